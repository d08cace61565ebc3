"""Upserting rows into a table in one commit (`merge_rows`).

The MERGE keys, per table (`schema.TABLES`):

- `records`: MERGE on `pith_number` (a row from a newer bundle replaces the old);
- `aliases`: MERGE on the alias (the newest arXiv version wins, as in the
  `arxiv/<id>.json` pointer);
- `events`: insert-only MERGE on `event_id` (events are immutable; only `valid`,
  derived from the subject's state, is corrected, in the same MERGE, when a bundle
  marks one invalid).

Every call is one Delta commit, so every version of a table has exactly one row per
key and readers (ours and every other engine) never see half of a change. A MERGE
that loses a commit race to another writer is re-run against the new version
(Delta's conflict check tells us; the MERGE is idempotent), so concurrent writers
lose nothing.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from pith_pipeline.errors import StorageError
from pith_pipeline.index.delta import Location
from pith_pipeline.index.guard import check_lease, note_version
from pith_pipeline.index.schema import TableSpec
from pith_pipeline.index.tables import (
    COMMIT_ATTEMPTS,
    commit_properties,
    dedupe_sorted,
    delta_error,
    live_files,
    open_table,
    writer_properties,
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
        commit_properties=commit_properties(run_id),
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
        check_lease(loc)
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
            raise delta_error(loc, spec, exc, writing=True) from None
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
