"""Writing the index's Delta tables: incremental MERGEs, compaction and full reindex.

Each table (`schema.TABLES`) is a Delta table under `index/<table>/`; every change
is one Delta commit, so every version of a table has exactly one row per key and
readers (ours and every other engine) never see half of a change:

- `records`: MERGE on `pith_number` (a row from a newer bundle replaces the old);
- `aliases`: MERGE on the alias (the newest arXiv version wins, as in the
  `arxiv/<id>.json` pointer);
- `events`: insert-only MERGE on `event_id` (events are immutable; only `valid`,
  derived from the subject's state, is corrected, in the same MERGE, when a bundle
  marks one invalid).

A run commits each table once (or, when its rows exceed a commit's memory budget,
once per group of whole papers: `RowSink.groups`), so no version splits a paper.

An update writes only subjects whose `records` row differs from their bundle, and
merges `events` and `aliases` before `records`: an unchanged records row therefore
means the subject is fully indexed, and a re-run completes an update that died half
way. A MERGE that loses a commit race to another writer is re-run against the new
version (Delta's conflict check tells us; the MERGE is idempotent), so concurrent
writers lose nothing.
"""

from __future__ import annotations

import hashlib
import math
import re
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from itertools import chain, islice
from typing import Any

import pyarrow as pa

from pith_pipeline._internal.disk_backed import sorted_unique
from pith_pipeline._internal.error_text import one_line, os_error_hint
from pith_pipeline._internal.rust_panics import without_rust_panics
from pith_pipeline.clock import system_clock
from pith_pipeline.core.canonical_json import dumps, loads
from pith_pipeline.core.layout import bundle_key
from pith_pipeline.core.timeutil import Clock
from pith_pipeline.errors import StorageError
from pith_pipeline.index.dataset import dataset_of
from pith_pipeline.index.delta import INDEX_PREFIX, Location, location, unwrap
from pith_pipeline.index.rows import Rows, rows_from_bundle
from pith_pipeline.index.schema import TABLE_PROPERTIES, TABLES, TableSpec
from pith_pipeline.index.sink import RowSink
from pith_pipeline.storage.base import Store
from pith_pipeline.storage.lease import check_writes

Progress = Callable[[int], None]
#: Hours a file no version needs any more is kept for readers of older versions.
DEFAULT_RETENTION_HOURS = 168
REINDEX_CHUNK = 20_000  # bundles per commit of a full reindex (memory bound)
UPDATE_BATCH = 10_000  # subjects per batch of an index update (memory bound)
COMMIT_ATTEMPTS = 12
DEFAULT_MAX_PARTS = 1  # events/aliases files a touched partition may keep before compaction
#: The index layout before Delta tables: a manifest of our own, migrated by `reindex`.
LEGACY_MANIFEST_KEY = "index/_manifest.json"
# `search`ed in store keys: ASCII digits and `\Z` (`$` admits a trailing newline)
_LEGACY_FILE = re.compile(r"/part-g[0-9]+-[0-9]{8}T[0-9]{6}Z-[0-9a-f]+\.parquet\Z")


@dataclass(slots=True)
class IndexUpdate:
    """What an index change did: each table's version after it, rows and commits."""

    versions: dict[str, int] = field(default_factory=dict)
    subjects_checked: int = 0
    subjects_changed: int = 0
    rows: dict[str, int] = field(default_factory=dict)
    files_compacted: int = 0
    #: table -> the versions this change committed (a run manifest records them)
    commits: dict[str, list[int]] = field(default_factory=dict)
    deleted: list[str] = field(default_factory=list)

    def line(self) -> str:
        rows = ", ".join(f"{k} {v}" for k, v in self.rows.items()) or "no new rows"
        versions = ", ".join(f"{k} v{v}" for k, v in sorted(self.versions.items())) or "no tables"
        return (
            f"index ({versions}): {self.subjects_changed} of {self.subjects_checked} "
            f"records changed ({rows}); {self.files_compacted} files compacted"
        )

    def compact_line(self) -> str:
        """What `compact` did, in one line. Why not `line`: compact reads no bundle,
        so its `0 of 0 records changed (no new rows)` read as an empty index."""
        versions = ", ".join(f"{k} v{v}" for k, v in sorted(self.versions.items())) or "no tables"
        did = (
            f"{self.files_compacted} small files compacted"
            if self.files_compacted
            else "no small files to compact"
        )
        return f"index ({versions}): {did}; {len(self.deleted)} old files deleted"


# -- bundles in -----------------------------------------------------------------


def _read_bundle(store: Store, key: str) -> Rows:
    data = store.get(key)
    if data is None:
        raise StorageError(
            f"{store.url}/{key} is missing; it was expected to be published "
            "(re-run the window, or `pith-pipeline rebuild`)"
        )
    try:
        bundle = loads(data)
    except ValueError as exc:
        raise StorageError(f"{store.url}/{key} is not valid JSON: {exc}") from None
    try:
        return rows_from_bundle(bundle, bundle_key=key, bundle_sha256=hashlib.sha256(data).hexdigest())
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise StorageError(
            f"{store.url}/{key}: not a bundle the index can read ({type(exc).__name__}: {exc})"
        ) from None


def read_bundles(
    store: Store, keys: Iterable[str], *, workers: int = 16, progress: Progress | None = None
) -> Iterator[tuple[str, Rows]]:
    """Index rows per bundle key; reads run in parallel (object stores are latency-bound)."""
    keys = list(keys)
    if not keys:
        return
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(keys)))) as pool:
        for key, rows in zip(keys, pool.map(lambda k: _read_bundle(store, k), keys), strict=True):
            if progress:
                progress(1)
            yield key, rows


