"""Stores for tests that need a store to fail: one place, shared by every test directory.

(`MemoryStore`, a whole store in a dict, is in the package: `pith_pipeline.storage.memory`,
and runs the store contract tests with the local and S3 stores.)
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from pith_pipeline.errors import StorageError
from pith_pipeline.storage.base import Store, StoreWrapper

#: The prefixes a run publishes under (events, bundles, their copies, pointers).
PUBLISHED = ("events/", "pith/", ".well-known/", "arxiv/")
#: The transparency log's pending markers: one per publishing process, named by a
#: random token (`tlog.pending`); a run that finishes deletes its own.
PENDING_MARKERS = "log/pending/"


@contextmanager
def counting_gets(store: Any) -> Iterator[list[str]]:
    """The keys `store.get` is asked for inside the block, in order (to show what a
    step reads back from the store)."""
    reads: list[str] = []
    real_get = store.get

    def counting(key: str) -> bytes | None:
        reads.append(key)
        return real_get(key)  # type: ignore[no-any-return]

    store.get = counting
    try:
        yield reads
    finally:
        store.get = real_get


def without_markers(objects: dict[str, bytes]) -> dict[str, bytes]:
    """A store's objects but its pending markers, for comparing what two runs published
    when the test stops before the runs finish."""
    return {k: v for k, v in objects.items() if not k.startswith(PENDING_MARKERS)}


@dataclass
class WriteBudget:
    """When writes fail: after `after` writes of keys under `only`, the next `failures`
    writes fail (every later one when None). Shared by several `FailingStore`s when a
    test's code opens the store more than once (an Airflow task per try)."""

    after: int
    failures: int | None = None
    only: tuple[str, ...] = ("",)
    writes: int = 0
    failed: int = 0

    def tick(self, key: str) -> None:
        if not key.startswith(self.only):
            return
        self.writes += 1
        if self.writes > self.after and (self.failures is None or self.failed < self.failures):
            self.failed += 1
            raise StorageError(f"PUT {key}: SlowDown (HTTP 503)", transient=True)


class FailingStore(StoreWrapper):
    """A real store whose writes fail as S3's do (SlowDown, transient) by a `WriteBudget`;
    reads and everything else pass through."""

    def __init__(self, inner: Store, budget: WriteBudget) -> None:
        super().__init__(inner)
        self.budget = budget

    def put(self, key: str, data: bytes, **kw: Any) -> None:
        self.budget.tick(key)
        self.inner.put(key, data, **kw)

    def put_once(self, key: str, data: bytes, **kw: Any) -> bool:
        self.budget.tick(key)
        return bool(self.inner.put_once(key, data, **kw))

    def put_if_match(self, key: str, data: bytes, tag: str | None, **kw: Any) -> bool:
        self.budget.tick(key)
        return bool(self.inner.put_if_match(key, data, tag, **kw))


class Killed(BaseException):
    """The process died here (SIGKILL): raised by `DyingStore`; like a kill, nothing
    below catches it (it is not an `Exception`)."""


class DyingStore(StoreWrapper):
    """A real store whose process is killed at its `at`-th write (0-based) of a key
    under `only`: that write and every later one never happen. Each write step of a
    log append is a kill point: walk `at` over 0..N to kill between every two."""

    def __init__(self, inner: Store, at: int, only: tuple[str, ...] = ("log/",)) -> None:
        super().__init__(inner)
        self.at, self.only = at, only
        self.writes = 0
        self.dead = False

    def _tick(self, key: str) -> None:
        if self.dead:
            raise Killed(key)
        if key.startswith(self.only):
            if self.writes == self.at:
                self.dead = True
                raise Killed(key)
            self.writes += 1

    def put(self, key: str, data: bytes, **kw: Any) -> None:
        self._tick(key)
        self.inner.put(key, data, **kw)

    def put_once(self, key: str, data: bytes, **kw: Any) -> bool:
        self._tick(key)
        return bool(self.inner.put_once(key, data, **kw))

    def put_if_match(self, key: str, data: bytes, tag: str | None, **kw: Any) -> bool:
        self._tick(key)
        return bool(self.inner.put_if_match(key, data, tag, **kw))

    def delete(self, key: str) -> None:
        self._tick(key)
        self.inner.delete(key)
