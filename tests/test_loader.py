"""The one publish loop (`pith_pipeline.loader`): papers in flight, order kept, counts added."""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from store_doubles import PENDING_MARKERS, without_markers

from pith_pipeline.core.canonical_json import loads
from pith_pipeline.core.keys import Ed25519Signer
from pith_pipeline.core.verify import verify_bundle
from pith_pipeline.errors import InputError, StorageError
from pith_pipeline.loader import Loader
from pith_pipeline.publish import BuildConfig, Publisher, RunSummary
from pith_pipeline.sources.jsonl import Item, parse_line
from pith_pipeline.storage.concurrency import check_io_concurrency, default_io_concurrency
from pith_pipeline.storage.memory import MemoryStore

SIGNER = Ed25519Signer(bytes(range(32)), "loader-test")
FIXED = datetime(2026, 7, 1, tzinfo=UTC)


def _fixed() -> datetime:
    return FIXED


class OrderCheckingStore(MemoryStore):
    """A store that checks, at every write, what a reader could see at that moment:
    a bundle's events are all stored, a pointer's records all have their bundle and
    state. Each request waits a moment, so threads really interleave."""

    def __init__(self, *, jitter: float = 0.0) -> None:
        super().__init__()
        self.jitter = jitter
        self.violations: list[str] = []
        self.puts: list[str] = []
        self._rng = random.Random(7)
        self._rng_lock = threading.Lock()

    def _wait(self) -> None:
        if self.jitter:
            with self._rng_lock:
                pause = self._rng.random() * self.jitter
            time.sleep(pause)

    def get(self, key: str) -> bytes | None:
        self._wait()
        return super().get(key)

    def _check_write(self, key: str, data: bytes) -> None:
        parts = key.split("/")
        if key.startswith(("pith/", ".well-known/pith/")) and key.endswith("bundle.json"):
            body = parts[-2]
            for ev in loads(data)["events"]:
                if f"events/{body}/{ev['content_sha256']}.json" not in self.objects:
                    self.violations.append(f"{key} before its event {ev['event_id']}")
        if key.startswith("arxiv/"):
            for rec in loads(data)["records"]:
                body = rec["pith_number"].split(":")[2]
                for need in (f"pith/{body}/bundle.json", f"pith/{body}/state.json"):
                    if need not in self.objects:
                        self.violations.append(f"{key} before {need}")

    def put(self, key: str, data: bytes, *, content_type: str = "application/json") -> None:
        self._wait()
        self._check_write(key, data)
        with self._lock:
            self.puts.append(key)
        super().put(key, data, content_type=content_type)

    def put_once(self, key: str, data: bytes, *, content_type: str = "application/json") -> bool:
        self._wait()
        with self._lock:
            self.puts.append(key)
        return super().put_once(key, data, content_type=content_type)


def _items(sample_lines: list[str]) -> list[Item]:
    """The sample, a paper's v1, its v2 and v1 again one after another (in flight at
    once, were they not kept in order), a duplicate and a bad line."""
    last = json.loads(sample_lines[-1])  # 2606.00972, v1 only
    created = last["versions"][0]["created"]
    v2 = dict(
        last,
        title=last["title"] + " (revised)",
        versions=[{"version": "v1", "created": created}, {"version": "v2", "created": created}],
    )
    lines = [sample_lines[-1], json.dumps(v2), sample_lines[-1], *sample_lines[:-1], "{not json"]
    return [parse_line(line.encode(), f"input:{n}") for n, line in enumerate(lines, 1)]


def _publish(store: MemoryStore, items: list[Item], n: int, **kw: Any) -> RunSummary:
    pub = Publisher(store, SIGNER, BuildConfig(), clock=_fixed, run_id="run-1", io_concurrency=n)
    return Loader(pub).publish(items, **kw)


