"""The pipeline's log: every published event in, once, in order; crashes healed."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from store_doubles import counting_gets
from testclock import StepClock

from pith_pipeline.core.canonical_json import dumps, dumps_trusted, loads
from pith_pipeline.core.events import content_sha256
from pith_pipeline.core.keys import Ed25519Signer
from pith_pipeline.errors import IntegrityError, KeyFileError
from pith_pipeline.publish import BuildConfig, Publisher
from pith_pipeline.sources.jsonl import iter_jsonl
from pith_pipeline.storage.memory import MemoryStore
from pith_pipeline.tlog import merkle
from pith_pipeline.tlog.append import append_events
from pith_pipeline.tlog.check import check_log_matches_event_store
from pith_pipeline.tlog.checkpoints import current_checkpoint
from pith_pipeline.tlog.log import LogSigner, TileReader, iter_entries, store_fetch
from pith_pipeline.tlog.log_key import LogNotConfiguredError, store_verifier
from pith_pipeline.tlog.lookup import Hints, IdFilter, logged_ids, lookup, not_logged
from pith_pipeline.tlog.pipeline import log_run, sync_log
from pith_pipeline.tlog.recovery import rebuild_log
from pith_pipeline.tlog.stored_events import entry_problem, event_entry, event_key_id, event_store_keys

SIGNER = Ed25519Signer(bytes(range(32)), "pipeline-test")
LOG_KEY = Ed25519Signer(bytes(range(1, 33)), "log")
ORIGIN = "pith.example.org/log"


def log_signer(key: Ed25519Signer = LOG_KEY) -> LogSigner:
    return LogSigner.from_signer(key, ORIGIN)


def publish(store: MemoryStore, lines: list[str], tmp_path: Path, name: str = "in.jsonl") -> Any:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    pub = Publisher(store, SIGNER, BuildConfig(), clock=StepClock(datetime(2026, 7, 1, tzinfo=UTC)))
    return pub.publish(iter_jsonl(path))


def logged_entries(store: MemoryStore) -> list[bytes]:
    v = store_verifier(store)
    from pith_pipeline.tlog.log import read_checkpoint

    cp = read_checkpoint(store_fetch(store), v)
    assert cp is not None
    return [e for _i, e in iter_entries(TileReader(store_fetch(store), cp.size))]


def test_a_run_logs_its_events_in_order_and_the_log_matches_the_event_store(
    tmp_path: Path, sample_lines: list[str]
) -> None:
    store = MemoryStore()
    summary = publish(store, sample_lines[:10], tmp_path)
    run = log_run(store, summary.written, log_signer())
    assert run is not None and run.result is not None and not run.problems
    events = [store.objects[k] for k in event_store_keys(store)]
    assert run.result.size == len(events) > 10
    entries = logged_entries(store)
    # the entry is the event's canonical JSON, and the log alone gives every event id
    assert sorted(entries) == sorted(dumps(loads(e)) for e in events)
    parsed = [loads(e) for e in entries]
    assert [(e["created_at"], e["event_id"]) for e in parsed] == sorted(
        (e["created_at"], e["event_id"]) for e in parsed
    )
    keys = {SIGNER.key_id: SIGNER.public_key_doc()}
    assert all(entry_problem(e, keys) is None for e in entries)
    assert check_log_matches_event_store(store) == []
    # the lookup finds each event's leaf, and the proof checks
    reader = TileReader(store_fetch(store), run.result.size)
    for i, e in enumerate(parsed):
        hex_id = e["event_id"].removeprefix("sha256:")
        assert lookup(store_fetch(store), hex_id, run.result.size) == i
        proof = reader.inclusion_proof(i)
        assert merkle.verify_inclusion(
            i, run.result.size, merkle.leaf_hash(entries[i]), proof, run.result.root
        )
    # the key document names the log key; the registry's own key is untouched
    doc = loads(store.objects["pith-signing-key.json"])
    assert doc["log"]["vkey"] == log_signer().verifier.vkey and doc["key_id"] == SIGNER.key_id
    # a second run of the same input appends nothing
    again = log_run(store, publish(store, sample_lines[:10], tmp_path).written, log_signer())
    assert again is not None and again.result is not None and again.result.appended == 0


def test_a_run_that_died_before_appending_is_healed_by_the_next(
    tmp_path: Path, sample_lines: list[str]
) -> None:
    store = MemoryStore()
    first = publish(store, sample_lines[:5], tmp_path)
    log_run(store, first.written, log_signer())
    publish(store, sample_lines[5:12], tmp_path, "b.jsonl")  # died before log_run
    third = publish(store, sample_lines[12:15], tmp_path, "c.jsonl")
    run = log_run(store, third.written, log_signer())
    assert run is not None and run.result is not None
    assert run.result.size == sum(1 for _ in event_store_keys(store))
    assert check_log_matches_event_store(store) == []


def test_a_store_with_a_log_refuses_an_unlogged_run_and_a_second_log_key(
    tmp_path: Path, sample_lines: list[str]
) -> None:
    store = MemoryStore()
    summary = publish(store, sample_lines[:2], tmp_path)
    assert log_run(store, summary.written, None) is None  # no log, no key: stays without one
    log_run(store, summary.written, log_signer())
    with pytest.raises(LogNotConfiguredError, match="--log-signer"):
        log_run(store, summary.written, None)
    with pytest.raises(KeyFileError, match="a log keeps its key"):
        log_run(store, summary.written, log_signer(Ed25519Signer.generate("other")))


def test_verify_store_names_missing_extra_and_damaged_entries(
    tmp_path: Path, sample_lines: list[str]
) -> None:
    store = MemoryStore()
    summary = publish(store, sample_lines[:3], tmp_path)
    log_run(store, summary.written, log_signer())
    # an event published outside any run
    extra = publish(store, sample_lines[3:4], tmp_path, "x.jsonl")
    missing = [k for k in extra.written if k.startswith("events/")]
    problems = check_log_matches_event_store(store)
    assert len(problems) == len(missing) and all("is not in the log" in p for p in problems)
    append_events(store, log_signer(), missing)
    assert check_log_matches_event_store(store) == []
    # an entry rewritten in its bundle (tiles untouched) is named by index
    size = sum(1 for _ in event_store_keys(store))
    key = f"log/tile/entries/000.p/{size}"
    data = store.objects[key]
    store.objects[key] = data.replace(b'"created_at":"2026', b'"created_at":"2027', 1)
    assert any("does not match the tree" in p for p in check_log_matches_event_store(store))


def test_log_rebuild_creates_a_log_once(tmp_path: Path, sample_lines: list[str]) -> None:
    store = MemoryStore()
    publish(store, sample_lines[:4], tmp_path)
    run = rebuild_log(store, log_signer())
    assert run.result is not None and run.result.size == sum(1 for _ in event_store_keys(store))
    assert check_log_matches_event_store(store) == []
    with pytest.raises(IntegrityError, match="never rewritten"):
        rebuild_log(store, log_signer())


def test_a_damaged_stored_event_is_named_and_not_logged(tmp_path: Path, sample_lines: list[str]) -> None:
    store = MemoryStore()
    summary = publish(store, sample_lines[:3], tmp_path)
    bad = next(k for k in summary.written if k.startswith("events/"))
    store.objects[bad] = store.objects[bad].replace(b'"created_at":"', b'"created_at":"X', 1)
    run = sync_log(store, log_signer(), summary.written)
    assert [p for p in run.problems if bad in p and "not the hash of its content" in p]
    assert run.result is not None and run.result.size == sum(1 for _ in event_store_keys(store)) - 1


def test_finish_run_appends_and_records_the_checkpoint_in_the_run_manifest(
    tmp_path: Path, sample_lines: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from pith_pipeline.runs.manifest import finish_run
    from pith_pipeline.signing.local import generate_key

    priv, _pub, _doc = generate_key(tmp_path / "logkey")
    from pith_pipeline.storage.local import LocalStore

    # what is not passed is not read: the environment names another key and origin
    monkeypatch.setenv("PITH_LOG_SIGNER", str(tmp_path / "not-this-key.json"))
    monkeypatch.setenv("PITH_LOG_ORIGIN", "not.this/log")
    store = LocalStore(tmp_path / "store")  # the index tables (Delta) need a directory or S3
    summary = publish(store, sample_lines[:3], tmp_path)
    key = finish_run(
        store, summary, {"input": "in.jsonl"}, log_signer=f"file:{priv}", log_origin="registry.test/log"
    )
    logged = loads(store.get(key) or b"")["log"]
    checkpoint = (store.get("log/checkpoint") or b"").decode().split("\n")
    assert checkpoint[:3] == ["registry.test/log", str(logged["size"]), logged["root_hash_b64"]]
    assert logged["size"] == logged["appended"] == sum(1 for _ in event_store_keys(store))
    assert check_log_matches_event_store(store) == []


def test_the_runs_own_events_are_appended_without_the_per_value_check(
    tmp_path: Path, sample_lines: list[str]
) -> None:
    """Events whose stored bytes are the ones the run wrote (its ledger) skip the
    per-value canonical check and give the same log; any other event is checked.

    Which path ran shows in what only the full check orders right: keys beyond
    U+D800 (the builder never writes one) sort one way on the fast path and another
    canonically (UTF-16), so an event whose id was made on the fast path passes with
    the ledger's hash and is refused without it (or with another hash)."""
    first, second = MemoryStore(), MemoryStore()
    summary = publish(first, sample_lines[:5], tmp_path)
    publish(second, sample_lines[:5], tmp_path)
    fast = append_events(first, log_signer(), summary.written)  # the ledger: key -> sha256
    slow = append_events(second, log_signer(), list(event_store_keys(second)))  # keys only
    assert fast.result is not None and slow.result is not None and fast.result.appended > 5
    assert logged_entries(first) == logged_entries(second)
    assert fast.result.root == slow.result.root

    key = next(k for k in summary.written if event_key_id(k))
    ev = loads(first.get(key) or b"")
    ev["\ue000"], ev["\U0001f600"] = "private use", "astral"
    digest = content_sha256(ev, trusted=True)
    ev["content_sha256"], ev["event_id"] = digest, "sha256:" + digest
    data = dumps_trusted(ev)
    assert event_entry(data, key, hashlib.sha256(data).hexdigest())[1] == digest
    for ledger in (None, "0" * 64):
        with pytest.raises(IntegrityError, match="not logged"):
            event_entry(data, key, ledger)


