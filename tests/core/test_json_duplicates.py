"""Stored JSON with a repeated object key is refused, not read last-wins.

Parsers disagree on duplicates (orjson and Python keep the last, many others the
first), so one file would say two things: a verifier reading one value and a
mirror reading the other. Every reader of stored JSON goes through `loads`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pith_pipeline.core.canonical_json import DuplicateKeyError, dumps_compact, dumps_pretty, loads

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=20,
)


@pytest.mark.parametrize(
    "text",
    [
        '{"a": 1, "a": 2}',
        '{"a":1,"a":1}',
        '{"x": {"k": "v", "b": 0, "k": "w"}}',
        '[1, {"z": [], "z": []}]',
        '{"\\u0061": 1, "a": 2}',  # the same key, one of them escaped
        '{"pith_number": "pith:2000:AAAA", "pith_number": "pith:2019:BBBB"}',
    ],
)
def test_duplicate_keys_are_refused(text: str) -> None:
    with pytest.raises(DuplicateKeyError, match="duplicate key"):
        loads(text)
    with pytest.raises(ValueError):  # callers catch ValueError for any unreadable JSON
        loads(text.encode())


def test_duplicate_prepended_to_the_reference_bundle(asset: Any) -> None:
    raw = Path(asset("pith-bundle-1909.11150.json")).read_bytes()
    assert isinstance(loads(raw), dict)
    forged = b'{"pith_number":"pith:2000:' + b"A" * 52 + b'",'
    hostile = forged + raw.lstrip()[1:]
    with pytest.raises(DuplicateKeyError, match="pith_number"):
        loads(hostile)


@settings(max_examples=200, deadline=None)
@given(JSON_VALUES)
def test_values_without_duplicates_read_back_in_every_layout(value: Any) -> None:
    for data in (
        dumps_compact(value),
        dumps_pretty(value) + b"\n",
        json.dumps(value).encode(),
        json.dumps(value, indent=3, ensure_ascii=False).encode(),
    ):
        assert loads(data) == value
        assert loads(data.decode()) == value


def test_strict_json_only() -> None:
    for bad in (b"NaN", b"[Infinity]", b'{"a": 1,}', b"\xff", b'"\\ud800"'):
        with pytest.raises(ValueError):
            loads(bad)
    assert loads(b"  [1, 2]\n") == [1, 2] and orjson.loads(b"3") == loads(b"3")
