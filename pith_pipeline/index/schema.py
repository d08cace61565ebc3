"""The three index tables (Delta tables): columns, partitioning, merge key and row order.

Each table is described once here and used by the writer, the checker and the
reader, so "one row per key" means the same thing everywhere:

- `key` names a row's identity: the partition column (functionally dependent on the
  key: a Pith number fixes its submission month, an event id its creation month, an
  alias its kind) and the merge column. The MERGE joins on both, so Delta prunes the
  target files by partition before it looks for matches.
- `winner` orders rows with the same key inside one batch (first wins): a MERGE
  source must hold one row per key.
- `update_when` is the MERGE's condition for replacing a matched row (None: never,
  the table is insert-only); `required` columns may not be null.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

TS = pa.timestamp("us", tz="UTC")
STR_LIST = pa.list_(pa.string())


@dataclass(frozen=True, slots=True)
class TableSpec:
    name: str
    schema: pa.Schema
    partition: str
    key: tuple[str, ...]
    winner: str  # SQL ORDER BY list; the first row per key is kept
    sort: tuple[str, ...]  # row order inside a file: similar rows together compress well
    update_when: str | None  # MERGE: when a matched target row `t` is replaced by source `s`
    required: tuple[str, ...]
    #: columns that, equal in the source and the indexed row of a key, mean there is
    #: nothing to write for it (a records row is a function of its bundle's bytes)
    compare: tuple[str, ...] = ()
    #: string columns whose values rarely repeat (hashes, identifiers, titles): stored
    #: without a dictionary (one of 32,768 unique values outgrows its page and falls
    #: back anyway) and with delta-encoded lengths (`writer.writer_properties`)
    unique_text: tuple[str, ...] = ()

    @property
    def merge_column(self) -> str:
        return self.key[-1]

    @property
    def merge_predicate(self) -> str:
        return " AND ".join(f"t.{c} = s.{c}" for c in self.key)

    @property
    def file_schema(self) -> pa.Schema:
        """Columns stored in the files: the partition value lives in the directory name."""
        return pa.schema([f for f in self.schema if f.name != self.partition])

    @property
    def public_columns(self) -> list[str]:
        return list(self.schema.names)


RECORDS = TableSpec(
    name="records",
    schema=pa.schema(
        [
            ("pith_number", pa.string()),
            ("short_pith_number", pa.string()),
            ("arxiv_id", pa.string()),
            ("version", pa.int32()),
            ("title", pa.string()),
            ("authors", STR_LIST),
            ("authors_text", pa.string()),
            ("primary_cat", pa.string()),
            ("primary_archive", pa.string()),
            ("categories", STR_LIST),
            ("license", pa.string()),
            ("submitted_at", TS),
            ("submitted_month", pa.string()),
            ("doi", pa.string()),
            ("canonical_sha256", pa.string()),
            ("title_canon_sha256", pa.string()),
            ("abstract_canon_sha256", pa.string()),
            ("created_at", TS),
            ("record_created_event_id", pa.string()),
            ("key_id", pa.string()),
            ("public_key_fingerprint", pa.string()),
            ("superseded_by", pa.string()),
            ("event_count", pa.int32()),
            ("bundle_key", pa.string()),
            ("bundle_sha256", pa.string()),
            ("state_sha256", pa.string()),
            ("built_at", TS),
        ]
    ),
    partition="submitted_month",
    key=("submitted_month", "pith_number"),
    winner="built_at DESC, bundle_sha256 DESC",
    sort=("primary_cat", "submitted_at", "arxiv_id", "version", "pith_number"),
    # a row from an older bundle never replaces one from a newer bundle
    update_when="t.built_at IS NULL OR s.built_at >= t.built_at",
    required=("pith_number", "submitted_month", "arxiv_id", "primary_cat", "bundle_key"),
    compare=("bundle_sha256",),
    unique_text=(
        "pith_number",
        "short_pith_number",
        "arxiv_id",
        "title",
        "authors_text",
        "doi",
        "canonical_sha256",
        "title_canon_sha256",
        "abstract_canon_sha256",
        "record_created_event_id",
        "bundle_key",
        "bundle_sha256",
        "state_sha256",
    ),
)

EVENTS = TableSpec(
    name="events",
    schema=pa.schema(
        [
            ("event_id", pa.string()),
            ("subject", pa.string()),
            ("event_type", pa.string()),
            ("target", pa.string()),
            ("created_at", TS),
            ("created_month", pa.string()),
            ("signer_id", pa.string()),
            ("signer_type", pa.string()),
            ("key_id", pa.string()),
            ("public_key_fingerprint", pa.string()),
            ("signed_at", TS),
            ("supersedes", STR_LIST),
            ("prev_event", pa.string()),
            ("correction_kind", pa.string()),
            ("valid", pa.bool_()),
            ("event_key", pa.string()),
        ]
    ),
    partition="created_month",
    key=("created_month", "event_id"),
    winner="valid ASC",  # an event any bundle marks invalid stays invalid
    sort=("event_type", "subject", "created_at", "event_id"),
    # events are immutable (named by their hash): insert-only; `valid` is derived from
    # the subject's state and is corrected separately (see `writer.merge_rows`)
    update_when=None,
    required=("event_id", "created_month", "subject", "event_type"),
    compare=("valid",),
    unique_text=("event_id", "subject", "target", "prev_event", "event_key"),
)

ALIASES = TableSpec(
    name="aliases",
    schema=pa.schema(
        [
            ("alias_kind", pa.string()),
            ("alias_value", pa.string()),
            ("alias", pa.string()),
            ("pith_number", pa.string()),
            ("arxiv_id", pa.string()),
            ("version", pa.int32()),
            ("record_created_at", TS),
            ("created_at", TS),
        ]
    ),
    partition="alias_kind",
    key=("alias_kind", "alias_value"),
    # the newest arXiv version wins, as in the arxiv/<id>.json pointer's `latest`
    winner="version DESC, record_created_at DESC, pith_number DESC",
    sort=("alias_value", "pith_number"),
    update_when=(
        "s.pith_number = t.pith_number OR t.version IS NULL OR s.version > t.version"
        " OR (s.version = t.version AND (s.record_created_at > t.record_created_at"
        " OR (s.record_created_at = t.record_created_at AND s.pith_number > t.pith_number)))"
    ),
    required=("alias_kind", "alias_value", "alias", "pith_number"),
    compare=("pith_number", "version", "record_created_at", "created_at"),
    unique_text=("alias_value", "alias"),
)

TABLES: dict[str, TableSpec] = {t.name: t for t in (RECORDS, EVENTS, ALIASES)}

#: Delta table properties every index table carries (set at creation, and on the next
#: write of a table made without them: `writer.ensure_properties`).
#: - the change data feed: `load_cdf` over a run's versions (its manifest's
#:   `index.commits`) gives exactly the rows the run changed;
#: - a checkpoint every 10 commits: opening a table reads the last checkpoint and at
#:   most 9 commit files after it, however many runs wrote it (a run commits 1-3
#:   times a table);
#: - the log and removed files are kept 30 and 7 days (`compact`'s vacuum and log
#:   cleanup honour them), so time travel reaches a month back and the log stays small.
TABLE_PROPERTIES: dict[str, str] = {
    "delta.enableChangeDataFeed": "true",
    "delta.checkpointInterval": "10",
    "delta.logRetentionDuration": "interval 30 days",
    "delta.deletedFileRetentionDuration": "interval 7 days",
}
