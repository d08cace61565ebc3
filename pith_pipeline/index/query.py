"""Analysts' reads: DuckDB over the index's Delta tables, with no DuckDB extension.

Each table's current version is read from its Delta log (deltalake), and its live
data files are opened as one pyarrow dataset on the store's own filesystem (local,
or S3 through `pyarrow.fs.S3FileSystem` on the same endpoint and credentials as
boto3), each file carrying its partition value from the log. Why not
`DeltaTable.to_pyarrow_dataset()`: it hands DuckDB `string_view` columns that it
mishandles; the log's file list read with our own schema gives the same rows.

delta-rs writes strings as `string_view` in MERGE output and as plain `string`
otherwise. DuckDB pushes filters (partition pruning, row-group statistics) only into
a scan whose schema has no views, and pyarrow cannot apply a pushed-down string
filter to a file that holds views. So the index is kept in plain files (every change
ends by rewriting the partitions it touched, `tidy.tidy_partitions`), the scan
declares plain strings, and a query that still meets a view file (a run that died
between its MERGE and the rewrite) is run again over a dataset that declares views:
without pushdown, slower, with the same rows.

Every Delta version holds one row per key, so the views `records`, `events` and
`aliases` are the files as they are. DuckDB pushes filters and projections into
the scan: a filter on `submitted_month` (records), `created_month` (events) or
`alias_kind` (aliases) skips whole files, one on `primary_cat` skips row groups by
their statistics.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from pith_pipeline.core.layout import run_manifest_key
from pith_pipeline.errors import InputError, StorageError
from pith_pipeline.index.dataset import arrow_source, dataset_of, read_schema
from pith_pipeline.index.delta import location, unwrap
from pith_pipeline.index.dictionary import categories
from pith_pipeline.index.legacy import refuse_legacy
from pith_pipeline.index.schema import TABLES
from pith_pipeline.index.tables import live_files, open_table, table_exists
from pith_pipeline.storage.base import Store


def _has_bundles(store: Store) -> bool:
    return any(k.endswith("/bundle.json") for k in unwrap(store).list("pith/"))


def as_of_versions(store: Store, run_id: str) -> dict[str, int]:
    """The table versions run `run_id`'s manifest names (`index.versions`): one
    consistent snapshot. `InputError` for an unknown run or one with no index versions."""
    import json

    key = run_manifest_key(run_id)
    if "/" in run_id or not run_id or (raw := store.get(key)) is None:
        raise InputError(f"no run {run_id!r} in {store.url} (no {key})", where="--as-of")
    try:
        versions = (json.loads(raw).get("index") or {}).get("versions") or {}
    except (ValueError, AttributeError):
        raise InputError(f"{store.url}/{key}: not a run manifest", where="--as-of") from None
    if not versions:
        raise InputError(f"run {run_id!r} names no index versions ({store.url}/{key})", where="--as-of")
    return {str(k): int(v) for k, v in versions.items()}


def table_sources(
    store: Store, *, views: bool = False, versions: dict[str, int] | None = None
) -> dict[str, Any]:
    """Per table, a dataset of its current version's live files, or of the version
    `versions` names (a table it does not name reads at its current version).

    A table that does not exist reads as empty only while the store has no bundles;
    otherwise the index was lost or never built, and `StorageError` says to reindex.
    """
    import pyarrow.dataset as ds

    loc = location(store)
    refuse_legacy(store)
    out: dict[str, Any] = {}
    missing = []
    for name, spec in TABLES.items():
        if not table_exists(loc, spec):
            missing.append(name)
            out[name] = ds.dataset(read_schema(spec, views=views).empty_table())
            continue
        dt = open_table(loc, spec)
        if versions and name in versions:
            dt.load_as_version(versions[name])
        out[name] = dataset_of(store, loc, spec, live_files(dt, spec), views=views)
    if missing and _has_bundles(store):
        raise StorageError(
            f"{loc.base}: the index table{'s' if len(missing) > 1 else ''} "
            f"{', '.join(missing)} {'are' if len(missing) > 1 else 'is'} missing but the store has "
            "published bundles; run `pith-pipeline reindex` to rebuild the index"
        )
    return out


#: Views defined over the tables (no scan of their own): name -> SELECT.
DERIVED_VIEWS: dict[str, str] = {
    # the latest version of each paper: one row per paper
    # and the Unicode names filled in where they are arXiv's text (null in records)
    "papers": "SELECT * REPLACE ("
    "coalesce(authors_unicode, authors) AS authors_unicode,"
    " coalesce(authors_text_unicode, authors_text) AS authors_text_unicode)"
    " FROM records WHERE superseded_by IS NULL",
}


def connect(store: Store, *, views: bool = False, versions: dict[str, int] | None = None) -> Any:
    """A DuckDB connection with views `records`, `events`, `aliases` (one row per key),
    `papers` (the latest version of each paper: records not superseded), and
    `categories` (arXiv's category, archive and group names). `versions`: table
    versions to read instead of the current ones (`as_of_versions`).

    `views=True` declares strings as views (no filter pushdown; for files that hold
    views, see the module docstring); `run_query` retries with it when needed.
    """
    import duckdb

    sources = table_sources(store, views=views, versions=versions)
    con = duckdb.connect()
    for name, spec in TABLES.items():
        con.register(f"{name}_files", sources[name])
        con.execute(f"CREATE VIEW {name} AS SELECT {', '.join(spec.public_columns)} FROM {name}_files")
    for name, select in DERIVED_VIEWS.items():
        con.execute(f"CREATE VIEW {name} AS {select}")
    con.register("categories", categories())  # arXiv's category names (package data)
    return con


@dataclass(frozen=True, slots=True)
class Result:
    columns: list[str]
    rows: list[tuple[Any, ...]]


def damaged_files(store: Store) -> list[tuple[str, str]]:
    """(store key, reason) of each live index file whose Parquet footer cannot be read."""
    import pyarrow.parquet as pq

    loc = location(store)
    fs, root = arrow_source(store)
    bad = []
    for name, spec in TABLES.items():
        if not table_exists(loc, spec):
            continue
        for f in live_files(open_table(loc, spec), spec):
            key = f"index/{name}/{f['path']}"
            try:
                with fs.open_input_file(f"{root}/{key}") as fh:
                    pq.read_metadata(fh)
            except (OSError, pa.ArrowException) as exc:
                bad.append((key, str(exc).strip().splitlines()[0] if str(exc).strip() else "unreadable"))
    return bad


def read_error(store: Store, exc: Exception) -> StorageError:
    """A one-line error for a failed read of the index, naming a damaged file if there is one."""
    try:
        bad = damaged_files(store)
    except Exception:  # naming the file is best effort; the original error still stands
        bad = []
    if bad:
        key, reason = bad[0]
        more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
        return StorageError(
            f"{store.url}/{key}: damaged index file ({reason}){more}; "
            "run `pith-pipeline reindex` to rebuild the index"
        )
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return StorageError(f"{store.url}: the index could not be read ({first})")


def needs_views(exc: BaseException) -> bool:
    """Whether a failed scan met a file holding `string_view` columns (see the docstring)."""
    return "string_view" in str(exc)


def run_query(store: Store, sql: str, *, as_of: str | None = None) -> Result:
    """Run one SQL statement over the indexes; errors name the problem, not a trace.
    `as_of`: a run id; read the table versions its manifest names (`as_of_versions`)."""
    versions = None if as_of is None else as_of_versions(store, as_of)
    try:
        return _run_query(store, sql, views=False, versions=versions)
    except InputError as exc:
        if not needs_views(exc):
            raise
    return _run_query(store, sql, views=True, versions=versions)


def _run_query(store: Store, sql: str, *, views: bool, versions: dict[str, int] | None = None) -> Result:
    import duckdb

    con = connect(store, views=views, versions=versions)
    try:
        try:
            rel = con.sql(sql)
            if rel is None:
                return Result([], [])
            return Result(list(rel.columns), rel.fetchall())
        except (duckdb.IOException, duckdb.InvalidInputException, OSError, pa.ArrowException) as exc:
            if isinstance(exc, duckdb.InvalidInputException) and (
                needs_views(exc) or "parquet" not in str(exc).lower()
            ):
                raise InputError(f"query failed: {exc}", where="SQL") from None
            raise read_error(store, exc) from None
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


__all__ = ["Result", "as_of_versions", "connect", "damaged_files", "format_table", "run_query"]
