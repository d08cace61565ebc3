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

import os
from dataclasses import dataclass, field
from typing import Any

from pith_pipeline.errors import StorageError
from pith_pipeline.storage.base import Store

INDEX_PREFIX = "index/"


@dataclass(frozen=True, slots=True)
class Location:
    """The base URI of the index (no trailing slash) and deltalake's storage options."""

    base: str
    options: dict[str, str]
    local: bool
    #: the store the tables are in, to read a commit file as it is (`writer.open_table`)
    store: Store | None = field(default=None, compare=False)

    def uri(self, table: str) -> str:
        return f"{self.base}/{table}"

    def __repr__(self) -> str:  # options hold credentials: never shown
        return f"Location({self.base!r})"


def unwrap(store: Store) -> Store:
    """The real store behind wrappers that pass calls through (`inner`, up to 8 deep):
    the index reads and writes its tables in the real store's own place (a directory,
    a bucket), so a test double or a fenced store around it still finds them."""
    seen = 0
    while hasattr(store, "inner") and seen < 8:
        store = store.inner
        seen += 1
    return store


def s3_options(store: Any) -> dict[str, str]:
    """deltalake storage options for an `S3Store`, from the same settings boto3 uses."""
    client = store.client
    if getattr(store, "_session", None) is None:
        import boto3

        store._session = boto3.session.Session()
    opts: dict[str, str] = {
        "AWS_REGION": client.meta.region_name or "us-east-1",
        "conditional_put": "etag",
    }
    creds = store._session.get_credentials()
    if creds is not None:
        frozen = creds.get_frozen_credentials()
        opts["AWS_ACCESS_KEY_ID"] = frozen.access_key
        opts["AWS_SECRET_ACCESS_KEY"] = frozen.secret_key
        if frozen.token:
            opts["AWS_SESSION_TOKEN"] = frozen.token
    else:
        opts["AWS_SKIP_SIGNATURE"] = "true"
    if os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL"):
        endpoint = str(client.meta.endpoint_url)
        opts["AWS_ENDPOINT_URL"] = endpoint
        opts["AWS_VIRTUAL_HOSTED_STYLE_REQUEST"] = "false"  # path style, as boto3 uses for MinIO/moto
        if endpoint.startswith("http://"):
            opts["AWS_ALLOW_HTTP"] = "true"
    return opts


def location(store: Store) -> Location:
    """Where `store`'s index tables are; `StorageError` for stores that cannot hold them."""
    from pith_pipeline.storage.local import LocalStore
    from pith_pipeline.storage.s3 import S3Store

    real = unwrap(store)
    if isinstance(real, LocalStore):
        return Location(str(real.root / "index"), {}, True, real)
    if isinstance(real, S3Store):
        root = f"{real.bucket}/{real.prefix}".rstrip("/") if real.prefix else real.bucket
        return Location(f"s3://{root}/index", s3_options(real), False, real)
    raise StorageError(f"{store.url}: the index (Delta tables) needs a local directory or an s3:// store")


def path_in_store(loc: Location, table: str, uri: str) -> str:
    """A data file's key in the store (`index/<table>/...`) from its URI."""
    prefix = loc.uri(table).rstrip("/") + "/"
    if uri.startswith("file://"):
        uri = uri[len("file://") :]
    rel = uri[len(prefix) :] if uri.startswith(prefix) else uri.rsplit(f"/index/{table}/", 1)[-1]
    return f"{INDEX_PREFIX}{table}/{rel}"
