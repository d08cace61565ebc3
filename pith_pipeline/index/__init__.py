"""Indexes over a store as Delta tables (`records`, `events`, `aliases`), their
compaction, queries and the per-run manifest.

The API other parts call (CLI `build`/`ingest`, Airflow tasks):

- `finish_run(store, summary, window)`: after `Publisher.publish`, update the
  indexes from the bundles the run touched, then write `runs/<run_id>/manifest.json`.
- `RowSink`: index rows of the bundles a run writes (`Publisher(on_bundle=
  sink.add_bundle)`), spilled to disk; `finish_run(..., rows=sink)` indexes them
  without reading the bundles back.
- `update_indexes(store, subjects)` / `write_manifest(store, summary, window=...)`:
  the two halves of `finish_run`, for callers that split them into tasks.
- `compact(store)`, `reindex(store)`, `run_query(store, sql)`, `status(store)`.
- `check_bundle(bundle)` / `check(row, table)`: validate index rows before a record
  is published (`InputError`, record-level: quarantine the record).

Importing this package imports pyarrow; deltalake and DuckDB are imported when a
table is read or written.
"""

from pith_pipeline.index.query import connect, format_table, run_query
from pith_pipeline.index.rows import check, check_bundle
from pith_pipeline.index.runs import (
    finish_run,
    reproducible_run_id,
    run_manifest_key,
    touched_subjects,
    write_manifest,
)
from pith_pipeline.index.sink import RowSink
from pith_pipeline.index.status import format_status, status
from pith_pipeline.index.writer import (
    DEFAULT_RETENTION_HOURS,
    LEGACY_MANIFEST_KEY,
    IndexUpdate,
    compact,
    reindex,
    update_indexes,
)

__all__ = [
    "DEFAULT_RETENTION_HOURS",
    "LEGACY_MANIFEST_KEY",
    "IndexUpdate",
    "RowSink",
    "check",
    "check_bundle",
    "compact",
    "connect",
    "finish_run",
    "format_status",
    "format_table",
    "reindex",
    "reproducible_run_id",
    "run_manifest_key",
    "run_query",
    "status",
    "touched_subjects",
    "update_indexes",
    "write_manifest",
]
