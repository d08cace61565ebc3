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
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol, runtime_checkable

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


@runtime_checkable
class Store(Protocol):
    """What every back end provides (local directory, S3)."""

    url: str

    def get(self, key: str) -> bytes | None:
        """The object's bytes, or None when absent."""
        ...

    def put(self, key: str, data: bytes, *, content_type: str = "application/json") -> None:
        """Create or atomically replace a derived object."""
        ...

    def put_once(self, key: str, data: bytes, *, content_type: str = "application/json") -> bool:
        """Write-once. True when written now, False when identical bytes were there."""
        ...

    def exists(self, key: str) -> bool: ...

    def list(self, prefix: str) -> Iterator[str]:
        """Keys under `prefix`, sorted."""
        ...

    def delete(self, key: str) -> None:
        """Remove a derived object (never used on the event store)."""
        ...

    def get_tagged(self, key: str) -> tuple[bytes, str] | None:
        """The object's bytes and a version tag (S3 ETag, or a content hash), or None."""
        ...

    def put_if_match(
        self, key: str, data: bytes, tag: str | None, *, content_type: str = "application/json"
    ) -> bool:
        """Replace only if the object still has `tag` (None: only if absent).

        False when another writer got there first; the caller re-reads and retries.
        """
        ...


def barrier(store: Store) -> None:
    """Make every write so far durable, before writing what claims it.

    Calls the store's `sync()` where it has one (the local store's group commit);
    other stores (S3, memory, wrappers) are durable per write, so there is nothing
    to do. Not a method of `Store` so that every store and test double need not
    grow one.
    """
    sync = getattr(store, "sync", None)
    if sync is not None:
        sync()


def iter_unsorted(store: Store, prefix: str) -> Iterator[str]:
    """The keys under `prefix` in no particular order, streamed where the store can
    (local, S3), so counting or scanning a prefix of millions holds none of them."""
    method = getattr(store, "iter_unsorted", None)
    return iter(method(prefix)) if method is not None else store.list(prefix)


def put_copy(store: Store, key: str, data: bytes, *, of: str) -> None:
    """Store `data` under `key` as well, where `data` are the bytes just stored under `of`.

    For the `.well-known/pith/<ID>/bundle.json` copy of a bundle. A back end that can
    give one object a second name does so (a directory store: a hard link, so the copy
    costs no second file and no bytes); any other writes the bytes again (S3: one PUT,
    so a bucket served as a static site answers both URLs with no rewrite rule). The
    copy always holds `data`: where `of` holds other bytes, `data` are written.
    """
    method = getattr(store, "put_copy", None)
    if method is not None:
        method(key, data, of=of)
    else:
        store.put(key, data)


def put_once_file(
    store: Store, key: str, path: str | os.PathLike[str], *, content_type: str = "application/json"
) -> bool:
    """`put_once` of a file's content, streamed where the store can (local, S3).

    For objects too large to hold in memory, such as a backfill's run manifest.
    """
    method = getattr(store, "put_once_file", None)
    if method is not None:
        return bool(method(key, path, content_type=content_type))
    return store.put_once(key, Path(path).read_bytes(), content_type=content_type)


def put_file(
    store: Store, key: str, path: str | os.PathLike[str], *, content_type: str = "application/json"
) -> None:
    """`put` of a file's content, streamed where the store can (local, S3): for objects
    too large to hold in memory, such as an Airflow window's quarantine."""
    method = getattr(store, "put_file", None)
    if method is not None:
        method(key, path, content_type=content_type)
    else:
        store.put(key, Path(path).read_bytes(), content_type=content_type)


class Writable(Protocol):
    def write(self, data: bytes, /) -> object: ...


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
    method = getattr(store, "read_into", None)
    if method is not None:
        return bool(method(key, out))
    data = store.get(key)
    if data is None:
        return False
    out.write(data)
    return True


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
    and a back end with a `get_capped(key, limit)` method (local, S3) never reads
    more than `limit + 1` bytes of it, so one such object cannot exhaust memory.
    """
    method = getattr(store, "get_capped", None)
    data = method(key, limit) if method is not None else store.get(key)
    if data is not None and len(data) > limit:
        raise too_large(key, len(data), limit)
    return data if data is None else bytes(data)