def test_a_run_with_a_row_sink_logs_its_events_without_reading_them_back(
    tmp_path: Path, sample_lines: list[str]
) -> None:
    """The entries the publishers made as they wrote (`RowSink`) are appended in the
    log's order; no event is read back from the store, and the log is the one a
    run reading every event from the store makes."""
    from pith_pipeline.index import RowSink

    path = tmp_path / "in.jsonl"
    path.write_text("\n".join(sample_lines[:8]) + "\n", encoding="utf-8")
    first, second = MemoryStore(), MemoryStore()
    with RowSink(tmp_path / "rows", chunk_papers=3) as sink:
        pub = Publisher(
            first,
            SIGNER,
            BuildConfig(),
            clock=StepClock(datetime(2026, 7, 1, tzinfo=UTC)),
            on_bundle=sink.add_bundle,
        )
        summary = pub.publish(iter_jsonl(path))
        sink.flush()
        with counting_gets(first) as reads:
            run = log_run(first, summary.written, log_signer(), entries=sink)
    assert run is not None and run.result is not None and not run.problems
    assert [k for k in reads if k.startswith("events/")] == []
    publish(second, sample_lines[:8], tmp_path, "again.jsonl")
    other = log_run(second, list(event_store_keys(second)), log_signer())
    assert other is not None and other.result is not None
    assert logged_entries(first) == logged_entries(second)
    assert run.result.root == other.result.root and run.result.size == other.result.size
    assert check_log_matches_event_store(first) == []


