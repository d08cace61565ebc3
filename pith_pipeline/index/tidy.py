"""Keeping the tables' files tidy: rewriting what a change left untidy, and `compact`.

Untidy is a partition holding more files than a change may leave, or files a MERGE
wrote with `string_view`/`binary_view` columns (which daft cannot read; see
`tidy_partitions`). A rewrite changes no row, and is one commit per table and kind
of rewrite. `compact` also vacuums the files no version younger than its retention
needs.
"""

from __future__ import annotations

import math
from typing import Any

import pyarrow as pa

from pith_pipeline._internal.rust_panics import without_rust_panics
from pith_pipeline.index.dataset import dataset_of
from pith_pipeline.index.delta import INDEX_PREFIX, Location, location, path_in_store
from pith_pipeline.index.guard import check_lease, note_version
from pith_pipeline.index.legacy import refuse_legacy
from pith_pipeline.index.outcome import IndexUpdate, Progress, record_commits
from pith_pipeline.index.schema import TABLES, TableSpec
from pith_pipeline.index.tables import (
    commit_properties,
    commit_retry,
    ensure_properties,
    live_files,
    open_table,
    table_exists,
    version_now,
    writer_properties,
)
from pith_pipeline.storage.base import Store

#: Hours a file no version needs any more is kept for readers of older versions.
DEFAULT_RETENTION_HOURS = 168
DEFAULT_MAX_PARTS = 1  # events/aliases files a touched partition may keep before compaction


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
                    commit_properties=commit_properties(run_id),
                )

            dt, committed = commit_retry(loc, spec, rewrite)
            if committed:
                record_commits(update, name, [dt.version()])
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
            commit_properties=commit_properties(run_id),
        )

    dt, committed = commit_retry(loc, spec, rewrite)
    if committed:
        record_commits(update, spec.name, [dt.version()])


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

        record_commits(update, name, ensure_properties(loc, spec))
        dt, committed = commit_retry(loc, spec, optimize)
        if committed:
            record_commits(update, name, [dt.version()])
        repair_views(loc, spec, update, None, None)
        dt = open_table(loc, spec)
        check_lease(loc)
        deleted = dt.vacuum(
            retention_hours=math.ceil(retention_hours), dry_run=False, enforce_retention_duration=False
        )
        update.deleted.extend(as_store_path(loc, name, p) for p in deleted)
        dt.cleanup_metadata()
        update.versions[name] = version_now(dt)  # vacuum commits too: the version status shows
        note_version(loc, spec, update.versions[name])
        if progress:
            progress(1)
    return update


def as_store_path(loc: Location, table: str, path: str) -> str:
    if "://" in path or path.startswith("/"):
        return path_in_store(loc, table, path)
    return f"{INDEX_PREFIX}{table}/{path}"
