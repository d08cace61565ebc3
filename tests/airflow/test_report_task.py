"""`pith_maintenance`'s `report` task, run by a real Airflow on moto's S3: the page of
`pith-pipeline report` lands in the store as report/index.html, with query's numbers."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tests.cli_in_process import run_cli

pytestmark = pytest.mark.airflow

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "arxiv-sample.jsonl"


def test_the_weekly_report_task_writes_the_page_into_the_store(
    dagbag: Any, pith_env: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    from pith_pipeline.index.query import run_query
    from pith_pipeline.report import STORE_KEY
    from pith_pipeline.storage.factory import open_store

    url = pith_env["PITH_STORE"]
    built = run_cli(capsys, "build", "--input", str(SAMPLE), "--store", url)
    assert built.code == 0, built.err
    store = open_store(url)
    assert store.get(STORE_KEY) is None

    dr = dagbag.get_dag("pith_maintenance").test(logical_date=datetime(2026, 1, 4, 3, tzinfo=UTC))
    states = {ti.task_id: ti.state for ti in dr.get_task_instances()}
    assert states["report"] == "success", states

    page = (store.get(STORE_KEY) or b"").decode("utf-8")
    papers = run_query(store, "SELECT count(*) FROM records WHERE superseded_by IS NULL").rows[0][0]
    assert papers > 0
    assert re.search(r'data-total="papers">(\d+)<', page)[1] == str(papers)  # type: ignore[index]
    assert page.count("<svg") >= 6
