"""`check` skips the Arrow conversion only of values that surely fit.

A value of the column's plain Python type (str, int in int32 range, bool, datetime,
list of str) is accepted without converting it alone; these tests hold that
shortcut to Arrow's own verdict, so it can never let through a value Arrow refuses,
and check that refused values are still named.
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pytest

from pith_pipeline.errors import InputError
from pith_pipeline.index import rows as rows_mod
from pith_pipeline.index.rows import check_rows, rows_from_bundle
from pith_pipeline.index.schema import TABLES

VALUES: list[Any] = [
    "a",
    "",
    "é\u00e9 π",
    "\ud800",  # a lone surrogate: not UTF-8
    0,
    -(2**31),
    2**31 - 1,
    2**31,
    -(2**31) - 1,
    3_000_000_000,
    True,
    False,
    1.5,
    "3",
    datetime(2026, 1, 1, tzinfo=UTC),
    datetime(2026, 1, 1),
    ["a", "b"],
    [],
    ["a", 1],
    ["\ud800"],
    [None],
    {"a": 1},
    b"x",
]


def _arrow_takes(value: Any, arrow_type: pa.DataType) -> bool:
    try:
        pa.array([value], type=arrow_type)
    except (pa.ArrowException, OverflowError, TypeError, ValueError):
        return False
    return True


@pytest.mark.parametrize("type_name", sorted(rows_mod._SURE))
def test_the_shortcut_accepts_only_what_arrow_accepts(type_name: str) -> None:
    arrow_type = next(f.type for t in TABLES.values() for f in t.schema if str(f.type) == type_name)
    sure = rows_mod._SURE[type_name]
    accepted = [v for v in VALUES if sure(v)]
    assert accepted  # the shortcut is used at all
    for v in accepted:
        assert _arrow_takes(v, arrow_type), (type_name, v)


def test_a_registry_bundle_is_checked_without_one_arrow_call(
    reference_bundle: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = rows_from_bundle(reference_bundle, bundle_key="pith/x/bundle.json", bundle_sha256="0" * 64)
    calls: list[Any] = []
    monkeypatch.setattr(rows_mod.pa, "array", lambda *a, **k: calls.append(a))
    check_rows(rows)
    assert calls == []


@pytest.mark.parametrize(
    ("table", "column", "value"),
    [
        ("records", "version", 3_000_000_000),  # int32 overflow
        ("records", "version", "3"),
        ("records", "license", ["a"]),
        ("records", "title", "\ud800"),
        ("records", "pith_number", None),  # required
        ("records", "not_a_column", 1),
        ("events", "valid", "yes"),
        ("aliases", "alias", {"a": 1}),
    ],
)
def test_a_value_that_does_not_fit_is_still_named(
    reference_bundle: dict[str, Any], table: str, column: str, value: Any
) -> None:
    rows = rows_from_bundle(
        copy.deepcopy(reference_bundle), bundle_key="pith/x/bundle.json", bundle_sha256="0" * 64
    )
    rows.table(table)[-1][column] = value
    with pytest.raises(InputError) as info:
        check_rows(rows)
    assert info.value.field == column
