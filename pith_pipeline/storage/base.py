"""The storage interface: a flat key space of immutable-or-replaceable objects.

Keys are `/`-separated paths relative to the store root; the layout is the URL
layout (`pith/<ID>/bundle.json`), so a static site or CDN can serve a store as
it is. Two kinds of write:

- `put_once`: write-once (events, raw harvests). An existing object with the same
  bytes counts as done; different bytes raise `WriteConflictError` and nothing is
  overwritten.
- `put`: replace atomically (derived files: bundles, states, indexes). Readers see
  the old object or the new one, never a part.
- `get_tagged` / `put_if_match`: compare-and-swap for the few small objects that
  several writers may update (the index manifest), so one writer's update is never
  silently lost to another's.

Durability is a barrier, `barrier(store)`: a store may hold writes back (the local
store does not flush each file, it makes them durable together at the barrier), so
whatever claims work already written (a transparency-log checkpoint, a run
manifest, a lease release, the key document) is written after a barrier. On S3 a
write is durable when it returns, and the barrier is a no-op.
"""

from __future__ import annotations

import hashlib
import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from pith_pipeline.core.layout import TEMPORARY
from pith_pipeline.errors import IntegrityError, StorageError

_RESERVED = TEMPORARY.rstrip("/")


def check_key(key: str) -> str:
    """`key`, or `StorageError` when it is not a plain relative key: empty, absolute,
    with an empty, `.` or `..` part, a backslash or a NUL, or under the store's own
    temporary directory.

    One rule for every back end, so a key valid on one is valid on all (a bucket
    synced to a directory holds the same objects), and a path outside the store can
    never be named.
    """
    parts = key.split("/")
    if (
        not key
        or key[0] == "/"
        or "\\" in key
        or "\x00" in key
        or parts[0] == _RESERVED
        or any(p in ("", ".", "..") for p in parts)
    ):
        raise StorageError(f"invalid storage key {key!r}")
    return key


class Writable(Protocol):
    def write(self, data: bytes, /) -> object: ...


@dataclass(frozen=True, slots=True)
class StoreLocation:
    """Where a store's objects are for a reader or writer that bypasses the store
    object (deltalake, pyarrow): `uri` of the store root (no trailing slash), the
    object-store `options` that reach it (credentials: never shown), whether it is a
    local directory, and the store itself."""

    uri: str
    options: dict[str, str]
    local: bool
    store: Store = field(compare=False)

    def __repr__(self) -> str:  # options hold credentials
        return f"StoreLocation({self.uri!r})"


#: Seconds a writer lease on a store lasts without renewal unless the store was opened
#: with another (`Store.lease_ttl`; the `lease_ttl` setting, PITH_LEASE_TTL).
DEFAULT_LEASE_TTL = 120.0


