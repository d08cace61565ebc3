"""Build-path benchmark: the project's path, a straightforward reference, the crypto floor.

`build` mode measures, in one process pinned to one core, on the same generated
records and the same Ed25519 signer:

  (a) the project's build path: `Publisher.publish_record` (canonical record, receipt,
      two signed events, merged state, signed bundle, all serialised) into a store
      that keeps nothing but a digest of every object written;
  (b) the reference path: the same code given `canonical_json.REFERENCE` (`rfc8785`
      for every hash, nothing trusted, so no fast paths and full re-verification)
      and `json.dumps` for every output;
  (c) the cryptographic floor: only the four signatures and the SHA-256 hashes of
      the same byte strings, nothing else.

Rounds are interleaved (a, b, c, a, b, c, ...) so drift in machine speed hits all
three alike; the best round of each is reported, with ratios a/b and a/c, peak RSS,
and whether (a) and (b) wrote byte-identical objects (they must).

`ingest` mode runs the real command, `pith-pipeline ingest --snapshot FILE`, into a
fresh local store for each N given, and reports time per paper and peak RSS of the
child process, so growth with N shows.

    python benchmarks/build_bench.py build --n 20000
    python benchmarks/build_bench.py ingest --n 100000 --n 1000000 --workdir /tmp/pith-bench
    python benchmarks/build_bench.py ingest --n 20000 --workers 1 --no-fsync
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gen_records import generate

from pith_pipeline.core import events as events_mod
from pith_pipeline.core.arxiv_record import ArxivRecord
from pith_pipeline.core.builder import FreshBuilder, Identity, build_record_events, sign_bundle
from pith_pipeline.core.canonical_json import REFERENCE as REFERENCE_CANON
from pith_pipeline.core.keys import Ed25519Signer, Signer
from pith_pipeline.publish import ONE_PASS, REFERENCE, BuildConfig, Codec, Publisher, RecordBuilder
from pith_pipeline.sources.jsonl import parse_line
from pith_pipeline.storage.base import Store
from pith_pipeline.tlog.pending import PENDING

NOW = datetime(2026, 1, 1, tzinfo=UTC)
SEED = bytes(range(32))
POOL = 2000  # distinct floor inputs kept in memory (hash cost depends on length only)


# -- a store that keeps only a digest of what was written -----------------------
class DigestStore(Store):
    """A `Store` that forgets every object but folds its key and bytes into one digest.

    Reads return nothing, as from a fresh store, so every record takes the full
    build path; the digest shows whether two paths wrote identical objects.
    """

    url = "memory://digest"

    def __init__(self, digest: bool = True) -> None:
        self.h = hashlib.sha256()
        self.digest = digest  # off in timed runs: the digest is the benchmark's work
        self.objects = 0
        self.bytes = 0

    def _take(self, key: str, data: bytes) -> None:
        # a publisher's pending marker (log/pending/<run id>.<token>.json) is named by a
        # random token per publisher, by design: it is bookkeeping, not published output
        if self.digest and not key.startswith(PENDING):
            self.h.update(key.encode() + b"\0" + len(data).to_bytes(8, "big") + data)
        self.objects += 1
        self.bytes += len(data)

    def get(self, key: str) -> bytes | None:
        return None

    def exists(self, key: str) -> bool:
        return False

    def put(self, key: str, data: bytes, *, content_type: str = "application/json") -> None:
        self._take(key, data)

    def put_once(self, key: str, data: bytes, *, content_type: str = "application/json") -> bool:
        self._take(key, data)
        return True

    def list(self, prefix: str) -> Iterator[str]:
        return iter(())

    def delete(self, key: str) -> None:
        pass

    def get_tagged(self, key: str) -> tuple[bytes, str] | None:
        return None

    def put_if_match(
        self, key: str, data: bytes, tag: str | None, *, content_type: str = "application/json"
    ) -> bool:
        self._take(key, data)
        return True


# -- the reference path: same code, reference serialisation everywhere ------------
def _ref_compact(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def _ref_pretty(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, indent=2).encode("utf-8")


# -- the three measured paths ----------------------------------------------------
#: what the reference path writes with (json, not the canonical fast serializer) and
#: hashes with (rfc8785, nothing trusted)
REFERENCE_CODEC = Codec(compact=_ref_compact, pretty=_ref_pretty, canon=REFERENCE_CANON)


def run_project(
    records: list[ArxivRecord], signer: Signer, digest: bool = False, reference: bool = False
) -> DigestStore:
    store = DigestStore(digest)
    builder: RecordBuilder = REFERENCE if reference else ONE_PASS
    codec = REFERENCE_CODEC if reference else Codec()
    pub = Publisher(
        store, signer, BuildConfig(), clock=lambda: NOW, run_id="bench", builder=builder, codec=codec
    )
    for rec in records:
        pub.publish_record(rec)
        pub.summary.written.clear()  # the run's ledger is not what is measured here
    return store


def run_reference(records: list[ArxivRecord], signer: Signer, digest: bool = False) -> DigestStore:
    return run_project(records, signer, digest, reference=True)


def _fold(h: Any, parts: list[bytes]) -> None:
    for part in parts:
        h.update(len(part).to_bytes(8, "big") + part)


def run_build(records: list[ArxivRecord], signer: Signer, digest: bool = False) -> Any:
    """(a) records to serialised signed events, bundle and state: `FreshBuilder`."""
    cfg = BuildConfig()
    fb = FreshBuilder(signer, cfg.signer_id, cfg.site, [signer.public_key_doc(url=cfg.site.key_url)])
    h = hashlib.sha256()
    size = 0
    for rec in records:
        f = fb.build(Identity.of(rec), NOW, NOW)
        parts = [*f.event_bytes, f.bundle_bytes, f.state_bytes]
        size += sum(map(len, parts))
        if digest:
            _fold(h, parts)
    return h, size


def run_build_reference(records: list[ArxivRecord], signer: Signer, digest: bool = False) -> Any:
    """(b) the same objects the straightforward way: rfc8785 hashes, full merge, json output."""
    cfg = BuildConfig()
    keys = [signer.public_key_doc(url=cfg.site.key_url)]
    h = hashlib.sha256()
    for rec in records:
        ident = Identity.of(rec, canon=REFERENCE_CANON)
        built = build_record_events(ident, signer, cfg.signer_id, NOW, canon=REFERENCE_CANON)
        b = sign_bundle(
            subject=ident.subject,
            canonical=ident.canonical,
            canonical_hex=ident.canonical_sha256,
            events=built.events,
            aliases=built.aliases,
            public_keys=keys,
            site=cfg.site,
            signer=signer,
            now=NOW,
            canon=REFERENCE_CANON,
        )
        parts = [*(_ref_compact(e) for e in built.events), _ref_compact(b), _ref_compact(b["state"])]
        if digest:
            _fold(h, parts)
    return h


@dataclass
class FloorInputs:
    """Per paper, the exact byte strings the build path hashes."""

    pool: list[tuple[bytes, ...]]


def floor_inputs(records: list[ArxivRecord], signer: Signer) -> FloorInputs:
    """Collect the hashed byte strings of the first POOL papers (outside the timing)."""
    from pith_pipeline.core.builder import Identity, build_record_events, sign_bundle
    from pith_pipeline.core.canonical_json import dumps_trusted
    from pith_pipeline.core.pith_record import canonical_bytes
    from pith_pipeline.core.text import canon

    cfg = BuildConfig()
    keys = [signer.public_key_doc(url=cfg.site.key_url)]
    pool = []
    for rec in records[:POOL]:
        ident = Identity.of(rec)
        built = build_record_events(ident, signer, cfg.signer_id, NOW)
        b = sign_bundle(
            subject=ident.subject,
            canonical=ident.canonical,
            canonical_hex=ident.canonical_sha256,
            events=built.events,
            aliases=built.aliases,
            public_keys=keys,
            site=cfg.site,
            signer=signer,
            now=NOW,
            trusted=built.events,
        )
        state = {k: v for k, v in b["state"].items() if k != "state_sha256"}
        body = {k: v for k, v in b.items() if k != "bundle_signature"}
        pool.append(
            (
                canonical_bytes(ident.canonical),
                canon(rec.title).encode(),
                canon(rec.abstract).encode(),
                *(dumps_trusted(events_mod.hashed_view(e)) for e in built.events),
                dumps_trusted(state),
                dumps_trusted(body),
            )
        )
    return FloorInputs(pool)


def run_floor(n: int, inputs: FloorInputs, signer: Signer) -> int:
    """Only the hashes and the four signatures (receipt, two events, bundle)."""
    sha = hashlib.sha256
    sign = signer.sign_digest
    pool = inputs.pool
    total = 0
    for i in range(n):
        canon_b, title, abstract, ev1, ev2, state, body = pool[i % len(pool)]
        d_canon = sha(canon_b).digest()
        sha(title).digest()
        sha(abstract).digest()
        d1 = sha(ev1).digest()
        d2 = sha(ev2).digest()
        sha(state).digest()
        d_bundle = sha(body).digest()
        total += len(sign(d_canon)) + len(sign(d1)) + len(sign(d2)) + len(sign(d_bundle))
    return total


# -- worker processes -------------------------------------------------------------
# Signers are deliberately not picklable: each worker opens its own from the signer
# spec (here a key file), as a backfill's workers would. Chunks of raw lines go out,
# only counts come back, so memory stays flat whatever N is.
_WORKER: dict[str, Any] = {}


def _worker_init(spec: str) -> None:
    from pith_pipeline.signing.factory import open_signer

    signer = open_signer(spec)
    cfg = BuildConfig()
    _WORKER["fb"] = FreshBuilder(
        signer, cfg.signer_id, cfg.site, [signer.public_key_doc(url=cfg.site.key_url)]
    )


def _worker_chunk(lines: list[bytes]) -> tuple[int, int]:
    fb: FreshBuilder = _WORKER["fb"]
    n = size = 0
    for line in lines:
        rec = parse_line(line, "chunk")
        if isinstance(rec, ArxivRecord):
            f = fb.build(Identity.of(rec), NOW, NOW)
            size += len(f.bundle_bytes) + len(f.state_bytes) + sum(map(len, f.event_bytes))
            n += 1
    return n, size


def run_workers(lines: list[bytes], spec: str, workers: int, chunk: int = 500) -> float:
    """Papers/s from JSON lines to serialised bundles with `workers` processes (0: inline)."""
    import multiprocessing

    chunks = [lines[i : i + chunk] for i in range(0, len(lines), chunk)]
    t = time.perf_counter()
    if workers == 0:
        _worker_init(spec)
        done = sum(_worker_chunk(c)[0] for c in chunks)
    else:
        ctx = multiprocessing.get_context("spawn")
        with ctx.Pool(workers, _worker_init, (spec,)) as pool:
            done = sum(n for n, _ in pool.imap_unordered(_worker_chunk, chunks))
    return done / (time.perf_counter() - t)


def cmd_workers(args: argparse.Namespace) -> int:
    import tempfile

    from pith_pipeline.signing.local import write_key_file

    lines = list(generate(args.n))
    with tempfile.TemporaryDirectory() as tmp:
        key = Path(tmp) / "pith-private-key.json"
        write_key_file(key, SEED, "bench-key")
        one = run_workers(lines, str(key), 0)
        many = run_workers(lines, str(key), args.workers)
    print(f"records: {args.n}, JSON lines -> serialised signed bundles (parsing included)")
    print(f"1 process             : {one:9.0f} papers/s")
    print(
        f"{args.workers} worker processes    : {many:9.0f} papers/s "
        f"({many / one:.2f}x; pool start-up included)"
    )
    print(f"peak RSS (this process): {peak_rss_mb():.0f} MB")
    return 0


def peak_rss_mb(who: int = resource.RUSAGE_SELF) -> float:
    return resource.getrusage(who).ru_maxrss / 1024


def load_records(n: int) -> list[ArxivRecord]:
    out = []
    for i, line in enumerate(generate(n)):
        item = parse_line(line, f"generated:{i + 1}")
        if not isinstance(item, ArxivRecord):
            raise SystemExit(f"generated record {i + 1} was rejected: {item.reason}")
        out.append(item)
    return out


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def cmd_build(args: argparse.Namespace) -> int:
    signer = Ed25519Signer(SEED, "bench-key")
    print(f"generating {args.n} records ...", file=sys.stderr)
    records = load_records(args.n)
    ref_n = min(args.n, args.reference_n)
    inputs = floor_inputs(records, signer)
    best: dict[str, float] = {}
    size = 0
    for r in range(args.rounds):
        dt, (_h, size) = timed(lambda: run_build(records, signer))
        best["a"] = max(best.get("a", 0.0), args.n / dt)
        dt, _ = timed(lambda: run_project(records, signer))
        best["p"] = max(best.get("p", 0.0), args.n / dt)
        dt, _ = timed(lambda: run_build_reference(records[:ref_n], signer))
        best["b"] = max(best.get("b", 0.0), ref_n / dt)
        dt, _ = timed(lambda: run_floor(args.n, inputs, signer))
        best["c"] = max(best.get("c", 0.0), args.n / dt)
        print(f"round {r + 1}: " + "  ".join(f"{k} {v:.0f}/s" for k, v in best.items()), file=sys.stderr)
    # byte identity on the records the reference ran on: the build paths, and the
    # publishing paths (every object a fresh store receives)
    same_build = (
        run_build(records[:ref_n], signer, True)[0].hexdigest()
        == run_build_reference(records[:ref_n], signer, True).hexdigest()
    )
    same_publish = (
        run_project(records[:ref_n], signer, True).h.hexdigest()
        == run_reference(records[:ref_n], signer, True).h.hexdigest()
    )
    same = same_build and same_publish
    print(
        f"records: {args.n} (reference path on the first {ref_n}), one process, one thread, "
        f"best of {args.rounds} interleaved rounds"
    )
    print(
        f"(a) project build path : {best['a']:9.0f} papers/s "
        f"(records -> 2 events + bundle + state, {size / args.n / 1024:.1f} KiB per paper)"
    )
    print(
        f"(b) reference path     : {best['b']:9.0f} papers/s (rfc8785 for every hash, full merge, json.dumps)"
    )
    print(f"(c) crypto floor       : {best['c']:9.0f} papers/s (4 signatures + 7 hashes)")
    print(f"a/b = {best['a'] / best['b']:.2f}x   a/c = {100 * best['a'] / best['c']:.0f}%")
    print(
        f"publisher (a + pointer, run ledger, store calls on a null store): "
        f"{best['p']:.0f} papers/s = {100 * best['p'] / best['c']:.0f}% of (c)"
    )
    print(
        f"output bytes identical to the reference: build {'yes' if same_build else 'NO'}, "
        f"publish {'yes' if same_publish else 'NO'}"
    )
    print(f"peak RSS: {peak_rss_mb():.0f} MB")
    return 0 if same else 1


# -- end to end ingest -----------------------------------------------------------
# Runs the real command in a child process; the wrapper only notes the time and peak
# RSS at which publishing hands over to the index update (`finish_run`, which every
# `Run` calls from pith_pipeline.runs.run), so the two phases of one run are reported apart.
DRIVER = """
import json, resource, sys, time
t0 = time.perf_counter()
import pith_pipeline.runs.run as ix
orig = ix.finish_run
def finish_run(*a, **k):
    t1 = time.perf_counter(); r1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    rw = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # workers, joined by now
    out = orig(*a, **k)
    t2 = time.perf_counter(); r2 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    sys.stderr.write("PHASES " + json.dumps({"publish_s": t1 - t0, "publish_rss_kb": r1,
                                             "worker_rss_kb": rw,
                                             "index_s": t2 - t1, "peak_rss_kb": r2}) + "\\n")
    return out