def test_many_papers_in_flight_write_what_one_at_a_time_writes(sample_lines: list[str]) -> None:
    items = _items(sample_lines)
    one = MemoryStore()
    s1 = _publish(one, items, 1)
    many = OrderCheckingStore(jitter=0.002)
    s8 = _publish(many, items, 8)
    assert many.violations == []
    assert without_markers(many.objects) == without_markers(one.objects)  # quarantine file too
    assert (
        s8.counts()
        == s1.counts()
        == {
            "fetched": 33,
            "built": 31,
            "unchanged": 1,
            "superseded": 1,
            "quarantined": 1,
        }
    )
    assert dict(s8.written) == dict(s1.written)
    assert sorted(s8.pith_numbers) == sorted(s1.pith_numbers)
    assert sorted(s8.seen) == sorted(s1.seen)
    for key, data in many.objects.items():
        if key.startswith("pith/") and key.endswith("bundle.json"):
            assert verify_bundle(loads(data)).ok, key


def test_a_papers_versions_are_published_in_input_order(sample_lines: list[str]) -> None:
    """v1 then v2 of one paper, many papers in flight: v2 supersedes v1, never the reverse."""
    store = OrderCheckingStore(jitter=0.002)
    _publish(store, _items(sample_lines), 8)
    pointer = loads(store.objects["arxiv/2606.00972.json"])
    assert [r["version"] for r in pointer["records"]] == [1, 2]
    assert pointer["latest"] == pointer["records"][1]["pith_number"]
    old_body = pointer["records"][0]["pith_number"].split(":")[2]
    old = loads(store.objects[f"pith/{old_body}/bundle.json"])
    assert old["state"]["current"]["corrections"][0]["payload"]["pith_number"] == pointer["latest"]


def test_the_quarantine_is_written_last_in_input_order(sample_lines: list[str]) -> None:
    lines = ["{bad 1", *sample_lines[:5], "{bad 2", *sample_lines[5:10], "{bad 3"]
    items = [parse_line(line.encode(), f"input:{n}") for n, line in enumerate(lines, 1)]
    store = OrderCheckingStore(jitter=0.002)
    _publish(store, items, 4)
    assert store.puts[-1] == "quarantine/run-1.jsonl"
    entries = [json.loads(x) for x in store.objects["quarantine/run-1.jsonl"].splitlines()]
    assert [e["where"] for e in entries] == ["input:1", "input:7", "input:13"]


def test_records_waiting_are_bounded(sample_lines: list[str]) -> None:
    """Back-pressure: the input is read at most `io_concurrency + backlog` records
    (plus the batch read ahead to learn which papers are new) ahead of those already
    counted, however slow the store."""
    items = _items(sample_lines)
    store = OrderCheckingStore(jitter=0.003)
    pub = Publisher(store, SIGNER, BuildConfig(), clock=_fixed, run_id="run-1", io_concurrency=2)
    loader = Loader(pub)
    loader.backlog = 1
    loader.learn_batch = 2
    done = 0
    ahead: list[int] = []

    def progress(n: int) -> None:
        nonlocal done
        done += n

    def reading() -> Iterator[Item]:
        for pulled, item in enumerate(items):
            ahead.append(pulled - done)
            yield item

    loader.publish(reading(), progress=progress)
    assert done == len(items)
    assert max(ahead) <= 5  # 2 in flight + 1 waiting + 2 read ahead
    assert max(ahead) >= 1  # and more than one was in flight at some point


class FailingStore(MemoryStore):
    def __init__(self, fail_on: str) -> None:
        super().__init__()
        self.fail_on = fail_on

    def put(self, key: str, data: bytes, *, content_type: str = "application/json") -> None:
        if key.startswith(self.fail_on):
            raise StorageError(f"PUT {key}: ServiceUnavailable (HTTP 503)", transient=True)
        super().put(key, data, content_type=content_type)


def test_a_store_error_in_a_thread_stops_the_run_with_that_error(sample_lines: list[str]) -> None:
    items = _items(sample_lines)
    store = FailingStore("arxiv/2606.00972")
    with pytest.raises(StorageError, match="ServiceUnavailable"):
        _publish(store, items, 4)
    assert "quarantine/run-1.jsonl" not in store.objects  # the run did not finish


