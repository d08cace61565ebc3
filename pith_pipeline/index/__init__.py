"""Indexes over a store as Delta tables (`records`, `events`, `aliases`), their
compaction and queries. (A run's manifest, written after its index update, is the
loader's: `pith_pipeline.runs.manifest`.)

The API other parts call (CLI `build`/`ingest`, Airflow tasks):

- `update_indexes(store, subjects, rows=...)`: bring the tables up to date for the
  records a run touched (`runs.manifest.finish_run` calls it, then writes the run
  manifest).
- `RowSink`: index rows of the bundles a run writes (`Publisher(on_bundle=
  sink.add_bundle)`), spilled to disk; `finish_run(..., rows=sink)` indexes them
  without reading the bundles back.
- `compact(store)`, `reindex(store)`, `run_query(store, sql)`, `status(store)`.
- `check_bundle(bundle)` / `check(row, table)`: validate index rows before a record
  is published (`InputError`, record-level: quarantine the record).

Importing this package imports pyarrow; deltalake and DuckDB are imported when a
table is read or written.
"""

from pith_pipeline.index.legacy import LEGACY_MANIFEST_KEY
from pith_pipeline.index.outcome import IndexUpdate
from pith_pipeline.index.query import connect, format_table, run_query
from pith_pipeline.index.reindexing import reindex
from pith_pipeline.index.rows import check, check_bundle
from pith_pipeline.index.sink import RowSink
from pith_pipeline.index.status import format_status, status
from pith_pipeline.index.tidy import DEFAULT_RETENTION_HOURS, compact
from pith_pipeline.index.update import update_indexes

__all__ = [
    "DEFAULT_RETENTION_HOURS",
    "LEGACY_MANIFEST_KEY",
    "IndexUpdate",
    "RowSink",
    "check",
    "check_bundle",
    "compact",
    "connect",
    "format_status",
    "format_table",
    "reindex",
    "run_query",
    "status",
    "update_indexes",
]
