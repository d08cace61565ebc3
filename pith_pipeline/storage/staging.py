"""A store that reads through to the published one and keeps every write in memory."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

from pith_pipeline.errors import StorageError, WriteConflictError

if TYPE_CHECKING:
    from pith_pipeline.storage.base import Store


class StagingStore:
    """Reads through to the published store; keeps every write in memory.

    Building against it sees exactly what a direct publish would, yet publishes
    nothing: the writes become one staged object that `publish` replays.
    """

    def __init__(self, base: Store) -> None:
        self.base = base
        self.url = base.url
        self.writes: dict[str, tuple[bytes, bool]] = {}

    def __repr__(self) -> str:
        return f"StagingStore({self.base!r}, {len(self.writes)} writes)"

    def get(self, key: str) -> bytes | None:
        if key in self.writes:
            return self.writes[key][0]
        return self.base.get(key)

    def exists(self, key: str) -> bool:
        return key in self.writes or self.base.exists(key)

    def put(self, key: str, data: bytes, *, content_type: str = "application/json") -> None:
        once = self.writes.get(key, (b"", False))[1]
        self.writes[key] = (data, once)

    def put_once(self, key: str, data: bytes, *, content_type: str = "application/json") -> bool:
        existing = self.get(key)
        if existing is not None:
            if existing == data:
                return False
            raise WriteConflictError(
                f"{key} already exists in {self.url} with different "
                "content; write-once objects are never overwritten"
            )
        self.writes[key] = (data, True)
        return True

    def list(self, prefix: str) -> Iterator[str]:
        keys = set(self.base.list(prefix)) | {k for k in self.writes if k.startswith(prefix)}
        return iter(sorted(keys))

    def delete(self, key: str) -> None:
        raise StorageError("a build never deletes; staging is append-only")

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


def staging_prefix(run_id: str) -> str:
    return f"staging/{run_id}/"


def staged_key(run_id: str, index: int) -> str:
    return f"{staging_prefix(run_id)}chunk-{index:04d}.jsonl"