def test_io_concurrency_defaults_per_store_and_is_checked() -> None:
    from pith_pipeline.storage.s3 import S3Store

    assert default_io_concurrency(MemoryStore()) == 1
    assert default_io_concurrency(S3Store("bucket", "p")) == 32
    with pytest.raises(InputError, match="io-concurrency"):
        check_io_concurrency(0)
    store = S3Store("bucket")
    Loader(Publisher(MemoryStore(), SIGNER, io_concurrency=4))  # no pool to reserve
    store.reserve_connections(48)
    assert store.max_connections == 48
    store.reserve_connections(8)  # never shrinks
    assert store.max_connections == 48


# -- only the requests a paper needs -----------------------------------------------


class NoListing(MemoryStore):
    """A store without `list_after`: every paper asks the store about itself."""

    list_after = None


class CountingStore(MemoryStore):
    """Counts requests by kind, as S3 would bill them."""

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[tuple[str, str]] = []

    def _count(self, kind: str, key: str) -> None:
        with self._lock:
            self.requests.append((kind, key))

    def get(self, key: str) -> bytes | None:
        self._count("GET", key)
        return super().get(key)

    def get_tagged(self, key: str) -> tuple[bytes, str] | None:
        self._count("GET", key)
        return super().get_tagged(key)

    def exists(self, key: str) -> bool:
        self._count("HEAD", key)
        return super().exists(key)

    def list(self, prefix: str) -> Iterator[str]:
        self._count("LIST", prefix)
        return super().list(prefix)

    def list_after(self, prefix: str, start_after: str, limit: int) -> Any:
        self._count("LIST", prefix)
        return super().list_after(prefix, start_after, limit)

    def put(self, key: str, data: bytes, *, content_type: str = "application/json") -> None:
        self._count("PUT", key)
        super().put(key, data, content_type=content_type)

    def put_once(self, key: str, data: bytes, *, content_type: str = "application/json") -> bool:
        self._count("PUT", key)
        return super().put_once(key, data, content_type=content_type)

    def put_if_match(self, key: str, data: bytes, tag: str | None, **kw: Any) -> bool:
        self._count("PUT", key)
        return super().put_if_match(key, data, tag, **kw)


#: a new paper's writes: two events, bundle, state, .well-known copy, page, arXiv pointer
WRITES_PER_NEW_PAPER = 7


@pytest.mark.parametrize("io", [1, 4])
def test_a_new_paper_costs_only_its_writes(sample_lines: list[str], io: int) -> None:
    items = [parse_line(line.encode(), f"input:{n}") for n, line in enumerate(sample_lines, 1)]
    store = CountingStore()
    summary = _publish(store, items, io)
    assert summary.built == len(items) == 30
    per_paper = [
        (k, key)
        for k, key in store.requests
        if key.startswith(("events/", "pith/", ".well-known/", "arxiv/"))
    ]
    kinds = {k for k, _key in per_paper}
    assert [k for k, _key in per_paper].count("PUT") == WRITES_PER_NEW_PAPER * 30
    assert kinds == {"PUT", "LIST"}  # no per-paper GET, HEAD
    # one LIST page each of pointers, events, bundles and .well-known copies (a new
    # paper has none)
    assert len(per_paper) - WRITES_PER_NEW_PAPER * 30 <= 4
    # + the key document's CAS and the log's pending marker (`tlog.pending`), whether the
    # store keeps a log (what its pages name: 3 reads), and each page asset (a read, a write)
    from pith_pipeline.pages.site import asset_files

    assert len(store.requests) <= WRITES_PER_NEW_PAPER * 30 + 9 + 3 + 2 * len(asset_files())


def test_what_is_learned_changes_no_byte(sample_lines: list[str]) -> None:
    """Learning which papers are new (one listing) writes what asking per paper writes,
    on a fresh store and on one that already holds some of the papers."""
    items = _items(sample_lines)
    learning, asking = MemoryStore(), NoListing()
    for store in (learning, asking):
        _publish(store, items[:12], 1)
    s1 = _publish(learning, items, 4)
    s2 = _publish(asking, items, 4)
    assert without_markers(learning.objects) == without_markers(asking.objects)
    assert s1.counts() == s2.counts()
    assert s1.unchanged >= 11