class Store(ABC):
    """What every back end provides (local directory, S3, memory, wrappers).

    Eight methods each back end must give (`get` ... `put_if_match`), and capabilities
    with defaults that keep the contract on any store: a back end overrides one where
    it can do better (stream a file, refuse a large object unread, link a copy, make
    writes durable together). Callers call the method; nothing probes for one.
    """

    url: str
    #: `list_after(prefix, start_after, limit)`: up to `limit` keys under `prefix` that
    #: sort after `start_after`, sorted, in one request whatever the store holds. None
    #: where a store cannot (a directory would walk the prefix): callers then ask about
    #: each key instead of listing ahead.
    list_after: Callable[[str, str, int], Sequence[str]] | None = None
    #: How long the writer leases taken on this store last without renewal
    #: (`storage.lease`). A property of how the store is used, given by whoever opens
    #: it from the settings (`open_store(..., lease_ttl=)`), so every lease a command
    #: takes on it, however deep, agrees without reading the settings itself.
    lease_ttl: float = DEFAULT_LEASE_TTL

    # -- the contract ------------------------------------------------------------
    @abstractmethod
    def get(self, key: str) -> bytes | None:
        """The object's bytes, or None when absent."""

    @abstractmethod
    def put(self, key: str, data: bytes, *, content_type: str = "application/json") -> None:
        """Create or atomically replace a derived object."""

    @abstractmethod
    def put_once(self, key: str, data: bytes, *, content_type: str = "application/json") -> bool:
        """Write-once. True when written now, False when identical bytes were there."""

    @abstractmethod
    def exists(self, key: str) -> bool:
        """Whether an object is stored under `key`."""

    @abstractmethod
    def list(self, prefix: str) -> Iterator[str]:
        """Keys under `prefix`, sorted."""

    @abstractmethod
    def delete(self, key: str) -> None:
        """Remove a derived object (never used on the event store); absent is no error."""

    @abstractmethod
    def get_tagged(self, key: str) -> tuple[bytes, str] | None:
        """The object's bytes and a version tag (S3 ETag, or a content hash), or None."""

    @abstractmethod
    def put_if_match(
        self, key: str, data: bytes, tag: str | None, *, content_type: str = "application/json"
    ) -> bool:
        """Replace only if the object still has `tag` (None: only if absent).

        False when another writer got there first; the caller re-reads and retries
        (`cas.cas_update`).
        """

    # -- capabilities, with defaults any store keeps -------------------------------
    def sync(self) -> None:
        """Make every write so far durable (`barrier`). Default: writes are durable
        when they return (S3, memory), nothing to do."""
        return None

    def iter_unsorted(self, prefix: str) -> Iterator[str]:
        """The keys of `list` in no particular order, streamed where the store can, so
        counting or scanning a prefix of millions holds none of them. Default: `list`."""
        return self.list(prefix)

    def put_copy(self, key: str, data: bytes, *, of: str) -> None:
        """Store `data` under `key` as well, where `data` are the bytes just stored
        under `of` (`base.put_copy`). Default: write the bytes again."""
        self.put(key, data)

    def put_file(
        self, key: str, src: str | os.PathLike[str], *, content_type: str = "application/json"
    ) -> None:
        """`put` of a file's content. Default: the file read whole."""
        self.put(key, Path(src).read_bytes(), content_type=content_type)

    def put_once_file(
        self, key: str, src: str | os.PathLike[str], *, content_type: str = "application/json"
    ) -> bool:
        """`put_once` of a file's content. Default: the file read whole."""
        return self.put_once(key, Path(src).read_bytes(), content_type=content_type)

    def read_into(self, key: str, out: Writable) -> bool:
        """Write the object's bytes to `out`; False when absent. Default: one `get`."""
        data = self.get(key)
        if data is None:
            return False
        out.write(data)
        return True

    def get_capped(self, key: str, limit: int) -> bytes | None:
        """The object's bytes (None when absent), `IntegrityError` when over `limit`
        bytes. A back end that can tell the size first reads no more than `limit + 1`
        bytes. Default: `get`, then the check."""
        data = self.get(key)
        if data is not None and len(data) > limit:
            raise too_large(key, len(data), limit)
        return data

    def reserve_connections(self, n: int) -> None:
        """Keep `n` connections open for `n` requests in flight. Default: nothing to keep."""
        return None

    def sweep_temporary(self, *, max_age: float = 3600.0, published: bool = False) -> tuple[str, ...]:
        """Remove temporary files that dead writers left; their names. Default: none."""
        return ()

    def local_root(self) -> Path | None:
        """The directory whose files are this store's published objects (a local
        store, or a wrapper reading through to one); None for remote stores."""
        return None

    def location(self) -> StoreLocation | None:
        """Where deltalake or pyarrow reach this store's objects themselves; None
        where they cannot (memory, a staging wrapper whose writes are in memory)."""
        return None

    def arrow_filesystem(self) -> tuple[Any, str] | None:
        """A pyarrow filesystem and the root path of the store on it; None where
        pyarrow cannot reach the objects."""
        return None

    def unwrapped(self) -> Store:
        """The store that holds the objects, behind wrappers that pass every call
        through (`StoreWrapper`); the store itself for a back end."""
        return self


class StoreWrapper(Store):
    """A store that passes every call to `inner`: the base of wrappers that add a
    check to writes (`LeasedStore`, the fault-injecting test doubles).

    Each write calls `before_write(key)` first; every capability is the inner
    store's, so a wrapper loses none (a linked copy stays a link, a streamed file
    stays streamed).
    """

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.url = inner.url
        self.list_after = inner.list_after
        self.lease_ttl = inner.lease_ttl

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.inner!r})"

    def before_write(self, key: str) -> None:
        """Called before each write, delete or replace; raise to stop it."""

    def get(self, key: str) -> bytes | None:
        return self.inner.get(key)

    def get_tagged(self, key: str) -> tuple[bytes, str] | None:
        return self.inner.get_tagged(key)

    def exists(self, key: str) -> bool:
        return self.inner.exists(key)

    def list(self, prefix: str) -> Iterator[str]:
        return self.inner.list(prefix)

    def put(self, key: str, data: bytes, *, content_type: str = "application/json") -> None:
        self.before_write(key)
        self.inner.put(key, data, content_type=content_type)

    def put_once(self, key: str, data: bytes, *, content_type: str = "application/json") -> bool:
        self.before_write(key)
        return self.inner.put_once(key, data, content_type=content_type)

    def put_if_match(
        self, key: str, data: bytes, tag: str | None, *, content_type: str = "application/json"
    ) -> bool:
        self.before_write(key)
        return self.inner.put_if_match(key, data, tag, content_type=content_type)

    def delete(self, key: str) -> None:
        self.before_write(key)
        self.inner.delete(key)

    def put_copy(self, key: str, data: bytes, *, of: str) -> None:
        self.before_write(key)
        self.inner.put_copy(key, data, of=of)

    def put_file(
        self, key: str, src: str | os.PathLike[str], *, content_type: str = "application/json"
    ) -> None:
        self.before_write(key)
        self.inner.put_file(key, src, content_type=content_type)

    def put_once_file(
        self, key: str, src: str | os.PathLike[str], *, content_type: str = "application/json"
    ) -> bool:
        self.before_write(key)
        return self.inner.put_once_file(key, src, content_type=content_type)

    def sync(self) -> None:
        self.inner.sync()

    def iter_unsorted(self, prefix: str) -> Iterator[str]:
        return self.inner.iter_unsorted(prefix)

    def read_into(self, key: str, out: Writable) -> bool:
        return self.inner.read_into(key, out)

    def get_capped(self, key: str, limit: int) -> bytes | None:
        return self.inner.get_capped(key, limit)

    def reserve_connections(self, n: int) -> None:
        self.inner.reserve_connections(n)

    def sweep_temporary(self, *, max_age: float = 3600.0, published: bool = False) -> tuple[str, ...]:
        return self.inner.sweep_temporary(max_age=max_age, published=published)

    def local_root(self) -> Path | None:
        return self.inner.local_root()

    def location(self) -> StoreLocation | None:
        return self.inner.location()

    def arrow_filesystem(self) -> tuple[Any, str] | None:
        return self.inner.arrow_filesystem()

    def unwrapped(self) -> Store:
        return self.inner.unwrapped()


