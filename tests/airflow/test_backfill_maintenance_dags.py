"""`pith_backfill` (snapshot source) and `pith_maintenance` run by a real Airflow."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.airflow

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "arxiv-sample.jsonl"


def test_snapshot_backfill_then_maintenance(
    dagbag: Any, pith_env: dict[str, str], monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    from pith_pipeline.core.canonical_json import loads
    from pith_pipeline.maintenance import WATERMARK_KEY, published_bundle_keys
    from pith_pipeline.storage.factory import open_store

    monkeypatch.setenv("PITH_SNAPSHOT_CHUNK_BYTES", "20000")
    store = open_store(pith_env["PITH_STORE"])
    dr = dagbag.get_dag("pith_backfill").test(
        logical_date=datetime(2026, 1, 1, tzinfo=UTC),
        run_conf={
            "from": "1990-01-01",
            "until": "2030-01-01",
            "source": "snapshot",
            "snapshot_path": str(SAMPLE),
        },
    )
    assert dr.state == "success", {ti.task_id: ti.state for ti in dr.get_task_instances()}
    build = [ti for ti in dr.get_task_instances() if ti.task_id == "build"]
    assert len(build) > 1  # mapped over several byte ranges
    manifest = loads(store.get("runs/snapshot-1990-01-01--2030-01-01/manifest.json") or b"")
    bundles = published_bundle_keys(store)
    assert len(bundles) == manifest["counts"]["built"] > 0

    dr = dagbag.get_dag("pith_maintenance").test(
        logical_date=datetime(2026, 1, 4, 3, tzinfo=UTC), run_conf={"sample_size": 1000, "retention_hours": 0}
    )
    assert dr.state == "success"
    mark = loads(store.get(WATERMARK_KEY) or b"")
    assert mark["checked_runs"] == ["runs/snapshot-1990-01-01--2030-01-01/manifest.json"]

    # delete one published bundle, its events, state and .well-known copy left: the
    # backfill's papers were checked already, so only the sample can draw it, and does
    body = bundles[0].split("/")[1]
    store.delete(bundles[0])
    capfd.readouterr()
    dr = dagbag.get_dag("pith_maintenance").test(
        logical_date=datetime(2026, 1, 11, 3, tzinfo=UTC), run_conf={"sample_size": 1000}
    )
    states = {ti.task_id: ti.state for ti in dr.get_task_instances()}
    assert states["verify"] == "failed" and dr.state == "failed"
    logged = "".join(capfd.readouterr())  # the task's log: the error names the object and the fix
    assert f"pith/{body}/bundle.json: missing, but events/{body}/ holds" in logged
    assert f"pith-pipeline rebuild --store {store.url}" in logged

    # repair: rebuilds from the event store, verifies again, and passes
    dr = dagbag.get_dag("pith_maintenance").test(
        logical_date=datetime(2026, 1, 18, 3, tzinfo=UTC), run_conf={"sample_size": 1000, "repair": True}
    )
    assert dr.state == "success", {ti.task_id: ti.state for ti in dr.get_task_instances()}
    assert store.get(bundles[0]) is not None


def test_mapped_oai_harvests_keep_the_interval_between_all_requests(
    dagbag: Any, pith_env: dict[str, str], oai_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each mapped harvest opens its own client; the endpoint still sees the interval."""
    import itertools

    _url, server = oai_server
    interval = 3.0  # arXiv's: the tasks between two harvests take less than that
    monkeypatch.setenv("PITH_OAI_MIN_INTERVAL", str(interval))
    dr = dagbag.get_dag("pith_backfill").test(
        logical_date=datetime(2026, 1, 2, tzinfo=UTC),
        run_conf={"from": "2024-01-02", "until": "2024-01-05", "source": "oai"},
    )
    assert dr.state == "success", {ti.task_id: ti.state for ti in dr.get_task_instances()}
    harvests = [ti for ti in dr.get_task_instances() if ti.task_id == "harvest"]
    assert len(harvests) == 3  # one mapped harvest per day
    gaps = [b - a for a, b in itertools.pairwise(sorted(server.times))]
    assert len(gaps) >= 4 and min(gaps) >= interval * 0.9, gaps
