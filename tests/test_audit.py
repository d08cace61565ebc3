"""The store audit: every damaged object is one finding naming it, and the rest is
still checked; `subject_events` gives the publisher the verified events of a subject."""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from testclock import StepClock

from pith_pipeline.audit import (
    MAX_EVENT_BYTES,
    Finding,
    KeyRing,
    audit_store,
    keyring_of_store,
    subject_events,
)
from pith_pipeline.core.canonical_json import dumps_compact
from pith_pipeline.core.events import finalize_event, sign_event
from pith_pipeline.core.keys import Ed25519Signer
from pith_pipeline.core.verify import Report
from pith_pipeline.publish import BuildConfig, Publisher
from pith_pipeline.sources.jsonl import iter_jsonl
from pith_pipeline.storage.local import LocalStore

SAMPLE = Path(__file__).parent / "data" / "arxiv-sample.jsonl"
SIGNER = Ed25519Signer(b"\x05" * 32, "pith-audit-test")


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("audit") / "store"
    Publisher(
        LocalStore(root), SIGNER, BuildConfig(), clock=StepClock(datetime(2026, 1, 5, tzinfo=UTC))
    ).publish(iter_jsonl(SAMPLE))
    return root


@pytest.fixture
def store(built: Path, tmp_path: Path) -> LocalStore:
    """A private copy of the built store, to damage."""
    root = tmp_path / "store"
    shutil.copytree(built, root)
    return LocalStore(root)


def audit(store: LocalStore) -> tuple[list[Finding], list[Report]]:
    reports: list[Report] = []
    return list(audit_store(store, on_report=reports.append)), reports


def some_event(store: LocalStore, kind: str = "graph_snapshot") -> tuple[Path, dict[str, Any]]:
    for path in sorted(store.root.glob("events/*/*.json")):
        ev = json.loads(path.read_bytes())
        if ev["event_type"] == kind:
            return path, ev
    raise AssertionError(kind)


def rel(store: LocalStore, path: Path) -> str:
    return str(path.relative_to(store.root))


def test_a_sound_store_has_no_findings(store: LocalStore) -> None:
    findings, reports = audit(store)
    assert findings == []
    assert len(reports) == 30 and all(r.ok for r in reports)


def test_a_deleted_event_is_named(store: LocalStore) -> None:
    path, ev = some_event(store)
    path.unlink()
    findings, reports = audit(store)
    body = path.parent.name
    assert [f.line() for f in findings] == [
        f"pith/{body}/bundle.json: lists event {ev['event_id']}, which is not in events/{body}/ (deleted?)"
    ]
    assert len(reports) == 30  # every other bundle still checked


def test_a_tampered_valid_json_event_is_named(store: LocalStore) -> None:
    path, ev = some_event(store)
    ev["payload"]["graph_snapshot"]["paper"]["title"] = "Something else"
    path.write_bytes(dumps_compact(ev))
    findings, _ = audit(store)
    assert [(f.key, f.reason) for f in findings] == [
        (rel(store, path), "content_sha256 does not recompute (the content was changed)")
    ]


def test_a_tampered_rehashed_event_fails_its_signature_and_its_name(store: LocalStore) -> None:
    path, ev = some_event(store)
    ev["payload"]["graph_snapshot"]["paper"]["title"] = "Something else"
    finalize_event(ev)
    path.write_bytes(dumps_compact(ev))
    findings, _ = audit(store)
    assert [f.key for f in findings] == [rel(store, path)]
    assert "signature does not verify" in findings[0].reason


def test_a_non_json_event_is_named(store: LocalStore) -> None:
    path, _ = some_event(store)
    path.write_bytes(b"\x00garbage")
    findings, _ = audit(store)
    assert [f.key for f in findings] == [rel(store, path)]
    assert findings[0].reason.startswith("not valid JSON")


def test_an_extra_event_is_named(store: LocalStore) -> None:
    """A sound event (our key, this subject) that the bundle does not list."""
    path, ev = some_event(store)
    ev["created_at"] = "2026-01-06T00:00:00Z"
    finalize_event(ev)
    sign_event(ev, SIGNER, "2026-01-06T00:00:00.000000Z")
    extra = path.parent / f"{ev['content_sha256']}.json"
    extra.write_bytes(dumps_compact(ev))
    findings, _ = audit(store)
    assert [(f.key, f.reason) for f in findings] == [
        (rel(store, extra), f"stored, but pith/{path.parent.name}/bundle.json does not list it")
    ]


def test_an_unsigned_or_foreign_event_is_named(store: LocalStore) -> None:
    path, ev = some_event(store)
    sign_event(ev, Ed25519Signer(b"\x09" * 32, "pith-audit-test"), ev["signature"]["signed_at"])
    path.write_bytes(dumps_compact(ev))  # same id and name, signed by an impostor key
    findings, _ = audit(store)
    assert [f.key for f in findings] == [rel(store, path)]
    assert "does not list (or with a wrong fingerprint)" in findings[0].reason


