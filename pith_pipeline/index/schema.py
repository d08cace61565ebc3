"""The three Parquet index tables: columns, partitioning, sort order and row identity.

Each table is described once here and used by the writer, the compactor and the
reader, so "one row per key" means the same thing everywhere:

- `key` names a row's identity; `winner` orders duplicates (first wins). Duplicates
  exist only between files (each file is deduplicated when written), so a partition
  with one file needs no deduplication at read time.
- The partition column is functionally dependent on the key (a Pith number fixes its
  submission month, an event id its creation month, an alias its kind) and is listed
  first in `key`, so a filter on it passes through the reader's deduplication window
  and still prunes files.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

TS = pa.timestamp("us", tz="UTC")
STR_LIST = pa.list_(pa.string())

#: Internal column: the index generation that wrote a row; later generations win.
SEQ = "index_seq"


@dataclass(frozen=True, slots=True)
class TableSpec:
    name: str
    schema: pa.Schema
    partition: str
    key: tuple[str, ...]
    winner: str  # SQL ORDER BY list; the first row per key is kept
    sort: tuple[str, ...]  # row order inside a file: similar rows together compress well
    row_group_size: int = 32_768

    @property
    def file_schema(self) -> pa.Schema:
        """Columns stored in the files: the partition value lives in the directory name."""
        return pa.schema([f for f in self.schema if f.name != self.partition])

    @property
    def public_columns(self) -> list[str]:
        return [f.name for f in self.schema if f.name != SEQ]


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
            (SEQ, pa.int64()),
        ]
    ),
    partition="submitted_month",
    key=("submitted_month", "pith_number"),
    winner=f"{SEQ} DESC, built_at DESC, bundle_sha256 DESC",
    sort=("primary_cat", "submitted_at", "arxiv_id", "version", "pith_number"),
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
            (SEQ, pa.int64()),
        ]
    ),
    partition="created_month",
    key=("created_month", "event_id"),
    winner=f"{SEQ} DESC",
    sort=("event_type", "subject", "created_at", "event_id"),
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
            (SEQ, pa.int64()),
        ]
    ),
    partition="alias_kind",
    key=("alias_kind", "alias_value"),
    # the newest arXiv version wins, as in the arxiv/<id>.json pointer's `latest`
    winner=f"version DESC, record_created_at DESC, pith_number DESC, {SEQ} DESC",
    sort=("alias_value", "pith_number"),
)

TABLES: dict[str, TableSpec] = {t.name: t for t in (RECORDS, EVENTS, ALIASES)}