def all_bundle_keys(store: Store) -> list[str]:
    return [k for k in store.list("pith/") if k.endswith("/bundle.json") and k.count("/") == 2]


# -- tables -------------------------------------------------------------------------


def _delta_error(loc: Location, spec: TableSpec, exc: Exception, *, writing: bool = False) -> StorageError:
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
            raise _delta_error(loc, spec, exc) from None
        else:
            _check_last_commit(loc, spec, dt)
            return dt
        from deltalake import CommitProperties

        _check_lease(loc)  # creating a table is a write
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
    from pith_pipeline.index.dictionary import dictionary_current, pending_steps

    dt = open_table(loc, spec, create=True)
    versions: list[int] = []
    config = dt.metadata().configuration
    if not all(config.get(k) == v for k, v in TABLE_PROPERTIES.items()):

        def alter(dt: Any) -> dict[str, Any]:
            dt.alter.set_table_properties(
                dict(TABLE_PROPERTIES), commit_properties=_commit_properties(run_id)
            )
            return {}

        dt, committed = _commit_retry(loc, spec, alter)
        versions += [int(dt.version())] if committed else []
    if dictionary_current(dt, spec):
        return versions
    for step in pending_steps(spec):  # a table made before the data dictionary: once

        def apply(dt: Any, step: Any = step) -> dict[str, Any]:
            step(dt, _commit_properties(run_id))
            return {}

        dt, committed = _commit_retry(loc, spec, apply)
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


#: operationMetrics of delta-rs commits that count their add and remove actions
#: (WRITE and DELETE, OPTIMIZE, MERGE)
_ADDED_METRICS = ("num_added_files", "numFilesAdded", "num_target_files_added")
_REMOVED_METRICS = ("num_removed_files", "numFilesRemoved", "num_target_files_removed")


def commit_problem(data: bytes) -> str | None:
    """What is wrong with a Delta commit file's bytes, or None.

    Why: delta-rs reads an empty commit file as a commit with no actions, and one cut
    at a line boundary as a commit with fewer: the rows its add actions held were
    silently gone (`query` said 0 rows, `status` passed). Each of our commits starts
    with a commitInfo whose metrics count its add and remove actions, so a file with
    no commitInfo, a line that is not an action, or other counts was cut short.
    """
    lines = [line for line in data.split(b"\n") if line.strip()]
    if not lines:
        return "is empty"
    counts: dict[str, int] = {}
    info: dict[str, Any] | None = None
    for n, line in enumerate(lines, 1):
        try:
            action = loads(line)
        except ValueError:
            return f"is cut short or not JSON at line {n}"
        if not isinstance(action, dict) or len(action) != 1:
            return f"has a line that is not a Delta action (line {n})"
        ((kind, body),) = action.items()
        counts[kind] = counts.get(kind, 0) + 1
        if kind == "commitInfo" and isinstance(body, dict):
            info = body
    if info is None:
        return "has no commitInfo (cut short?)"
    metrics = info.get("operationMetrics")
    metrics = metrics if isinstance(metrics, dict) else {}
    # a MERGE counts the change data files it adds (`cdc` actions) among its added files
    merged = "num_target_files_added" in metrics
    for names, kind in ((_ADDED_METRICS, "add"), (_REMOVED_METRICS, "remove")):
        for name in names:
            got = counts.get(kind, 0)
            if kind == "add" and merged:
                got += counts.get("cdc", 0)
            want = metrics.get(name)
            if isinstance(want, int) and want != got:
                return f"holds {got} {kind} actions where its commitInfo counts {want} (cut short)"
    return None


def version_key(table: str) -> str:
    """Where the newest version our writers committed to `table` is noted.

    In the table's directory, so a `reindex` that starts the table anew removes it with
    the table; its name starts with `_`, which Delta readers and `vacuum` leave alone.
    """
    return f"{INDEX_PREFIX}{table}/_pith_version.json"


def _check_lease(loc: Location) -> None:
    """Every index write checks the writer's lease first (`storage.lease.check_writes`):
    Delta commits bypass the store object, so they are checked here."""
    if loc.store is not None:
        check_writes(loc.store)


def note_version(loc: Location, spec: TableSpec, version: int) -> None:
    """Note that `version` of the table was committed (after the commit, never before).

    Why: when the newest commit file is deleted, delta-rs reads the version before it
    without a word, so the rows it held were silently gone. A table whose log ends
    below the noted version has lost commits (`_check_last_commit`). The note only
    grows; two writers racing may leave the lower of their versions, which misses a
    loss but never claims one. A note that cannot be written is left as it was, for the
    same reason: the commit is made, and a lower note only weakens the check.
    """
    if loc.store is None:
        return
    _check_lease(loc)
    try:
        noted = _noted_version(loc, spec)
        if noted is None or version > noted:
            loc.store.put(version_key(spec.name), dumps({"version": version}))
    except StorageError:
        return


def _noted_version(loc: Location, spec: TableSpec) -> int | None:
    """The version `note_version` noted, None when none was; a note that is not one is
    damage (`StorageError`)."""
    assert loc.store is not None
    key = version_key(spec.name)
    try:
        data = loc.store.get(key)
    except StorageError:
        return None  # reading it failed: the table's own reads say what is wrong
    if data is None:
        return None
    try:
        doc = loads(data)
    except ValueError:
        doc = None
    version = doc.get("version") if isinstance(doc, dict) else None
    if not isinstance(version, int) or isinstance(version, bool) or version < 0:
        raise StorageError(
            f"{loc.uri(spec.name)}: the index table is damaged: {key} is not a version note; "
            "`pith-pipeline reindex` rebuilds it from the bundles"
        )
    return version


