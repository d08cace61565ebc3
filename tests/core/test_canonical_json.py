"""RFC 8785 canonical JSON: every fast path gives the reference's bytes, or refuses.

`dumps` (checked), `dumps_trusted` (builder-made values) and `fast_safe` (the check
that licenses `dumps_trusted` on foreign parts) are compared with `rfc8785.dumps`
on the text the spec worries about; the compact and pretty outputs are compared
with `json.dumps`, which the reference build path uses for published files.
"""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from pith_pipeline.core.canonical_json import (
    canonical_sha256,
    dumps,
    dumps_compact,
    dumps_pretty,
    dumps_trusted,
    fast_safe,
)
from pith_pipeline.errors import CanonicalJSONError

SPECIAL = [
    "\u2028",
    "\u2029",
    "\x00",
    "\x01",
    "\x08",
    "\x0b",
    "\x1f",
    "\x7f",
    "\x80",
    "\ue000",
    "\uffff",
    "\ufeff",
    "\U00010000",
    "\U0001d11e",
    "\U0001f600",
    "\U0010ffff",
    "é",
    "\\",
    '"',
    "/",
    "\t",
    "\n",
    "\r",
    "</script>",
]
texts = st.lists(
    st.one_of(st.characters(exclude_categories=("Cs",)), st.sampled_from(SPECIAL)), max_size=10
).map("".join)
# keys drawn to collide around the U+E000 / astral boundary, where UTF-16 and code-point
# orders differ
keys = st.one_of(
    texts, st.sampled_from(["\ue000", "\ue000a", "\U0001f600", "\U0001f600a", "\uffff", "a", "A", ""])
)
safe_ints = st.integers(min_value=-(2**53) + 1, max_value=2**53 - 1)
scalars = st.one_of(st.none(), st.booleans(), safe_ints, texts)
values = st.recursive(
    scalars,
    lambda kids: st.one_of(st.lists(kids, max_size=4), st.dictionaries(keys, kids, max_size=4)),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None)
@given(values)
def test_checked_dumps_equals_reference(value: Any) -> None:
    assert dumps(value) == rfc8785.dumps(value)


@settings(max_examples=300, deadline=None)
@given(values)
def test_trusted_dumps_equals_reference_whenever_fast_safe_says_so(value: Any) -> None:
    if fast_safe(value):
        assert dumps_trusted(value) == rfc8785.dumps(value)
    else:  # a key at or above U+D800 somewhere: only the checked path may serialise it
        assert dumps(value) == rfc8785.dumps(value)


def test_fast_safe_rejects_keys_where_utf16_order_differs() -> None:
    value = {"\ue000": 1, "\U0001f600": 2}
    assert not fast_safe(value)
    assert not fast_safe([{"x": {"\U0001f600": 1}}])
    assert dumps_trusted(value) != rfc8785.dumps(value)  # why the check exists
    assert dumps(value) == rfc8785.dumps(value)


@pytest.mark.parametrize("depth", [150, 199, 201, 400])
def test_deep_nesting(depth: int) -> None:
    value: Any = "\U0001f600"
    for i in range(depth):
        value = [value] if i % 2 else {"k\u2028": value}
    assert dumps(value) == rfc8785.dumps(value)


@pytest.mark.parametrize("bad", [0.5, -0.0, 1e300, {"a": [1.0]}, [[{"x": 2.5}]]])
def test_floats_are_refused_everywhere(bad: Any) -> None:
    with pytest.raises(CanonicalJSONError):
        dumps(bad)
    with pytest.raises(CanonicalJSONError):
        fast_safe(bad)


@pytest.mark.parametrize("bad", [2**53, -(2**53), 2**63, 10**30, {"v": 2**53}, [[-(2**60)]]])
def test_integers_beyond_2_53_are_refused_even_on_the_trusted_path(bad: Any) -> None:
    for fn in (dumps, dumps_trusted, fast_safe):
        with pytest.raises(CanonicalJSONError):
            fn(bad)


@pytest.mark.parametrize("edge", [2**53 - 1, -(2**53) + 1])
def test_integers_at_the_edge_are_exact(edge: int) -> None:
    assert dumps_trusted({"n": edge}) == rfc8785.dumps({"n": edge})


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(texts, values, max_size=4))
def test_compact_output_equals_json_dumps(value: dict[str, Any]) -> None:
    ref = json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    assert dumps_compact(value) == ref


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(texts, values, max_size=4))
def test_pretty_output_equals_json_dumps(value: dict[str, Any]) -> None:
    ref = json.dumps(value, ensure_ascii=False, indent=2).encode("utf-8")
    assert dumps_pretty(value) == ref


def test_lone_surrogates_fall_back_to_the_reference_decision() -> None:
    value = {"a": "\ud800"}
    with pytest.raises(orjson.JSONEncodeError):
        orjson.dumps(value)
    try:
        expected: bytes | None = rfc8785.dumps(value)
    except rfc8785.CanonicalizationError:
        expected = None
    for fn in (dumps, dumps_trusted):
        if expected is None:
            with pytest.raises(CanonicalJSONError):
                fn(value)
        else:
            assert fn(value) == expected


def test_keys_above_e000_sort_by_utf16_like_the_reference() -> None:
    # U+E000 sorts after U+1F600 in UTF-16 code units (0xE000 > 0xD83D) but before it by code point
    value = {"\ue000": 1, "\U0001f600": 2, "a": 3}
    assert dumps(value) == rfc8785.dumps(value)
    assert dumps(value).index("\U0001f600".encode()) < dumps(value).index("\ue000".encode())


def test_matches_json_dumps_sorted_for_format_values(reference_bundle: dict[str, Any]) -> None:
    """Spec section 1: for the format's values JCS equals sorted compact json.dumps."""
    expect = json.dumps(reference_bundle, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    assert dumps(reference_bundle) == expect


def test_hash_of_reference_canonical_record(reference_bundle: dict[str, Any]) -> None:
    assert canonical_sha256(reference_bundle["canonical_record"]) == reference_bundle["canonical_sha256"]
