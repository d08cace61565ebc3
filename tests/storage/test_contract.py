"""One contract for every store: each test runs on a local directory, S3 (moto), memory,
and the staging wrapper a build writes through."""

from __future__ import annotations

from pathlib import Path

import pytest

from pith_pipeline.errors import StorageError, WriteConflictError
from pith_pipeline.storage.base import Store
from pith_pipeline.storage.factory import open_store


@pytest.fixture(params=["local", "s3", "memory", "staging"])
def store(request: pytest.FixtureRequest, tmp_path: object) -> Store:
    if request.param == "local":
        return open_store(str(tmp_path))
    if request.param == "memory":
        from pith_pipeline.storage.memory import MemoryStore

        return MemoryStore()
    if request.param == "staging":
        from pith_pipeline.storage.staging import StagingStore

        return StagingStore(open_store(str(tmp_path)))
    url = request.getfixturevalue("s3_store_url")
    return open_store(url)


def test_is_a_store(store: Store) -> None:
    assert isinstance(store, Store)


def test_missing_object(store: Store) -> None:
    assert store.get("pith/NOPE/bundle.json") is None
    assert not store.exists("pith/NOPE/bundle.json")
    assert store.get_tagged("pith/NOPE/bundle.json") is None


def test_put_get_replace(store: Store) -> None:
    store.put("pith/A/bundle.json", b'{"a":1}')
    assert store.get("pith/A/bundle.json") == b'{"a":1}'
    assert store.exists("pith/A/bundle.json")
    store.put("pith/A/bundle.json", b'{"a":2}')
    assert store.get("pith/A/bundle.json") == b'{"a":2}'


def test_put_once_identical_is_done(store: Store) -> None:
    assert store.put_once("events/A/1.json", b"one") is True
    assert store.put_once("events/A/1.json", b"one") is False
    assert store.get("events/A/1.json") == b"one"


def test_put_once_different_bytes_refused(store: Store) -> None:
    store.put_once("events/A/1.json", b"one")
    with pytest.raises(WriteConflictError, match=r"events/A/1\.json"):
        store.put_once("events/A/1.json", b"two")
    assert store.get("events/A/1.json") == b"one"


def test_put_once_file_streams_a_file_write_once(store: Store, tmp_path: Path) -> None:
    from pith_pipeline.storage.base import put_once_file

    assert hasattr(store, "put_once_file")  # streamed, not the read-it-whole fallback
    big = tmp_path / "manifest.json"
    big.write_bytes(bytes(range(256)) * 8192)  # 2 MiB, more than one copy chunk
    assert put_once_file(store, "runs/r1/manifest.json", big) is True
    assert store.get("runs/r1/manifest.json") == big.read_bytes()
    assert put_once_file(store, "runs/r1/manifest.json", big) is False
    other = tmp_path / "other.json"
    other.write_bytes(b"{}")
    with pytest.raises(WriteConflictError, match=r"runs/r1/manifest\.json"):
        put_once_file(store, "runs/r1/manifest.json", other)
    assert store.get("runs/r1/manifest.json") == big.read_bytes()
    assert not [k for k in store.list("runs/") if ".tmp-" in k]


def test_list_is_sorted_and_scoped(store: Store) -> None:
    for key in (
        "events/B/2.json",
        "events/A/1.json",
        "events/AB/3.json",
        "pith/A/bundle.json",
        "events/A/0.json",
    ):
        store.put(key, b"x")
    assert list(store.list("events/A/")) == ["events/A/0.json", "events/A/1.json"]
    assert list(store.list("events/")) == [
        "events/A/0.json",
        "events/A/1.json",
        "events/AB/3.json",
        "events/B/2.json",
    ]
    assert list(store.list("nothing/")) == []


def test_iter_unsorted_streams_the_keys_of_list(store: Store) -> None:
    from pith_pipeline.storage.base import iter_unsorted

    for key in ("events/B/2.json", "events/A/1.json", "events/AB/3.json", "pith/A/bundle.json", "top.json"):
        store.put(key, b"x")
    for prefix in ("events/", "events/A/", "events/A", "", "nothing/"):
        got = list(iter_unsorted(store, prefix))
        assert sorted(got) == list(store.list(prefix)) and len(got) == len(set(got))


def test_delete(store: Store) -> None:
    store.put("index/x.parquet", b"x")
    store.delete("index/x.parquet")
    assert store.get("index/x.parquet") is None
    store.delete("index/x.parquet")  # absent: no error


BAD_KEYS = ["", "/abs", "a//b", "a/../b", "./a", "a/", "..", "a\\b", "a\x00b", ".tmp/x", ".tmp"]