def _check_last_commit(loc: Location, spec: TableSpec, dt: Any) -> None:
    """Refuse a table whose last commit file is damaged (see `commit_problem`) or gone
    (its log ends below the version `note_version` noted).

    The last one only: it is the one a crash or a full disk cuts short, and reading
    every commit would cost a request per commit on S3 each time a table is opened.
    The note is read before the log is listed again: a writer notes a version only
    after its commit file exists, so a commit made since `dt` was opened is listed
    then, and only a commit that is really gone is reported.
    """
    if loc.store is None:
        return
    noted = _noted_version(loc, spec)
    if noted is not None and int(dt.version()) < noted:
        dt.update_incremental()
        if int(dt.version()) < noted:
            raise StorageError(
                f"{loc.uri(spec.name)}: the index table lost commits: its log ends at version "
                f"{dt.version()} but version {noted} was committed "
                f"({commit_key(spec.name, int(dt.version()) + 1)} is missing); "
                "`pith-pipeline reindex` rebuilds it from the bundles"
            )
    key = commit_key(spec.name, int(dt.version()))
    try:
        data = loc.store.get(key)
    except StorageError:
        return  # reading it failed: the table's own reads say so
    problem = commit_problem(data) if data is not None else None
    if problem:
        raise StorageError(
            f"{loc.uri(spec.name)}: the index table is damaged: its last commit {key} {problem}; "
            "`pith-pipeline reindex` rebuilds it from the bundles"
        )


def _commit_retry(loc: Location, spec: TableSpec, op: Callable[[Any], dict[str, Any]]) -> tuple[Any, bool]:
    """Run `op(table)` on the newest version, again after a lost commit race.

    Returns (the table after, whether `op` committed a new version).
    """
    from deltalake.exceptions import CommitFailedError, DeltaError

    for attempt in range(COMMIT_ATTEMPTS):
        _check_lease(loc)
        dt = open_table(loc, spec, create=True)
        before = dt.version()
        try:
            op(dt)
        except CommitFailedError:
            time.sleep(min(2.0, 0.05 * 2**attempt))
            continue
        except (DeltaError, OSError) as exc:  # every op writes: a merge, an overwrite, a compaction
            raise _delta_error(loc, spec, exc, writing=True) from None
        if dt.version() != before:
            note_version(loc, spec, int(dt.version()))
            return dt, True
        return dt, False
    raise StorageError(
        f"{loc.uri(spec.name)}: gave up after {COMMIT_ATTEMPTS} concurrent commits; try again",
        transient=True,
    )


def _commit_properties(run_id: str | None) -> Any:
    from deltalake import CommitProperties

    return CommitProperties(
        custom_metadata={"pith.run_id": run_id} if run_id else None, max_commit_retries=COMMIT_ATTEMPTS
    )


@dataclass(slots=True)
class MergeReport:
    """What `merge_rows` wrote: rows of new keys and of changed keys, and the partitions
    an append wrote and those a MERGE wrote (its output holds `string_view`s, new rows
    included: see `tidy_partitions`)."""

    appended: int = 0
    merged: int = 0
    appended_partitions: set[str] = field(default_factory=set)
    merged_partitions: set[str] = field(default_factory=set)


def _target_rows(
    loc: Location, dt: Any, spec: TableSpec, partitions: set[str], columns: list[str], keys: pa.Array
) -> pa.Table:
    """`columns` of the version `dt`'s rows in `partitions` whose key is one of `keys`.

    A projected scan in batches, each filtered to `keys` as it comes: memory holds the
    batch and the matches, not every key of the partition (a snapshot's events are one
    partition: 2 M keys at 1 M papers). No filter is pushed into the scan: pyarrow
    cannot bind a string filter to files of both string kinds (see `query`).
    """
    import pyarrow.compute as pc

    files = [f for f in live_files(dt, spec) if f["partition"] in partitions]
    schema = pa.schema([spec.schema.field(c) for c in columns if c != spec.partition])
    if not files:
        return schema.empty_table()
    if loc.local:
        from urllib.parse import unquote

        import pyarrow.dataset as ds
        from pyarrow import fs as pafs

        fmt = ds.ParquetFileFormat()
        local = pafs.LocalFileSystem()
        fragments = [
            fmt.make_fragment(f"{loc.uri(spec.name)}/{unquote(f['path'])}", filesystem=local) for f in files
        ]
        dataset = ds.FileSystemDataset(fragments, schema, fmt, local)
    else:
        dataset = dt.to_pyarrow_dataset(file_pruning_predicate=[(spec.partition, "in", sorted(partitions))])
    key = spec.merge_column
    wanted = keys.cast(pa.string())
    found = []
    for batch in dataset.to_batches(columns=schema.names):
        got = pa.table({c: batch.column(c).cast(schema.field(c).type) for c in schema.names})
        got = got.filter(pc.is_in(got.column(key), value_set=wanted))
        if got.num_rows:
            found.append(got)
    return pa.concat_tables(found) if found else schema.empty_table()


