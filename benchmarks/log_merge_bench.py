"""The log phase of a run at the 1,000,000-paper scale, without the run.

A 1 M-paper run writes about 100 sorted entries files (`index.RowSink`: one a flush,
`CHUNK_PAPERS` papers, about 20,000 entries) and its log phase merges them
(`RowSink.log_entries`) and appends them (`tlog.pipeline.log_run`). A whole run of
that size needs ~60 GB of disk; this writes only the entries files, through the real
`RowSink` flush, and times the two steps, each in a process of its own so its peak
RSS is its own:

  gen     FILES entries files of PER_FILE entries each, as W workers write them
          (each chunk's events share the seconds its papers were built in, the
          workers' chunks overlap in time). Entries are real events
          (benchmarks/gen_records.py through `Publisher` and `log_entries_of`),
          copied with a new event id and created_at each (same sizes).
  merge   `RowSink.log_entries()` fully consumed, on a hard-linked copy of the files
          (a merge in rounds replaces its inputs); prints a SHA-256 of the stream
          so two versions of the merge can be compared byte for byte.
  append  `log_run(store, [], log, entries=sink)` into an empty log on a local
          store: the merge, hashing, tiles, entry bundles, lookup, checkpoint.

    python benchmarks/log_merge_bench.py --files 100 --per-file 20000 --workdir /dev/shm/pith-lm
    python benchmarks/log_merge_bench.py --phases merge --fan-in 32,128 ...   # compare fan-ins

Space: at 2,000,000 entries the files take ~1.5 GB and the log ~5 GB.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import resource
import shutil
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

BASE = datetime(2026, 7, 1, tzinfo=UTC)


def templates(papers: int) -> list[tuple[str, str, str, bytes]]:
    """Log entries of real events: `papers` generated records published into memory."""
    from gen_records import generate

    from pith_pipeline.core.keys import Ed25519Signer
    from pith_pipeline.index.sink import log_entries_of
    from pith_pipeline.publish import BuildConfig, Publisher
    from pith_pipeline.sources.jsonl import iter_jsonl
    from pith_pipeline.storage.memory import MemoryStore

    out: list[tuple[str, str, str, bytes]] = []
    tmp = Path(os.environ.get("TMPDIR", "/tmp")) / f"log-merge-bench-{os.getpid()}.jsonl"
    with tmp.open("wb") as fh:
        for line in generate(papers):
            fh.write(line)
    try:
        pub = Publisher(
            MemoryStore(),
            Ed25519Signer(bytes(range(32)), "bench"),
            BuildConfig(),
            clock=lambda: BASE,
            on_bundle=lambda _k, bundle, _s, _r: out.extend(log_entries_of(bundle)),
        )
        pub.publish(iter_jsonl(tmp))
    finally:
        tmp.unlink()
    return out


def gen(directory: Path, files: int, per_file: int, workers: int, seconds_per_chunk: int) -> None:
    from pith_pipeline.index.sink import LOG_DIR, RowSink

    shutil.rmtree(directory, ignore_errors=True)
    temps = templates(1000)
    sinks = [RowSink(directory) for _ in range(workers)]
    n = 0
    total = 0
    for f in range(files):
        w, chunk = f % workers, f // workers
        entries = []
        for j in range(per_file):
            created_t, hex_t, key_t, entry_t = temps[n % len(temps)]
            hex_id = hashlib.sha256(n.to_bytes(8, "big")).hexdigest()
            # a paper's two events share their second; a chunk's papers span its seconds
            sec = chunk * seconds_per_chunk + (j // 2) * seconds_per_chunk // max(1, per_file // 2)
            created = (BASE + timedelta(seconds=sec)).strftime("%Y-%m-%dT%H:%M:%SZ")
            entry = entry_t.replace(hex_t.encode(), hex_id.encode())
            entry = entry.replace(created_t.encode(), created.encode())
            entries.append((created, hex_id, key_t.replace(hex_t, hex_id), entry))
            total += len(entry)
            n += 1
        sinks[w]._entries = entries  # what add_bundle collects; flush writes it as a run does
        sinks[w].flush()
    size = sum(p.stat().st_size for p in (directory / LOG_DIR).glob("*.parquet"))
    print(f"gen: {files} files x {per_file} entries = {n:,} entries, mean {total / n:.0f} B, {size:,} B")


def copy_of(directory: Path, to: Path) -> Path:
    """A hard-linked copy: the merge may delete its inputs, the originals stay."""
    shutil.rmtree(to, ignore_errors=True)
    shutil.copytree(directory, to, copy_function=os.link)
    return to


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def phase_merge(directory: Path, work: Path, fan_in: int | None) -> None:
    import pith_pipeline.index.sink as sink_mod
    from pith_pipeline.index.sink import RowSink

    if fan_in:
        sink_mod.ENTRY_FAN_IN = fan_in
    rows = copy_of(directory, work / "merge-rows")
    digest = hashlib.sha256()
    n = 0
    t0 = time.perf_counter()
    for hex_id, key, entry in RowSink(rows).log_entries():
        digest.update(hex_id.encode() + b"\0" + key.encode() + b"\0" + entry)
        n += 1
    t = time.perf_counter() - t0
    shutil.rmtree(rows)
    print(
        f"merge (fan-in {sink_mod.ENTRY_FAN_IN}): {n:,} entries in {t:.1f} s = {t / n * 1e6:.1f} us/entry, "
        f"peak RSS {peak_mb():.0f} MB, stream sha256 {digest.hexdigest()[:16]}"
    )


def phase_append(directory: Path, work: Path, fan_in: int | None) -> None:
    import pith_pipeline.index.sink as sink_mod
    from pith_pipeline.core.keys import Ed25519Signer
    from pith_pipeline.index.sink import RowSink
    from pith_pipeline.storage.local import LocalStore
    from pith_pipeline.tlog.log import LogSigner
    from pith_pipeline.tlog.pipeline import log_run

    if fan_in:
        sink_mod.ENTRY_FAN_IN = fan_in
    os.environ.pop("PITH_LOG_SIGNER", None)
    rows = copy_of(directory, work / "append-rows")
    shutil.rmtree(work / "store", ignore_errors=True)
    store = LocalStore(str(work / "store"))
    log = LogSigner.from_signer(Ed25519Signer(bytes(range(1, 33)), "log"), "bench.example/log")
    t0 = time.perf_counter()
    run = log_run(store, [], log, entries=RowSink(rows))
    t = time.perf_counter() - t0
    assert run is not None and run.result is not None and not run.problems
    n = run.result.size
    shutil.rmtree(rows)
    log_bytes = sum(p.stat().st_size for p in (work / "store").rglob("*") if p.is_file())
    shutil.rmtree(work / "store")
    print(
        f"append (log_run, fan-in {sink_mod.ENTRY_FAN_IN}): {n:,} entries in {t:.1f} s = "
        f"{t / n * 1e6:.1f} us/entry, peak RSS {peak_mb():.0f} MB, log {log_bytes:,} B, "
        f"root {run.result.root_b64}"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", type=int, default=100)
    ap.add_argument("--per-file", type=int, default=20_000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seconds-per-chunk", type=int, default=26, help="1 M run: 1,288 s / 50 chunks a worker")
    ap.add_argument("--workdir", type=Path, required=True)
    ap.add_argument("--phases", default="gen,merge,append")
    ap.add_argument("--fan-in", default="", help="ENTRY_FAN_IN values, comma-separated")
    ap.add_argument("--phase", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    entries = args.workdir / "entries"
    if args.phase:
        fan_in = int(args.fan_in) if args.fan_in else None
        {"merge": phase_merge, "append": phase_append}[args.phase](entries, args.workdir, fan_in)
        return 0
    args.workdir.mkdir(parents=True, exist_ok=True)
    phases = args.phases.split(",")
    if "gen" in phases:
        t0 = time.perf_counter()
        gen(entries, args.files, args.per_file, args.workers, args.seconds_per_chunk)
        print(f"gen took {time.perf_counter() - t0:.1f} s")
    for fan_in in args.fan_in.split(",") if args.fan_in else [""]:
        for phase in ("merge", "append"):
            if phase in phases:
                cmd = [sys.executable, __file__, "--workdir", str(args.workdir), "--phase", phase]
                subprocess.run([*cmd, "--fan-in", fan_in] if fan_in else cmd, check=True)
                print(f"  load average {os.getloadavg()[0]:.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
