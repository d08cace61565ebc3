"""`pith_ingest` run by a real Airflow (`dag.test()`, SQLite) against a local OAI-PMH
server and moto's S3: two consecutive daily windows, a re-run, and a publish that
fails half-way and is retried by Airflow."""

from __future__ import annotations

import hashlib
from collections import Counter
from datetime import UTC, datetime
from typing import Any

import pytest
from store_doubles import PUBLISHED, FailingStore, WriteBudget

pytestmark = pytest.mark.airflow

# `dag.test()` makes manual runs: each owns the day of its logical date (UTC)
DAY1 = datetime(2024, 1, 2, 6, 0, tzinfo=UTC)  # window [01-02, 01-03)
DAY2 = datetime(2024, 1, 3, 6, 0, tzinfo=UTC)  # window [01-03, 01-04)


def snapshot(store: Any) -> dict[str, str]:
    """Every object in the store and the sha256 of its bytes."""
    return {k: hashlib.sha256(store.get(k)).hexdigest() for k in store.list("")}


def expected_subjects(records: list[bytes]) -> dict[str, str]:
    """arXiv id -> Pith number, computed from the served XML by the parser and the core."""
    from lxml import etree

    from pith_pipeline.core.arxiv_record import ArxivRecord
    from pith_pipeline.core.builder import Identity
    from pith_pipeline.sources.arxivraw_record import parse_record

    out = {}
    for raw in records:
        item = parse_record(etree.fromstring(raw), "test")
        if isinstance(item, ArxivRecord):
            out[item.id] = Identity.of(item).subject
    return out


def run(dagbag: Any, when: datetime) -> Any:
    dag = dagbag.get_dag("pith_ingest")
    dr = dag.test(logical_date=when)
    assert dr.state == "success", {ti.task_id: ti.state for ti in dr.get_task_instances()}
    return dr


def indexed_records(store: Any) -> int:
    """Rows of the `records` index table, each Pith number once."""
    from pith_pipeline.index import run_query

    rows, distinct = run_query(store, "SELECT count(*), count(DISTINCT pith_number) FROM records").rows[0]
    assert rows == distinct
    return int(rows)


def load(store: Any, key: str) -> Any:
    from pith_pipeline.core.canonical_json import loads

    data = store.get(key)
    assert data is not None, f"{key} missing"
    return loads(data)


def check_window(store: Any, subjects: dict[str, str], run_id: str) -> None:
    """Each record: one record_created, a verifying bundle, a pointer; one run manifest."""
    from pith_pipeline.core.verify import verify_bundle

    for arxiv_id, subject in subjects.items():
        body = subject.split(":")[-1]
        events = [load(store, k) for k in store.list(f"events/{body}/")]
        created = [e for e in events if e["event_type"] == "record_created"]
        assert len(created) == 1, f"{arxiv_id}: {len(created)} record_created events"
        report = verify_bundle(load(store, f"pith/{body}/bundle.json"))
        assert report.ok, [c for c in report.failed]
        pointer = load(store, f"arxiv/{arxiv_id}.json")
        assert Counter(r["pith_number"] for r in pointer["records"])[subject] == 1
    manifest = load(store, f"runs/{run_id}/manifest.json")
    assert manifest["run_id"] == run_id
    assert manifest["counts"]["built"] + manifest["counts"]["unchanged"] == len(subjects)
    assert list(store.list("staging/")) == []


def test_two_daily_windows_then_a_rerun_changes_nothing(
    dagbag: Any, pith_env: dict[str, str], oai_server: Any
) -> None:
    from pith_pipeline.storage.factory import open_store

    _url, server = oai_server
    store = open_store(pith_env["PITH_STORE"])
    day1 = expected_subjects(server.days["2024-01-02"])
    day2 = expected_subjects(server.days["2024-01-03"])

    run(dagbag, DAY1)
    assert {(r["from"], r["until"]) for r in server.requests if "from" in r} == {("2024-01-02", "2024-01-02")}
    check_window(store, day1, "ingest-2024-01-02")
    raw = [k for k in store.list("raw/") if k.endswith(".xml.gz") and "/page-" in k]
    assert len(raw) == 3  # nine records, four a page
    assert indexed_records(store) == len(set(day1.values()))

    run(dagbag, DAY2)
    check_window(store, day2, "ingest-2024-01-03")
    pointer = load(store, "arxiv/2401.00001.json")
    assert [r["version"] for r in pointer["records"]] == [1, 2]
    assert pointer["latest"] == day2["2401.00001"]
    old_body = day1["2401.00001"].split(":")[-1]
    old_events = [load(store, k) for k in store.list(f"events/{old_body}/")]
    assert any(e["event_type"] == "correction" for e in old_events)
    assert indexed_records(store) >= len(set(day1.values()) | set(day2.values()))

    assert_xcoms_carry_only_keys_and_counts(pith_env, runs=2)

    before = snapshot(store)
    requests_before = len(server.requests)
    run(dagbag, DAY1)
    assert snapshot(store) == before
    assert len(server.requests) == requests_before  # a harvested window is replayed