def split_new(loc: Location, dt: Any, spec: TableSpec, source: pa.Table) -> tuple[pa.Table, pa.Table]:
    """(rows whose key version `dt` lacks, rows whose key it holds with other `compare`
    values); rows it already holds as they are are dropped: nothing to write for them.

    Keys fix their partition (see `schema`), so only the source's partitions are read,
    and only the key and `compare` columns of them.
    """
    import pyarrow.compute as pc

    key = spec.merge_column
    partitions = set(source.column(spec.partition).unique().to_pylist())
    target = _target_rows(
        loc, dt, spec, partitions, [key, *spec.compare], source.column(key).combine_chunks()
    )
    if target.num_rows == 0:
        return source, source.schema.empty_table()
    present = pc.is_in(source.column(key), value_set=target.column(key))
    new = source.filter(pc.invert(present))
    held = source.filter(present)
    if held.num_rows == 0 or not spec.compare:
        return new, held
    indexed = {r[key]: tuple(r[c] for c in spec.compare) for r in target.to_pylist()}
    differs = [
        indexed.get(r[key]) != tuple(r[c] for c in spec.compare)
        for r in held.select([key, *spec.compare]).to_pylist()
    ]
    return new, held.filter(pa.array(differs, pa.bool_()))


def _merge_from(dt: Any, source: pa.Table, spec: TableSpec, run_id: str | None) -> Any:
    """A MERGE of `source` (alias `s`) into the table (alias `t`) on the table's key.

    The source is one bounded batch: materialised (`streamed_exec=False`), its
    partition values prune the target files the MERGE reads (streamed, it reads every
    file).
    """
    return dt.merge(
        source,
        spec.merge_predicate,
        source_alias="s",
        target_alias="t",
        writer_properties=writer_properties(spec),
        commit_properties=_commit_properties(run_id),
        streamed_exec=False,
    )


def merge_rows(
    loc: Location,
    spec: TableSpec,
    table: pa.Table,
    *,
    run_id: str | None = None,
    report: MergeReport | None = None,
) -> list[int]:
    """Upsert `table` (deduplicated here) into `spec`'s Delta table in ONE commit;
    versions committed (none when every row is indexed as it is).

    So every version of the table holds the rows of `table` either all as they were
    or all as they are now: a paper's new version and the supersession of its old one
    (or an `arxiv:` alias moving to it) are never in two commits.

    - only new keys: they are appended (no target file read beyond the key columns,
      plain strings written). The commit is allowed no retry: it succeeds only as the
      version right after the one the keys were read from, and otherwise the keys are
      read again from the newer version, so concurrent writers keep one row per key;
    - any changed key: one MERGE of the new and the changed rows (insert the new,
      update the matched per `update_when`; for `events`, the matched update is the
      `valid` correction: an event any bundle marks invalid stays invalid). A MERGE
      that loses a commit race is run again (Delta's conflict check; it is idempotent).
      Its files hold `string_view`s until `tidy_partitions` rewrites them.
    """
    import pyarrow.compute as pc
    from deltalake.exceptions import CommitFailedError, DeltaError

    if table.num_rows == 0:
        return []
    report = report if report is not None else MergeReport()
    source = dedupe_sorted(spec, table)
    for attempt in range(COMMIT_ATTEMPTS):
        dt = open_table(loc, spec, create=True)
        new, changed = split_new(loc, dt, spec, source)
        if spec.name == "events":  # an event indexed invalid stays so: only invalid flags change one
            changed = changed.filter(pc.invert(changed.column("valid")))
        if new.num_rows == 0 and changed.num_rows == 0:
            return []
        _check_lease(loc)
        try:
            if changed.num_rows == 0:
                _append(dt, spec, new, run_id)
            else:
                both = pa.concat_tables([new, changed]).sort_by([(c, "ascending") for c in spec.sort])
                _merge(dt, spec, both, run_id)
        except CommitFailedError:
            time.sleep(min(2.0, 0.05 * 2**attempt))
            continue
        except (DeltaError, OSError) as exc:
            raise _delta_error(loc, spec, exc, writing=True) from None
        note_version(loc, spec, int(dt.version()))
        report.appended += new.num_rows
        report.merged += changed.num_rows
        parts = report.appended_partitions if changed.num_rows == 0 else report.merged_partitions
        for part in (new, changed):
            parts.update(part.column(spec.partition).unique().to_pylist())
        return [int(dt.version())]
    raise StorageError(
        f"{loc.uri(spec.name)}: gave up after {COMMIT_ATTEMPTS} concurrent commits; try again",
        transient=True,
    )


def _append(dt: Any, spec: TableSpec, rows: pa.Table, run_id: str | None) -> None:
    """Append `rows` in one commit, with no retry (see `merge_rows`)."""
    from deltalake import CommitProperties, write_deltalake

    write_deltalake(
        dt,
        rows,
        mode="append",
        partition_by=[spec.partition],
        writer_properties=writer_properties(spec),
        commit_properties=CommitProperties(
            custom_metadata={"pith.run_id": run_id} if run_id else None, max_commit_retries=0
        ),
    )


def _merge(dt: Any, spec: TableSpec, rows: pa.Table, run_id: str | None) -> None:
    """One MERGE of `rows`: insert keys the table lacks, update matched ones (see `merge_rows`)."""
    m = _merge_from(dt, rows, spec, run_id)
    if spec.update_when is not None:
        m = m.when_matched_update_all(predicate=spec.update_when)
    if spec.name == "events":
        m = m.when_matched_update(
            updates={"valid": "s.valid"}, predicate="s.valid = false AND (t.valid IS NULL OR t.valid)"
        )
    m.when_not_matched_insert_all().execute()


def commit_key(table: str, version: int) -> str:
    return f"{INDEX_PREFIX}{table}/_delta_log/{version:020d}.json"


