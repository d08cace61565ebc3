"""Run-sized collections behave the same whether they are in memory or spilled to disk."""

from __future__ import annotations

import pickle
import random

import pytest

from pith_pipeline._internal.disk_backed import Ledger, SpillList, iter_sorted, sorted_unique
from pith_pipeline.publish import RunSummary

WORDS = ["pith:2019:B", "pith:2019:A", "\u00e9", "\u4e2d", "\U0001f600", "Z", "a", "pith:2019:A"]


@pytest.mark.parametrize("limit", [2, 10_000])
def test_spill_list_is_a_list(limit: int) -> None:
    sl, ref = SpillList(limit=limit), []
    for w in WORDS:
        sl.append(w)
        ref.append(w)
    sl.extend(["x", "y"])
    ref.extend(["x", "y"])
    assert sl.spilled == (limit == 2)
    assert list(sl) == ref and len(sl) == len(ref) and sl == ref
    assert [sl[i] for i in range(len(ref))] == ref
    assert sl[-1] == "y" and sl[2:5] == ref[2:5]
    with pytest.raises(IndexError):
        sl[len(ref)]
    assert list(sl.iter_sorted()) == sorted(ref)
    assert list(sl.iter_sorted(unique=True)) == sorted(set(ref))
    assert list(iter_sorted(sl)) == sorted(ref) == list(iter_sorted(ref))
    assert pickle.loads(pickle.dumps(sl)) == ref
    sl.sort()
    ref.sort()
    assert sl == ref
    sl.clear()
    assert sl == [] and len(sl) == 0


@pytest.mark.parametrize("limit", [5, 10_000])
def test_sorted_unique_equals_sorted_set(limit: int) -> None:
    rng = random.Random(7)
    items = [
        "".join(rng.choice("ab\u00e9\u4e2d\U0001f600") for _ in range(rng.randint(0, 4))) for _ in range(3000)
    ]
    assert list(sorted_unique(items, limit=limit)) == sorted(set(items))
    assert list(sorted_unique([], limit=limit)) == []


def test_ledger_sorted_items_in_key_order() -> None:
    for limit in (2, 100):
        led = Ledger(limit=limit)
        for k in ["b", "\u00e9", "a", "\U0001f600", "c"]:
            led[k] = k * 2
        assert list(led.sorted_items()) == sorted((k, k * 2) for k in led)


def test_run_summary_lists_spill() -> None:
    s = RunSummary("r")
    assert isinstance(s.pith_numbers, SpillList) and isinstance(s.seen, SpillList)
    assert s.pith_numbers == [] and s.seen == []
