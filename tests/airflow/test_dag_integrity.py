"""Every DAG file parses, stays light at parse time, and declares owners, retries, tags."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.airflow

DAGS = Path(__file__).resolve().parents[2] / "dags"
DAG_FILES = sorted(p for p in DAGS.glob("*.py") if not p.name.startswith("_"))
EXPECTED = {"pith_ingest", "pith_backfill", "pith_maintenance"}
#: Modules a scheduler must not load to parse a DAG file (they belong in tasks).
HEAVY = (
    "pyarrow",
    "boto3",
    "botocore",
    "duckdb",
    "lxml",
    "nacl",
    "httpx2",
    "pith_pipeline.index",
    "pith_pipeline.publish",
    "pith_pipeline.storage.s3",
    "pith_pipeline.sources.oai",
)

PROBE = """
import importlib.util, json, sys
path = sys.argv[1]
spec = importlib.util.spec_from_file_location("dag_under_test", path)
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
heavy = json.loads(sys.argv[2])
loaded = sorted(m for m in sys.modules if any(m == h or m.startswith(h + ".") for h in heavy))
print(json.dumps(loaded))
"""


def test_the_expected_dag_files_exist() -> None:
    assert {p.stem for p in DAG_FILES} == EXPECTED


@pytest.mark.parametrize("path", DAG_FILES, ids=lambda p: p.name)
def test_dag_file_imports_without_heavy_modules(path: Path, tmp_path: Path, airflow_env: Any) -> None:
    """Parse in a fresh interpreter, then look at what got imported."""
    env = {**os.environ, **airflow_env(tmp_path)}
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, str(path), json.dumps(HEAVY)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, f"{path.name} failed to import:\n{proc.stderr[-4000:]}"
    loaded = json.loads(proc.stdout.strip().splitlines()[-1])
    assert loaded == [], f"{path.name} imports heavy modules at parse time: {loaded}"


def test_dagbag_has_no_import_errors(dagbag: Any) -> None:
    assert dagbag.import_errors == {}
    assert set(dagbag.dag_ids) == EXPECTED


@pytest.mark.parametrize("dag_id", sorted(EXPECTED))
def test_dag_declares_owner_retries_and_tags(dagbag: Any, dag_id: str) -> None:
    dag = dagbag.get_dag(dag_id)
    assert dag.tags and "pith" in dag.tags
    assert dag.doc_md and dag_id in dag.doc_md
    for t in dag.tasks:
        assert t.owner == "pith-pipeline", t.task_id
        assert t.retries >= 1, t.task_id
        assert t.retry_exponential_backoff, t.task_id
        assert t.retry_policy is not None, t.task_id


def test_arxiv_requests_go_through_the_single_slot_pool(dagbag: Any) -> None:
    """Every task that talks to arXiv runs in the `arxiv_oai` pool, one slot each."""
    talkers = {("pith_ingest", "harvest"), ("pith_backfill", "harvest")}
    for dag_id, task_id in talkers:
        t = dagbag.get_dag(dag_id).get_task(task_id)
        assert (t.pool, t.pool_slots) == ("arxiv_oai", 1)
    others = [
        (d, t.task_id) for d in EXPECTED for t in dagbag.get_dag(d).tasks if (d, t.task_id) not in talkers
    ]
    assert all(dagbag.get_dag(d).get_task(t).pool != "arxiv_oai" for d, t in others)


def test_ingest_runs_own_whole_day_windows(dagbag: Any) -> None:
    """A data-interval timetable: each run's interval is one whole UTC day, not zero-length."""
    from datetime import UTC, datetime, timedelta

    from airflow.serialization.encoders import coerce_to_core_timetable

    dag = dagbag.get_dag("pith_ingest")
    timetable = coerce_to_core_timetable(dag.timetable)
    interval = timetable.infer_manual_data_interval(run_after=datetime(2026, 3, 5, 7, 30, tzinfo=UTC))
    assert interval.end - interval.start == timedelta(days=1)
    assert interval.start == datetime(2026, 3, 4, tzinfo=UTC)
    assert dag.max_active_runs == 1


def test_index_assets_are_outlets(dagbag: Any) -> None:
    names = {"pith_index_records", "pith_index_events", "pith_index_aliases"}
    for dag_id, task_id in (("pith_ingest", "index"), ("pith_maintenance", "compact")):
        outlets = dagbag.get_dag(dag_id).get_task(task_id).outlets
        assert {o.name for o in outlets} == names


def test_backfill_params(dagbag: Any) -> None:
    params = dagbag.get_dag("pith_backfill").params
    assert {"from", "until", "source", "snapshot_path"} <= set(params.keys())
    assert params["source"] == "oai"
