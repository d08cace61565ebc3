"""The fast canonical JSON path is byte-equal to the RFC 8785 reference, or refuses."""

from __future__ import annotations

import json
from typing import Any

import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from pith_pipeline.core.canonical_json import H, dumps, dumps_reference, dumps_trusted
from pith_pipeline.errors import CanonicalJSONError

# every kind of text the spec names: control characters, U+2028/2029, astral, keys >= U+E000
special = st.sampled_from(["\u2028", "\u2029", "\x00", "\x1f", "\x7f", "\ue000", "\uffff",
                           "\U0001d11e", "\U0001f600", "é", "\\", '"', "/", "\t", "\n"])
texts = st.lists(st.one_of(st.characters(exclude_categories=("Cs",)), special),
                 max_size=12).map("".join)
safe_ints = st.integers(min_value=-(2**53) + 1, max_value=2**53 - 1)
scalars = st.one_of(st.none(), st.booleans(), safe_ints, texts)
values = st.recursive(
    scalars,
    lambda children: st.one_of(st.lists(children, max_size=5),
                               st.dictionaries(texts, children, max_size=5)),
    max_leaves=40,
)


@settings(max_examples=400, deadline=None)
@given(values)
def test_fast_path_equals_reference(value: Any) -> None:
    assert dumps(value) == rfc8785.dumps(value)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(texts, scalars, max_size=8))
def test_trusted_path_equals_reference_when_keys_are_below_surrogates(value: dict[str, Any]) -> None:
    if all(k.isascii() or max(k) < "\ud800" for k in value):
        assert dumps_trusted(value) == rfc8785.dumps(value)


def test_keys_above_e000_sort_by_utf16_like_the_reference() -> None:
    # U+E000 sorts after U+1F600 in UTF-16 code units (0xE000 > 0xD83D) but before it by code point
    value = {"\ue000": 1, "\U0001f600": 2, "a": 3}
    assert dumps(value) == rfc8785.dumps(value)
    assert dumps(value).index("\U0001f600".encode()) < dumps(value).index("\ue000".encode())


def test_deep_nesting_matches_reference() -> None:
    value: Any = "leaf"
    for i in range(300):
        value = [value] if i % 2 else {"k": value}
    assert dumps(value) == rfc8785.dumps(value)


@pytest.mark.parametrize("bad", [1.5, 0.0, {"a": [1.0]}, 2**53, -(2**53), 10**30])
def test_floats_and_big_integers_are_refused(bad: Any) -> None:
    with pytest.raises(CanonicalJSONError):
        dumps(bad)
    with pytest.raises(CanonicalJSONError):
        dumps_reference(bad)


def test_matches_json_dumps_sorted_for_format_values(reference_bundle: dict[str, Any]) -> None:
    """Spec section 1: for the format's values JCS equals sorted compact json.dumps."""
    expect = json.dumps(reference_bundle, sort_keys=True, separators=(",", ":"),
                        ensure_ascii=False).encode()
    assert dumps(reference_bundle) == expect


def test_hash_of_reference_canonical_record(reference_bundle: dict[str, Any]) -> None:
    assert H(reference_bundle["canonical_record"]) == reference_bundle["canonical_sha256"]
