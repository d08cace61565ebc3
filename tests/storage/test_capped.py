"""`get_capped`: a hostile huge object is refused by name, never read whole."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import pytest

from pith_pipeline.errors import IntegrityError
from pith_pipeline.storage.base import Store, get_capped
from pith_pipeline.storage.factory import open_store


@pytest.fixture(params=["local", "s3", "memory"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    if request.param == "local":
        return open_store(str(tmp_path))
    if request.param == "memory":
        from pith_pipeline.storage.memory import MemoryStore

        return MemoryStore()
    return open_store(request.getfixturevalue("s3_store_url"))


def test_within_the_cap_reads_whole(store: Store) -> None:
    store.put("pith/A/bundle.json", b"x" * 100)
    assert get_capped(store, "pith/A/bundle.json", 100) == b"x" * 100
    store.put("pith/A/empty.json", b"")
    assert get_capped(store, "pith/A/empty.json", 100) == b""
    assert get_capped(store, "pith/NOPE/bundle.json", 100) is None


def test_over_the_cap_is_an_integrity_error_naming_the_object(store: Store) -> None:
    store.put("events/A/big.json", b"y" * 101)
    with pytest.raises(IntegrityError, match="over the 100-byte limit") as exc:
        get_capped(store, "events/A/big.json", 100)
    assert exc.value.key == "events/A/big.json"


def test_a_huge_local_object_is_not_read_whole(tmp_path: Path) -> None:
    store = open_store(str(tmp_path))
    store.put("events/A/huge.json", b"z" * (32 << 20))
    tracemalloc.start()
    try:
        with pytest.raises(IntegrityError):
            get_capped(store, "events/A/huge.json", 1 << 10)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < (4 << 20), peak