def _record_commits(update: IndexUpdate, table: str, versions: Iterable[int]) -> None:
    """Note the versions this change committed (`commit_key` names each one's log entry).

    Versions, not the log entries' hashes: an entry holds wall-clock times and random
    file names, so two identical runs would differ, while their versions agree.
    """
    for v in versions:
        update.commits.setdefault(table, []).append(v)
        update.versions[table] = max(update.versions.get(table, -1), v)


# -- reading the live rows ----------------------------------------------------------


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


def _legacy_present(store: Store) -> bool:
    return unwrap(store).get(LEGACY_MANIFEST_KEY) is not None


def refuse_legacy(store: Store) -> None:
    """`StorageError` when the store's index is in the layout before Delta tables
    (`index/_manifest.json`): every reader and writer of the tables refuses it, and
    says to run `reindex` once, rather than read or write half of two layouts."""
    if _legacy_present(store):
        raise StorageError(
            f"{store.url}/{LEGACY_MANIFEST_KEY}: this store's index is in the old layout; "
            "run `pith-pipeline reindex` once to turn it into Delta tables"
        )


# -- incremental update -------------------------------------------------------------


GROUP_ROWS = 100_000  # rows of one table per commit of an update (memory bound)
#: ... and at most this many bytes of them (uncompressed Arrow): a write holds a few
#: copies of its rows (the sink's, the deduplicated, the writer's)
GROUP_BYTES = 32 * 2**20


def _index_sink(
    loc: Location,
    sink: RowSink,
    update: IndexUpdate,
    run_id: str | None,
    touched: dict[str, set[str] | None],
    views: dict[str, set[str]],
    group_rows: int,
    progress: Progress | None,
) -> None:
    """Write the sink's rows: one commit per table when they fit in `group_rows` rows
    (and `GROUP_BYTES`), else one per group of whole papers (`RowSink.groups`)."""
    for spec in TABLES.values():  # readers see every table (empty) while the update runs
        _record_commits(update, spec.name, ensure_properties(loc, spec, run_id))
    # events and aliases before records: an indexed records row means the subject is complete
    for name in ("events", "aliases", "records"):
        spec = TABLES[name]
        rows = min(group_rows, sink.rows_within(name, GROUP_BYTES))
        for table in sink.groups(name, rows):
            report = MergeReport()
            versions = merge_rows(loc, spec, table, run_id=run_id, report=report)
            if report.appended + report.merged:
                update.rows[name] = update.rows.get(name, 0) + report.appended + report.merged
            if name == "records":
                update.subjects_changed += report.appended + report.merged
                if progress:
                    progress(table.num_rows)
            seen = touched.setdefault(name, set())
            if seen is not None:
                seen.update(report.appended_partitions | report.merged_partitions)
            views.setdefault(name, set()).update(report.merged_partitions)
            _record_commits(update, name, versions)


def tidy_partitions(
    loc: Location,
    touched: dict[str, set[str] | None],
    update: IndexUpdate,
    *,
    max_files: int,
    run_id: str | None,
    views: dict[str, set[str]] | None = None,
) -> None:
    """Rewrite the partitions a change left untidy into plain, sorted files (a commit
    per table and kind of rewrite that has any).

    Untidy: a partition the change MERGEd into (`views[name]`, or every touched one
    when `views` is None), or one holding more than `max_files` files. Why: a MERGE
    writes its files with `string_view`/`binary_view` columns, which daft cannot read,
    pyarrow cannot filter beside plain files, and DuckDB pushes no filter into (see
    `query`); appends, compaction and z-order write plain types. A rewrite, not a writer
    setting, because deltalake 1.6 has none: its MERGE runs in a DataFusion session
    with `datafusion.execution.parquet.schema_force_view_types` forced on (delta-rs's
    `DeltaSessionConfig`; the Python `merge` takes no session configuration), and since
    https://github.com/delta-io/delta-rs/pull/4302 it writes the types it scanned. The
    rewrite changes no row (no change-feed entry) and comes before the run notes its
    versions, so every version a run manifest names holds plain files only. `records`
    partitions a MERGE wrote are z-ordered on `primary_cat` (a MERGE leaves its rows
    unsorted; z-order clusters a category into few row groups again); every other
    untidy partition is compacted: its files were appended sorted (slices of a large
    partition), and compaction streams where z-order sorts the whole partition in
    memory. `touched[name]` None means every partition.
    """
    for name, partitions in touched.items():
        spec = TABLES[name]
        files = live_files(open_table(loc, spec, create=True), spec)
        per: dict[str, int] = {}
        for f in files:
            per[f["partition"]] = per.get(f["partition"], 0) + 1
        scope = set(per) if partitions is None else set(partitions) & set(per)
        merged = scope if views is None else scope & views.get(name, set())
        many = {p for p in scope if per[p] > max_files}
        if name == "records":
            z_ordered, compacted = merged, many - merged  # events/aliases views go when compacted
        else:
            z_ordered, compacted = set(), many
        for chosen, how in ((sorted(z_ordered), "z_order"), (sorted(compacted), "compact")):
            if not chosen:
                continue

            def rewrite(
                dt: Any, chosen: list[str] = chosen, spec: TableSpec = spec, how: str = how
            ) -> dict[str, Any]:
                return _optimize(
                    dt,
                    spec,
                    update,
                    z_order=how == "z_order",
                    partition_filters=[(spec.partition, "in", chosen)],
                    commit_properties=_commit_properties(run_id),
                )

            dt, committed = _commit_retry(loc, spec, rewrite)
            if committed:
                _record_commits(update, name, [dt.version()])
        if name != "records" and merged:  # a MERGE's single file is no compaction's
            repair_views(loc, spec, update, merged, run_id)


