"""The monitor catches each way a log can break its promise."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from testclock import StepClock

from pith_pipeline.core.canonical_json import dumps, loads
from pith_pipeline.core.keys import Ed25519Signer
from pith_pipeline.publish import BuildConfig, Publisher
from pith_pipeline.sources.jsonl import iter_jsonl
from pith_pipeline.storage.memory import MemoryStore
from pith_pipeline.tlog.log import LogSigner, append_entries, store_fetch
from pith_pipeline.tlog.monitor import LogProblem, monitor
from pith_pipeline.tlog.pipeline import log_run

SIGNER = Ed25519Signer(bytes(range(32)), "monitor-test")
LOG = LogSigner.from_signer(Ed25519Signer(bytes(range(2, 34)), "log"), "pith.example.org/log")


def published(tmp_path: Path, lines: list[str]) -> MemoryStore:
    store = MemoryStore()
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    pub = Publisher(store, SIGNER, BuildConfig(), clock=StepClock(datetime(2026, 7, 1, tzinfo=UTC)))
    log_run(store, pub.publish(iter_jsonl(path)).written, LOG)
    return store


def watch(store: MemoryStore, state: Path) -> object:
    return monitor(
        store_fetch(store), "memory:///log", state, key_doc=lambda: store.get("pith-signing-key.json")
    )


def entries_of(store: MemoryStore) -> list[bytes]:
    from pith_pipeline.tlog.log import TileReader, iter_entries

    size = int(store.objects["log/checkpoint"].split(b"\n")[1])
    return [e for _i, e in iter_entries(TileReader(store_fetch(store), size))]


def relogged(store: MemoryStore, entries: list[bytes]) -> MemoryStore:
    """The same registry, its log rebuilt from `entries` and re-signed by its key."""
    other = MemoryStore()
    other.objects = {k: v for k, v in store.objects.items() if not k.startswith("log/")}
    append_entries(other, LOG, entries)
    return other


@pytest.fixture
def store(tmp_path: Path, sample_lines: list[str]) -> MemoryStore:
    return published(tmp_path, sample_lines[:6])


def test_a_healthy_log_is_trusted_and_followed(store: MemoryStore, tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    first = watch(store, state)
    n = len(entries_of(store))
    assert first.checked == n and json.loads(state.read_text())["size"] == n  # type: ignore[attr-defined]
    # the registry publishes more; the monitor checks only the new entries
    path = tmp_path / "more.jsonl"
    path.write_text(
        (Path(__file__).parents[1] / "data/arxiv-sample.jsonl").read_text().splitlines()[7] + "\n"
    )
    pub = Publisher(store, SIGNER, BuildConfig(), clock=StepClock(datetime(2026, 7, 2, tzinfo=UTC)))
    log_run(store, pub.publish(iter_jsonl(path)).written, LOG)
    second = watch(store, state)
    assert second.old_size == n and second.checked == len(entries_of(store)) - n > 0  # type: ignore[attr-defined]


def test_a_rewritten_entry(store: MemoryStore, tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    watch(store, state)
    entries = entries_of(store)
    ev = loads(entries[1])
    ev["payload"] = {**ev["payload"], "rewritten": True}
    # re-signed history: the tree changes under the trusted size
    with pytest.raises(LogProblem, match="forked"):
        watch(relogged(store, [entries[0], dumps(ev), *entries[2:]]), state)
    # the bundle edited in place, the tiles left: the entry no longer matches the tree
    key = f"log/tile/entries/000.p/{len(entries)}"
    store.objects[key] = store.objects[key].replace(entries[1][:60], entries[1][:59] + b" ", 1)
    with pytest.raises(LogProblem, match="bad entry"):
        watch(store, tmp_path / "fresh.json")


def test_a_dropped_entry(store: MemoryStore, tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    watch(store, state)
    entries = entries_of(store)
    # history without one entry, padded past the trusted size so it does not shrink
    with pytest.raises(LogProblem, match="forked"):
        watch(relogged(store, [*entries[:2], *entries[3:], entries[2], entries[0]]), state)
    assert json.loads(state.read_text())["size"] == len(entries)  # still the last trusted


def test_a_forked_checkpoint(store: MemoryStore, tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    watch(store, state)
    entries = entries_of(store)
    with pytest.raises(LogProblem, match="forked"):
        watch(relogged(store, [entries[1], entries[0], *entries[2:]]), state)


def test_a_shrunken_tree(store: MemoryStore, tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    watch(store, state)
    with pytest.raises(LogProblem, match="shrunk"):
        watch(relogged(store, entries_of(store)[:-1]), state)


def test_an_appended_entry_that_does_not_verify(store: MemoryStore, tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    watch(store, state)
    ev = loads(entries_of(store)[0])
    ev["signature"] = {**ev["signature"], "key_id": "someone-else"}
    append_entries(store, LOG, [dumps(ev)])
    with pytest.raises(
        LogProblem, match=r"bad entry: entry .* a key the registry's key document does not list"
    ):
        watch(store, state)
    append_entries(store, LOG, [b"not an event"])
    with pytest.raises(LogProblem, match="bad entry"):
        watch(store, state)
