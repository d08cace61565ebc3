"""One contract for every store: each test runs on a local directory, S3 (moto), memory,
the staging wrapper a build writes through, and the lease wrapper a writer writes
through. The capabilities (`Store`'s methods with defaults) are covered here too, so a
new back end or wrapper that passes this file works wherever a store is used."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from pith_pipeline.errors import IntegrityError, StorageError, WriteConflictError
from pith_pipeline.storage.base import (
    Digest,
    Store,
    barrier,
    file_sha256,
    get_capped,
    iter_unsorted,
    put_copy,
    put_file,
    put_once_file,
    read_into,
)
from pith_pipeline.storage.concurrency import reserve_connections
from pith_pipeline.storage.factory import open_store
from pith_pipeline.storage.lease import LeasedStore, LeaseLostError
from pith_pipeline.storage.memory import MemoryStore
from pith_pipeline.storage.staging import StagingStore


@pytest.fixture(params=["local", "s3", "memory", "staging", "leased", "leased-s3"])
def store(request: pytest.FixtureRequest, tmp_path: object) -> Store:
    if request.param == "local":
        return open_store(str(tmp_path))
    if request.param == "leased":
        return LeasedStore(open_store(str(tmp_path)), lambda: None)
    if request.param == "leased-s3":
        return LeasedStore(open_store(request.getfixturevalue("s3_store_url")), lambda: None)
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


# -- capabilities ----------------------------------------------------------------


def test_put_file_and_read_into_stream_whole_objects(store: Store, tmp_path: Path) -> None:
    src = tmp_path / "quarantine.jsonl"
    src.write_bytes(b'{"raw": "x"}\n' * 100_000)  # more than one 1 MiB chunk
    store.put_file("quarantine/r1.jsonl", src, content_type="application/x-ndjson")
    out = Digest()
    assert store.read_into("quarantine/r1.jsonl", out) is True
    assert out.hexdigest() == file_sha256(src) and out.lines == 100_000
    assert store.read_into("quarantine/nope.jsonl", Digest()) is False
    store.put_file("quarantine/r1.jsonl", tmp_path / "quarantine.jsonl")  # replace: no error


def test_get_capped_refuses_an_object_over_the_limit_by_name(store: Store) -> None:
    store.put("events/A/1.json", b"y" * 101)
    assert store.get_capped("events/A/1.json", 101) == b"y" * 101
    with pytest.raises(IntegrityError, match="over the 100-byte limit") as exc:
        store.get_capped("events/A/1.json", 100)
    assert exc.value.key == "events/A/1.json"
    assert store.get_capped("events/A/nope.json", 100) is None


def test_sync_and_the_housekeeping_capabilities_keep_every_object(store: Store) -> None:
    store.put("pith/A/bundle.json", b"1")
    store.put_once("events/A/1.json", b"e")
    store.sync()
    barrier(store)
    store.reserve_connections(40)
    assert isinstance(store.sweep_temporary(), tuple)
    assert store.get("pith/A/bundle.json") == b"1" and store.get("events/A/1.json") == b"e"
    assert (
        sorted(store.iter_unsorted("")) == list(store.list("")) == ["events/A/1.json", "pith/A/bundle.json"]
    )


def test_list_after_where_a_store_has_it(store: Store) -> None:
    """`list_after` is None (the caller asks key by key) or answers as a sorted,
    limited listing from a key would."""
    if store.list_after is None:
        assert store.unwrapped().list_after is None
        return
    keys = [f"arxiv/2601.{n:05d}.json" for n in range(7)] + ["events/A/1.json"]
    for key in keys:
        store.put(key, b"x")
    assert list(store.list_after("arxiv/", "arxiv/2601.00002.json", 3)) == keys[3:6]
    assert list(store.list_after("arxiv/", "arxiv/", 100)) == keys[:7]
    assert list(store.list_after("arxiv/", "arxiv/2601.00006.json", 10)) == []


def test_where_the_objects_are_for_readers_that_bypass_the_store(store: Store, tmp_path: Path) -> None:
    """`local_root`, `location` and `arrow_filesystem` name the same place on each back
    end, through wrappers: a key file there would be published, deltalake and pyarrow
    read and write there."""
    store.put("index/t/x.bin", b"hello")
    where = store.location()
    root = store.local_root()
    arrow = store.arrow_filesystem()
    kind = store.unwrapped()
    if isinstance(kind, MemoryStore) or isinstance(store, StagingStore):
        # nothing outside the store object can reach memory or a staged write
        assert where is None and arrow is None
        assert root == (tmp_path if isinstance(store, StagingStore) else None)
        return
    assert where is not None and arrow is not None
    assert where.store is kind and repr(where).count("SECRET") == 0
    fs, arrow_root = arrow
    with fs.open_input_stream(f"{arrow_root}/index/t/x.bin") as fh:
        assert fh.read() == b"hello"
    if where.local:
        assert root == tmp_path and where.uri == str(tmp_path) and where.options == {}
    else:
        assert root is None and where.uri == store.url and where.uri.startswith("s3://")
        assert where.options["AWS_REGION"] and where.options["AWS_ALLOW_HTTP"] == "true"
        assert where.uri.removeprefix("s3://") == arrow_root


def test_unwrapped_is_the_store_that_holds_the_objects(store: Store) -> None:
    inner = store.unwrapped()
    assert inner.unwrapped() is inner and not isinstance(inner, LeasedStore)
    assert inner is store or (isinstance(store, LeasedStore) and inner is store.inner)


class Minimal(Store):
    """A new back end giving only the eight methods every store must: each capability
    then works by its default."""

    def __init__(self) -> None:
        self.url = "minimal://"
        self.inner = MemoryStore()

    def get(self, key: str) -> bytes | None:
        return self.inner.get(key)

    def put(self, key: str, data: bytes, *, content_type: str = "application/json") -> None:
        self.inner.put(key, data)

    def put_once(self, key: str, data: bytes, *, content_type: str = "application/json") -> bool:
        return self.inner.put_once(key, data)

    def exists(self, key: str) -> bool:
        return self.inner.exists(key)

    def list(self, prefix: str) -> Iterator[str]:
        return self.inner.list(prefix)

    def delete(self, key: str) -> None:
        self.inner.delete(key)

    def get_tagged(self, key: str) -> tuple[bytes, str] | None:
        return self.inner.get_tagged(key)

    def put_if_match(
        self, key: str, data: bytes, tag: str | None, *, content_type: str = "application/json"
    ) -> bool:
        return self.inner.put_if_match(key, data, tag)


def test_a_back_end_with_only_the_required_methods_has_every_capability(tmp_path: Path) -> None:
    store = Minimal()
    src = tmp_path / "m.json"
    src.write_bytes(b"{}")
    assert put_once_file(store, "runs/r/manifest.json", src) is True
    assert put_once_file(store, "runs/r/manifest.json", src) is False
    put_file(store, "quarantine/r.jsonl", src)
    put_copy(store, ".well-known/pith/A/bundle.json", b"b", of="pith/A/bundle.json")
    out = Digest()
    assert read_into(store, "quarantine/r.jsonl", out) and out.hexdigest() == file_sha256(src)
    assert get_capped(store, "quarantine/r.jsonl", 2) == b"{}"
    with pytest.raises(IntegrityError, match="over the 1-byte limit"):
        get_capped(store, "quarantine/r.jsonl", 1)
    barrier(store)
    reserve_connections(store, 8)
    assert list(iter_unsorted(store, "")) == list(store.list(""))
    assert store.list_after is None and store.location() is None and store.local_root() is None
    assert store.arrow_filesystem() is None and store.unwrapped() is store and store.sweep_temporary() == ()


def test_a_store_missing_a_required_method_cannot_be_made() -> None:
    class NoDelete(Minimal):
        delete = Store.delete  # type: ignore[assignment]

    with pytest.raises(TypeError, match="delete"):
        NoDelete()


def test_every_write_through_the_lease_wrapper_checks_the_lease(tmp_path: Path) -> None:
    """A writer whose lease is lost writes nothing, whichever write it makes."""
    lost = LeaseLostError("lease lost")

    def check() -> None:
        raise lost

    src = tmp_path / "f.json"
    src.write_bytes(b"{}")
    inner = open_store(str(tmp_path / "store"))
    inner.put("pith/A/bundle.json", b"b")
    leased = LeasedStore(inner, check)
    writes = [
        lambda: leased.put("k/a.json", b"x"),
        lambda: leased.put_once("k/a.json", b"x"),
        lambda: leased.put_if_match("k/a.json", b"x", None),
        lambda: leased.delete("pith/A/bundle.json"),
        lambda: leased.put_copy("k/b.json", b"b", of="pith/A/bundle.json"),
        lambda: leased.put_file("k/c.json", src),
        lambda: leased.put_once_file("k/d.json", src),
    ]
    for write in writes:
        with pytest.raises(LeaseLostError):
            write()
    assert list(inner.list("")) == ["pith/A/bundle.json"]
    assert leased.get("pith/A/bundle.json") == b"b"  # reads pass through
