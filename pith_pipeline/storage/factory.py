"""A store from a location: `open_store` for a run that may create it,
`open_existing_store` for a command that reads or maintains one.

Above the back ends (`local`, `s3`), which import the interface in `base` and never
this module, so the interface depends on no back end. boto3 is imported only when an
`s3://` location is opened.
"""

from __future__ import annotations

from pith_pipeline.errors import UnreadableInputError
from pith_pipeline.storage.base import DEFAULT_LEASE_TTL, Store


def open_store(location: str, *, fsync: bool = True, lease_ttl: float = DEFAULT_LEASE_TTL) -> Store:
    """A store from a location: a directory path, `file://...` or `s3://bucket/prefix`.

    `fsync` (a local store: False leaves flushing to the OS) and `lease_ttl` (how long
    the writer leases taken on it last) are the settings' `local_fsync` and
    `lease_ttl`: a command passes `**settings.store_options`; this reads no setting.
    """
    store: Store
    # A back end is imported when a store of its kind is opened, not by every
    # `import pith_pipeline.storage` (python -X importtime).
    if location.startswith("s3://"):
        from pith_pipeline.storage.s3 import S3Store  # lazy: 5 ms, boto3 only when used

        store = S3Store.from_url(location)
    else:
        from pith_pipeline.storage.local import LocalStore  # lazy: 24 ms (ctypes, the syncfs lookup)

        path = location[len("file://") :] if location.startswith("file://") else location
        store = LocalStore(path, fsync=fsync)
    store.lease_ttl = lease_ttl
    return store


class MissingStoreError(UnreadableInputError):
    """A store to read or maintain that is not there: a directory that does not exist
    (or is a file), an S3 prefix that holds no objects. Exit status 2, as for any
    input that cannot be used at all; terminal, so an Airflow task does not retry a
    mistyped path."""


#: how a missing store's message ends: where stores come from
MAKE_A_STORE = "check the path, or make a store with `pith-pipeline ingest --sample` (or `ingest`, `build`)"


def open_existing_store(location: str, *, fsync: bool = True, lease_ttl: float = DEFAULT_LEASE_TTL) -> Store:
    """The store at `location`, which must be there: for every command that reads or
    maintains a store rather than publishing into one (`query`, `status`, `reindex`,
    `log status`, ...).

    Why one function: `open_store` makes nothing until the first write, so a missing
    directory read as an empty store and a typo answered "0 records". A directory that
    exists is a store even when empty (nothing published yet); a path that does not
    exist or is not a directory, and an S3 prefix with no object under it (S3 has no
    empty directories), are `MissingStoreError`, one line naming the location.
    """
    store = open_store(location, fsync=fsync, lease_ttl=lease_ttl)
    root = store.local_root()
    if root is not None:
        if root.is_dir():
            return store
        why = "it is a file, not a directory" if root.exists() else "the directory does not exist"
        raise MissingStoreError(f"{store.url}: no store here ({why}); {MAKE_A_STORE}")
    if next(iter(store.iter_unsorted("")), None) is not None:
        return store
    raise MissingStoreError(f"{store.url}: no store here (the prefix holds no objects); {MAKE_A_STORE}")
