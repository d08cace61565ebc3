"""`dedupe_sorted` skips DuckDB when there is nothing to choose, with DuckDB's result.

Rows whose keys are all distinct and whose sort columns tell every row apart are
sorted by pyarrow (`tables._sorted_if_unique`); anything else (a key twice, two rows
tied on the sort columns) goes through DuckDB's window query as before. These tests
hold the shortcut to DuckDB's own answer on the awkward values: nulls in sort
columns, non-ASCII and upper-case strings, timestamps, and a table of several chunks.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa
import pytest

from pith_pipeline.index import tables
from pith_pipeline.index.schema import ALIASES, EVENTS, RECORDS, TableSpec

STRINGS = ["a", "B", "b", "é", "Z", "zz", "日本", "", "a b", "a\u0301"]


def _value(field: pa.Field, rng: random.Random, i: int) -> Any:
    t = field.type
    if rng.random() < 0.15 and field.nullable:  # a NOT NULL column (the keys) never is
        return None
    if pa.types.is_string(t):
        return f"{rng.choice(STRINGS)}{i if field.name in ('pith_number', 'event_id', 'alias_value') else ''}"
    if pa.types.is_int32(t):
        return rng.randint(-3, 3)
    if pa.types.is_boolean(t):
        return rng.random() < 0.5
    if pa.types.is_timestamp(t):
        return datetime(2024, 1, 1, tzinfo=UTC) + timedelta(seconds=rng.randint(0, 5))
    if pa.types.is_list(t):
        return [rng.choice(STRINGS)]
    raise AssertionError(t)


def _table(spec: TableSpec, n: int, seed: int, chunks: int = 1) -> pa.Table:
    rng = random.Random(seed)
    rows = [{f.name: _value(f, rng, i) for f in spec.schema} for i in range(n)]
    step = max(1, n // chunks)
    return pa.concat_tables(
        [pa.Table.from_pylist(rows[k : k + step], schema=spec.schema) for k in range(0, n, step)]
    )


def _by_duckdb(spec: TableSpec, table: pa.Table, monkeypatch: pytest.MonkeyPatch) -> pa.Table:
    with monkeypatch.context() as m:
        m.setattr(tables, "_sorted_if_unique", lambda spec, table: None)
        return tables.dedupe_sorted(spec, table)


@pytest.mark.parametrize("spec", [RECORDS, EVENTS, ALIASES], ids=lambda s: s.name)
@pytest.mark.parametrize("seed", range(4))
def test_distinct_rows_are_sorted_as_duckdb_sorts_them(
    spec: TableSpec, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = _table(spec, 300, seed, chunks=3)
    fast = tables._sorted_if_unique(spec, table)
    assert fast is not None
    expected = _by_duckdb(spec, table, monkeypatch)
    assert fast.schema == expected.schema == spec.schema
    assert fast.to_pylist() == expected.to_pylist()
    assert tables.dedupe_sorted(spec, table).to_pylist() == expected.to_pylist()


def test_a_key_twice_goes_to_duckdb_which_keeps_the_winner(monkeypatch: pytest.MonkeyPatch) -> None:
    table = _table(EVENTS, 50, 7)
    rows = table.to_pylist()
    twin = {**rows[3], "valid": not rows[3]["valid"]}  # same key, the other `valid`
    doubled = pa.Table.from_pylist([*rows, twin], schema=EVENTS.schema)
    assert tables._sorted_if_unique(EVENTS, doubled) is None
    out = tables.dedupe_sorted(EVENTS, doubled)
    assert out.num_rows == 50
    kept = [r for r in out.to_pylist() if r["event_id"] == rows[3]["event_id"]]
    assert [r["valid"] for r in kept] == [False]  # winner: valid ASC
    assert out.to_pylist() == _by_duckdb(EVENTS, doubled, monkeypatch).to_pylist()


def test_rows_tied_on_the_sort_columns_go_to_duckdb() -> None:
    rows = _table(ALIASES, 20, 3).to_pylist()
    # another kind of alias with the same value and paper: distinct keys, tied sort columns
    tied = {**rows[0], "alias_kind": f"other-{rows[0]['alias_kind']}"}
    table = pa.Table.from_pylist([*rows, tied], schema=ALIASES.schema)
    assert tables._sorted_if_unique(ALIASES, table) is None
    assert tables.dedupe_sorted(ALIASES, table).num_rows == 21