def test_a_huge_event_is_named_not_read(store: LocalStore) -> None:
    path, _ = some_event(store)
    path.write_bytes(b" " * (MAX_EVENT_BYTES + 1))
    findings, _ = audit(store)
    assert [f.key for f in findings] == [rel(store, path)]
    assert "limit" in findings[0].reason


@pytest.mark.parametrize("damage", ["delete", "change"])
def test_well_known_copy_and_state(store: LocalStore, damage: str) -> None:
    body = next(store.root.glob("pith/*")).name
    wk = store.root / ".well-known/pith" / body / "bundle.json"
    state = store.root / "pith" / body / "state.json"
    if damage == "delete":
        wk.unlink()
        state.unlink()
        expected = {
            (f"pith/{body}/state.json", "missing"),
            (f".well-known/pith/{body}/bundle.json", "missing"),
        }
    else:
        wk.write_bytes(wk.read_bytes() + b"\n")
        doc = json.loads(state.read_bytes())
        doc["valid_event_count"] += 1
        state.write_bytes(dumps_compact(doc))
        expected = {
            (f"pith/{body}/state.json", "differs"),
            (f".well-known/pith/{body}/bundle.json", "differs"),
        }
    findings, _ = audit(store)
    assert {(f.key, f.reason.split(" ")[0]) for f in findings} == expected


def test_hostile_bundles_fail_alone(store: LocalStore) -> None:
    bundles = sorted(store.root.glob("pith/*/bundle.json"))
    float_b, int_b, junk_b, dup_b = bundles[:4]
    for path, value in ((float_b, 1.5), (int_b, 2**60)):
        doc = json.loads(path.read_bytes())
        doc["canonical_record"]["metadata"]["primary_cat"] = value
        path.write_bytes(json.dumps(doc).encode())
    junk_b.write_bytes(b"{ not json")
    dup_b.write_bytes(b'{"pith_number":"pith:2000:AAAA",' + dup_b.read_bytes()[1:])
    findings, reports = audit(store)
    named = {f.key for f in findings}
    assert {rel(store, p) for p in (float_b, int_b, junk_b, dup_b)} <= named
    assert {f.reason.split(" (")[0] for f in findings if f.key == rel(store, junk_b)} == {"unreadable bundle"}
    assert "duplicate key" in next(f.reason for f in findings if f.key == rel(store, dup_b))
    assert len(reports) == 28 and sum(r.ok for r in reports) == 26  # the others all checked


def test_pointers(store: LocalStore) -> None:
    pointers = sorted(store.root.glob("arxiv/*.json"))
    broken, wrong, gone = pointers[:3]
    broken.write_bytes(b'{"records": 3}')
    doc = json.loads(wrong.read_bytes())
    doc["records"][0]["record_created"] = "sha256:" + "0" * 64
    wrong.write_bytes(json.dumps(doc).encode())
    gone.unlink()
    findings, _ = audit(store)
    by_key = {f.key: f.reason for f in findings}
    assert set(by_key) == {rel(store, p) for p in (broken, wrong, gone)}
    assert by_key[rel(store, broken)].startswith("unreadable arXiv pointer")
    assert "not a verified event" in by_key[rel(store, wrong)]
    assert by_key[rel(store, gone)].startswith("missing, but bundles exist")


def test_a_pointer_with_no_records_is_named_as_the_publisher_refuses_it(store: LocalStore) -> None:
    """One rule (`ArxivPointer.parse`): an empty record list names no newest version."""
    path = sorted(store.root.glob("arxiv/*.json"))[0]
    doc = json.loads(path.read_bytes())
    path.write_bytes(json.dumps({"arxiv_id": doc["arxiv_id"], "records": []}).encode())
    findings, _ = audit(store)
    assert [f.line() for f in findings] == [
        f"{rel(store, path)}: unreadable arXiv pointer (records must be a non-empty list)"
    ]


def test_key_document(store: LocalStore) -> None:
    (store.root / "pith-signing-key.json").unlink()
    findings, _ = audit(store)
    assert findings[0] == Finding("pith-signing-key.json", "missing: no event signature can be checked")
    assert len(findings) > 30  # and then no event's signature counts
    (store.root / "pith-signing-key.json").write_bytes(b"[]")
    ring, problems = keyring_of_store(store)
    assert len(ring) == 0 and problems[0].key == "pith-signing-key.json"