def _has_views(schema: pa.Schema) -> bool:
    def view(t: pa.DataType) -> bool:
        if t in (pa.string_view(), pa.binary_view()):
            return True
        return bool(pa.types.is_list(t) or pa.types.is_large_list(t)) and view(t.value_type)

    return any(view(f.type) for f in schema)


def view_partitions(loc: Location, dt: Any, spec: TableSpec, partitions: set[str] | None) -> list[str]:
    """The partitions (of `partitions`, None: all) holding a file whose Arrow schema has
    `string_view` or `binary_view` columns; reads each file's footer."""

    files = [f for f in live_files(dt, spec) if partitions is None or f["partition"] in partitions]
    if not files or loc.store is None:
        return []
    bad = set()
    for f, fragment in zip(files, dataset_of(loc.store, loc, spec, files).get_fragments(), strict=True):
        if f["partition"] not in bad and _has_views(fragment.physical_schema):
            bad.add(f["partition"])
    return sorted(bad)


def repair_views(
    loc: Location, spec: TableSpec, update: IndexUpdate, partitions: set[str] | None, run_id: str | None
) -> None:
    """Rewrite (z-order, one commit) the partitions of `partitions` still holding files
    with view types: a MERGE that rewrote one file into one, which compaction leaves
    alone (there is nothing to bin-pack), or a MERGE whose run died before tidying."""
    bad = view_partitions(loc, open_table(loc, spec, create=True), spec, partitions)
    if not bad:
        return

    def rewrite(dt: Any) -> dict[str, Any]:
        return _optimize(
            dt,
            spec,
            update,
            z_order=True,
            partition_filters=[(spec.partition, "in", bad)],
            commit_properties=_commit_properties(run_id),
        )

    dt, committed = _commit_retry(loc, spec, rewrite)
    if committed:
        _record_commits(update, spec.name, [dt.version()])


#: the column z-order clusters each table's rewritten partitions on: `records` by
#: category (see docs/pages/analysts.md); the others by their first sort column
_Z_ORDER = {"records": ["primary_cat"]}


def _optimize(dt: Any, spec: TableSpec, update: IndexUpdate, *, z_order: bool, **opts: Any) -> dict[str, Any]:
    """One `optimize` commit of `spec`'s table: z-order on `primary_cat` (records) or
    compaction, with the table's writer properties; counts the files it removed."""
    opts["writer_properties"] = writer_properties(spec)
    if z_order:
        result: dict[str, Any] = dt.optimize.z_order(_Z_ORDER.get(spec.name, [spec.sort[0]]), **opts)
    else:
        result = dt.optimize.compact(**opts)
    update.files_compacted += int(result.get("numFilesRemoved", 0))
    return result


def _uncovered(subjects: Iterator[str], covered: Iterator[str]) -> Iterator[str]:
    """Sorted `subjects` (bundle keys) minus sorted `covered` (their bundle keys)."""
    have = next(covered, None)
    for key in subjects:
        while have is not None and have < key:
            have = next(covered, None)
        if have != key:
            yield key


@without_rust_panics
def update_indexes(
    store: Store,
    subjects: Iterable[str],
    *,
    rows: RowSink | Rows | Iterable[Rows] | None = None,
    run_id: str | None = None,
    clock: Clock = system_clock,
    workers: int = 16,
    progress: Progress | None = None,
    batch_size: int = UPDATE_BATCH,
    max_parts: int = DEFAULT_MAX_PARTS,
    group_rows: int = GROUP_ROWS,
) -> IndexUpdate:
    """Bring the indexes up to date for `subjects` (Pith numbers) and for `rows`.

    `rows`: index rows the caller already has, of bundles it published (a `RowSink`
    the publisher fed, or `Rows`): their subjects are not read back from the store.
    Every other subject's bundle is read (`batch_size` at a time) and its rows join
    them in a `RowSink` on disk, so memory does not grow with the run.

    The rows are then written one commit per table (`merge_rows`), or, past `group_rows`
    rows (and `GROUP_BYTES`) of a table, one commit per group of whole papers: a group of
    only new keys is appended, a group with changed keys is one MERGE of its new and
    changed rows, rows already indexed as they are cost nothing. So re-running a
    window commits nothing, and a run that died before indexing is completed by the
    next run over the same records. Call it after the bundles are published. At the
    end, partitions left untidy are rewritten (`tidy_partitions`).
    `clock` is unused (Delta stamps its own commits); it is kept so callers need not
    change.
    """
    del clock
    if batch_size < 1 or group_rows < 1:
        raise ValueError("batch_size and group_rows must be at least 1")
    if isinstance(rows, RowSink):
        sink, own = rows, False
    else:
        sink, own = RowSink(), True
        for r in [rows] if isinstance(rows, Rows) else rows or ():
            sink.add(r)
    try:
        sink.flush()
        keys = _uncovered(
            sorted_unique(bundle_key(s) for s in subjects),  # streamed: millions in a backfill
            sorted_unique(bundle_key(s) for s in sink.subjects()),
        )
        update = IndexUpdate()
        first = next(keys, None)
        has_rows = bool(sink.files("records") or sink.files("events") or sink.files("aliases"))
        if first is None and not has_rows:
            return update
        loc = location(store)
        refuse_legacy(store)
        update.subjects_checked = sum(1 for _ in sink.subjects())
        keys = chain([first], keys) if first is not None else iter(())
        while batch := list(islice(keys, batch_size)):
            update.subjects_checked += len(batch)
            for _, r in read_bundles(store, batch, workers=workers):
                sink.add(r)
            sink.flush()
        touched: dict[str, set[str] | None] = {}
        views: dict[str, set[str]] = {}
        _index_sink(loc, sink, update, run_id, touched, views, group_rows, progress)
        tidy_partitions(loc, dict(touched), update, max_files=max_parts, run_id=run_id, views=views)
        # every table's version after the update, committed to or not: the run manifest's
        # `index.versions` is then a whole snapshot (`query --as-of`); the index lease
        # keeps other writers out, so these are the versions this update left
        for name, spec in TABLES.items():
            if name not in update.versions:
                update.versions[name] = _version_now(open_table(loc, spec, create=True))
        return update
    finally:
        if own:
            sink.close()


