"""A chunk's rejects stay out of memory and out of XComs on the Airflow path.

Why: each reject keeps its raw input (up to a line's size limit), so a hostile chunk
quarantines up to the reject budget (256 MiB a file). Held in a list and serialised
into the staged header, they were all in memory at once in the build task, again in
the publish task, and the header was as large as the rejects. Now a chunk spools them
to disk and stores them as an object of their own beside its staged header, and
`publish` streams those objects into `quarantine/<run_id>.jsonl`. (No Airflow needed:
the task functions are called directly.)
"""

from __future__ import annotations

import hashlib
import json
import tracemalloc
from pathlib import Path

import pytest

from pith_pipeline import airflow_tasks as at
from pith_pipeline.core.layout import quarantine_key
from pith_pipeline.runs import backfill_plan
from pith_pipeline.storage.local import LocalStore

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "arxiv-sample.jsonl"
MIB = 1 << 20
REJECTS = 96


@pytest.fixture
def settings(tmp_path: Path) -> at.Settings:
    from pith_pipeline.signing.local import generate_key

    key = generate_key(tmp_path / "keys", key_id="pith-test-key")[0]
    return at.Settings(store=str(tmp_path / "store"), signer=f"file:{key}", lease_wait="0")


def test_a_chunk_of_many_large_rejects_is_quarantined_whole_with_bounded_memory_and_small_xcoms(
    settings: at.Settings, tmp_path: Path
) -> None:
    good = [ln for ln in SAMPLE.read_text().splitlines() if ln.strip()][:3]
    bad = [f'{{"id": "{i:04d}", "title": "' + "x" * MIB for i in range(REJECTS)]  # not JSON: cut
    snapshot = tmp_path / "hostile.jsonl"
    snapshot.write_text("\n".join(good + bad) + "\n", encoding="utf-8")
    store = LocalStore(settings.store)
    [request] = backfill_plan.plan_backfill(
        settings, "1990-01-01", "2030-01-01", "snapshot", str(snapshot), store=store
    )
    harvested = backfill_plan.harvest_for(settings, request, store=store)
    items = backfill_plan.plan_chunks_for([harvested])
    run_id = str(harvested["run_id"])

    tracemalloc.start()
    try:
        built = [at.build_chunk(settings, run_id, i["chunk"], store=store) for i in items]
        _, build_peak = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        staged = [b["staged"] for b in built]
        published = at.publish_staged(settings, staged, store=store)
        _, publish_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    rejected = REJECTS * MIB
    # a few rejects at a time in memory (the loop's read-ahead), never all of them: the
    # peak (~30 MiB, most of it the modules the build imports) does not grow with them,
    # where holding them all took over three times what they hold
    assert build_peak < rejected // 2, build_peak
    assert publish_peak < rejected // 2, publish_peak
    assert sum(b["quarantined"] for b in built) == REJECTS
    assert len(json.dumps(built)) < 4096  # the XComs: counts and keys, no raw bytes
    for key in staged:  # the staged header too: the rejects are an object of their own
        assert len(store.get(key) or b"") < 64 * 1024
    assert published["quarantined"] == REJECTS

    body = store.get(quarantine_key(run_id)) or b""
    entries = [json.loads(line) for line in body.splitlines()]
    assert [e["raw"] for e in entries] == bad  # every reject, whole, in input order
    summary = at.window_summary(store, run_id, staged)
    assert summary.written[quarantine_key(run_id)] == hashlib.sha256(body).hexdigest()
    again = at.publish_staged(settings, staged, store=store)  # a retried task: nothing new
    assert again["written"] == 0 and store.get(quarantine_key(run_id)) == body
