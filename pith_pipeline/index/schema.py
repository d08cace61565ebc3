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
- `description` and each column's `comment` (Arrow field metadata) are the data
  dictionary: they go into the Delta tables (table name, description, column metadata,
  so Glue, Unity or Athena show them), `pith-pipeline index schema` prints them for a
  catalog, and the column table in docs/pages/index-tables.md is generated from them
  (`pith_pipeline.index.dictionary`). The key and `required` columns are declared
  `NOT NULL` in the tables' schema.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

TS = pa.timestamp("us", tz="UTC")
STR_LIST = pa.list_(pa.string())

#: Field metadata key of a column's description (what Spark, Unity and Glue read).
COMMENT = "comment"


def _columns(*columns: tuple[str, pa.DataType, str]) -> pa.Schema:
    """A schema from (name, type, description) triples; the description is the field's comment."""
    return pa.schema([pa.field(name, type_, metadata={COMMENT: text}) for name, type_, text in columns])


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
    #: back anyway) and with delta-encoded lengths (`tables.writer_properties`)
    unique_text: tuple[str, ...] = ()
    #: what one row is, for catalogs and the docs
    description: str = ""

    def __post_init__(self) -> None:
        """The key and `required` columns become `NOT NULL` in `schema`: the Delta table
        refuses a row without them, and catalogs show them as keys."""
        not_null = {*self.key, *self.required}
        unknown = not_null - set(self.schema.names)
        if unknown:
            raise ValueError(f"{self.name}: key or required columns not in the schema: {sorted(unknown)}")
        fields = [f.with_nullable(f.name not in not_null) for f in self.schema]
        object.__setattr__(self, "schema", pa.schema(fields))

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
    description=(
        "One row per Pith record: one arXiv version of a paper, read from its signed bundle."
        " The latest version of each paper has superseded_by null."
    ),
    schema=_columns(
        ("pith_number", pa.string(), "the record's id, pith:YYYY:<26 chars> (the key)"),
        ("short_pith_number", pa.string(), "pith:<8 chars>"),
        ("arxiv_id", pa.string(), "arXiv id without version (1909.11150, hep-th/9901001)"),
        ("version", pa.int32(), "the arXiv version this record describes"),
        ("title", pa.string(), "whitespace-collapsed title, as in the graph snapshot"),
        ("authors", STR_LIST, "author names as arXiv writes them (TeX kept), in authors_text order"),
        ("authors_text", pa.string(), "the author names joined by ', ', as arXiv writes them"),
        (
            "authors_unicode",
            STR_LIST,
            'the author names with TeX converted to Unicode (Schrödinger for Schr\\"odinger);'
            " null where that is arXiv's text: read coalesce(authors_unicode, authors)",
        ),
        (
            "authors_text_unicode",
            pa.string(),
            "authors_unicode joined by ', '; null where that is authors_text:"
            " search coalesce(authors_text_unicode, authors_text)",
        ),
        ("primary_cat", pa.string(), "arXiv primary category (cs.LG); names in the categories table"),
        ("primary_archive", pa.string(), "the primary category's archive (cs, hep-th)"),
        ("categories", STR_LIST, "the primary category first, then the cross-lists sorted"),
        ("license", pa.string(), "licence URL exactly as arXiv gives it; empty when none"),
        ("submitted_at", TS, "v1 submission time"),
        ("submitted_month", pa.string(), "YYYY-MM of submitted_at (the partition)"),
        ("doi", pa.string(), "the record's DOI alias (10.48550/arxiv.<id>)"),
        ("canonical_sha256", pa.string(), "hex SHA-256 of the canonical record"),
        ("title_canon_sha256", pa.string(), "hex SHA-256 of the canonicalised title"),
        ("abstract_canon_sha256", pa.string(), "hex SHA-256 of the canonicalised abstract"),
        ("created_at", TS, "created_at of the applied record_created event"),
        ("record_created_event_id", pa.string(), "event id of the applied record_created event"),
        ("key_id", pa.string(), "id of the key that signed the record's receipt"),
        ("public_key_fingerprint", pa.string(), "fingerprint of the key that signed the record's receipt"),
        ("superseded_by", pa.string(), "Pith number of the paper's newer version; null for the latest"),
        ("event_count", pa.int32(), "distinct events in the bundle"),
        ("bundle_key", pa.string(), "the bundle's object key, pith/<ID>/bundle.json"),
        ("bundle_sha256", pa.string(), "hex SHA-256 of the published bundle file"),
        ("state_sha256", pa.string(), "the bundle state's state_sha256"),
        ("built_at", TS, "the bundle's built_at"),
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
        "authors_text_unicode",
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
    description="One row per signed event of any indexed record, as its bundle holds it.",
    schema=_columns(
        ("event_id", pa.string(), "the event's id, sha256:<hex> (the key)"),
        ("subject", pa.string(), "Pith number of the record the event is about"),
        ("event_type", pa.string(), "record_created, graph_snapshot, correction, ..."),
        ("target", pa.string(), "what the event points at, when it has a target"),
        ("created_at", TS, "the event's created_at"),
        ("created_month", pa.string(), "YYYY-MM of created_at (the partition)"),
        ("signer_id", pa.string(), "the signer block's signer_id"),
        ("signer_type", pa.string(), "the signer block's signer_type"),
        ("key_id", pa.string(), "id of the key that signed the event"),
        ("public_key_fingerprint", pa.string(), "fingerprint of the key that signed the event"),
        ("signed_at", TS, "the signature's signed_at"),
        ("supersedes", STR_LIST, "event ids this event supersedes"),
        ("prev_event", pa.string(), "the previous event of the subject, if any"),
        ("correction_kind", pa.string(), "superseded for the correction a new version adds; null otherwise"),
        ("valid", pa.bool_(), "false when the bundle's state lists the event as invalid"),
        ("event_key", pa.string(), "the event's object key in the event store"),
    ),
    partition="created_month",
    key=("created_month", "event_id"),
    winner="valid ASC",  # an event any bundle marks invalid stays invalid
    sort=("event_type", "subject", "created_at", "event_id"),
    # events are immutable (named by their hash): insert-only; `valid` is derived from
    # the subject's state and is corrected separately (see `merge.merge_rows`)
    update_when=None,
    required=("event_id", "created_month", "subject", "event_type"),
    compare=("valid",),
    unique_text=("event_id", "subject", "target", "prev_event", "event_key"),
)

ALIASES = TableSpec(
    name="aliases",
    description=(
        "One row per alias (kind:value) and the Pith number it resolves to;"
        " arxiv:<id> resolves to the newest arXiv version."
    ),
    schema=_columns(
        (
            "alias_kind",
            pa.string(),
            "arxiv, arxiv_version, doi, pith_short_8, pith_short_12 or pith_short_16 (the partition)",
        ),
        ("alias_value", pa.string(), "the alias without its kind (with the kind, the key)"),
        ("alias", pa.string(), "kind:value, e.g. arxiv:1909.11150"),
        ("pith_number", pa.string(), "Pith number the alias resolves to"),
        ("arxiv_id", pa.string(), "arXiv id of that record"),
        ("version", pa.int32(), "arXiv version of that record"),
        ("record_created_at", TS, "created_at of that record's record_created event"),
        ("created_at", TS, "the alias's own created_at"),
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
#: write of a table made without them: `tables.ensure_properties`).
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
