"""`status` names the run that finished last, by the time its manifest records.

Why: it took the last run id in sorted order, as if every run id started with its
time. Only `build`/`ingest` ids do (`20261204T135937Z-babb5f`); a backfill's are its
kind and window (`snapshot-2019-09-01--2019-10-01`, `ingest-2019-09-29`, a rerun's
`...-rerun-1`), and sort after every timestamped id whenever they ran.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from cli_in_process import run_cli

from pith_pipeline.index.status import status
from pith_pipeline.publish import RunSummary
from pith_pipeline.runs.manifest import write_manifest
from pith_pipeline.storage.base import Store
from pith_pipeline.storage.local import LocalStore


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Any:
    return partial(run_cli, capsys)


def finished(store: Store, run_id: str, at: datetime, **counts: int) -> None:
    """A run manifest of `run_id` that finished at `at`."""
    summary = RunSummary.part(run_id, **counts)
    write_manifest(store, summary, window={"run": run_id}, clock=lambda: at)


def day(d: int, hour: int = 0) -> datetime:
    return datetime(2026, 1, d, hour, tzinfo=UTC)


def test_a_daily_run_after_a_snapshot_backfill_is_the_last_run(tmp_path: Path, cli: Any) -> None:
    store = LocalStore(tmp_path / "store")
    finished(store, "snapshot-2019-09-01--2019-10-01", day(5), fetched=30)
    finished(store, "20260110T000000Z-abcdef", day(10), fetched=2)
    r = cli("status", "--store", str(tmp_path / "store"), "--json")
    assert r.code == 0, r.err
    last = json.loads(r.out)["last_run"]
    assert last["run_id"] == "20260110T000000Z-abcdef", last
    assert last["finished_at"] == "2026-01-10T00:00:00Z"
    assert last["counts"]["fetched"] == 2
    text = cli("status", "--store", str(tmp_path / "store")).out
    assert "last run: 20260110T000000Z-abcdef finished 2026-01-10T00:00:00Z" in text, text


def test_a_snapshot_backfill_after_a_daily_run_is_the_last_run(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store")
    finished(store, "20260105T000000Z-abcdef", day(5))
    finished(store, "snapshot-2019-09-01--2019-10-01", day(10))
    assert status(store)["last_run"]["run_id"] == "snapshot-2019-09-01--2019-10-01"


def test_window_runs_and_reruns_are_ordered_by_when_they_finished(tmp_path: Path) -> None:
    """Window run ids sort by the window, not by when the window ran: a backfill of an
    old month after today's daily window, a rerun of an old day."""
    store = LocalStore(tmp_path / "store")
    finished(store, "ingest-2026-01-09", day(10, 1))
    finished(store, "ingest-2019-09-29-rerun-1", day(10, 3))
    finished(store, "ingest-2019-09-29", day(10, 2))
    finished(store, "20260110T000000Z-abcdef", day(10, 0))
    st = status(store)
    assert st["runs"] == 4
    assert st["last_run"]["run_id"] == "ingest-2019-09-29-rerun-1"


def test_runs_that_finished_in_the_same_second_are_ordered_by_run_id(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store")
    finished(store, "snapshot-2019-09-01--2019-10-01", day(5))
    finished(store, "ingest-2019-09-29", day(5))
    assert status(store)["last_run"]["run_id"] == "snapshot-2019-09-01--2019-10-01"


def test_a_manifest_with_a_long_tail_is_still_read(tmp_path: Path) -> None:
    """The time is read from a manifest's end (it lists every object first); a manifest
    whose end holds more than that read (a long log entry) is read whole instead."""
    store = LocalStore(tmp_path / "store")
    finished(store, "20260110T000000Z-abcdef", day(10))
    finished(store, "snapshot-2019-09-01--2019-10-01", day(5))
    key = "runs/20260110T000000Z-abcdef/manifest.json"
    doc = json.loads(store.get(key) or b"")
    doc["log"] = {"problems": ["x" * 1000] * 100}
    (tmp_path / "store" / key).write_text(json.dumps(doc, indent=2) + "\n")
    assert status(store)["last_run"]["run_id"] == "20260110T000000Z-abcdef"


def test_the_last_run_on_s3(s3_store_url: str) -> None:
    from pith_pipeline.storage.factory import open_store

    store = open_store(s3_store_url)
    finished(store, "snapshot-2019-09-01--2019-10-01", day(5))
    finished(store, "20260110T000000Z-abcdef", day(10))
    assert status(store)["last_run"]["run_id"] == "20260110T000000Z-abcdef"


def test_the_time_is_read_from_the_manifests_end_only(tmp_path: Path, s3_store_url: str) -> None:
    """A ranged read of the last bytes, on a directory and on S3 (not the whole manifest,
    which for a backfill lists every object it published)."""
    from pith_pipeline.index.status import _tail
    from pith_pipeline.storage.factory import open_store

    for store in (LocalStore(tmp_path / "store"), open_store(s3_store_url)):
        finished(store, "20260110T000000Z-abcdef", day(10))
        key = "runs/20260110T000000Z-abcdef/manifest.json"
        whole = store.get(key) or b""
        assert _tail(store, key, 64) == whole[-64:]
        assert _tail(store, key, len(whole) + 10) == whole
