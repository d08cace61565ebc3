"""The log's invariants under crashes and lost objects (issue 26, classes 1 and 3).

- every published event is in the log exactly once, whatever write of an append a
  kill stops at, and whatever derived object (a lookup object) is lost;
- the pipeline never signs a checkpoint inconsistent with one it signed before;
- a store that has had a log cannot lose it (or roll its checkpoint back) unnoticed.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from store_doubles import DyingStore, Killed
from test_pipeline_log import SIGNER, log_signer
from testclock import StepClock

from pith_pipeline.core.canonical_json import dumps, loads
from pith_pipeline.errors import IntegrityError
from pith_pipeline.publish import BuildConfig, Publisher
from pith_pipeline.sources.jsonl import iter_jsonl
from pith_pipeline.storage.memory import MemoryStore
from pith_pipeline.tlog.check import check_log_matches_event_store
from pith_pipeline.tlog.log import TileReader, store_fetch
from pith_pipeline.tlog.lookup import lookup
from pith_pipeline.tlog.pipeline import log_run, sync_log
from pith_pipeline.tlog.recovery import rebuild_log
from pith_pipeline.tlog.stored_events import event_store_keys


def publish(store: Any, lines: list[str], tmp_path: Path, name: str = "a.jsonl") -> Any:
    """One run; each later run's clock starts a day later (as runs do)."""
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    day = 1 + sum(1 for _ in tmp_path.glob("*.jsonl"))
    clock = StepClock(datetime(2026, 7, day, tzinfo=UTC))
    return Publisher(store, SIGNER, BuildConfig(), clock=clock).publish(iter_jsonl(path))


def _run(store: Any, summary: Any, **kw: Any) -> Any:
    return log_run(
        store, summary.written, log_signer(), pending=summary.log_pending, run_id=summary.run_id, **kw
    )


def _drop_leases(store: MemoryStore) -> None:
    """What a killed writer's leases come to once their TTL passes."""
    for k in list(store.list("leases/")):
        store.delete(k)


def _log_sync(store: MemoryStore) -> int:
    """`log sync`'s call; the number of entries it appended."""
    run = sync_log(store, log_signer(), event_store_keys(store), everything=True)
    assert run.result is not None and not run.problems
    return run.result.appended


