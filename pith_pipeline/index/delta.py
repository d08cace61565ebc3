"""Where the index's Delta tables live, and how `deltalake` reaches them.

Why Delta: every engine analysts use (Athena, Spark, Trino, Polars, DuckDB, pandas
through deltalake) reads a Delta table's log and sees exactly one committed version,
so no reader ever sees a half-done change or a stale duplicate, and we keep no table
format of our own.

- a local store `DIR`: the tables are `DIR/index/<table>/` (commits are atomic
  renames that fail if the version exists);
- an S3 store `s3://bucket/prefix`: `s3://bucket/prefix/index/<table>/`, with the
  same endpoint, region and credentials as boto3 (`AWS_ENDPOINT_URL`,
  `AWS_ENDPOINT_URL_S3`, the standard credential chain), plain HTTP allowed only for
  an `http://` endpoint, and `conditional_put=etag`: a commit is a conditional PUT of
  the next log entry, so two writers can never both write version N.

Stores that are neither (an in-memory or wrapped store) have no index tables.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pith_pipeline.errors import StorageError
from pith_pipeline.storage.base import Store

INDEX_PREFIX = "index/"


@dataclass(frozen=True, slots=True)
class Location:
    """The base URI of the index (no trailing slash) and deltalake's storage options."""

    base: str
    options: dict[str, str]
    local: bool
    #: the store the tables are in, to read a commit file as it is (`tables.open_table`)
    store: Store | None = field(default=None, compare=False)

    def uri(self, table: str) -> str:
        return f"{self.base}/{table}"

    def __repr__(self) -> str:  # options hold credentials: never shown
        return f"Location({self.base!r})"


def unwrap(store: Store) -> Store:
    """The real store behind wrappers that pass calls through (`Store.unwrapped`): the
    index reads and writes its tables in the real store's own place (a directory, a
    bucket), so a test double or a fenced store around it still finds them."""
    return store.unwrapped()


def location(store: Store) -> Location:
    """Where `store`'s index tables are; `StorageError` for stores that cannot hold them."""
    where = store.location()
    if where is None:
        raise StorageError(f"{store.url}: the index (Delta tables) needs a local directory or an s3:// store")
    # a commit is a conditional PUT of the next log entry (S3: If-None-Match), so two
    # writers can never both write version N
    options = where.options if where.local else {**where.options, "conditional_put": "etag"}
    return Location(f"{where.uri}/index", options, where.local, where.store)


def path_in_store(loc: Location, table: str, uri: str) -> str:
    """A data file's key in the store (`index/<table>/...`) from its URI."""
    prefix = loc.uri(table).rstrip("/") + "/"
    if uri.startswith("file://"):
        uri = uri[len("file://") :]
    rel = uri[len(prefix) :] if uri.startswith(prefix) else uri.rsplit(f"/index/{table}/", 1)[-1]
    return f"{INDEX_PREFIX}{table}/{rel}"