def test_the_id_filter_holds_ids_compactly_and_the_lookup_confirms_full_ids(
    tmp_path: Path, sample_lines: list[str]
) -> None:
    """`IdFilter` keeps 64 bits an id: no false negatives, and `logged_ids` answers on
    full ids, so an id sharing its first 64 bits with a logged one is not taken as
    logged."""
    import hashlib

    ids = [hashlib.sha256(str(i).encode()).hexdigest() for i in range(5000)]
    f = IdFilter(ids[:4000])
    assert len(f) == 4000 and all(h in f for h in ids[:4000])
    assert sum(h in f for h in ids[4000:]) == 0
    assert f.shards == {h[:2] for h in ids[:4000]}
    store = MemoryStore()
    summary = publish(store, sample_lines[:4], tmp_path)
    run = log_run(store, summary.written, log_signer())
    assert run is not None and run.result is not None
    logged = [k.split("/")[2].removesuffix(".json") for k in event_store_keys(store)]
    twin = logged[0][:16] + ("0" if logged[0][16] != "0" else "1") + logged[0][17:]
    wanted = IdFilter([twin, logged[1], ids[0]])
    assert twin in wanted and logged[0] in wanted  # the filter alone cannot tell them apart
    out = logged_ids(store, wanted, Hints(store, current_checkpoint(store, log_signer().verifier)))
    # asked on full ids: the twin is not logged, the logged id is, the stranger is not
    assert twin not in out and logged[1] in out and ids[0] not in out


def test_the_keys_the_log_lacks_are_found_one_lookup_object_at_a_time(
    tmp_path: Path, sample_lines: list[str]
) -> None:
    """The whole-store comparison (`log sync`, a dead run's marker) goes through the
    keys sorted by lookup object, so it holds one object's ids at a time, never a set
    of every logged id; each lookup object is read once."""
    store = MemoryStore()
    first = publish(store, sample_lines[:6], tmp_path)
    run = log_run(store, first.written, log_signer())
    assert run is not None and run.result is not None
    publish(store, sample_lines[6:9], tmp_path, "b.jsonl")  # not logged
    every = list(event_store_keys(store))
    logged = {k for k in first.written if k.startswith("events/")}
    with counting_gets(store) as reads:
        lacking = list(
            not_logged(
                store, every + every[:3], Hints(store, current_checkpoint(store, log_signer().verifier))
            )
        )  # repeats: once
    assert sorted(lacking) == sorted(set(every) - logged) != []
    index_reads = [k for k in reads if k.startswith("log/index/")]
    assert len(index_reads) == len(set(index_reads)) == len({k.split("/")[2][:2] for k in every})
    assert (
        list(not_logged(store, every, Hints(store, None))) == every
    )  # an empty log lacks them all (no read)