def _assert_whole(store: MemoryStore) -> None:
    assert check_log_matches_event_store(store) == []  # each event once, no other entry
    assert list(store.list("log/pending/")) == []
    before = store.get("log/checkpoint")
    assert _log_sync(store) == 0 and _log_sync(store) == 0  # idempotent
    assert store.get("log/checkpoint") == before
    size = int((before or b"").split(b"\n")[1])
    for key in event_store_keys(store):  # the lookup finds every event where it is
        hex_id = key.rsplit("/", 1)[1].split(".")[0]
        idx = lookup(store_fetch(store), hex_id, size)
        assert idx is not None
        entry = TileReader(store_fetch(store), size).entries(idx // 256)[idx % 256]
        assert loads(entry)["event_id"] == "sha256:" + hex_id


def _log_writes(tmp_path: Path, lines: list[str]) -> int:
    store = MemoryStore()
    _run(store, publish(store, lines[:4], tmp_path))
    second = publish(store, lines[4:10], tmp_path, "b.jsonl")
    dying = DyingStore(store, at=10**9)
    _run(dying, second)
    return dying.writes


@pytest.mark.parametrize("then", ["next run", "log sync", "same run again"])
def test_a_kill_at_any_write_of_an_append_loses_no_event_and_duplicates_none(
    tmp_path: Path, sample_lines: list[str], then: str
) -> None:
    steps = _log_writes(tmp_path, sample_lines)
    assert steps >= 5  # tiles, bundle, lookup objects, checkpoint, appended.json, markers
    for at in range(steps):
        store = MemoryStore()
        _run(store, publish(store, sample_lines[:4], tmp_path))
        second = publish(store, sample_lines[4:10], tmp_path, "b.jsonl")
        with pytest.raises(Killed):
            _run(DyingStore(store, at), second)
        _drop_leases(store)
        if then == "next run":
            _run(store, publish(store, sample_lines[10:12], tmp_path, "c.jsonl"))
        elif then == "same run again":  # its ledger and marker: a retry of the killed task
            _run(store, second)
        else:
            _log_sync(store)  # appends the dead run's events and deletes its marker
        try:
            _assert_whole(store)
        except AssertionError as exc:
            raise AssertionError(f"killed at log write {at} of {steps}, then {then}: {exc}") from None


def test_a_lost_lookup_object_is_derived_again_from_the_log_not_appended_twice(
    tmp_path: Path, sample_lines: list[str]
) -> None:
    store = MemoryStore()
    _run(store, publish(store, sample_lines[:6], tmp_path))
    shards = sorted(store.list("log/index/"))
    lost = {k: store.get(k) for k in shards[: len(shards) // 2]}
    for k in lost:
        store.delete(k)
    assert _log_sync(store) == 0
    assert {k: store.get(k) for k in lost} == lost  # re-derived from the entries, byte for byte
    # and a run after it (whose own events are new) keeps the log whole
    _run(store, publish(store, sample_lines[6:8], tmp_path, "b.jsonl"))
    _assert_whole(store)


# -- class 3: a lost or rolled-back log ------------------------------------------


def test_a_lost_log_is_noticed_by_runs_sync_and_verify_and_rebuild_recovers_it(
    tmp_path: Path, sample_lines: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PITH_LOG_SIGNER", raising=False)
    store = MemoryStore()
    _run(store, publish(store, sample_lines[:4], tmp_path))
    _run(store, publish(store, sample_lines[4:7], tmp_path, "b.jsonl"))
    signed = store.get("log/checkpoint")
    for k in list(store.list("log/")):
        store.delete(k)
    third = publish(store, sample_lines[7:9], tmp_path, "c.jsonl")
    with pytest.raises(IntegrityError, match=r"lost.*log rebuild"):
        log_run(store, third.written, None)  # without the key
    with pytest.raises(IntegrityError, match=r"lost.*log rebuild"):
        _run(store, third)  # with the key: a new log would be a fork
    with pytest.raises(IntegrityError, match=r"lost.*log rebuild"):
        _log_sync(store)
    problems = check_log_matches_event_store(store)
    assert len(problems) == 1 and "lost" in problems[0] and "log rebuild" in problems[0]
    assert store.get("log/checkpoint") is None  # nothing was signed
    run = rebuild_log(store, log_signer())
    assert run.result is not None
    old_size = int((signed or b"").split(b"\n")[1])
    assert run.result.size >= old_size
    _assert_whole(store)


def test_a_checkpoint_rolled_back_is_noticed_and_never_appended_onto(
    tmp_path: Path, sample_lines: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PITH_LOG_SIGNER", raising=False)
    store = MemoryStore()
    _run(store, publish(store, sample_lines[:4], tmp_path))
    older = store.get("log/checkpoint")
    _run(store, publish(store, sample_lines[4:7], tmp_path, "b.jsonl"))
    newer = store.get("log/checkpoint")
    tiles = {k: store.get(k) for k in store.list("log/tile/")}
    store.put("log/checkpoint", older or b"")  # a restore from an older backup of log/
    third = publish(store, sample_lines[7:9], tmp_path, "c.jsonl")
    with pytest.raises(IntegrityError, match=r"rolled back.*log rebuild"):
        _run(store, third)
    with pytest.raises(IntegrityError, match=r"rolled back.*log rebuild"):
        _log_sync(store)
    problems = check_log_matches_event_store(store)
    assert any("rolled back" in p for p in problems), problems
    assert store.get("log/checkpoint") == older  # nothing signed onto the old tree
    assert {k: store.get(k) for k in tiles} == tiles  # no tile the newer checkpoint names changed
    rebuild_log(store, log_signer())  # the newer checkpoint back (its tiles are intact)
    assert store.get("log/checkpoint") == newer
    _run(store, third)
    _assert_whole(store)


def test_rebuild_refuses_to_sign_a_tree_that_forks_from_a_recorded_checkpoint(
    tmp_path: Path, sample_lines: list[str]
) -> None:
    store = MemoryStore()
    _run(store, publish(store, sample_lines[:4], tmp_path))
    _run(store, publish(store, sample_lines[4:7], tmp_path, "b.jsonl"))
    first_event = sorted(event_store_keys(store))[0]
    for k in list(store.list("log/")):
        store.delete(k)
    store.delete(first_event)  # the event store no longer gives the same tree
    with pytest.raises(IntegrityError, match="fork"):
        rebuild_log(store, log_signer())
    assert store.get("log/checkpoint") is None and list(store.list("log/tile/")) == []


def test_a_run_manifests_record_alone_tells_a_lost_or_rolled_back_log(
    tmp_path: Path, sample_lines: list[str]
) -> None:
    """A store written before the witness existed: its run manifests record the
    checkpoints, and that is enough to notice."""
    store = MemoryStore()
    _run(store, publish(store, sample_lines[:4], tmp_path))
    older = store.get("log/checkpoint")
    _run(store, publish(store, sample_lines[4:7], tmp_path, "b.jsonl"))
    size, root = (store.get("log/checkpoint") or b"").decode().split("\n")[1:3]
    record = {"format": "pith-run-manifest-v1", "log": {"size": int(size), "root_hash_b64": root}}
    store.put("runs/r1/manifest.json", dumps(record))
    store.delete("runs/log-checkpoint")
    store.put("log/checkpoint", older or b"")
    problems = check_log_matches_event_store(store)
    assert len(problems) == 1 and "rolled back" in problems[0] and "runs/r1/manifest.json" in problems[0]
    for k in list(store.list("log/")):
        store.delete(k)
    third = publish(store, sample_lines[7:8], tmp_path, "c.jsonl")
    with pytest.raises(IntegrityError, match=r"runs/r1/manifest\.json.*the log was lost"):
        _run(store, third)
