"""`cas_update`: concurrent read-modify-write on every store loses no writer's change."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from pith_pipeline.errors import IntegrityError, KeyFileError
from pith_pipeline.storage.base import Store, StoreWrapper
from pith_pipeline.storage.cas import cas_update
from pith_pipeline.storage.factory import open_store
from pith_pipeline.storage.memory import MemoryStore

KEY = "pith-signing-key.json"


@pytest.fixture(params=["local", "s3", "memory"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    if request.param == "local":
        return open_store(str(tmp_path))
    if request.param == "memory":
        return MemoryStore()
    return open_store(request.getfixturevalue("s3_store_url"))


def add_line(line: bytes) -> Callable[[bytes | None], bytes | None]:
    def update(current: bytes | None) -> bytes | None:
        have = current or b""
        return None if line in have.splitlines() else have + line + b"\n"

    return update


def test_concurrent_writers_each_keep_their_change(store: Store) -> None:
    """Four writers add their lines at once: every line is in the object after."""
    lines = [f"w{w}-{n}".encode() for w in range(4) for n in range(8)]

    def writer(w: int) -> None:
        for n in range(8):
            cas_update(store, KEY, add_line(f"w{w}-{n}".encode()))

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stored = store.get(KEY)
    assert stored is not None and sorted(stored.splitlines()) == sorted(lines)


def test_nothing_to_change_writes_nothing(store: Store) -> None:
    assert cas_update(store, KEY, add_line(b"a")) == b"a\n"
    got = store.get_tagged(KEY)
    writes: list[str] = []
    assert cas_update(store, KEY, add_line(b"a"), before_write=lambda: writes.append("w")) is None
    assert cas_update(store, KEY, lambda current: current) is None
    assert store.get_tagged(KEY) == got and writes == []


def test_a_refusal_raised_by_the_update_is_passed_on_and_nothing_written(store: Store) -> None:
    store.put(KEY, b"old\n")

    def refuse(current: bytes | None) -> bytes | None:
        raise KeyFileError("a log keeps its key")

    with pytest.raises(KeyFileError, match="keeps its key"):
        cas_update(store, KEY, refuse)
    assert store.get(KEY) == b"old\n"


class AlwaysRaced(StoreWrapper):
    """Another writer always changes the object between our read and our write."""

    def put_if_match(
        self, key: str, data: bytes, tag: str | None, *, content_type: str = "application/json"
    ) -> bool:
        self.inner.put(key, (self.inner.get(key) or b"") + b"rival\n")
        return False


def test_a_writer_that_never_wins_is_one_error_naming_the_object() -> None:
    store = AlwaysRaced(MemoryStore())
    barriers: list[int] = []
    with pytest.raises(IntegrityError, match="kept changing under concurrent writers") as exc:
        cas_update(store, KEY, add_line(b"mine"), before_write=lambda: barriers.append(1), attempts=5)
    assert exc.value.key == KEY and len(barriers) == 5
    assert b"mine" not in (store.get(KEY) or b"")