@pytest.mark.parametrize(
    "rename",
    [
        lambda k: k + "\n",  # `$` admitted a trailing newline
        lambda k: "events/../" + k.rsplit("/", 1)[1],  # a subject that is not a Pith number's body
    ],
)
def test_a_copy_of_an_event_under_a_look_alike_key_is_not_logged(
    tmp_path: Path, sample_lines: list[str], rename: Any
) -> None:
    """Keys can be planted by anyone who can write the store: only a key of the event
    store's exact form names an event, so a copy under a look-alike name is never a
    second log entry for one event."""
    store = MemoryStore()
    publish(store, sample_lines[:2], tmp_path)
    genuine = list(event_store_keys(store))
    planted = rename(genuine[0])
    store.objects[planted] = store.objects[genuine[0]]
    run = rebuild_log(store, log_signer())
    assert run.result is not None and run.result.size == len(genuine)
    entries = logged_entries(store)
    assert len(set(entries)) == len(entries) == len(genuine)
    assert planted not in set(event_store_keys(store))


def test_the_log_key_and_origin_are_what_the_caller_passes_not_the_environment(
    tmp_path: Path, sample_lines: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The edge resolves `log_signer` and `log_origin` from its settings and passes
    them: a variable set here reaches nothing in the log's code."""
    from pith_pipeline.signing.local import generate_key
    from pith_pipeline.tlog.log_key import log_signer_for

    priv, _pub, _doc = generate_key(tmp_path / "logkey")
    monkeypatch.setenv("PITH_LOG_SIGNER", f"file:{priv}")
    monkeypatch.setenv("PITH_LOG_ORIGIN", "from-the-environment.test/log")
    store = MemoryStore()
    summary = publish(store, sample_lines[:2], tmp_path)
    assert log_run(store, summary.written, None) is None  # no key passed: no log
    assert not store.exists("log/checkpoint")
    assert log_signer_for(None, store) is None
    derived = log_signer_for(f"file:{priv}", store)  # no origin passed: the key document's host
    assert derived is not None and not derived.origin.startswith("from-the-environment")
    log = log_signer_for(f"file:{priv}", store, "given.test/log")
    assert log is not None and log.origin == "given.test/log"
    log_run(store, summary.written, log)
    assert (store.get("log/checkpoint") or b"").startswith(b"given.test/log\n")
    again = log_signer_for(f"file:{priv}", store)  # the key document names the origin now
    assert again is not None and again.origin == "given.test/log"


def test_no_module_of_the_log_reads_the_environment() -> None:
    """Settings are resolved at the edge: the log's modules take them as parameters
    (`tlog.run_log` and `tlog.client` take theirs from the command's settings)."""
    import ast

    import pith_pipeline.tlog as tlog

    readers = []
    for path in sorted(Path(tlog.__file__).parent.glob("*.py")):
        if path.stem in ("run_log", "client"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            name = node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", None)
            if name in ("from_env", "environ", "getenv", "flag"):
                readers.append(f"{path.name}:{node.lineno} {name}")
    assert readers == []


@pytest.mark.parametrize("value", [1.5, 2**60], ids=["float", "integer-beyond-2**53"])
def test_a_stored_event_canonical_json_cannot_hold_is_named_and_the_rest_logged(
    tmp_path: Path, sample_lines: list[str], value: object
) -> None:
    """A value RFC 8785 here refuses (a float, an integer beyond 2**53), planted in a
    stored event under its own id, is one named problem: the append goes on, and the
    log check names the event as missing rather than failing whole."""
    store = MemoryStore()
    summary = publish(store, sample_lines[:3], tmp_path)
    bad = next(k for k in summary.written if event_key_id(k))
    ev = loads(store.get(bad) or b"")
    ev["planted"] = value
    planted = json.dumps(ev, separators=(",", ":"), sort_keys=True).encode()
    store.objects[bad] = planted  # its id still names it; the content changed
    run = sync_log(store, log_signer(), list(event_store_keys(store)))
    assert [p for p in run.problems if bad in p and "not logged" in p]
    assert run.result is not None and run.result.size == sum(1 for _ in event_store_keys(store)) - 1
    assert [p for p in check_log_matches_event_store(store) if bad in p] == [
        f"{store.url}/{bad}: event is not in the log"
    ]
    assert entry_problem(planted, {}) is not None