def barrier(store: Store) -> None:
    """Make every write so far durable, before writing what claims it (`Store.sync`)."""
    store.sync()


def iter_unsorted(store: Store, prefix: str) -> Iterator[str]:
    """The keys under `prefix` in no particular order (`Store.iter_unsorted`)."""
    return iter(store.iter_unsorted(prefix))


def put_copy(store: Store, key: str, data: bytes, *, of: str) -> None:
    """Store `data` under `key` as well, where `data` are the bytes just stored under `of`.

    For the `.well-known/pith/<ID>/bundle.json` copy of a bundle. A back end that can
    give one object a second name does so (a directory store: a hard link, so the copy
    costs no second file and no bytes); any other writes the bytes again (S3: one PUT,
    so a bucket served as a static site answers both URLs with no rewrite rule). The
    copy always holds `data`: where `of` holds other bytes, `data` are written.
    """
    store.put_copy(key, data, of=of)


def put_once_file(
    store: Store, key: str, path: str | os.PathLike[str], *, content_type: str = "application/json"
) -> bool:
    """`put_once` of a file's content, streamed where the store can (local, S3).

    For objects too large to hold in memory, such as a backfill's run manifest.
    """
    return bool(store.put_once_file(key, path, content_type=content_type))


def put_file(
    store: Store, key: str, path: str | os.PathLike[str], *, content_type: str = "application/json"
) -> None:
    """`put` of a file's content, streamed where the store can (local, S3): for objects
    too large to hold in memory, such as an Airflow window's quarantine."""
    store.put_file(key, path, content_type=content_type)


class Digest:
    """A write target (`read_into`) that hashes and counts the lines of what passes
    through it, and passes it on to `out` when given (a file): an object compared or
    copied without being held in memory."""

    def __init__(self, out: Writable | None = None) -> None:
        self._sha = hashlib.sha256()
        self._out = out
        self.lines = 0

    def write(self, data: bytes) -> int:
        self._sha.update(data)
        self.lines += data.count(b"\n")
        if self._out is not None:
            self._out.write(data)
        return len(data)

    def hexdigest(self) -> str:
        return self._sha.hexdigest()


def read_into(store: Store, key: str, out: Writable) -> bool:
    """Write the object's bytes to `out` a piece at a time where the store can (local,
    S3), so an object larger than memory can be copied or hashed; False when absent."""
    return bool(store.read_into(key, out))


def file_sha256(path: str | os.PathLike[str]) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def too_large(key: str, size: int | None, limit: int) -> IntegrityError:
    what = f"is {size} bytes" if size is not None else "is larger"
    return IntegrityError(f"object {what}, over the {limit}-byte limit for it; not read", key=key)


def get_capped(store: Store, key: str, limit: int) -> bytes | None:
    """The object's bytes (None when absent), refused when over `limit` bytes.

    For reading stored objects a hostile writer may have made huge (an event, a
    bundle, a pointer): over the limit is an `IntegrityError` naming the object,
    and a back end that can tell the size first (local, S3) never reads more than
    `limit + 1` bytes of it, so one such object cannot exhaust memory.
    """
    data = store.get_capped(key, limit)
    if data is not None and len(data) > limit:
        raise too_large(key, len(data), limit)
    return data if data is None else bytes(data)