ix.finish_run = finish_run
# every STEP papers: elapsed time and the RSS (now, and peak so far) of this process and
# of each worker process, read from /proc; shows whether time per paper or memory grows
import os, pith_pipeline.ingest as ing
STEP = int(os.environ.get("BENCH_STEP", "100000"))
def _status(pid):
    out = {}
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith(("VmRSS", "VmHWM")):
                out[line.split(":")[0]] = int(line.split()[1])
    except OSError:
        pass
    return out
def _children():
    me = str(os.getpid())
    kids = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                fields = open(f"/proc/{d}/stat").read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[1] == me:
                kids.append(int(d))
    return sorted(kids)
done = [0, STEP]
def _track(inner):
    def progress(n):
        done[0] += n
        if done[0] >= done[1]:
            done[1] += STEP
            kids = {pid: _status(pid) for pid in _children()}
            sys.stderr.write("PROGRESS " + json.dumps({
                "papers": done[0], "s": time.perf_counter() - t0, "self": _status(os.getpid()),
                "workers": [k for k in kids.values() if k]}) + "\\n")
            sys.stderr.flush()
        return inner(n) if inner else None
    return progress
orig_init = ing.Ingest.__init__
def init(self, *a, progress=None, **k):
    orig_init(self, *a, progress=_track(progress), **k)
