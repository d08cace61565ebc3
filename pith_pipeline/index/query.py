"""Analysts' reads: DuckDB over the Parquet indexes through pyarrow datasets.

The files come from the index manifest (never from listing directories), and are
opened as pyarrow datasets on the store's own filesystem (local, or S3 through
`pyarrow.fs.S3FileSystem` on the same endpoint and credentials as boto3), so DuckDB
needs no extensions and pushes filters and projections into the scan: a filter on
`submitted_month` (records), `created_month` (events) or `alias_kind` (aliases)
skips whole files, one on `primary_cat` skips row groups by their statistics.

Tables `records`, `events` and `aliases` are views with one row per key; while a
partition holds more than one file (between compactions) the view keeps the newest
row per key, windowed by the partition column first so pruning still applies.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds

from pith_pipeline.index import manifest as mf
from pith_pipeline.index.schema import TABLES, TableSpec
from pith_pipeline.index.writer import read_file
from pith_pipeline.storage.base import Store


def arrow_source(store: Store) -> tuple[Any, str] | None:
    """(pyarrow filesystem, root path) for stores Parquet can be scanned in place."""
    from pith_pipeline.storage.local import LocalStore

    if isinstance(store, LocalStore):
        from pyarrow import fs as pafs

        return pafs.LocalFileSystem(), str(store.root)
    opener = getattr(store, "arrow_filesystem", None)
    if callable(opener):
        result: tuple[Any, str] = opener()
        return result
    return None


def table_source(store: Store, spec: TableSpec, entries: list[dict[str, Any]]) -> Any:
    """A pyarrow dataset (or, for stores without a filesystem, a table) of the files."""
    if not entries:
        return spec.schema.empty_table()
    source = arrow_source(store)
    if source is None:  # wrapped or exotic store: read through the Store interface
        return pa.concat_tables([read_file(store, spec, e) for e in entries])
    fs, root = source
    return ds.dataset(
        [f"{root}/{e['path']}" for e in entries],
        filesystem=fs,
        format="parquet",
        schema=spec.schema,
        partitioning=ds.partitioning(pa.schema([(spec.partition, pa.string())]), flavor="hive"),
        partition_base_dir=f"{root}/index/{spec.name}",
    )


def view_sql(spec: TableSpec, source: str, dedupe: bool) -> str:
    cols = ", ".join(spec.public_columns)
    if not dedupe:
        return f"SELECT {cols} FROM {source}"
    return (
        f"SELECT {cols} FROM {source} QUALIFY row_number() OVER "
        f"(PARTITION BY {', '.join(spec.key)} ORDER BY {spec.winner}) = 1"
    )


def connect(store: Store, *, manifest: mf.Manifest | None = None) -> Any:
    """A DuckDB connection with views `records`, `events`, `aliases` (and `<name>_files`)."""
    import duckdb

    manifest = manifest or mf.load(store)
    con = duckdb.connect()
    for name, spec in TABLES.items():
        src = table_source(store, spec, manifest.files[name])
        con.register(f"{name}_files", src)
        con.execute(f"CREATE VIEW {name} AS " + view_sql(spec, f"{name}_files", manifest.needs_dedupe(name)))
    return con


@dataclass(frozen=True, slots=True)
class Result:
    columns: list[str]
    rows: list[tuple[Any, ...]]


def run_query(store: Store, sql: str) -> Result:
    """Run one SQL statement over the indexes; errors name the problem, not a trace."""
    import duckdb

    from pith_pipeline.errors import InputError

    con = connect(store)
    try:
        rel = con.sql(sql)
        if rel is None:
            return Result([], [])
        return Result(list(rel.columns), rel.fetchall())
    except duckdb.Error as exc:
        raise InputError(f"query failed: {exc}", where="SQL") from None
    finally:
        con.close()


def format_table(result: Result, *, max_width: int = 60) -> str:
    """A plain text table (header, rule, rows), cells cut at `max_width`."""

    def cell(v: Any) -> str:
        text = "NULL" if v is None else str(v)
        return text if len(text) <= max_width else text[: max_width - 1] + "…"

    body = [[cell(v) for v in row] for row in result.rows]
    widths = [max([len(c), *(len(r[i]) for r in body)]) for i, c in enumerate(result.columns)]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(result.columns, widths, strict=True)),
        "  ".join("-" * w for w in widths),
    ]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in body]
    lines.append(f"({len(body)} row{'s' if len(body) != 1 else ''})")
    return "\n".join(lines)


__all__ = ["Result", "connect", "format_table", "run_query"]
