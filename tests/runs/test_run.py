"""`Run`: one lifecycle for every publishing run, and one way to end it."""

from __future__ import annotations

from dataclasses import replace
from itertools import islice
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from pith_pipeline.cli import cli
from pith_pipeline.config import Settings
from pith_pipeline.core.canonical_json import loads
from pith_pipeline.core.layout import INDEX, LOG, run_manifest_key
from pith_pipeline.runs.run import LOG_ONLY, REINDEX, Run
from pith_pipeline.signing.local import generate_key
from pith_pipeline.sources.jsonl import iter_jsonl
from pith_pipeline.storage.lease import LeaseBusyError, writer_lease
from pith_pipeline.storage.local import LocalStore

DATA = Path(__file__).resolve().parents[1] / "data"


def _records() -> list[Any]:
    return list(islice(iter_jsonl(DATA / "arxiv-sample.jsonl"), 3))


def _settings(tmp_path: Path) -> Settings:
    key = generate_key(tmp_path / "keys", key_id="run-test")[0]
    return Settings(store=str(tmp_path / "store"), signer=str(key), workers=1)


def _manifests(store: LocalStore) -> list[str]:
    return [k for k in store.list("runs/") if k.endswith("/manifest.json")]


def test_a_run_that_succeeds_indexes_and_writes_its_manifest(tmp_path: Path) -> None:
    with Run.open(_settings(tmp_path), command="build", notes={"input": "sample"}) as run:
        summary = run.publish(_records())
    assert summary.built == 3
    assert run.manifest_key == run_manifest_key(run.run_id)
    assert _manifests(LocalStore(tmp_path / "store")) == [run.manifest_key]


@pytest.mark.parametrize("fault", [RuntimeError("disk full"), KeyboardInterrupt()])
def test_a_failed_or_interrupted_run_writes_no_manifest_and_frees_its_leases(
    tmp_path: Path, fault: BaseException
) -> None:
    settings = _settings(tmp_path)
    with pytest.raises(type(fault)), Run.open(settings, command="build") as run:
        run.publish(_records())
        raise fault
    store = LocalStore(tmp_path / "store")
    assert _manifests(store) == []
    assert run.manifest_key is None
    # the leases were released: the next run (waiting for nobody) takes them at once
    with Run.open(settings, command="build", lease_wait=0) as again:
        assert again.publish(_records()).unchanged == 3
    assert _manifests(store) == [again.manifest_key]


def _with_log(tmp_path: Path) -> Settings:
    """Settings naming a log key and origin of their own: nothing in the environment."""
    log_key = generate_key(tmp_path / "log-keys", key_id="run-test-log")[0]
    return replace(_settings(tmp_path), log_signer=f"file:{log_key}", log_origin="registry.test/log")


def _events(store: LocalStore) -> int:
    return sum(1 for k in store.list("events/") if k.endswith(".json"))


def test_the_settings_log_key_and_origin_reach_the_log_and_the_pages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run's log key is a field of its `Settings`, handed to the publisher (the
    pages name the log) and to the manifest (the append): no environment variable and
    no command scope carries it."""
    for name in ("PITH_LOG_SIGNER", "PITH_LOG_ORIGIN", "PITH_KEEP_LOG"):
        monkeypatch.delenv(name, raising=False)
    with Run.open(_with_log(tmp_path), command="build") as run:
        run.publish(_records())
    store = LocalStore(tmp_path / "store")
    checkpoint = (store.get(f"{LOG}checkpoint") or b"").decode().split("\n")
    assert checkpoint[:2] == ["registry.test/log", str(_events(store))]
    assert run.manifest_key is not None
    assert loads(store.get(run.manifest_key) or b"{}")["log"]["size"] == _events(store)
    verified = CliRunner().invoke(cli, ["verify", str(tmp_path / "store"), "-q"])
    assert verified.exit_code == 0, verified.output  # pages, log and bundles agree


def test_a_log_only_run_appends_its_events_and_indexes_nothing(tmp_path: Path) -> None:
    """`receipts reissue`'s ending: the run's new events go into the log; no index
    table is touched and no run manifest is written."""
    with Run.open(_with_log(tmp_path), command="reissue-like", ending=LOG_ONLY) as run:
        run.publish(_records())
    store = LocalStore(tmp_path / "store")
    assert run.result is not None and run.manifest_key is None
    assert (store.get(f"{LOG}checkpoint") or b"").decode().split("\n")[1] == str(_events(store))
    assert _manifests(store) == [] and list(store.list(INDEX)) == []


def test_a_log_only_run_that_fails_appends_nothing(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError), Run.open(_with_log(tmp_path), command="t", ending=LOG_ONLY) as run:
        run.publish(_records())
        raise RuntimeError("stop")
    assert run.result is None
    assert LocalStore(tmp_path / "store").get(f"{LOG}checkpoint") is None


def test_a_reindex_run_holds_the_index_lease_from_its_start_and_rebuilds_every_table(
    tmp_path: Path,
) -> None:
    """`rebuild`'s ending: no other index writer gets in between its bundles and its
    indexes, and the indexes come back whole from the bundles."""
    settings = _settings(tmp_path)
    with Run.open(settings, command="build") as first:
        first.publish(_records())
    with (
        Run.open(settings, command="rebuild", ending=REINDEX, lease_wait=0) as run,
        pytest.raises(LeaseBusyError),
    ):
        writer_lease(run.store, command="other", papers=False, index=True, wait=0).acquire()
    assert run.manifest_key is None
    assert run.result.rows["records"] == 3


def test_a_run_stamps_what_it_writes_with_the_clock_it_is_given(tmp_path: Path) -> None:
    """The clock is injected, as the store and the signer are: no patching of time."""
    from datetime import UTC, datetime

    fixed = datetime(2026, 7, 1, 12, 0, tzinfo=UTC)
    with Run.open(_settings(tmp_path), command="build", clock=lambda: fixed) as run:
        run.publish(_records())
    store = LocalStore(tmp_path / "store")
    assert run.manifest_key is not None
    assert loads(store.get(run.manifest_key) or b"{}")["finished_at"].startswith("2026-07-01T12:00:00")
    bundles = [k for k in store.list("pith/") if k.endswith("/bundle.json")]
    assert bundles and all(
        loads(store.get(k) or b"{}")["built_at"].startswith("2026-07-01T12:00:00") for k in bundles
    )