ing.Ingest.__init__ = init
from pith_pipeline.cli import main
sys.argv = ["pith-pipeline", *sys.argv[1:]]
main()
"""


def _tree_bytes(root: Path) -> int:
    """Bytes of every file under `root`, streamed (a store holds millions of files)."""
    total = 0
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            total += os.stat(os.path.join(dirpath, name)).st_size
    return total


def _follow(proc: subprocess.Popen[str], n: int) -> tuple[str, list[str]]:
    """Print the child's PROGRESS lines as they come (a 1M run takes a while)."""
    assert proc.stdout is not None and proc.stderr is not None
    err_lines: list[str] = []
    last = (0, 0.0)
    for line in proc.stderr:
        err_lines.append(line)
        if line.startswith("PROGRESS "):
            p = json.loads(line[9:])
            seg = 1000 * (p["s"] - last[1]) / max(1, p["papers"] - last[0])
            last = (p["papers"], p["s"])
            workers = p["workers"]
            w_now = max((w.get("VmRSS", 0) for w in workers), default=0) / 1024
            w_peak = max((w.get("VmHWM", 0) for w in workers), default=0) / 1024
            print(
                f"   {p['papers']:>9,} of {n:,} papers  {p['s']:7.0f} s  "
                f"{seg:5.2f} ms/paper (last step)  RSS MB now/peak: parent "
                f"{p['self'].get('VmRSS', 0) / 1024:.0f}/{p['self'].get('VmHWM', 0) / 1024:.0f}"
                f", largest of {len(workers)} workers {w_now:.0f}/{w_peak:.0f}",
                flush=True,
            )
    out_text = proc.stdout.read()
    proc.wait()
    return out_text, err_lines


