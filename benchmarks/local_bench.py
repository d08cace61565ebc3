"""Local-directory benchmark: `pith-pipeline build` end to end vs a straightforward script.

Both sides run as child processes on the same generated records (benchmarks/
gen_records.py) and the same key, each into a fresh directory, and are timed from
process start to exit (imports, reading the input, building, signing, writing):

  (a) the real command, `pith-pipeline build --input F --store DIR --key K`, with its
      defaults: worker processes, the index update and run manifest, and the default
      durability (group commit: files made durable together before the index, the
      transparency-log checkpoint and the run manifest claim them);
  (b) the straightforward path, the way build_bench.py's reference defines it: the
      same events and bundles built with `canonical_json.REFERENCE` (`rfc8785` for
      every hash, full merge, no fast paths) and `json.dumps` for every output, then each object written with
      `open().write()` into `os.makedirs`-made directories, no fsync, one process.
      It writes what `build` writes per paper (2 events, bundle, state, the
      `.well-known` copy, the arXiv pointer) and the key document, and nothing else:
      no index, no manifest, no checks of what is already stored.

Each side runs once untimed first (it writes Python's bytecode caches, which a
sandbox's PYTHONDONTWRITEBYTECODE would otherwise make every process compile again,
and warms the page cache), as a user's earlier runs have.
Rounds alternate (a, b, a, b, ...) so drift in machine speed hits both alike; the
best and the median of each are reported, with the ratio b/a of times (how many
times faster `build` is). Optionally `--strace` runs (a) once more under
`strace -f -c` and prints the syscall summary.

    python benchmarks/local_bench.py --n 3000 --rounds 3
    python benchmarks/local_bench.py --n 3000 --rounds 3 --no-fsync   # PITH_LOCAL_FSYNC=0 for (a)
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

HERE = Path(__file__).resolve().parent


def straightforward(input_path: Path, out: Path, key_path: str) -> int:
    """(b): build every record the straightforward way and write the files, no fsync."""
    import json

    from build_bench import _ref_compact, _ref_pretty

    from pith_pipeline.clock import system_clock
    from pith_pipeline.core.builder import Identity, build_record_events, sign_bundle
    from pith_pipeline.core.canonical_json import REFERENCE
    from pith_pipeline.core.layout import PUBLIC_KEY_FILE, bundle_paths
    from pith_pipeline.publish import BuildConfig
    from pith_pipeline.signing.factory import open_signer
    from pith_pipeline.sources.jsonl import Rejected, parse_line

    signer = open_signer(key_path)
    cfg = BuildConfig()
    site = cfg.site
    keys = [signer.public_key_doc(url=site.key_url)]

    def write(key: str, data: bytes) -> None:
        path = out / key
        os.makedirs(path.parent, exist_ok=True)
        with open(path, "wb") as fh:
            fh.write(data)

    n = 0
    with input_path.open("rb") as fh:
        for no, line in enumerate(fh, 1):
            item = parse_line(line, f"{input_path}:{no}")
            if isinstance(item, Rejected):
                continue
            ident = Identity.of(item, canon=REFERENCE)
            now = system_clock()
            built = build_record_events(ident, signer, cfg.signer_id, now, canon=REFERENCE)
            bundle = sign_bundle(
                subject=ident.subject,
                canonical=ident.canonical,
                canonical_hex=ident.canonical_sha256,
                events=built.events,
                aliases=built.aliases,
                public_keys=keys,
                site=site,
                signer=signer,
                now=system_clock(),
                canon=REFERENCE,
            )
            for ev in built.events:
                write(f"events/{ident.body}/{ev['content_sha256']}.json", _ref_compact(ev))
            bkey, skey, wkey = bundle_paths(ident.body)
            data = _ref_compact(bundle)
            write(bkey, data)
            write(skey, _ref_compact(bundle["state"]))
            write(wkey, data)
            created = built.events[0]
            pointer = {
                "arxiv_id": item.id,
                "records": [
                    {
                        "version": item.version,
                        "pith_number": ident.subject,
                        "record_created": created["event_id"],
                        "created_at": created["created_at"],
                        "canonical_sha256": ident.canonical_sha256,
                    }
                ],
                "latest": ident.subject,
            }
            write(f"arxiv/{item.id}.json", _ref_pretty(pointer) + b"\n")
            n += 1
    write(PUBLIC_KEY_FILE, json.dumps(signer.public_key_doc(url=site.key_url).to_json(), indent=2).encode())
    return n


def _bundles(root: Path) -> int:
    return sum(1 for _ in (root / "pith").glob("*/bundle.json"))


def _run(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds: user + system of the child and its workers)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    dt = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        sys.exit(f"{cmd[0]} ... failed ({proc.returncode}): {proc.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return dt, cpu


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd")
    sf = sub.add_parser("straightforward", help="(b) alone, as the benchmark runs it")
    sf.add_argument("--input", type=Path, required=True)
    sf.add_argument("--out", type=Path, required=True)
    sf.add_argument("--key", required=True)
    ap.add_argument("--n", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workdir", type=Path, default=None, help="default: a temporary directory")
    ap.add_argument("--no-fsync", action="store_true", help="PITH_LOCAL_FSYNC=0 for (a)")
    ap.add_argument("--strace", action="store_true", help="also: (a) once under strace -f -c")
    args = ap.parse_args()
    if args.cmd == "straightforward":
        n = straightforward(args.input, args.out, args.key)
        print(n)
        return 0

    from gen_records import generate

    work = args.workdir or Path(tempfile.mkdtemp(prefix="pith-local-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    exe = str(Path(sys.executable).with_name("pith-pipeline"))
    records = work / f"records-{args.n}.jsonl"
    if not records.exists():
        with records.open("wb") as fh:
            fh.writelines(generate(args.n))
    keydir = work / "keys"
    if not (keydir / "pith-private-key.json").exists():
        subprocess.run(
            [exe, "keys", "generate", "--out", str(keydir), "--key-id", "bench-key"],
            check=True,
            stdout=subprocess.DEVNULL,
        )
    key = str(keydir / "pith-private-key.json")
    # Python's bytecode cache as an installed package has it: a sandbox or CI that sets
    # PYTHONDONTWRITEBYTECODE makes every process compile the package again (~0.12 s,
    # paid by (a)'s parent and each worker and by (b) once), which no user's run pays
    env = {
        k: v for k, v in os.environ.items() if not k.startswith("PITH_") and k != "PYTHONDONTWRITEBYTECODE"
    }
    env_a = {**env, **({"PITH_LOCAL_FSYNC": "0"} if args.no_fsync else {})}
    times: dict[str, list[float]] = {"a": [], "b": []}
    cpus: dict[str, list[float]] = {"a": [], "b": []}
    cmds = {
        "a": lambda d: [exe, "build", "--input", str(records), "--store", str(d), "--key", key],
        "b": lambda d: [
            sys.executable,
            str(HERE / "local_bench.py"),
            "straightforward",
            "--input",
            str(records),
            "--out",
            str(d),
            "--key",
            key,
        ],
    }
    # one untimed run of each side first: it writes the bytecode caches and reads the
    # input and the installed packages into the page cache, as a user's earlier runs have
    for side in ("a", "b"):
        d = work / f"store-{side}"
        shutil.rmtree(d, ignore_errors=True)
        _run(cmds[side](d), env_a if side == "a" else env)
    for r in range(args.rounds):
        for side in ("a", "b"):
            d = work / f"store-{side}"
            shutil.rmtree(d, ignore_errors=True)
            os.sync()  # neither side pays for the other's (or the last round's) dirty pages
            dt, cpu = _run(cmds[side](d), env_a if side == "a" else env)
            got = _bundles(d)
            if got != args.n:
                sys.exit(f"({side}) wrote {got} bundles, not {args.n}")
            times[side].append(dt)
            cpus[side].append(cpu)
        print(
            f"round {r + 1}: (a) build {times['a'][-1]:.2f} s ({cpus['a'][-1]:.2f} s CPU)   "
            f"(b) straightforward {times['b'][-1]:.2f} s ({cpus['b'][-1]:.2f} s CPU)",
            file=sys.stderr,
        )
    a_best, b_best = min(times["a"]), min(times["b"])
    a_med, b_med = statistics.median(times["a"]), statistics.median(times["b"])
    durability = "PITH_LOCAL_FSYNC=0" if args.no_fsync else "default durability (group commit)"
    print(f"{args.n} papers, {args.rounds} interleaved rounds, {os.cpu_count()} cores; times best / median")
    print(
        f"(a) pith-pipeline build, {durability}: {a_best:6.2f} s / {a_med:6.2f} s  "
        f"({args.n / a_best:,.0f} papers/s best)"
    )
    print(
        f"(b) straightforward script, no fsync        : {b_best:6.2f} s / {b_med:6.2f} s  "
        f"({args.n / b_best:,.0f} papers/s best)"
    )
    print(f"build is {b_best / a_best:.2f}x the straightforward path (best), {b_med / a_med:.2f}x (median)")
    a_cpu, b_cpu = min(cpus["a"]), min(cpus["b"])
    print(
        f"CPU seconds (user + system, workers included), best: (a) {a_cpu:.2f} s, (b) {b_cpu:.2f} s; "
        f"b/a = {b_cpu / a_cpu:.2f}x  (wall time on a busy machine includes waiting for a core)"
    )
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")
    if args.strace and shutil.which("strace"):
        d = work / "store-strace"
        shutil.rmtree(d, ignore_errors=True)
        proc = subprocess.run(
            ["strace", "-f", "-c", "-o", str(work / "strace.txt"), *cmds["a"](d)],
            env=env_a,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        print(f"strace -f -c of (a) (exit {proc.returncode}):")
        print((work / "strace.txt").read_text())
    if args.workdir is None:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
