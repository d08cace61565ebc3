"""The quarantine is streamed: a run's rejects are spilled to disk as they come, so a
file full of large hostile records never holds them all in memory."""

from __future__ import annotations

import hashlib
import tracemalloc
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

from pith_pipeline.core.canonical_json import dumps_compact
from pith_pipeline.core.keys import Ed25519Signer
from pith_pipeline.items import Item, Rejected
from pith_pipeline.publish import Publisher
from pith_pipeline.storage.local import LocalStore

SIGNER = Ed25519Signer(bytes(range(32)), "quarantine-test")
MiB = 1 << 20
RAW = 256 << 10  # each reject keeps 256 KiB of raw input
COUNT = 200  # 50 MiB of rejects in all


def _fixed() -> datetime:
    return datetime(2026, 7, 1, tzinfo=UTC)


def _rejects() -> Iterator[Item]:
    for i in range(COUNT):  # made one at a time: the input itself is never held whole
        yield Rejected(f"big.jsonl:{i + 1}", "line too long", chr(ord("a") + i % 26) * RAW)


def test_many_large_rejects_keep_memory_bounded(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store")
    pub = Publisher(store, SIGNER, clock=_fixed, run_id="run-big")
    tracemalloc.start()
    try:
        summary = pub.publish(_rejects())
        _current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert summary.quarantined == COUNT
    # the run holds a few rejects at a time
    # (a few read ahead, one being written): not the 50 MiB they add up to
    assert peak < 20 * MiB, f"peak {peak / MiB:.1f} MiB while quarantining {COUNT * RAW / MiB} MiB"
    # the object is byte for byte what the whole list would have made, in input order
    want = hashlib.sha256()
    for item in _rejects():
        assert isinstance(item, Rejected)
        want.update(dumps_compact({"run_id": "run-big", **item.to_json()}) + b"\n")
    got = (tmp_path / "store" / "quarantine" / "run-big.jsonl").read_bytes()
    assert hashlib.sha256(got).hexdigest() == want.hexdigest()
    assert summary.written["quarantine/run-big.jsonl"] == want.hexdigest()