def cmd_ingest(args: argparse.Namespace) -> int:
    work: Path = args.workdir
    work.mkdir(parents=True, exist_ok=True)
    exe = Path(sys.executable).with_name("pith-pipeline")
    keydir = work / "keys"
    if not (keydir / "pith-private-key.json").exists():
        subprocess.run(
            [str(exe), "keys", "generate", "--out", str(keydir), "--key-id", "bench-key"],
            check=True,
            stdout=subprocess.DEVNULL,
        )
    workers = "CLI default" if args.workers is None else str(args.workers)
    print(
        f"ingest --snapshot, fsync {'on' if args.fsync else 'off'}, workers {workers}; "
        "publishing = records to bundles in the store, index = the run's Parquet index update"
    )
    print(
        f"{'N':>9} {'publish s':>9} {'papers/s':>9} {'ms/paper':>9} {'RSS MB':>7} "
        f"{'index s':>8} {'peak RSS MB':>11} {'store GB':>9} {'worker RSS MB':>13}"
    )
    for n in args.n:
        src = work / f"records-{n}.jsonl"
        if not src.exists():
            with src.open("wb") as fh:
                for line in generate(n):
                    fh.write(line)
        store = work / f"store-{n}"
        if store.exists():
            shutil.rmtree(store)
        cmd = [
            sys.executable,
            "-c",
            DRIVER,
            "ingest",
            "--snapshot",
            str(src),
            "--store",
            str(store),
            "--key",
            str(keydir / "pith-private-key.json"),
        ]
        if args.workers is not None:
            cmd += ["--workers", str(args.workers)]
        env = {**os.environ, "SOURCE_DATE_EPOCH": "1767225600", "TQDM_DISABLE": "1"}
        if not args.fsync:
            env["PITH_LOCAL_FSYNC"] = "0"
        if args.step:
            env["BENCH_STEP"] = str(args.step)
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        out_text, err_lines = _follow(proc, n)
        if proc.returncode != 0:
            print(out_text, "".join(err_lines), file=sys.stderr)
            return proc.returncode
        proc = subprocess.CompletedProcess(cmd, proc.returncode, out_text, "".join(err_lines))
        phases = json.loads(next(line for line in proc.stderr.splitlines() if line.startswith("PHASES "))[7:])
        size = _tree_bytes(store) / 1e9 if args.measure_size else float("nan")
        pub = phases["publish_s"]
        print(
            f"{n:9d} {pub:9.0f} {n / pub:9.0f} {1000 * pub / n:9.2f} "
            f"{phases['publish_rss_kb'] / 1024:7.0f} {phases['index_s']:8.0f} "
            f"{phases['peak_rss_kb'] / 1024:11.0f} {size:9.1f} "
            f"{phases['worker_rss_kb'] / 1024:13.0f}",
            flush=True,
        )
        print("   " + " | ".join(proc.stdout.strip().splitlines()[-2:]), flush=True)
        if not args.keep:
            shutil.rmtree(store)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="mode", required=True)
    b = sub.add_parser("build", help="(a) project vs (b) reference vs (c) crypto floor")
    b.add_argument("--n", type=int, default=20000, help="records for (a) and (c)")
    b.add_argument(
        "--reference-n",
        type=int,
        default=5000,
        help="records for (b), which is slow (papers/s is what is compared)",
    )
    b.add_argument("--rounds", type=int, default=3)
    w = sub.add_parser("workers", help="the build path on 1 process vs worker processes")
    w.add_argument("--n", type=int, default=40000)
    w.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    i = sub.add_parser("ingest", help="end-to-end `pith-pipeline ingest --snapshot`")
    i.add_argument(
        "--n",
        type=int,
        action="append",
        required=True,
        help="records per run; repeat for several runs (e.g. 100000, 1000000)",
    )
    i.add_argument("--workdir", type=Path, default=Path("/tmp/pith-bench"))
    i.add_argument("--keep", action="store_true", help="keep each store after its run")
    i.add_argument("--measure-size", action="store_true", help="report the store's size")
    i.add_argument(
        "--step",
        type=int,
        default=100_000,
        help="print time per paper and RSS every STEP papers (default 100,000)",
    )
    i.add_argument(
        "--workers",
        type=int,
        default=None,
        help="pass --workers N to the command (default: the command's own default, "
        "the usable cores); 1 publishes in one process",
    )
    i.add_argument(
        "--fsync",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="fsync every object (the store's default); --no-fsync sets "
        "PITH_LOCAL_FSYNC=0 (same files, flushed by the OS)",
    )
    args = ap.parse_args(argv)
    return {"build": cmd_build, "workers": cmd_workers, "ingest": cmd_ingest}[args.mode](args)


if __name__ == "__main__":
    raise SystemExit(main())
