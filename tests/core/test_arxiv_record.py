"""Bad input gets an error naming the record and the field."""

from __future__ import annotations

import json
import pickle
from typing import Any

import pytest

from pith_pipeline.core.arxiv_record import ArxivRecord, split_authors
from pith_pipeline.errors import InputError


def base() -> dict[str, Any]:
    return {
        "id": "0704.0002",
        "title": "A title",
        "abstract": "An abstract.",
        "categories": "math.CO cs.CG",
        "authors": "A. Author and B. Author",
        "versions": [{"version": "v1", "created": "Sat, 31 Mar 2007 02:26:18 GMT"}],
    }


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"title": None}, "title"),
        ({"title": "   "}, "title"),
        ({"abstract": None}, "abstract"),
        ({"categories": ""}, "categories"),
        ({"categories": "math.CO cs/CG"}, "categories"),
        ({"categories": 7}, "categories"),
        ({"versions": [{"version": "v1", "created": "the 31st of March"}]}, "versions[v1].created"),
        ({"versions": []}, "versions"),
        ({"versions": [{"version": "1", "created": "Sat, 31 Mar 2007 02:26:18 GMT"}]}, "versions"),
        ({"id": "0704.0002v2"}, "id"),
        ({"authors_parsed": [["x", 1]]}, "authors_parsed"),
    ],
)
def test_errors_name_record_and_field(change: dict[str, Any], field: str) -> None:
    obj = {**base(), **change}
    with pytest.raises(InputError) as err:
        ArxivRecord.from_json(obj, where="papers.jsonl:7")
    assert err.value.field == field
    assert "papers.jsonl:7" in str(err.value)
    if change.get("id") is None:
        assert err.value.record_id == "0704.0002"
        assert "0704.0002" in str(err.value)


def test_roundtrip_snapshot_layout(sample_lines: list[str]) -> None:
    for line in sample_lines:
        obj = json.loads(line)
        assert ArxivRecord.from_json(obj).to_json() == obj


def test_errors_pickle_across_processes() -> None:
    err = InputError("bad", record_id="x", field="title", where="f:1")
    back = pickle.loads(pickle.dumps(err))
    assert str(back) == str(err) and back.field == "title"


def test_author_names_prefer_authors_parsed() -> None:
    obj = {**base(), "authors_parsed": [["Young", "M. Todd", ""], ["Smith", "John", "Jr"]]}
    assert ArxivRecord.from_json(obj).author_names == ["M. Todd Young", "John Smith Jr"]


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("A, B and C", ["A", "B", "C"]),
        ("A and B", ["A", "B"]),
        ("A. One (Univ. X, Y), B. Two (Lab (Z))", ["A. One", "B. Two"]),
        ("A,\n  B, and C", ["A", "B", "C"]),
    ],
)
def test_split_authors(text: str, names: list[str]) -> None:
    assert split_authors(text) == names
