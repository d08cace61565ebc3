"""Every write of the log and the index checks the writer's lease first (issue 26):
a writer paused past its lease stops before its next write, on a directory and S3."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from testclock import StepClock

from pith_pipeline.core.keys import Ed25519Signer
from pith_pipeline.publish import BuildConfig, Publisher
from pith_pipeline.sources.jsonl import iter_jsonl
from pith_pipeline.storage import lease as lease_mod
from pith_pipeline.storage.base import Store, StoreWrapper
from pith_pipeline.storage.factory import open_store
from pith_pipeline.storage.lease import LeaseLostError, WriterLease
from pith_pipeline.tlog.log import LogSigner
from pith_pipeline.tlog.pipeline import append_events, event_store_keys

SIGNER = Ed25519Signer(bytes(range(32)), "pipeline-test")
LOG_KEY = Ed25519Signer(bytes(range(1, 33)), "log")


class Clock:
    def __init__(self) -> None:
        self.skew = 0.0

    def __call__(self) -> float:
        import time

        return time.time() + self.skew


class PausesAtFirstWrite(StoreWrapper):
    """Passes every call to `inner`; at the first write under `prefix`, the writer
    "pauses" for longer than its lease (the lease's clock jumps past its TTL)."""

    def __init__(self, inner: Store, prefix: str, clock: Clock) -> None:
        super().__init__(inner)
        self.prefix, self.clock = prefix, clock
        self.writes: list[str] = []

    def _wrote(self, key: str) -> None:
        if key.startswith(self.prefix):
            self.writes.append(key)
            if len(self.writes) == 1:
                self.clock.skew = 10_000.0  # resumed long after the lease expired

    def put(self, key: str, data: bytes, **kw: Any) -> None:
        self.inner.put(key, data, **kw)
        self._wrote(key)

    def put_once(self, key: str, data: bytes, **kw: Any) -> bool:
        done = self.inner.put_once(key, data, **kw)
        self._wrote(key)
        return done

    def put_if_match(self, key: str, data: bytes, tag: str | None, **kw: Any) -> bool:
        done = self.inner.put_if_match(key, data, tag, **kw)
        self._wrote(key)
        return done


@pytest.fixture(params=["local", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    if request.param == "local":
        return open_store(str(tmp_path / "store"))
    return open_store(request.getfixturevalue("s3_store_url"))


def test_a_writer_paused_past_its_lease_stops_before_its_next_log_write(
    store: Store, tmp_path: Path, sample_lines: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    src = tmp_path / "in.jsonl"
    src.write_text("\n".join(sample_lines[:10]) + "\n", encoding="utf-8")
    Publisher(store, SIGNER, BuildConfig(), clock=StepClock(datetime(2026, 7, 1, tzinfo=UTC))).publish(
        iter_jsonl(src)
    )
    clock = Clock()

    class ClockedLease(WriterLease):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **{**kwargs, "now": clock})

    monkeypatch.setattr(lease_mod, "WriterLease", ClockedLease)
    paused = PausesAtFirstWrite(store, "log/", clock)
    with pytest.raises(LeaseLostError) as err:
        append_events(
            paused, LogSigner.from_signer(LOG_KEY, "pith.example.org/log"), list(event_store_keys(store))
        )
    assert "\n" not in str(err.value) and "expired" in str(err.value)
    assert len(paused.writes) == 1, paused.writes  # nothing after the pause
    assert store.get("log/checkpoint") is None


def test_a_writer_paused_past_its_lease_stops_before_its_next_index_write(
    tmp_path: Path, sample_lines: list[str]
) -> None:
    """The index's Delta commits bypass the store: they check the leases this
    process holds on it before every commit, note and removal."""
    from pith_pipeline.index import update_indexes
    from pith_pipeline.runs.manifest import touched_subjects

    store = open_store(str(tmp_path / "store"))
    src = tmp_path / "in.jsonl"
    src.write_text("\n".join(sample_lines[:5]) + "\n", encoding="utf-8")
    summary = Publisher(
        store, SIGNER, BuildConfig(), clock=StepClock(datetime(2026, 7, 1, tzinfo=UTC))
    ).publish(iter_jsonl(src))
    clock = Clock()
    with WriterLease(store, ["index"], owner={"pid": 1}, ttl=600, now=clock):
        clock.skew = 10_000.0  # paused past the TTL, then resumed
        with pytest.raises(LeaseLostError):
            update_indexes(store, touched_subjects(summary), run_id="r")
    assert not (tmp_path / "store" / "index").exists()
