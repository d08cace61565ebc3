"""The benchmark generator makes only ids arXiv could have issued.

Why: the chaos and lease tests build from these records; an id with the wrong digit
count for its month (`1201.00001`, five digits before 2015) is now quarantined, so a
generator that made them would test the quarantine, not the build.
"""

from __future__ import annotations

import random
import sys
from datetime import UTC, datetime
from pathlib import Path

from pith_pipeline.core.arxiv_record import ArxivRecord, is_arxiv_id

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from gen_records import Templates, make_record


def test_generated_ids_are_valid_for_their_month_and_unique() -> None:
    t = Templates.load()
    start = datetime(2014, 11, 1, tzinfo=UTC)
    # across the 2014/2015 change of width, and far into five-digit months
    indices = [0, 9_998, 9_999, 19_997, 19_998, 19_999, 119_996, 119_997, 1_000_000]
    recs = [make_record(random.Random(i), t, i, start) for i in indices]
    ids = [r["id"] for r in recs]
    assert ids[:6] == ["1411.0001", "1411.9999", "1412.0001", "1412.9999", "1501.00001", "1501.00002"]
    assert ids[6:8] == ["1501.99999", "1502.00001"]
    assert all(is_arxiv_id(i) for i in ids)
    assert len(set(ids)) == len(ids)
    for r in recs:
        assert ArxivRecord.from_json(r).id == r["id"]
