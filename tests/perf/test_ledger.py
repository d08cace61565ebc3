"""The run ledger behaves as a dict whether it holds its entries in memory or spilled."""

from __future__ import annotations

import pickle

import pytest

from pith_pipeline._internal.disk_backed import Ledger
from pith_pipeline.publish import RunSummary


@pytest.mark.parametrize("limit", [3, 10_000])
def test_ledger_is_a_dict_in_write_order(limit: int) -> None:
    led, ref = Ledger(limit=limit), {}
    for i in range(20):
        led[f"pith/{i}/bundle.json"] = f"{i:064x}"
        ref[f"pith/{i}/bundle.json"] = f"{i:064x}"
    led["pith/3/bundle.json"] = ref["pith/3/bundle.json"] = "f" * 64  # replaced, keeps place
    del led["pith/4/bundle.json"], ref["pith/4/bundle.json"]
    assert list(led) == list(ref) and len(led) == len(ref) == 19
    assert led == ref and dict(led) == ref
    assert led["pith/3/bundle.json"] == "f" * 64
    with pytest.raises(KeyError):
        led["pith/4/bundle.json"]
    with pytest.raises(KeyError):
        del led["absent"]
    assert pickle.loads(pickle.dumps(led)) == ref
    led.clear()
    assert led == {} and len(led) == 0


def test_run_summary_starts_with_an_empty_ledger() -> None:
    s = RunSummary("r")
    assert s.written == {} and isinstance(s.written, Ledger)