def test_subject_events_for_the_publisher(store: LocalStore) -> None:
    ring, problems = keyring_of_store(store)
    assert problems == [] and len(ring) == 1
    path, _ = some_event(store)
    body = path.parent.name
    good = subject_events(store, body, ring)
    assert good.ok and len(good.events) == 2 and "2 stored events verified" in good.describe()
    good.raise_for_problems()
    path.write_bytes(b"{}")
    bad = subject_events(store, body, ring)
    assert not bad.ok and len(bad.events) == 1
    assert bad.problems == [(rel(store, path), bad.problems[0][1])]
    assert bad.describe().startswith(rel(store, path) + ": malformed")
    err = bad.error()
    assert err.key == rel(store, path) and "run `verify`" in str(err)
    with pytest.raises(type(err)):
        bad.raise_for_problems()
    # a key ring without our key: every event is a problem
    assert len(subject_events(store, body, KeyRing([])).problems) == 2


def test_the_audit_in_threads_finds_and_reports_the_same_in_the_same_order(store: LocalStore) -> None:
    """On S3 subjects are audited several at once (each is GETs waiting on the
    network); what is found, and in which order, must not depend on it."""
    path, _ = some_event(store)
    path.write_bytes(b"\x00garbage")
    (store.root / "arxiv").joinpath(
        sorted(p.name for p in (store.root / "arxiv").glob("*.json"))[-1]
    ).write_bytes(b"{")
    reports: dict[int, list[Report]] = {1: [], 4: []}
    found = {n: list(audit_store(store, on_report=reports[n].append, concurrency=n)) for n in (1, 4)}
    assert found[1] == found[4] and len(found[1]) >= 2
    assert [r.to_json() for r in reports[1]] == [r.to_json() for r in reports[4]]
    assert len(reports[4]) == 30


def test_a_pointer_listing_another_papers_record_is_named(store: LocalStore) -> None:
    """A pointer is for its arXiv id only: one that lists the (genuine, verified) record
    of another paper would make a publisher sign a correction across papers."""
    first, second = sorted(store.root.glob("arxiv/*.json"))[:2]
    doc, other = json.loads(first.read_bytes()), json.loads(second.read_bytes())
    doc["records"], doc["latest"] = other["records"], other["latest"]
    first.write_bytes(json.dumps(doc).encode())
    findings, _ = audit(store)
    reasons = [f.reason for f in findings if f.key == rel(store, first)]
    want = f"but its bundle is version {other['records'][0]['version']} of {other['arxiv_id']}"
    assert any(r.endswith(want) for r in reasons), reasons


@pytest.mark.parametrize(
    "reserialise",
    [
        lambda raw: json.dumps(json.loads(raw), indent=1).encode(),  # whitespace
        lambda raw: raw.replace(b'"event_type"', b'"\\u0065vent_type"'),  # an escape
        lambda raw: raw + b"\n",  # a trailing byte
        lambda raw: json.dumps(json.loads(raw), separators=(",", ":"), sort_keys=True).encode(),  # key order
    ],
    ids=["whitespace", "escape", "newline", "key-order"],
)
def test_an_event_re_serialised_with_the_same_content_is_named(store: LocalStore, reserialise: Any) -> None:
    """Same content, same hash, other bytes: not what the publisher wrote, so found."""
    path, _ = some_event(store)
    path.write_bytes(reserialise(path.read_bytes()))
    findings, _ = audit(store)
    assert [f.key for f in findings] == [rel(store, path)], findings
    assert "re-serialised" in findings[0].reason


def test_a_bundle_or_state_re_serialised_with_the_same_content_is_named(store: LocalStore) -> None:
    body = sorted(p.name for p in (store.root / "pith").iterdir())[0]
    bundle, state = store.root / "pith" / body / "bundle.json", store.root / "pith" / body / "state.json"
    well = store.root / ".well-known" / "pith" / body / "bundle.json"
    pretty = json.dumps(json.loads(bundle.read_bytes()), indent=1).encode()
    for p in (bundle, well):  # both copies, so they still agree
        p.unlink()
        p.write_bytes(pretty)
    state.write_bytes(json.dumps(json.loads(state.read_bytes()), indent=1).encode())
    findings, _ = audit(store)
    assert sorted(f.key for f in findings) == sorted([rel(store, bundle), rel(store, state)]), findings
    assert all("re-serialised" in f.reason for f in findings)


def test_an_object_that_is_a_symlink_out_of_the_store_is_named_unread(
    store: LocalStore, tmp_path: Path
) -> None:
    """A genuine event copied outside the store and linked back: the local store reads
    only its own files, so the link is a finding, not a sound event."""
    path, _ = some_event(store)
    outside = tmp_path / "elsewhere.json"
    outside.write_bytes(path.read_bytes())
    path.unlink()
    path.symlink_to(outside)
    findings, _ = audit(store)
    assert [f.key for f in findings] == [rel(store, path)]
    assert "symbolic link" in findings[0].reason
