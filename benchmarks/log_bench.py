"""Transparency log benchmark: what the log costs a run, a store, and a client.

For N generated papers (benchmarks/gen_records.py), in one process on a local store:

  run       publish + indexes + run manifest, without a log (the run's time)
  log       the same run's log append (`tlog.pipeline.log_run`: order, canonicalise,
            hash, tiles, entry bundles, event-id lookup, checkpoint)
  bytes     the store's bytes outside log/ and the log's bytes
  reads     objects a client fetches to prove one event: checkpoint, lookup, and
            the tiles and entry bundle the proof needs (worst over a sample)

and a raw append of M synthetic entries of the run's mean event size into memory
(hashing and tiling alone, no store I/O), to extrapolate to 2,000,000 entries.

    python benchmarks/log_bench.py --n 5000 --m 200000 --workdir /tmp/pith-log-bench
"""

from __future__ import annotations

import argparse
import os
import shutil
import stat
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gen_records import generate

from pith_pipeline.core.keys import Ed25519Signer
from pith_pipeline.publish import BuildConfig, Publisher
from pith_pipeline.sources.jsonl import iter_jsonl
from pith_pipeline.storage.local import LocalStore
from pith_pipeline.storage.memory import MemoryStore
from pith_pipeline.tlog.log import LogSigner, TileReader, append_entries, store_fetch
from pith_pipeline.tlog.lookup import lookup
from pith_pipeline.tlog.pipeline import log_run
from pith_pipeline.tlog.stored_events import event_store_keys


class TreeBytes(NamedTuple):
    """A store's size three ways: as S3 objects, as a directory's file bytes, and on disk."""

    objects: int  # every path's bytes: what a bucket holds (a hard link is a second object)
    files: int  # each file once (a hard link counted once): `du --apparent-size`
    disk: int  # blocks allocated to files and directories: `du`, what the disk gives up


def tree_bytes(root: Path, *, inside: str | None = None, outside: str | None = None) -> TreeBytes:
    objects = files = disk = 0
    seen: set[tuple[int, int]] = set()
    for p in root.rglob("*"):
        rel = p.relative_to(root).as_posix()
        if inside is not None and not rel.startswith(inside):
            continue
        if outside is not None and rel.startswith(outside):
            continue
        st = p.lstat()
        if stat.S_ISREG(st.st_mode):
            objects += st.st_size
        if (st.st_dev, st.st_ino) in seen:
            continue
        seen.add((st.st_dev, st.st_ino))
        if stat.S_ISREG(st.st_mode):
            files += st.st_size
        disk += st.st_blocks * 512
    return TreeBytes(objects, files, disk)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=5000, help="papers in the run")
    ap.add_argument("--m", type=int, default=200_000, help="entries in the raw append")
    ap.add_argument("--workdir", type=Path, default=None)
    args = ap.parse_args()
    os.environ.pop("PITH_LOG_SIGNER", None)
    work = args.workdir or Path(tempfile.mkdtemp(prefix="pith-log-bench-"))
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    records = work / "records.jsonl"
    with records.open("wb") as fh:
        for line in generate(args.n):
            fh.write(line)
    store = LocalStore(str(work / "store"))
    signer = Ed25519Signer(bytes(range(32)), "bench")
    key = Ed25519Signer(bytes(range(1, 33)), "log")
    log = LogSigner.from_signer(key, "bench.example/log")

    from pith_pipeline.runs.manifest import finish_run

    t0 = time.perf_counter()
    pub = Publisher(store, signer, BuildConfig(), clock=lambda: datetime(2026, 7, 1, tzinfo=UTC))
    summary = pub.publish(iter_jsonl(records))
    finish_run(store, summary, {"input": "bench"})
    t_run = time.perf_counter() - t0

    t0 = time.perf_counter()
    logged = log_run(store, summary.written, log)
    t_log = time.perf_counter() - t0
    assert logged is not None and logged.result is not None and not logged.problems
    size = logged.result.size

    root = work / "store"
    log_bytes = tree_bytes(root, inside="log/")
    other = tree_bytes(root, outside="log/")
    event_bytes = tree_bytes(root, inside="events/")

    fetch = store_fetch(store)
    worst = worst_tiles = 0
    keys = list(event_store_keys(store))
    for k in keys[:: max(1, len(keys) // 200)]:
        hex_id = k.rsplit("/", 1)[1][:-5]
        idx = lookup(fetch, hex_id, size)
        assert idx is not None
        reader = TileReader(fetch, size)
        reader.inclusion_proof(idx)
        worst_tiles = max(worst_tiles, reader.reads)
        reader.entries(idx // 256)
        worst = max(worst, reader.reads + 2)  # + checkpoint + lookup object

    mean = max(1, event_bytes.files // max(1, size))
    mem = MemoryStore()
    payload = os.urandom(mean)
    t0 = time.perf_counter()
    append_entries(mem, log, (payload[:-8] + i.to_bytes(8, "big") for i in range(args.m)))
    t_raw = time.perf_counter() - t0

    print(f"papers {args.n}, events logged {size}, mean event {mean} B")
    print(f"run without log: {t_run:.2f} s ({t_run / args.n * 1e3:.3f} ms/paper)")
    per_entry = t_log / size * 1e6
    print(f"log append:      {t_log:.2f} s ({per_entry:.1f} us/entry) = {t_log / t_run:.1%} of the run")
    for what, name in (
        ("objects", "as a bucket's objects (the .well-known copy a second object)"),
        ("files", "as a directory's file bytes (du --apparent-size; the copy a hard link)"),
        ("disk", "as the directory's allocated blocks (du)"),
    ):
        o, lg = getattr(other, what), getattr(log_bytes, what)
        print(f"store bytes {name}: {o:,} outside log/, {lg:,} in log/ = {lg / o:.1%} more")
    print(f"  (events/ alone: {event_bytes.files:,}; the entries repeat the events, canonicalised)")
    print(f"tile reads for one inclusion proof (worst of sample): {worst_tiles}")
    print(f"all reads to prove one event (checkpoint, lookup, tiles, bundle): {worst}")
    print(
        f"raw append, {args.m} entries of {mean} B in memory: {t_raw:.2f} s "
        f"({t_raw / args.m * 1e6:.1f} us/entry; 2,000,000 entries ~ {t_raw / args.m * 2e6:.0f} s)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
