"""Delta I/O: opening and creating the tables, their properties, and one commit.

Every table is opened through `open_table` (so the commit guard checks it) and
every write goes through `commit_retry` or a caller that re-runs itself after a lost
commit race, at most `COMMIT_ATTEMPTS` times. A failure of the Delta library is one
line (`delta_error`) saying whether the table cannot be read or the write committed
nothing. Rows are written deduplicated and sorted (`dedupe_sorted`), with the
table's writer properties (`writer_properties`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from pith_pipeline._internal.error_text import one_line, os_error_hint
from pith_pipeline.errors import StorageError
from pith_pipeline.index.delta import Location
from pith_pipeline.index.dictionary import dictionary_current, pending_steps
from pith_pipeline.index.guard import check_last_commit, check_lease, note_version
from pith_pipeline.index.schema import TABLE_PROPERTIES, TableSpec

COMMIT_ATTEMPTS = 12


def delta_error(loc: Location, spec: TableSpec, exc: Exception, *, writing: bool = False) -> StorageError:
    """One line for a failure of the Delta library on table `spec`.

    Why `writing`: the library's text does not say which it was (a full disk while a
    data file is written reads "Failed to parse parquet: ..."), and the fix differs: a
    table that cannot be read is repaired by `reindex`; a write that failed on the file
    system (a full disk, a read-only mount, a permission) committed nothing, so the
    table is as it was and the fix is the file system's, then the same command again.
    """
    text = one_line(str(exc)) or type(exc).__name__
    uri = loc.uri(spec.name)
    hint = os_error_hint(exc if isinstance(exc, OSError) else OSError(text))
    if writing:
        what = f"{uri}: writing the index table failed ({text})"
        if hint:
            return StorageError(f"{what}{hint}; nothing was committed by this write")
        return StorageError(
            f"{what}; nothing was committed: run the command again, or `pith-pipeline reindex`"
        )
    if hint:
        return StorageError(f"{uri}: the index table cannot be read ({text}){hint}")
    return StorageError(
        f"{uri}: the index table cannot be read ({text}); "
        "`pith-pipeline reindex` rebuilds it from the bundles"
    )


def table_exists(loc: Location, spec: TableSpec) -> bool:
    from deltalake import DeltaTable

    return bool(DeltaTable.is_deltatable(loc.uri(spec.name), storage_options=loc.options or None))


def open_table(loc: Location, spec: TableSpec, *, create: bool = False) -> Any:
    """The table's current version (a `DeltaTable`); created empty when `create`."""
    from deltalake import DeltaTable
    from deltalake.exceptions import DeltaError, TableNotFoundError

    uri = loc.uri(spec.name)
    opts = loc.options or None
    for _ in range(COMMIT_ATTEMPTS):
        try:
            dt = DeltaTable(uri, storage_options=opts)
        except TableNotFoundError:
            if not create:
                raise
        except (DeltaError, OSError, ValueError) as exc:
            raise delta_error(loc, spec, exc) from None
        else:
            check_last_commit(loc, spec, dt)
            return dt
        from deltalake import CommitProperties

        check_lease(loc)  # creating a table is a write
        try:
            # no commit retries: a writer that loses the race to create version 0 must
            # open the winner's table, not commit a second table definition as version 1
            return DeltaTable.create(
                uri,
                schema=spec.schema,
                partition_by=[spec.partition],
                mode="ignore",
                name=spec.name,
                description=spec.description,
                configuration=TABLE_PROPERTIES,
                storage_options=opts,
                commit_properties=CommitProperties(max_commit_retries=0),
            )
        except DeltaError:  # another writer created it meanwhile: open that one
            time.sleep(0.05)
    raise StorageError(f"{uri}: could not create the index table; try again", transient=True)


def ensure_properties(loc: Location, spec: TableSpec, run_id: str | None = None) -> list[int]:
    """Give a table made without them `TABLE_PROPERTIES` (one commit) and the data
    dictionary (`dictionary.pending_steps`); versions committed.

    Why: tables made before the properties existed have no change data feed and the
    default checkpoint interval; every writer calls this before its first write, so
    the next run sets them and the feed covers its changes.
    """
    dt = open_table(loc, spec, create=True)
    versions: list[int] = []
    config = dt.metadata().configuration
    if not all(config.get(k) == v for k, v in TABLE_PROPERTIES.items()):

        def alter(dt: Any) -> dict[str, Any]:
            dt.alter.set_table_properties(dict(TABLE_PROPERTIES), commit_properties=commit_properties(run_id))
            return {}

        dt, committed = commit_retry(loc, spec, alter)
        versions += [int(dt.version())] if committed else []
    if dictionary_current(dt, spec):
        return versions
    for step in pending_steps(spec):  # a table made before the data dictionary: once

        def apply(dt: Any, step: Any = step) -> dict[str, Any]:
            step(dt, commit_properties(run_id))
            return {}

        dt, committed = commit_retry(loc, spec, apply)
        versions += [int(dt.version())] if committed else []
    return versions


