"""A run's counts add up (`RunSummary.add`): a thread's paper, a worker's chunk, an
Airflow task's staged chunk and a backfill's window are each a summary added to the run's."""

from __future__ import annotations

import pytest

from pith_pipeline.backfill import BackfillResult
from pith_pipeline.publish import MAX_PROBLEMS, RunSummary


def test_run_summaries_add_up() -> None:
    a = RunSummary.part("r", fetched=3, built=2, quarantined=1)
    a.written["k1"] = "s1"
    a.pith_numbers.append("p1")
    a.seen.append("p1")
    b = RunSummary.part("r", fetched=2, unchanged=1, superseded=1, skipped=1)
    b.fail("p2: damaged")
    b.written["k2"] = "s2"
    b.seen.append("p2")
    assert a.add(b) is a
    assert a.counts() == {
        "fetched": 5,
        "built": 2,
        "unchanged": 1,
        "superseded": 1,
        "quarantined": 1,
        "failed": 1,
        "skipped": 1,
    }
    assert a.problems == ["p2: damaged"]
    assert dict(a.written) == {"k1": "s1", "k2": "s2"}
    assert (a.pith_numbers, a.seen) == (["p1"], ["p1", "p2"])
    with pytest.raises(TypeError, match="counter"):
        RunSummary.part("r", written=1)


def test_added_problems_stay_capped_and_failed_stays_exact() -> None:
    total = RunSummary("r")
    for n in range(3):
        part = RunSummary.part("r")
        for i in range(MAX_PROBLEMS):
            part.fail(f"{n}-{i}")
        total.add(part)
    assert total.failed == 3 * MAX_PROBLEMS
    assert len(total.problems) == MAX_PROBLEMS


def test_a_backfill_adds_its_windows_counts() -> None:
    result = BackfillResult(windows_planned=2)
    assert result.line() == "0/2 windows: nothing to do"
    result.add({"manifest": "runs/a/manifest.json", "status": "written", "fetched": 3, "built": 3})
    result.add({"fetched": 2, "unchanged": 2})
    assert result.counts == {"fetched": 5, "built": 3, "unchanged": 2, "superseded": 0, "quarantined": 0}


def test_a_summary_survives_its_staged_header() -> None:
    part = RunSummary.part(
        "r1", fetched=5, built=2, unchanged=1, superseded=1, quarantined=1, failed=1, skipped=1
    )
    part.problems.append("pith/x/events.json: bad")
    part.pith_numbers.extend(["b", "a"])
    part.seen.extend(["s2", "s1"])
    part.written.update({"k2": "h2", "k1": "h1"})
    part.log_pending.append("tlog/pending/p")
    header = part.to_header()
    assert header["counts"]["records"] == 2 and header["built"] == ["a", "b"]
    back = RunSummary.from_header("r1", header)
    # a skipped record is counted as fetched by the chunk that owns it
    assert (back.fetched, back.built, back.failed, back.skipped) == (4, 2, 1, 0)
    assert back.problems == part.problems and sorted(back.seen) == ["s1", "s2"]
    assert dict(back.written) == {"k1": "h1", "k2": "h2"} and back.log_pending == ["tlog/pending/p"]
