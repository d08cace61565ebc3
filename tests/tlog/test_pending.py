"""Pending markers: a run checks the whole event store against the log only when
another run may have left events unlogged (not on every run: that is O(store))."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from testclock import StepClock

from pith_pipeline.core.keys import Ed25519Signer
from pith_pipeline.publish import BuildConfig, Publisher, RunSummary
from pith_pipeline.runs.manifest import write_manifest
from pith_pipeline.sources.jsonl import iter_jsonl
from pith_pipeline.storage.lease import WriterLease, default_owner, shard_lease
from pith_pipeline.storage.memory import MemoryStore
from pith_pipeline.tlog.check import check_log_matches_event_store
from pith_pipeline.tlog.log import LogSigner
from pith_pipeline.tlog.pending import PENDING
from pith_pipeline.tlog.pipeline import log_run

SIGNER = Ed25519Signer(bytes(range(32)), "pipeline-test")
LOG = LogSigner.from_signer(Ed25519Signer(bytes(range(1, 33)), "log"), "pith.example.org/log")


class ListCounting(MemoryStore):
    """A memory store that records which prefixes were listed."""

    def __init__(self) -> None:
        super().__init__()
        self.listed: list[str] = []

    def list(self, prefix: str) -> Iterator[str]:
        self.listed.append(prefix)
        return super().list(prefix)


def publish(
    store: MemoryStore, lines: list[str], tmp_path: Path, name: str, run_id: str | None = None
) -> Any:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    pub = Publisher(
        store, SIGNER, BuildConfig(), clock=StepClock(datetime(2026, 7, 1, tzinfo=UTC)), run_id=run_id
    )
    return pub.publish(iter_jsonl(path))


def finish(store: MemoryStore, summary: RunSummary) -> Any:
    return log_run(store, summary.written, LOG, pending=summary.log_pending, run_id=summary.run_id)


def pending(store: MemoryStore) -> list[str]:
    return sorted(k for k in store.objects if k.startswith(PENDING))


def test_a_publisher_marks_its_run_pending_before_its_first_event(
    tmp_path: Path, sample_lines: list[str]
) -> None:
    store = MemoryStore()
    order: list[str] = []
    real_put_once = store.put_once
    real_put = store.put

    def put_once(key: str, data: bytes, **kw: Any) -> bool:
        order.append(key)
        return real_put_once(key, data, **kw)

    def put(key: str, data: bytes, **kw: Any) -> None:
        order.append(key)
        real_put(key, data, **kw)

    store.put_once = put_once  # type: ignore[method-assign]
    store.put = put  # type: ignore[method-assign]
    summary = publish(store, sample_lines[:3], tmp_path, "a.jsonl")
    marks = pending(store)
    assert len(marks) == 1 and summary.log_pending == marks
    assert marks[0].startswith(f"{PENDING}{summary.run_id}.")
    first_event = next(i for i, k in enumerate(order) if k.startswith("events/"))
    assert order.index(marks[0]) < first_event
    # a run that publishes nothing new writes no marker
    again = publish(store, sample_lines[:3], tmp_path, "a.jsonl")
    assert again.log_pending == [] and pending(store) == marks


def test_a_run_alone_does_not_list_the_event_store_and_removes_its_marker(
    tmp_path: Path, sample_lines: list[str]
) -> None:
    store = ListCounting()
    finish(store, publish(store, sample_lines[:4], tmp_path, "a.jsonl"))  # the first log
    store.listed.clear()
    second = publish(store, sample_lines[4:9], tmp_path, "b.jsonl")
    listed_while_publishing = list(store.listed)
    run = finish(store, second)
    assert run is not None and run.result is not None and run.result.appended > 5
    assert [p for p in store.listed[len(listed_while_publishing) :] if p.startswith("events")] == []
    assert pending(store) == []
    assert check_log_matches_event_store(store) == []


def test_the_first_run_on_a_new_store_does_not_list_the_event_store(
    tmp_path: Path, sample_lines: list[str]
) -> None:
    """An empty log on a store no earlier run finished in: nothing but this run's
    events can be there (a run that died leaves a marker), so nothing is listed."""
    store = ListCounting()
    summary = publish(store, sample_lines[:4], tmp_path, "a.jsonl")
    before = len(store.listed)
    run = finish(store, summary)
    assert run is not None and run.result is not None and run.result.appended > 4
    assert [p for p in store.listed[before:] if p.startswith("events")] == []
    assert check_log_matches_event_store(store) == []


def test_a_marker_left_by_a_dead_run_makes_the_next_run_log_its_events(
    tmp_path: Path, sample_lines: list[str]
) -> None:
    store = MemoryStore()
    finish(store, publish(store, sample_lines[:3], tmp_path, "a.jsonl"))
    died = publish(store, sample_lines[3:8], tmp_path, "b.jsonl")  # killed before its log append
    assert pending(store) == died.log_pending != []
    third = publish(store, sample_lines[8:10], tmp_path, "c.jsonl")
    finish(store, third)
    assert check_log_matches_event_store(store) == []
    assert pending(store) == []  # the dead run's marker is settled with it


def test_a_rerun_under_the_same_run_id_logs_what_its_killed_attempt_published(
    tmp_path: Path, sample_lines: list[str]
) -> None:
    """A reproducible run id (SOURCE_DATE_EPOCH) makes the rerun of a killed run the
    same run: the events its first attempt wrote are `unchanged` for the rerun, in
    no ledger of it, and must still reach the log."""
    store = MemoryStore()
    finish(store, publish(store, sample_lines[:2], tmp_path, "a.jsonl"))
    publish(store, sample_lines[2:6], tmp_path, "b.jsonl", run_id="20260701T000000Z-abcdef")  # killed
    rerun = publish(store, sample_lines[2:6], tmp_path, "b.jsonl", run_id="20260701T000000Z-abcdef")
    assert rerun.built == 0 and rerun.log_pending == []
    finish(store, rerun)
    assert check_log_matches_event_store(store) == []
    assert pending(store) == []


def test_the_marker_of_a_run_still_holding_a_lease_is_left_to_that_run(
    tmp_path: Path, sample_lines: list[str]
) -> None:
    store = ListCounting()
    finish(store, publish(store, sample_lines[:2], tmp_path, "a.jsonl"))
    busy = publish(store, sample_lines[2:5], tmp_path, "b.jsonl", run_id="20260701T000000Z-b00000")
    with WriterLease(store, [shard_lease(3)], owner=default_owner(busy.run_id, "build")):
        store.listed.clear()
        mine = publish(store, sample_lines[5:7], tmp_path, "c.jsonl")
        before = len(store.listed)
        finish(store, mine)
        # still running: its events are its own to append; nobody lists the store for them
        assert [p for p in store.listed[before:] if p.startswith("events")] == []
        assert pending(store) == busy.log_pending
    finish(store, busy)
    assert pending(store) == [] and check_log_matches_event_store(store) == []


def test_the_marker_of_a_lease_holder_that_died_is_settled(tmp_path: Path, sample_lines: list[str]) -> None:
    """SIGKILL leaves the lease until its TTL; a holder on this machine whose process
    is gone is dead at once (as for taking the lease over)."""
    store = MemoryStore()
    finish(store, publish(store, sample_lines[:2], tmp_path, "a.jsonl"))
    died = publish(store, sample_lines[2:5], tmp_path, "b.jsonl")
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True)
    owner = {**default_owner(died.run_id, "build"), "pid": int(gone.stdout)}
    lease = WriterLease(store, [shard_lease(1)], owner=owner)
    lease.acquire()
    lease._stop.set()  # the holder is gone: nothing renews or releases it
    finish(store, publish(store, sample_lines[5:6], tmp_path, "c.jsonl"))
    assert check_log_matches_event_store(store) == [] and pending(store) == []
    assert os.getpid() != owner["pid"]


def test_without_a_log_a_run_leaves_no_marker(
    tmp_path: Path, sample_lines: list[str], monkeypatch: Any
) -> None:
    monkeypatch.delenv("PITH_LOG_SIGNER", raising=False)
    store = MemoryStore()
    summary = publish(store, sample_lines[:3], tmp_path, "a.jsonl")
    write_manifest(store, summary)  # the run's end: no log key, no log
    assert log_run(store, summary.written, None, pending=summary.log_pending, run_id=summary.run_id) is None
    assert pending(store) == []
    # the first run with a log key then logs every event the store holds (earlier
    # runs finished here: their manifests say so)
    finish(store, publish(store, sample_lines[3:4], tmp_path, "b.jsonl"))
    assert check_log_matches_event_store(store) == []


def test_every_command_that_writes_a_marker_holds_a_lease_naming_its_run(
    tmp_path: Path, monkeypatch: Any, asset: Any
) -> None:
    """Another run's log step leaves a marker alone only while its run holds a writer
    lease naming that run: a command whose lease names no run (or another one) would
    see its marker settled while it is still writing events."""
    from click.testing import CliRunner

    from pith_pipeline.cli import cli
    from pith_pipeline.signing.local import generate_key
    from pith_pipeline.storage.lease import live_run_ids
    from pith_pipeline.tlog import pending as pending_mod

    seen: list[tuple[str, bool]] = []
    real_ensure = pending_mod.PendingMark.ensure

    def ensure(self: Any, run_id: str) -> str | None:
        key = real_ensure(self, run_id)
        if key is not None:
            seen.append((run_id, run_id in live_run_ids(self.store)))
        return key

    monkeypatch.setattr(pending_mod.PendingMark, "ensure", ensure)
    monkeypatch.delenv("PITH_LOG_SIGNER", raising=False)
    old = generate_key(tmp_path / "keys", key_id="old-key")[0]
    new = generate_key(tmp_path / "keys2", key_id="new-key")[0]
    store, sample = str(tmp_path / "store"), str(asset("arxiv-sample.jsonl"))
    commands = [
        ["build", "--input", sample, "--store", store, "--key", str(old)],
        # the store's log key is beside the old key (made by the build): given with the new one
        [
            "receipts",
            "reissue",
            "--store",
            store,
            "--signer",
            str(new),
            "--log-signer",
            str(tmp_path / "keys" / "pith-log-private-key.json"),
        ],
        # a store of its own, so it has events to write
        ["ingest", "--snapshot", sample, "--store", store + "-2", "--key", str(old)],
    ]
    for args in commands:
        result = CliRunner().invoke(cli, [*args, "--workers", "1"])
        assert result.exit_code == 0, result.output
        assert seen and all(live for _run, live in seen), (args[0], seen)
        seen.clear()
