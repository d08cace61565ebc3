"""The Airflow DAG appends what it publishes to the transparency log (on moto's S3)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_ingest_dag import DAY1, DAY2, load, run

pytestmark = pytest.mark.airflow


def test_daily_windows_are_logged_and_recorded_in_their_run_manifests(
    dagbag: Any, pith_env: dict[str, str], oai_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pith_pipeline.signing.local import generate_key
    from pith_pipeline.storage.factory import open_store
    from pith_pipeline.tlog.pipeline import check_log_matches_event_store, event_store_keys

    priv, _pub, _doc = generate_key(tmp_path / "logkey")
    monkeypatch.setenv("PITH_LOG_SIGNER", f"file:{priv}")
    store = open_store(pith_env["PITH_STORE"])
    run(dagbag, DAY1)
    first = load(store, "runs/ingest-2024-01-02/manifest.json")["log"]
    assert list(store.list("log/pending/")) == []
    assert first["origin"] == "pith.test.example/log" and first["size"] == first["appended"] > 0
    run(dagbag, DAY2)
    second = load(store, "runs/ingest-2024-01-03/manifest.json")["log"]
    assert second["first_index"] == first["size"] and second["size"] > first["size"]
    assert second["size"] == sum(1 for _ in event_store_keys(store))
    assert check_log_matches_event_store(store) == []
    # each window's pending markers travelled with its staged ledgers and were settled
    assert list(store.list("log/pending/")) == []


def test_with_no_log_key_given_the_dag_keeps_a_log_signed_by_a_key_made_beside_the_registry_key(
    dagbag: Any, pith_env: dict[str, str], oai_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The log on by default in the DAG's tasks too: the window's build tasks make the
    key beside PITH_SIGNER's file (on a new store) and name it in the key document;
    the task that writes the run manifest appends with it, on S3."""
    from pith_pipeline.storage.factory import open_store
    from pith_pipeline.tlog.pipeline import check_log_matches_event_store, event_store_keys

    monkeypatch.delenv("PITH_LOG_SIGNER", raising=False)
    log_key = Path(pith_env["PITH_SIGNER"].removeprefix("file:")).with_name("pith-log-private-key.json")
    assert not log_key.exists()
    store = open_store(pith_env["PITH_STORE"])
    run(dagbag, DAY1)
    assert log_key.is_file() and (log_key.stat().st_mode & 0o777) == 0o600
    logged = load(store, "runs/ingest-2024-01-02/manifest.json")["log"]
    assert logged["origin"] == "pith.test.example/log"
    assert logged["size"] == sum(1 for _ in event_store_keys(store)) > 0
    assert check_log_matches_event_store(store) == []
