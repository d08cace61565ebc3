"""An event larger than a tlog-tiles entry (65,535 bytes) is logged, not refused.

A real record with a collaboration-sized author list (3,000 to 5,000 names, as
ATLAS, CMS and LIGO papers have) makes a graph_snapshot event of ~74 KB; the log
holds it as a hash-committed entry, and every reader (verify STORE, `log sync`,
the monitor, `log prove`, Go's sumdb/tlog) accepts it.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from test_go_interop import (
    _b64,
    check_with_go,
    interop,  # noqa: F401  (the Go checker fixture)
)
from test_log_cli import run

from pith_pipeline.core.canonical_json import dumps, loads
from pith_pipeline.storage.local import LocalStore
from pith_pipeline.tlog.entry import committed_entry, log_entry, parse_committed
from pith_pipeline.tlog.log import TileReader, iter_entries, store_fetch
from pith_pipeline.tlog.monitor import registry_keys
from pith_pipeline.tlog.stored_events import entry_problem
from pith_pipeline.tlog.tiles import MAX_ENTRY, decode_bundle, encode_bundle

LOG_SIGNER = ("--log-signer", "logkey/pith-private-key.json")


def collaboration(record: dict[str, Any], n: int) -> dict[str, Any]:
    """`record` with `n` generated authors (its other fields as they are)."""
    people = [(f"Physicist{i:04d}", f"Ann-Marie{i % 97} Q.") for i in range(n)]
    out = dict(record)
    out["authors"] = ", ".join(f"{first} {last}" for last, first in people)
    out["authors_parsed"] = [[last, first, ""] for last, first in people]
    return out


def entries_of(store_dir: Path) -> list[bytes]:
    from pith_pipeline.tlog.log import read_checkpoint
    from pith_pipeline.tlog.log_key import store_verifier

    store = LocalStore(str(store_dir))
    cp = read_checkpoint(store_fetch(store), store_verifier(store))
    assert cp is not None
    return [e for _i, e in iter_entries(TileReader(store_fetch(store), cp.size))]


@pytest.mark.parametrize("authors", [3000, 5000])
def test_a_collaboration_paper_is_published_and_logged(
    tmp_path: Path,
    asset: Any,
    interop: Path,  # noqa: F811  (the imported fixture)
    authors: int,
) -> None:
    cwd = tmp_path
    lines = asset("arxiv-sample.jsonl").read_text(encoding="utf-8").splitlines()
    big = collaboration(json.loads(lines[3]), authors)
    (cwd / "in.jsonl").write_text(
        "\n".join([*lines[:3], json.dumps(big), *lines[4:8]]) + "\n", encoding="utf-8"
    )
    for d in ("keys", "logkey"):
        assert run("keys", "generate", "--out", d, cwd=cwd).returncode == 0
    argv = (
        "build",
        "--input",
        "in.jsonl",
        "--store",
        "out",
        "--key",
        "keys/pith-private-key.json",
        *LOG_SIGNER,
    )
    r = run(*argv, "--workers", "1", cwd=cwd)
    assert r.returncode == 0, r.stderr

    entries = entries_of(cwd / "out")
    committed = [(i, parse_committed(e)) for i, e in enumerate(entries) if parse_committed(e)]
    assert committed, "no event was large enough to need a committed entry"
    store = LocalStore(str(cwd / "out"))
    keys_doc = json.loads((cwd / "out/pith-signing-key.json").read_text())
    assert keys_doc  # the registry's key document is published
    for _i, c in committed:
        assert c is not None
        stored = loads(store.get(c.event_key) or b"")
        canonical = dumps(stored)
        assert len(canonical) > MAX_ENTRY and c.matches(canonical)
        # the auditor recomputes the id from the stored event the entry commits to
        assert stored["event_id"] == "sha256:" + c.event_hex
        assert hashlib.sha256(canonical).hexdigest() == c.sha256
    # the monitor's check: the committed entry against the stored event, then the event
    doc = (cwd / "out/pith-signing-key.json").read_bytes()
    registry = registry_keys(lambda: doc, "key document")
    for i, c in committed:
        assert c is not None
        assert entry_problem(entries[i], registry, store.get) is None
        other = next(e for e in entries if e.startswith(b"{"))  # another, valid event
        said = entry_problem(entries[i], registry, lambda k, o=other, at=c.event_key: o if k == at else None)
        assert said is not None and c.event_key in said
        said = entry_problem(entries[i], registry, lambda _k: None)
        assert said is not None and "missing" in said
    # every other entry is the event inline, as before
    assert all(e.startswith(b"{") for e in entries if parse_committed(e) is None)

    v = run("verify", "out", cwd=cwd)
    assert v.returncode == 0, v.stdout + v.stderr
    sync = run("log", "sync", "--store", "out", *LOG_SIGNER, cwd=cwd)
    assert sync.returncode == 0, sync.stderr
    assert entries_of(cwd / "out") == entries  # a no-op
    again = run(*argv, "--workers", "1", cwd=cwd)
    assert again.returncode == 0, again.stderr
    assert entries_of(cwd / "out") == entries
    mon = run("log", "monitor", "out", "--state", "mon.json", cwd=cwd)
    assert mon.returncode == 0, mon.stdout + mon.stderr
    _idx, c = committed[0]
    assert c is not None
    proof = run("log", "prove", "sha256:" + c.event_hex, "--log", "out", cwd=cwd)
    assert proof.returncode == 0, proof.stdout + proof.stderr

    size = len(entries)
    reader = TileReader(store_fetch(store), size)
    request = {
        "dir": str(cwd / "out/log"),
        "vkey": json.loads(mon_state(cwd))["vkey"],
        "inclusion": [
            {"index": i, "proof": [_b64(h) for h in reader.inclusion_proof(i)]} for i, _ in committed
        ],
        "consistency": [],
    }
    got = check_with_go(interop, request)
    assert got.returncode == 0, got.stdout + got.stderr
    assert got.stdout.count("ok inclusion") == len(committed)


def mon_state(cwd: Path) -> str:
    return (cwd / "mon.json").read_text(encoding="utf-8")


def test_the_entry_form_changes_at_exactly_65535_bytes() -> None:
    key = "events/" + "A" * 26 + "/" + "ab" * 32 + ".json"
    hex_id = "ab" * 32
    for n in (MAX_ENTRY - 1, MAX_ENTRY):
        body = b"{" + b"x" * (n - 2) + b"}"
        assert log_entry(body, hex_id, key) == body
        assert decode_bundle(encode_bundle([body]), 1, "b") == [body]  # the uint16 prefix holds it
    for n in (MAX_ENTRY + 1, MAX_ENTRY + 2, 74_000):
        body = b"{" + b"x" * (n - 2) + b"}"
        entry = log_entry(body, hex_id, key)
        c = parse_committed(entry)
        assert c is not None and c.size == n and c.matches(body) and not c.matches(body[:-1] + b" ")
        assert entry == committed_entry(body, hex_id, key)
        assert decode_bundle(encode_bundle([entry]), 1, "b") == [entry]
    with pytest.raises(ValueError, match="65535"):
        encode_bundle([b"x" * (MAX_ENTRY + 1)])


def test_the_committed_form_is_exact() -> None:
    key = "events/" + "B" * 26 + "/" + "cd" * 32 + ".json"
    body = b'{"a":1}'
    entry = committed_entry(body, "cd" * 32, key)
    assert entry == (
        b"pith-log-entry/sha256/v1\n"
        b"event_id sha256:" + b"cd" * 32 + b"\n"
        b"event_key " + key.encode() + b"\n"
        b"size 7\n"
        b"sha256 " + hashlib.sha256(body).hexdigest().encode() + b"\n"
    )
    # anything but exactly that form is not a committed entry
    for bad in (entry + b"\n", entry.replace(b"size 7", b"size 07"), entry.replace(b"cd", b"CD", 1)):
        assert parse_committed(bad) is None
    # an entry naming a key whose id is another event's is refused
    assert parse_committed(entry.replace(b"/" + b"cd" * 32, b"/" + b"ef" * 32)) is None
    # the monitor's check of an entry: a committed one is checked against the stored event
    assert entry_problem(entry, {}, lambda _k: None) is not None


def test_a_raw_append_of_an_oversize_entry_names_it_and_moves_nothing(tmp_path: Path) -> None:
    from pith_pipeline.core.keys import Ed25519Signer
    from pith_pipeline.errors import IntegrityError
    from pith_pipeline.tlog.log import LogSigner, append_entries

    store = LocalStore(str(tmp_path / "store"))
    key = Ed25519Signer(bytes(range(32)), "log")
    log = LogSigner.from_signer(key, "pith.example.org/log")
    append_entries(store, log, [b"a", b"b"])
    before = store.get("log/checkpoint")
    with pytest.raises(IntegrityError, match=r"log entry 3 is 65536 bytes"):
        append_entries(store, log, [b"c", b"x" * (MAX_ENTRY + 1)])
    assert store.get("log/checkpoint") == before
    append_entries(store, log, [b"c", b"x" * MAX_ENTRY])  # the limit itself fits
    assert TileReader(store_fetch(store), 4).entries(0)[3] == b"x" * MAX_ENTRY