@pytest.mark.parametrize("key", BAD_KEYS)
def test_bad_keys_refused(store: Store, key: str) -> None:
    """One rule on every back end: a key valid on one is valid on all (a store copied
    from S3 to a directory holds the same objects), so every read and write refuses it."""
    for call in (
        lambda: store.put(key, b"x"),
        lambda: store.put_once(key, b"x"),
        lambda: store.put_if_match(key, b"x", None),
        lambda: store.get(key),
        lambda: store.exists(key),
        lambda: store.delete(key),
    ):
        with pytest.raises(StorageError, match="invalid storage key"):
            call()


def test_compare_and_swap(store: Store) -> None:
    key = "index/_manifest.json"
    assert store.put_if_match(key, b"v1", None) is True
    assert store.put_if_match(key, b"v1-again", None) is False  # exists now
    got = store.get_tagged(key)
    assert got is not None and got[0] == b"v1"
    tag1 = got[1]
    assert store.put_if_match(key, b"v2", tag1) is True
    assert store.put_if_match(key, b"v3", tag1) is False  # stale tag: lost the race
    assert store.get(key) == b"v2"
    got2 = store.get_tagged(key)
    assert got2 is not None and got2[1] != tag1


def test_staging_keeps_writes_and_deletes_out_of_the_store_below(tmp_path: Path) -> None:
    """What a build writes through the staging wrapper stays in it: the published
    store below is read, never changed, until the staged writes are published."""
    from pith_pipeline.storage.staging import StagingStore

    base = open_store(str(tmp_path))
    base.put("pith/A/bundle.json", b"published")
    staging = StagingStore(base)
    staging.put("pith/B/bundle.json", b"new")
    staging.put_once("events/B/1.json", b"event")
    staging.delete("pith/A/bundle.json")
    assert staging.get("pith/A/bundle.json") is None and not staging.exists("pith/A/bundle.json")
    assert list(staging.list("pith/")) == ["pith/B/bundle.json"]
    assert base.get("pith/A/bundle.json") == b"published"
    assert list(base.list("")) == ["pith/A/bundle.json"]


def test_put_copy_stores_the_same_bytes_under_a_second_name(store: Store) -> None:
    from pith_pipeline.storage.base import put_copy

    store.put("pith/A/bundle.json", b'{"a":1}')
    put_copy(store, ".well-known/pith/A/bundle.json", b'{"a":1}', of="pith/A/bundle.json")
    assert store.get(".well-known/pith/A/bundle.json") == b'{"a":1}'
    # the source replaced: the copy keeps its bytes until it is copied again
    store.put("pith/A/bundle.json", b'{"a":2}')
    assert store.get(".well-known/pith/A/bundle.json") == b'{"a":1}'
    put_copy(store, ".well-known/pith/A/bundle.json", b'{"a":2}', of="pith/A/bundle.json")
    assert store.get(".well-known/pith/A/bundle.json") == b'{"a":2}'


def test_put_copy_writes_the_given_bytes_when_the_source_holds_others(store: Store) -> None:
    """A copy is never of bytes the caller did not give: a source replaced by another
    writer, or missing, means the given bytes are written."""
    from pith_pipeline.storage.base import put_copy

    store.put("pith/A/bundle.json", b'{"other":1}')
    put_copy(store, ".well-known/pith/A/bundle.json", b'{"a":1}', of="pith/A/bundle.json")
    assert store.get(".well-known/pith/A/bundle.json") == b'{"a":1}'
    put_copy(store, ".well-known/pith/B/bundle.json", b'{"b":1}', of="pith/B/bundle.json")
    assert store.get(".well-known/pith/B/bundle.json") == b'{"b":1}'


@pytest.fixture(params=["local", "s3"])
def large_object_store(request: pytest.FixtureRequest, tmp_path: object) -> Store:
    """The stores that hold objects larger than memory (memory's are in memory)."""
    if request.param == "local":
        return open_store(str(tmp_path))
    return open_store(request.getfixturevalue("s3_store_url"))


def test_a_write_once_conflict_is_judged_without_reading_the_object_whole(
    large_object_store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On S3, a conditional write that found the object there (412) read it whole to
    compare: a quarantine or run manifest may be hundreds of megabytes."""
    from pith_pipeline.storage.base import put_once_file

    store = large_object_store
    big = tmp_path / "quarantine.jsonl"
    big.write_bytes(b'{"raw": "x"}\n' * 300_000)
    key = "quarantine/r1.jsonl"
    assert put_once_file(store, key, big) is True

    def whole(k: str) -> bytes | None:
        raise AssertionError(f"{k} read whole")

    monkeypatch.setattr(store, "get", whole)
    assert put_once_file(store, key, big) is False
    other = tmp_path / "other.jsonl"
    other.write_bytes(b"{}\n")
    with pytest.raises(WriteConflictError, match=r"quarantine/r1\.jsonl"):
        put_once_file(store, key, other)