# -- compaction -------------------------------------------------------------------


@without_rust_panics
def compact(
    store: Store,
    *,
    retention_hours: float = DEFAULT_RETENTION_HOURS,
    z_order: bool = False,
    progress: Progress | None = None,
) -> IndexUpdate:
    """`optimize.compact()` every table (small files into large), then `vacuum`.

    Compaction is one commit per table: readers of older versions keep reading their
    files, which `vacuum` deletes only once no version younger than `retention_hours`
    needs them (0 deletes at once, for a store nobody is reading). `z_order` orders
    `records` by `primary_cat` instead (see the benchmark in docs/pages/analysts.md).
    Partitions still holding files with view types (`repair_views`) are rewritten,
    and tables made without `TABLE_PROPERTIES` get them.
    """
    loc = location(store)
    refuse_legacy(store)
    update = IndexUpdate()
    for name, spec in TABLES.items():
        if not table_exists(loc, spec):
            continue

        def optimize(dt: Any, spec: TableSpec = spec) -> dict[str, Any]:
            return _optimize(dt, spec, update, z_order=z_order and spec.name == "records")

        _record_commits(update, name, ensure_properties(loc, spec))
        dt, committed = _commit_retry(loc, spec, optimize)
        if committed:
            _record_commits(update, name, [dt.version()])
        repair_views(loc, spec, update, None, None)
        dt = open_table(loc, spec)
        _check_lease(loc)
        deleted = dt.vacuum(
            retention_hours=math.ceil(retention_hours), dry_run=False, enforce_retention_duration=False
        )
        update.deleted.extend(_as_store_path(loc, name, p) for p in deleted)
        dt.cleanup_metadata()
        update.versions[name] = _version_now(dt)  # vacuum commits too: the version status shows
        note_version(loc, spec, update.versions[name])
        if progress:
            progress(1)
    return update


def _as_store_path(loc: Location, table: str, path: str) -> str:
    from pith_pipeline.index.delta import path_in_store

    if "://" in path or path.startswith("/"):
        return path_in_store(loc, table, path)
    return f"{INDEX_PREFIX}{table}/{path}"


# -- full rebuild -----------------------------------------------------------------


def _remove_prefix(store: Store, prefix: str) -> list[str]:
    real = unwrap(store)
    gone = []
    for key in list(real.list(prefix)):
        check_writes(real)
        real.delete(key)
        gone.append(key)
    return gone


def _repairable(loc: Location, spec: TableSpec) -> bool:
    """Whether the table's log can be read (else `reindex` starts it anew)."""
    try:
        open_table(loc, spec)
    except Exception:  # any failure to read the log: the table is rebuilt from scratch
        return False
    return True


@without_rust_panics
def reindex(
    store: Store,
    *,
    clock: Clock = system_clock,
    workers: int = 16,
    retention_hours: float = DEFAULT_RETENTION_HOURS,
    progress: Progress | None = None,
) -> IndexUpdate:
    """Rebuild every table from every bundle in the store, whatever state the index is in.

    - an old-layout index (`index/_manifest.json` and its files) is removed;
    - a table whose log cannot be read is removed and started anew;
    - otherwise the first group of rows replaces the table's contents in one commit
      (readers of older versions keep reading theirs) and later groups are merged in.

    Bundles are read in chunks into a `RowSink` on disk (bounded memory), and the rows
    are written in groups of whole papers (`RowSink.groups`): one commit per table
    when they fit, and no commit ever holds part of a paper. Files no version needs are vacuumed
    after `retention_hours`, as in `compact`.
    """
    del clock
    loc = location(store)
    keys = all_bundle_keys(store)
    update = IndexUpdate(subjects_checked=len(keys))
    legacy = _legacy_present(store)
    real = unwrap(store)
    # the records table as it was, to count the records whose rows really change
    before = None if legacy else _readable_version(loc, TABLES["records"])
    for name, spec in TABLES.items():
        prefix = f"{INDEX_PREFIX}{name}/"
        if legacy or not _repairable(loc, spec):
            has_log = any(True for _ in real.list(f"{prefix}_delta_log/"))
            if legacy and has_log and _repairable(loc, spec):
                # a Delta table already here (a migration that died): keep it, drop the old files
                update.deleted.extend(_remove_legacy_files(real, prefix))
            else:
                update.deleted.extend(_remove_prefix(real, prefix))
    if legacy:
        update.deleted.extend(_remove_legacy_files(real, INDEX_PREFIX))
        check_writes(real)
        real.delete(LEGACY_MANIFEST_KEY)
        update.deleted.append(LEGACY_MANIFEST_KEY)
    for spec in TABLES.values():
        _record_commits(update, spec.name, ensure_properties(loc, spec))
    with RowSink() as sink:
        # read in chunks (bounded memory) into a sink on disk, then written in groups of
        # whole papers: bundle keys are not in paper order, so a chunk would split one
        for start in range(0, len(keys), REINDEX_CHUNK):
            chunk = keys[start : start + REINDEX_CHUNK]
            per_bundle = list(read_bundles(store, chunk, workers=workers, progress=progress))
            changed = per_bundle if before is None else _changed_or_all(store, loc, per_bundle, before)
            update.subjects_changed += len(changed)
            for _, r in per_bundle:
                sink.add(r)
            del per_bundle, changed
        sink.flush()
        for name, spec in TABLES.items():
            budget = min(GROUP_ROWS, sink.rows_within(name, GROUP_BYTES))
            first = True
            for table in sink.groups(name, budget):
                versions = _overwrite(loc, spec, table) if first else merge_rows(loc, spec, table)
                update.rows[name] = update.rows.get(name, 0) + table.num_rows
                _record_commits(update, name, versions)
                first = False
            if first:  # no bundles: the table is emptied
                _record_commits(update, name, _overwrite(loc, spec, spec.schema.empty_table()))
    tidy_partitions(loc, dict.fromkeys(TABLES), update, max_files=DEFAULT_MAX_PARTS, run_id=None)
    for name, spec in TABLES.items():
        dt = open_table(loc, spec, create=True)
        _check_lease(loc)
        deleted = dt.vacuum(
            retention_hours=math.ceil(retention_hours), dry_run=False, enforce_retention_duration=False
        )
        update.deleted.extend(_as_store_path(loc, name, p) for p in deleted)
        update.versions[name] = _version_now(dt)  # vacuum commits too: the version status shows
        note_version(loc, spec, update.versions[name])
    return update


