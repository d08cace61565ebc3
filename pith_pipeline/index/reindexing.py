"""Rebuilding every table from every bundle in the store (`reindex`).

Whatever state the index is in (the layout before Delta tables, a table whose log
cannot be read, a healthy table), the tables afterwards hold exactly the rows of the
store's bundles, written in groups of whole papers, and old versions stay readable
until vacuumed.
"""

from __future__ import annotations

import math
from typing import Any

import pyarrow as pa

from pith_pipeline._internal.rust_panics import without_rust_panics
from pith_pipeline.clock import system_clock
from pith_pipeline.core.timeutil import Clock
from pith_pipeline.index.bundles import all_bundle_keys, read_bundles
from pith_pipeline.index.dataset import dataset_of
from pith_pipeline.index.delta import INDEX_PREFIX, Location, location, unwrap
from pith_pipeline.index.guard import check_lease, note_version
from pith_pipeline.index.legacy import LEGACY_MANIFEST_KEY, legacy_present, remove_legacy_files
from pith_pipeline.index.merge import merge_rows
from pith_pipeline.index.outcome import IndexUpdate, Progress, record_commits
from pith_pipeline.index.rows import Rows
from pith_pipeline.index.schema import TABLES, TableSpec
from pith_pipeline.index.sink import RowSink
from pith_pipeline.index.tables import (
    commit_properties,
    commit_retry,
    dedupe_sorted,
    ensure_properties,
    live_files,
    open_table,
    table_exists,
    version_now,
    writer_properties,
)
from pith_pipeline.index.tidy import (
    DEFAULT_MAX_PARTS,
    DEFAULT_RETENTION_HOURS,
    as_store_path,
    tidy_partitions,
)
from pith_pipeline.index.update import GROUP_BYTES, GROUP_ROWS
from pith_pipeline.storage.base import Store
from pith_pipeline.storage.lease import check_writes

REINDEX_CHUNK = 20_000  # bundles per commit of a full reindex (memory bound)


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
    legacy = legacy_present(store)
    real = unwrap(store)
    # the records table as it was, to count the records whose rows really change
    before = None if legacy else _readable_version(loc, TABLES["records"])
    for name, spec in TABLES.items():
        prefix = f"{INDEX_PREFIX}{name}/"
        if legacy or not _repairable(loc, spec):
            has_log = any(True for _ in real.list(f"{prefix}_delta_log/"))
            if legacy and has_log and _repairable(loc, spec):
                # a Delta table already here (a migration that died): keep it, drop the old files
                update.deleted.extend(remove_legacy_files(real, prefix))
            else:
                update.deleted.extend(_remove_prefix(real, prefix))
    if legacy:
        update.deleted.extend(remove_legacy_files(real, INDEX_PREFIX))
        check_writes(real)
        real.delete(LEGACY_MANIFEST_KEY)
        update.deleted.append(LEGACY_MANIFEST_KEY)
    for spec in TABLES.values():
        record_commits(update, spec.name, ensure_properties(loc, spec))
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
                record_commits(update, name, versions)
                first = False
            if first:  # no bundles: the table is emptied
                record_commits(update, name, _overwrite(loc, spec, spec.schema.empty_table()))
    tidy_partitions(loc, dict.fromkeys(TABLES), update, max_files=DEFAULT_MAX_PARTS, run_id=None)
    for name, spec in TABLES.items():
        dt = open_table(loc, spec, create=True)
        check_lease(loc)
        deleted = dt.vacuum(
            retention_hours=math.ceil(retention_hours), dry_run=False, enforce_retention_duration=False
        )
        update.deleted.extend(as_store_path(loc, name, p) for p in deleted)
        update.versions[name] = version_now(dt)  # vacuum commits too: the version status shows
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
            commit_properties=commit_properties(None),
        )
        return {}

    dt, committed = commit_retry(loc, spec, write)
    if committed:
        dt.update_incremental()
    return [dt.version()] if committed else []