def test_a_paper_whose_run_died_after_its_events_is_not_built_again(sample_lines: list[str]) -> None:
    """Events stored, no bundle, no pointer (killed in between): a listing finds the
    events, so the paper is finished from them, not given a second creation."""
    items = [parse_line(line.encode(), f"input:{n}") for n, line in enumerate(sample_lines[:3], 1)]
    store = MemoryStore()
    _publish(store, items, 1)
    before = dict(store.objects)
    body = next(k.split("/")[1] for k in before if k.startswith("pith/"))
    arxiv_id = next(k for k in before if k.startswith("arxiv/") and body in before[k].decode())
    for key in (
        f"pith/{body}/bundle.json",
        f"pith/{body}/state.json",
        f".well-known/pith/{body}/bundle.json",
        arxiv_id,
    ):
        del store.objects[key]
    again = _publish(store, items, 4)
    assert (again.built, again.unchanged) == (0, 3)
    assert store.objects == before


def test_s3_lists_pages_after_a_key_and_publishes_many_papers_at_once(
    s3_store_url: str, sample_lines: list[str]
) -> None:
    """On moto's server: `list_after` pages as the memory store does, and a run with
    papers in flight writes what one at a time writes."""
    from pith_pipeline.storage.s3 import S3Store

    s3 = S3Store.from_url(s3_store_url)
    mem = MemoryStore()
    for key in ("arxiv/1.json", "arxiv/2.json", "arxiv/3.json", "events/A/x.json", "events/B/y.json"):
        s3.put(key, b"{}")
        mem.put(key, b"{}")
    for prefix, after, limit in (
        ("arxiv/", "arxiv/1.jso", 2),
        ("arxiv/", "arxiv/3", 10),
        ("events/", "events/A", 5),
    ):
        assert list(s3.list_after(prefix, after, limit)) == list(mem.list_after(prefix, after, limit))
    items = _items(sample_lines)
    s3_run = S3Store.from_url(s3_store_url + "/run")
    summary = _publish(s3_run, items, 8)
    assert s3_run.max_connections >= 8
    one = MemoryStore()
    _publish(one, items, 1)
    assert summary.built == 31
    published = without_markers(one.objects)
    assert {k: s3_run.get(k) for k in published} == published
    assert sorted(k for k in s3_run.list("") if not k.startswith(PENDING_MARKERS)) == sorted(published)


def test_build_takes_io_concurrency(tmp_path: Path, asset: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """`build --io-concurrency 4` into a directory publishes what the default (1) does
    (the index tables' commit logs carry their own timestamps)."""
    from click.testing import CliRunner

    from pith_pipeline.cli import cli
    from pith_pipeline.signing.local import generate_key

    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1780000000")
    key = generate_key(tmp_path / "keys", key_id="test-key")[0]
    trees = []
    for io in ("1", "4"):
        store = tmp_path / f"io-{io}"
        args = [
            "build",
            "--input",
            str(asset("arxiv-sample.jsonl")),
            "--store",
            str(store),
            "--key",
            str(key),
        ]
        result = CliRunner().invoke(cli, [*args, "--workers", "1", "--io-concurrency", io])
        assert result.exit_code == 0, result.output
        published = ("events/", "pith/", ".well-known/", "arxiv/", "quarantine/", "pith-signing-key.json")
        files = {str(p.relative_to(store)): p for p in sorted(store.rglob("*")) if p.is_file()}
        trees.append({k: p.read_bytes() for k, p in files.items() if k.startswith(published)})
    assert trees[0] == trees[1]
    assert sum(1 for k in trees[0] if k.startswith("pith/") and k.endswith("bundle.json")) == 30
    bad = CliRunner().invoke(cli, [*args, "--io-concurrency", "0"])
    assert bad.exit_code == 2 and "io-concurrency" in bad.output
