"""A run's quarantine (`publish.rejects`): each reject counted and named by its run,
stored once at the run's end under its lease, and never written twice."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from pith_pipeline.items import Rejected
from pith_pipeline.publish import CANONICAL, RunSummary
from pith_pipeline.publish.rejects import RunQuarantine, quarantine_entry
from pith_pipeline.publish.writing import Writer
from pith_pipeline.storage.memory import MemoryStore


class CountingStore(MemoryStore):
    """A memory store that counts its write-once writes."""

    def __init__(self) -> None:
        super().__init__()
        self.put_onces: list[str] = []

    def put_once(self, key: str, data: bytes, *, content_type: str = "application/json") -> bool:
        self.put_onces.append(key)
        return super().put_once(key, data, content_type=content_type)


class Lost(Exception):
    pass


class Lease:
    """A writer lease that is held until `lose` is called."""

    def __init__(self) -> None:
        self.held = True

    def check(self) -> None:
        if not self.held:
            raise Lost("the run's lease is gone")


def reject(n: int) -> Rejected:
    return Rejected(f"in.jsonl:{n}", "not a record", f"raw {n}", f"2401.{n:05d}")


def quarantine(lease: Lease | None = None) -> tuple[CountingStore, RunSummary, RunQuarantine]:
    store = CountingStore()
    summary = RunSummary("run-q", written={})
    return store, summary, RunQuarantine(Writer(store, CANONICAL, summary, lease=lease))


def test_an_entry_is_counted_in_its_summary_and_names_the_run() -> None:
    summary = RunSummary.part("run-q")
    entry = quarantine_entry(reject(1), summary)
    assert summary.quarantined == 1
    assert entry == {"run_id": "run-q", **reject(1).to_json()}


def test_a_run_without_rejects_stores_no_quarantine() -> None:
    store, summary, q = quarantine()
    q.store(summary)
    assert store.objects == {} and store.put_onces == [] and dict(summary.written) == {}


def test_the_quarantine_is_stored_once_in_input_order_and_entered_in_the_ledger() -> None:
    store, summary, q = quarantine()
    add = q.spool.batch()
    for n in (2, 0, 1):  # threads hand entries back out of order
        add(n, quarantine_entry(reject(n), summary))
    q.store(summary)
    q.store(summary)  # again with no new reject: nothing is written
    key = "quarantine/run-q.jsonl"
    assert store.put_onces == [key]
    entries: list[dict[str, Any]] = [json.loads(x) for x in store.objects[key].splitlines()]
    assert [e["where"] for e in entries] == ["in.jsonl:0", "in.jsonl:1", "in.jsonl:2"]
    assert summary.written[key] == hashlib.sha256(store.objects[key]).hexdigest()


def test_a_quarantine_is_not_stored_once_the_lease_is_lost() -> None:
    lease = Lease()
    store, summary, q = quarantine(lease)
    q.spool.append(quarantine_entry(reject(1), summary))
    lease.held = False
    with pytest.raises(Lost):
        q.store(summary)
    assert store.objects == {} and "quarantine/run-q.jsonl" not in summary.written
