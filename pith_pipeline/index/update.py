"""Bringing the tables up to date for the records a run touched (`update_indexes`).

A run commits each table once (or, when its rows exceed a commit's memory budget,
once per group of whole papers: `RowSink.groups`), so no version splits a paper.

An update writes only subjects whose `records` row differs from their bundle, and
merges `events` and `aliases` before `records`: an unchanged records row therefore
means the subject is fully indexed, and a re-run completes an update that died half
way.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from itertools import chain, islice

from pith_pipeline._internal.disk_backed import sorted_unique
from pith_pipeline._internal.rust_panics import without_rust_panics
from pith_pipeline.clock import system_clock
from pith_pipeline.core.layout import bundle_key
from pith_pipeline.core.timeutil import Clock
from pith_pipeline.index.bundles import read_bundles
from pith_pipeline.index.delta import Location, location
from pith_pipeline.index.legacy import refuse_legacy
from pith_pipeline.index.merge import MergeReport, merge_rows
from pith_pipeline.index.outcome import IndexUpdate, Progress, record_commits
from pith_pipeline.index.rows import Rows
from pith_pipeline.index.schema import TABLES
from pith_pipeline.index.sink import RowSink
from pith_pipeline.index.tables import ensure_properties, open_table, version_now
from pith_pipeline.index.tidy import DEFAULT_MAX_PARTS, tidy_partitions
from pith_pipeline.storage.base import Store

UPDATE_BATCH = 10_000  # subjects per batch of an index update (memory bound)
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
        record_commits(update, spec.name, ensure_properties(loc, spec, run_id))
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
            record_commits(update, name, versions)


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
                update.versions[name] = version_now(open_table(loc, spec, create=True))
        return update
    finally:
        if own:
            sink.close()