def writer_properties(spec: TableSpec) -> Any:
    """zstd, row groups of 32,768; `spec.unique_text` columns without a dictionary and
    with delta-encoded lengths (the 1 M-row `records` table: 333 bytes a row, 363 with
    the defaults; every reader the README names decodes them)."""
    from deltalake import ColumnProperties, WriterProperties

    plain = ColumnProperties(dictionary_enabled=False, encoding="DELTA_LENGTH_BYTE_ARRAY")
    return WriterProperties(
        compression="ZSTD",
        compression_level=3,
        max_row_group_size=32_768,
        column_properties=dict.fromkeys(spec.unique_text, plain),
    )


def to_table(spec: TableSpec, rows: list[dict[str, Any]]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=spec.schema)


def dedupe_sorted(spec: TableSpec, table: pa.Table) -> pa.Table:
    """One row per key (the winner), in file sort order: a MERGE source must be unique."""
    done = _sorted_if_unique(spec, table)
    if done is not None:
        return done
    import duckdb

    # one thread and a memory cap: a step's peak stays near its input size
    con = duckdb.connect(config={"threads": 1, "memory_limit": "256MB"})
    try:
        con.register("t", table)
        key = ", ".join(spec.key)
        order = ", ".join(spec.sort)
        out = con.sql(
            f"SELECT * FROM t QUALIFY row_number() OVER (PARTITION BY {key} "
            f"ORDER BY {spec.winner}) = 1 ORDER BY {order}"
        ).to_arrow_table()
    finally:
        con.close()
    return out.select(spec.schema.names).cast(spec.schema)


def _distinct(table: pa.Table, columns: tuple[str, ...]) -> int:
    """How many distinct combinations of `columns` the table holds (null equals null)."""
    return int(table.group_by(list(columns)).aggregate([]).num_rows)


def _sorted_if_unique(spec: TableSpec, table: pa.Table) -> pa.Table | None:
    """`dedupe_sorted`'s result without DuckDB when there is nothing to choose: every
    key once, and the sort columns telling every row apart; None otherwise.

    Why: a run's own rows are usually such (each paper built once), and DuckDB's
    import and a connection per table were about half of a 3,000-paper build's index
    update. The order is DuckDB's: no two rows tie, values compare the same (strings
    by their UTF-8 bytes) and nulls come last in both.
    """
    n = table.num_rows
    if _distinct(table, spec.key) != n or _distinct(table, spec.sort) != n:
        return None
    ordered = table.sort_by([(c, "ascending") for c in spec.sort])
    return ordered.select(spec.schema.names).cast(spec.schema)


def commit_retry(loc: Location, spec: TableSpec, op: Callable[[Any], dict[str, Any]]) -> tuple[Any, bool]:
    """Run `op(table)` on the newest version, again after a lost commit race.

    Returns (the table after, whether `op` committed a new version).
    """
    from deltalake.exceptions import CommitFailedError, DeltaError

    for attempt in range(COMMIT_ATTEMPTS):
        check_lease(loc)
        dt = open_table(loc, spec, create=True)
        before = dt.version()
        try:
            op(dt)
        except CommitFailedError:
            time.sleep(min(2.0, 0.05 * 2**attempt))
            continue
        except (DeltaError, OSError) as exc:  # every op writes: a merge, an overwrite, a compaction
            raise delta_error(loc, spec, exc, writing=True) from None
        if dt.version() != before:
            note_version(loc, spec, int(dt.version()))
            return dt, True
        return dt, False
    raise StorageError(
        f"{loc.uri(spec.name)}: gave up after {COMMIT_ATTEMPTS} concurrent commits; try again",
        transient=True,
    )


def commit_properties(run_id: str | None) -> Any:
    from deltalake import CommitProperties

    return CommitProperties(
        custom_metadata={"pith.run_id": run_id} if run_id else None, max_commit_retries=COMMIT_ATTEMPTS
    )


def live_files(dt: Any, spec: TableSpec) -> list[dict[str, Any]]:
    """The data files of a table version: path (relative), partition value, rows, bytes."""
    actions = pa.table(dt.get_add_actions(flatten=True))
    if actions.num_rows == 0:
        return []
    part = f"partition.{spec.partition}"
    out = []
    for r in actions.select(["path", "num_records", "size_bytes", part]).to_pylist():
        out.append(
            {
                "path": r["path"],
                "partition": r[part],
                "rows": int(r["num_records"] or 0),
                "bytes": int(r["size_bytes"] or 0),
            }
        )
    return out


def version_now(dt: Any) -> int:
    """The table's newest version, commits of its own `vacuum` included."""
    dt.update_incremental()
    return int(dt.version())