def assert_xcoms_carry_only_keys_and_counts(pith_env: dict[str, str], runs: int) -> None:
    """Every XCom the runs pushed: small, no record text, no trace of the private key."""
    import base64
    import json
    from pathlib import Path

    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    key_file = Path(pith_env["PITH_SIGNER"].removeprefix("file:"))
    seed = base64.b64decode(json.loads(key_file.read_text())["seed_b64"])
    forms = [seed.hex(), base64.b64encode(seed).decode(), base64.urlsafe_b64encode(seed).decode()]
    with create_session() as session:
        rows = session.query(XComModel).filter(XComModel.dag_id == "pith_ingest").all()
        assert len({r.run_id for r in rows}) >= runs
        values = [(r.task_id, json.dumps(r.value, default=str)) for r in rows]
    assert {t for t, _ in values} >= {"harvest", "build", "publish", "index", "manifest"}
    # a dict return is one XCom (return_value), not also one XCom per key
    assert {r.key for r in rows} == {"return_value"}, sorted({(r.task_id, r.key) for r in rows})
    text = "\n".join(v for _, v in values)
    for form in forms:
        assert form not in text
    for task_id, value in values:
        assert len(value) < 20_000, f"{task_id} pushed {len(value)} bytes"
        assert '"abstract' not in value and '"title' not in value and "signature_b64" not in value


def test_publish_failure_then_retry_gives_complete_output_without_duplicates(
    dagbag: Any, pith_env: dict[str, str], oai_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pith_pipeline import airflow_tasks as at
    from pith_pipeline.maintenance import verify_sample
    from pith_pipeline.storage.factory import open_store

    _url, server = oai_server
    budget = WriteBudget(after=6, failures=1, only=PUBLISHED)  # the 7th published write fails once
    from pith_pipeline.runs import steps

    real = steps.run_store
    monkeypatch.setattr(steps, "run_store", lambda settings: FailingStore(real(settings), budget))
    store = open_store(pith_env["PITH_STORE"])

    dr = run(dagbag, DAY1)

    assert budget.failed == 1 and budget.writes > 7  # the failure happened, and later writes went through
    # papers are published by the mapped build tasks, each under its shards' leases
    retried = [ti for ti in dr.get_task_instances() if ti.task_id == "build" and ti.try_number == 2]
    assert len(retried) == 1
    day1 = expected_subjects(server.days["2024-01-02"])
    check_window(store, day1, "ingest-2024-01-02")
    events = [k for k in store.list("events/")]
    assert len(events) == len(set(events))
    result = verify_sample(at.load_settings(), size=100, seed="all")
    assert result["checked"] == len(set(day1.values()))


def test_a_manual_run_for_one_past_day_harvests_that_day(
    dagbag: Any, pith_env: dict[str, str], oai_server: Any
) -> None:
    """`--conf '{"day": ...}'` (or a manual logical date) names the day, whatever the
    data interval of the trigger time says."""
    from pith_pipeline.storage.factory import open_store

    _url, server = oai_server
    dag = dagbag.get_dag("pith_ingest")
    dr = dag.test(logical_date=DAY1, run_conf={"day": "2024-01-03"})  # DAY1 is 2024-01-02
    assert dr.state == "success", {ti.task_id: ti.state for ti in dr.get_task_instances()}
    assert {r.get("from") for r in server.requests if "from" in r} == {"2024-01-03"}
    assert open_store(pith_env["PITH_STORE"]).exists("runs/ingest-2024-01-03/manifest.json")


def test_a_manual_run_with_a_logical_date_harvests_that_day(
    dagbag: Any, pith_env: dict[str, str], oai_server: Any
) -> None:
    """Issue 25: `dag.test(logical_date=...)` makes a manual run and runs its tasks
    through the Task SDK, whose context gives `dag_run.run_type` as an enum; the day
    must be the logical date's, not the data interval before it (2024-01-02 here)."""
    from pith_pipeline.storage.factory import open_store

    _url, server = oai_server
    dr = dagbag.get_dag("pith_ingest").test(logical_date=datetime(2024, 1, 3, tzinfo=UTC))
    assert dr.state == "success", {ti.task_id: ti.state for ti in dr.get_task_instances()}
    assert str(dr.run_type) == "manual"
    assert {r.get("from") for r in server.requests if "from" in r} == {"2024-01-03"}
    store = open_store(pith_env["PITH_STORE"])
    assert store.exists("runs/ingest-2024-01-03/manifest.json")
    assert not store.exists("runs/ingest-2024-01-02/manifest.json")


@pytest.mark.parametrize("day", ["1985-01-01", "2999-01-01"])
def test_a_day_arxiv_cannot_have_fails_loudly(dagbag: Any, pith_env: dict[str, str], day: str) -> None:
    """Never a run marked success with nothing done (it would block the day for good)."""
    dr = dagbag.get_dag("pith_ingest").test(logical_date=DAY1, run_conf={"day": day})
    states = {ti.task_id: ti.state for ti in dr.get_task_instances()}
    assert dr.state == "failed" and states["harvest"] == "failed", states


def test_the_daily_dag_starts_on_arxivs_first_day(dagbag: Any) -> None:
    from pith_pipeline.runs.windows import ARXIV_FIRST_DAY

    dag = dagbag.get_dag("pith_ingest")
    assert dag.start_date.date() == ARXIV_FIRST_DAY and dag.catchup is False
