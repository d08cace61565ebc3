"""A store that reads through to the published one and keeps every write in memory."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

from pith_pipeline.core.layout import staged_key, staged_rejects_key, staging_prefix
from pith_pipeline.errors import WriteConflictError
from pith_pipeline.storage.base import Store, check_key

#: the staged keys' names, spelled by `core.layout` (runs/steps.py imports them from here)
__all__ = ["StagingStore", "staged_key", "staged_rejects_key", "staging_prefix"]


class StagingStore(Store):
    """Reads through to the published store; keeps every write in memory.

    Building against it sees exactly what a direct publish would, yet publishes
    nothing: the writes become one staged object that `publish` replays. It keeps
    the whole `Store` contract (the contract tests run on it too), so code that
    works on a store works the same through it. A delete is staged like any write:
    the object below is hidden from this wrapper, never removed.
    """

    def __init__(self, base: Store) -> None:
        self.base = base
        self.url = base.url
        #: key -> (bytes, written write-once); None bytes: deleted here.
        self.writes: dict[str, tuple[bytes | None, bool]] = {}

    def __repr__(self) -> str:
        return f"StagingStore({self.base!r}, {len(self.writes)} writes)"

    def get(self, key: str) -> bytes | None:
        if check_key(key) in self.writes:
            return self.writes[key][0]
        return self.base.get(key)

    def exists(self, key: str) -> bool:
        if check_key(key) in self.writes:
            return self.writes[key][0] is not None
        return self.base.exists(key)

    def put(self, key: str, data: bytes, *, content_type: str = "application/json") -> None:
        once = self.writes.get(check_key(key), (b"", False))[1]
        self.writes[key] = (bytes(data), once)

    def put_once(self, key: str, data: bytes, *, content_type: str = "application/json") -> bool:
        existing = self.get(key)
        if existing is not None:
            if existing == data:
                return False
            raise WriteConflictError(
                f"{key} already exists in {self.url} with different "
                "content; write-once objects are never overwritten"
            )
        self.writes[key] = (bytes(data), True)
        return True

    def local_root(self) -> Path | None:
        """The directory below: a key file inside it would be published with what
        this build stages (`signing.guard`)."""
        return self.base.local_root()

    def list(self, prefix: str) -> Iterator[str]:
        keys = set(self.base.list(prefix)) | {k for k in self.writes if k.startswith(prefix)}
        return iter(sorted(k for k in keys if self.writes.get(k, (b"", False))[0] is not None))

    def delete(self, key: str) -> None:
        self.writes[check_key(key)] = (None, False)

    def get_tagged(self, key: str) -> tuple[bytes, str] | None:
        data = self.get(key)
        return None if data is None else (data, hashlib.sha256(data).hexdigest())

    def put_if_match(
        self, key: str, data: bytes, tag: str | None, *, content_type: str = "application/json"
    ) -> bool:
        current = self.get_tagged(key)
        if (current[1] if current else None) != tag:
            return False
        self.put(key, data)
        return True