def _indexed_bundles(
    store: Store, loc: Location, keys: set[str], months: set[str], version: int | None = None
) -> dict[str, str]:
    """Pith number -> `bundle_sha256` of the indexed `records` rows of `keys`, from `months`
    (of the table's `version`, default the newest).

    A row is a function of its bundle's bytes, so an equal hash means an equal row:
    two narrow columns are read instead of whole rows.
    """

    spec = TABLES["records"]
    dt = open_table(loc, spec, create=True)
    if version is not None:
        dt.load_as_version(version)
    files = [f for f in live_files(dt, spec) if f["partition"] in months]
    if not files:
        return {}
    # no pushed-down filter on a string column: pyarrow cannot bind one to files of
    # both string kinds (see `query`); the touched months are read and filtered here
    table = dataset_of(store, loc, spec, files).to_table(columns=["pith_number", "bundle_sha256"])
    out = {}
    for pn, sha in zip(
        table.column("pith_number").to_pylist(), table.column("bundle_sha256").to_pylist(), strict=True
    ):
        if pn in keys:
            out[pn] = sha
    return out


def _changed(
    store: Store, loc: Location, per_bundle: list[tuple[str, Rows]], version: int | None = None
) -> list[tuple[str, Rows]]:
    """Bundles whose `records` row differs from the index (at `version`, default the
    newest): the only ones to (re)merge."""
    spec = TABLES["records"]
    fresh = {r["pith_number"]: r for _, rows in per_bundle for r in rows.records}
    if not fresh:
        return []
    current = _indexed_bundles(store, loc, set(fresh), {r[spec.partition] for r in fresh.values()}, version)
    return [
        (k, rows)
        for k, rows in per_bundle
        if any(current.get(r["pith_number"]) != r["bundle_sha256"] for r in rows.records)
    ]


# -- incremental update -------------------------------------------------------------


def _readable_version(loc: Location, spec: TableSpec) -> int | None:
    """The table's version when it exists and can be read, else None (a reindex starts it anew)."""
    if not table_exists(loc, spec):
        return None
    try:
        return int(open_table(loc, spec).version())
    except Exception:  # any failure to read the log: every record counts as changed
        return None


def _changed_or_all(
    store: Store, loc: Location, per_bundle: list[tuple[str, Rows]], version: int
) -> list[tuple[str, Rows]]:
    """`_changed` against the table as it was before the reindex; all of them when
    that version cannot be read (a damaged file is what a reindex repairs)."""
    try:
        return _changed(store, loc, per_bundle, version)
    except Exception:  # only the count depends on it; the reindex goes on
        return per_bundle


def _version_now(dt: Any) -> int:
    """The table's newest version, commits of its own `vacuum` included."""
    dt.update_incremental()
    return int(dt.version())


def _remove_legacy_files(real: Store, prefix: str) -> list[str]:
    gone = []
    for key in list(real.list(prefix)):
        if _LEGACY_FILE.search(key):
            check_writes(real)
            real.delete(key)
            gone.append(key)
    return gone


def _overwrite(loc: Location, spec: TableSpec, table: pa.Table) -> list[int]:
    """Replace the table's rows with `table` (deduplicated) in one commit."""
    from deltalake import write_deltalake

    source = dedupe_sorted(spec, table) if table.num_rows else spec.schema.empty_table()

    def write(dt: Any) -> dict[str, Any]:
        write_deltalake(
            dt,
            source,
            mode="overwrite",
            partition_by=[spec.partition],
            writer_properties=writer_properties(spec),
            commit_properties=_commit_properties(None),
        )
        return {}

    dt, committed = _commit_retry(loc, spec, write)
    if committed:
        dt.update_incremental()
    return [dt.version()] if committed else []
