"""A store in a dict: for unit tests and benchmarks that should not touch a disk.

It keeps the whole `Store` contract (write-once, compare-and-swap, sorted listing),
and is run through the same contract tests as the local and S3 stores, so a test
that passes on it means the same thing there.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

from pith_pipeline.errors import WriteConflictError
from pith_pipeline.storage.base import Store, check_key


class MemoryStore(Store):
    """Objects in memory; thread-safe, so worker threads may share one."""

    def __init__(self, url: str = "memory://") -> None:
        self.url = url
        self.objects: dict[str, bytes] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"MemoryStore({self.url!r}, {len(self.objects)} objects)"

    def get(self, key: str) -> bytes | None:
        return self.objects.get(check_key(key))

    def exists(self, key: str) -> bool:
        return check_key(key) in self.objects

    def put(self, key: str, data: bytes, *, content_type: str = "application/json") -> None:
        with self._lock:
            self.objects[check_key(key)] = bytes(data)

    def put_once(self, key: str, data: bytes, *, content_type: str = "application/json") -> bool:
        with self._lock:
            have = self.objects.get(check_key(key))
            if have is None:
                self.objects[key] = bytes(data)
                return True
        if have == data:
            return False
        raise WriteConflictError(
            f"{key} already exists in {self.url} with different content; "
            "write-once objects are never overwritten"
        )

    def put_once_file(
        self, key: str, src: str | os.PathLike[str], *, content_type: str = "application/json"
    ) -> bool:
        return self.put_once(key, Path(src).read_bytes(), content_type=content_type)

    def list(self, prefix: str) -> Iterator[str]:
        return iter(sorted(k for k in list(self.objects) if k.startswith(prefix)))

    def list_after(self, prefix: str, start_after: str, limit: int) -> Sequence[str]:
        """Up to `limit` keys under `prefix` after `start_after` (as `S3Store.list_after`)."""
        with self._lock:
            keys = sorted(k for k in self.objects if k.startswith(prefix) and k > start_after)
        return keys[: max(1, limit)]

    def delete(self, key: str) -> None:
        with self._lock:
            self.objects.pop(check_key(key), None)

    def get_tagged(self, key: str) -> tuple[bytes, str] | None:
        data = self.get(key)
        return None if data is None else (data, hashlib.sha256(data).hexdigest())

    def put_if_match(
        self, key: str, data: bytes, tag: str | None, *, content_type: str = "application/json"
    ) -> bool:
        with self._lock:
            have = self.objects.get(check_key(key))
            current = None if have is None else hashlib.sha256(have).hexdigest()
            if current != tag:
                return False
            self.objects[key] = bytes(data)
            return True
