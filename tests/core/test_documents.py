"""The typed stored documents: one rule each (`parse`), one form each (`to_bytes`).

Round trips to identical bytes on the registry's own bundle and on a store built
from the sample; every malformed form is an `IntegrityError` that names the key.
"""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from testclock import StepClock

from pith_pipeline.core.arxiv_pointer import (
    ArxivPointer,
    PointerRecord,
    first_record_created,
    listed_bodies,
    pointer_entry,
    pointer_record_problem,
    pointer_sort_key,
)
from pith_pipeline.core.canonical_json import dumps_compact, dumps_pretty
from pith_pipeline.core.documents import Bundle, Event, KeyDocument, State
from pith_pipeline.core.keys import Ed25519Signer
from pith_pipeline.errors import IntegrityError
from pith_pipeline.publish import BuildConfig, Publisher
from pith_pipeline.sources.jsonl import iter_jsonl
from pith_pipeline.storage.local import LocalStore

DATA = Path(__file__).resolve().parents[1] / "data"
VECTOR = DATA / "pith-bundle-1909.11150.json"
SIGNER = Ed25519Signer(b"\x07" * 32, "pith-documents-test")
BODY = "CDU3BX5RMZUBC43H42ZNV4JXNI"
PN = f"pith:2019:{BODY}"
EID = "sha256:" + "a" * 64


@pytest.fixture(scope="module")
def sample_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("documents") / "store"
    Publisher(
        LocalStore(root), SIGNER, BuildConfig(), clock=StepClock(datetime(2026, 1, 5, tzinfo=UTC))
    ).publish(iter_jsonl(DATA / "arxiv-sample.jsonl"))
    return root


def _objects(root: Path, pattern: str) -> list[tuple[str, bytes]]:
    found = [(str(p.relative_to(root)), p.read_bytes()) for p in sorted(root.glob(pattern))]
    assert found, pattern
    return found


# -- round trips -----------------------------------------------------------------------


def test_the_registry_bundle_its_state_and_events_round_trip_to_identical_bytes() -> None:
    raw = VECTOR.read_bytes()
    bundle = Bundle.parse(raw, "pith/x/bundle.json")
    assert bundle.to_bytes() == raw
    assert bundle.pith_number == PN and bundle.arxiv_source == ("1909.11150", 1)
    state_raw = dumps_compact(bundle.doc["state"])
    assert State.parse(state_raw, "pith/x/state.json").to_bytes() == state_raw
    for ev in bundle.events or []:
        one = dumps_compact(ev)
        assert one in raw  # the bundle's copy of the event, byte for byte
        event = Event.parse(one, "events/x.json")
        assert event.to_bytes() == one and event.subject == PN


@pytest.mark.parametrize(
    ("pattern", "model"),
    [
        ("pith/*/bundle.json", Bundle),
        (".well-known/pith/*/bundle.json", Bundle),
        ("pith/*/state.json", State),
        ("events/*/*.json", Event),
        ("arxiv/**/*.json", ArxivPointer),
        ("pith-signing-key.json", KeyDocument),
    ],
)
def test_every_document_of_the_sample_store_round_trips(sample_store: Path, pattern: str, model: Any) -> None:
    for key, raw in _objects(sample_store, pattern):
        assert model.parse(raw, key).to_bytes() == raw, key


def test_a_pointer_rebuilt_from_its_records_is_the_stored_pointer(sample_store: Path) -> None:
    for key, raw in _objects(sample_store, "arxiv/**/*.json"):
        parsed = ArxivPointer.parse(raw, key)
        shuffled = reversed(parsed.records)
        assert ArxivPointer.of(parsed.arxiv_id, shuffled).to_bytes() == raw


def _stored_events(root: Path) -> dict[str, list[dict[str, Any]]]:
    by_body: dict[str, list[dict[str, Any]]] = {}
    for key, raw in _objects(root, "events/*/*.json"):
        by_body.setdefault(key.split("/")[1], []).append(Event.parse(raw, key).doc)
    return by_body


def test_pointers_re_derived_from_the_events_are_the_stored_pointers(sample_store: Path) -> None:
    """What `rebuild` writes from the verified events is what the publisher wrote."""
    records: dict[str, list[PointerRecord]] = {}
    for events in _stored_events(sample_store).values():
        creation = first_record_created(events)
        assert creation is not None
        got = pointer_entry(creation)
        assert got is not None
        records.setdefault(got[0], []).append(got[1])
    stored = dict(_objects(sample_store, "arxiv/**/*.json"))
    assert {f"arxiv/{a}.json" for a in records} == set(stored)
    for arxiv_id, entries in records.items():
        assert ArxivPointer.of(arxiv_id, entries).to_bytes() == stored[f"arxiv/{arxiv_id}.json"]


def test_a_pointer_record_counts_only_as_far_as_its_stored_record_created_says(sample_store: Path) -> None:
    events = _stored_events(sample_store)
    key, raw = _objects(sample_store, "arxiv/**/*.json")[0]
    pointer = ArxivPointer.parse(raw, key)
    record = pointer.records[0]
    own = events[record.body]
    assert pointer_record_problem(pointer.arxiv_id, record, own) is None
    wrong_version = PointerRecord(record.version + 1, *astuple_tail(record))
    assert "but its record_created is of" in str(pointer_record_problem(pointer.arxiv_id, wrong_version, own))
    other_paper = pointer_record_problem("0000.00000", record, own)
    assert other_paper is not None and "as version" in other_paper
    assert "not a stored event" in str(pointer_record_problem(pointer.arxiv_id, record, []))
    assert first_record_created([]) is None


def astuple_tail(record: PointerRecord) -> tuple[str, str, str, str]:
    return (record.pith_number, record.record_created, record.created_at, record.canonical_sha256)


def test_the_key_document_built_by_a_writer_is_the_stored_one(sample_store: Path) -> None:
    raw = (sample_store / "pith-signing-key.json").read_bytes()
    doc = KeyDocument.parse(raw, "pith-signing-key.json")
    assert KeyDocument.of(doc.keys[0], doc.keys).to_bytes() == raw
    assert doc.log is None


# -- the arXiv pointer's rule ------------------------------------------------------------


def _record(version: int, pn: str = PN, created_at: str = "2026-01-05T00:00:00Z") -> dict[str, Any]:
    return {
        "version": version,
        "pith_number": pn,
        "record_created": EID,
        "created_at": created_at,
        "canonical_sha256": "b" * 64,
    }


def _pointer(records: list[dict[str, Any]], latest: Any = None, **extra: Any) -> bytes:
    doc = {"arxiv_id": "1909.11150", "records": records, "latest": latest or records[-1]["pith_number"]}
    return dumps_pretty({**doc, **extra}) + b"\n"


KEY = "arxiv/1909.11150.json"
OTHER_PN = "pith:2019:" + "B" * 26


def test_one_sort_key_orders_versions_and_names_the_latest() -> None:
    older = PointerRecord(1, OTHER_PN, EID, "2026-01-06T00:00:00Z", "b" * 64)
    newer = PointerRecord(2, PN, EID, "2026-01-05T00:00:00Z", "b" * 64)
    pointer = ArxivPointer.of("1909.11150", [newer, older])
    assert pointer.records == (older, newer) and pointer.latest == PN
    assert sorted([newer, older], key=pointer_sort_key) == [older, newer]
    assert pointer.with_record(newer) is pointer
    assert pointer.newest_at_or_below(1, besides=PN) == older
    assert ArxivPointer.parse(pointer.to_bytes(), KEY) == pointer


def test_an_empty_record_list_is_refused_by_the_rule_and_by_the_constructor() -> None:
    """A pointer is written with its paper's first record; with none it names no
    newest version, so a stored one is damaged (the publisher and the audit agree)."""
    raw = dumps_pretty({"arxiv_id": "1909.11150", "records": []}) + b"\n"
    with pytest.raises(IntegrityError) as caught:
        ArxivPointer.parse(raw, KEY)
    assert str(caught.value) == f"{KEY}: unreadable arXiv pointer (records must be a non-empty list)"
    with pytest.raises(ValueError, match="needs a record"):
        ArxivPointer.of("1909.11150", [])
    one = _pointer([_record(1)])
    assert ArxivPointer.parse(one, KEY).records[0].version == 1


HOSTILE_POINTERS: dict[str, tuple[bytes, str]] = {
    "not JSON": (b'{"arxiv_id": ', "unreadable arXiv pointer ("),
    "not UTF-8": (b'{"arxiv_id": "\xff"}', "unreadable arXiv pointer ("),
    "duplicate member": (b'{"arxiv_id": "1", "arxiv_id": "2"}', "duplicate key"),
    "a list": (b"[]", "not a JSON object"),
    "records not a list": (b'{"arxiv_id": "1909.11150", "records": 3}', "non-empty list"),
    "another paper's id": (_pointer([_record(1)]).replace(b"1909.11150", b"1909.11151", 1), "arxiv_id is"),
    "latest wrong": (_pointer([_record(1), _record(2, OTHER_PN)], latest=PN), "latest is"),
    "latest missing": (dumps_pretty({"arxiv_id": "1909.11150", "records": [_record(1)]}), "latest is"),
    "extra member": (_pointer([_record(1)], note="trust me"), "unknown field 'note'"),
    "extra record field": (_pointer([{**_record(1), "x": 1}]), "unknown field 'x'"),
    "missing record field": (
        _pointer([{k: v for k, v in _record(1).items() if k != "created_at"}]),
        "no created_at",
    ),
    "version a string": (_pointer([{**_record(1), "version": "1"}]), "version '1'"),
    "version a bool": (_pointer([{**_record(1), "version": True}]), "version True"),
    "version zero": (_pointer([_record(0)]), "version 0"),
    "version huge": (
        _pointer([_record(1)]).replace(b'"version": 1', b'"version": 99999999999999999999'),
        "version",
    ),
    "not a Pith number": (_pointer([_record(1, "pith:nope")]), "not a Pith number"),
    "record_created not an id": (_pointer([{**_record(1), "record_created": "x"}]), "not an event id"),
    "canonical_sha256 not hex": (_pointer([{**_record(1), "canonical_sha256": "Z" * 64}]), "not a SHA-256"),
    "listed twice": (_pointer([_record(1), _record(1)]), "listed twice"),
    "record not an object": (
        _pointer([_record(1)]).replace(b'"records": [\n    {', b'"records": [7, {', 1),
        "objects",
    ),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_POINTERS))
def test_a_malformed_pointer_is_one_line_naming_its_key(case: str) -> None:
    raw, why = HOSTILE_POINTERS[case]
    with pytest.raises(IntegrityError) as caught:
        ArxivPointer.parse(raw, KEY)
    text = str(caught.value)
    assert text.startswith(f"{KEY}: ") and why in text and "\n" not in text, text


def test_a_pointer_under_a_key_that_is_no_pointer_key_is_refused() -> None:
    with pytest.raises(IntegrityError, match="not the id its key names"):
        ArxivPointer.parse(_pointer([_record(1)]), "arxiv/1909.11150.txt")


def test_listed_bodies_reads_what_a_damaged_pointer_still_names() -> None:
    damaged = _pointer([_record(1), _record(2, OTHER_PN)], latest=PN)
    assert listed_bodies(damaged) == {BODY, "B" * 26}
    assert listed_bodies(b"\xff") == set() and listed_bodies(None) == set()


# -- events, bundles, states, key documents ------------------------------------------------


def _event() -> dict[str, Any]:
    bundle = json.loads(VECTOR.read_bytes())
    return copy.deepcopy(bundle["events"][0])


def _without(doc: dict[str, Any], name: str) -> dict[str, Any]:
    return {k: v for k, v in doc.items() if k != name}


HOSTILE_EVENTS: dict[str, tuple[Any, str]] = {
    "missing field": (lambda e: _without(e, "target"), "field 'target' missing"),
    "extra field": (lambda e: {**e, "trust_me": True}, "unknown field 'trust_me'"),
    "payload a list": (lambda e: {**e, "payload": []}, "field 'payload'"),
    "created_at a number": (lambda e: {**e, "created_at": 2026}, "field 'created_at'"),
    "prev_event a bool": (lambda e: {**e, "prev_event": False}, "field 'prev_event'"),
    "signer with an extra field": (lambda e: {**e, "signer": {**e["signer"], "x": "y"}}, "signer: unknown"),
    "signature field not a string": (
        lambda e: {**e, "signature": {**e["signature"], "signed_at": 1}},
        "signature: non-string signed_at",
    ),
    "supersedes a number": (lambda e: {**e, "supersedes": [1]}, "supersedes lists a non-string"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_EVENTS))
def test_a_malformed_event_is_one_line_naming_its_key(case: str) -> None:
    change, why = HOSTILE_EVENTS[case]
    key = f"events/{BODY}/{'c' * 64}.json"
    with pytest.raises(IntegrityError) as caught:
        Event.parse(dumps_compact(change(_event())), key)
    text = str(caught.value)
    assert text.startswith(f"{key}: malformed event (") and why in text and "\n" not in text, text


@pytest.mark.parametrize("model", [Event, Bundle, State, ArxivPointer, KeyDocument])
@pytest.mark.parametrize(
    "raw",
    [b"", b"\xff\xfe", b"[1]", b'"text"', b'{"a": 1, "a": 2}', b"{" * 100_000, b'{"n": 1e999}'],
)
def test_unreadable_bytes_are_refused_by_every_model(model: Any, raw: bytes) -> None:
    with pytest.raises(IntegrityError) as caught:
        model.parse(raw, "some/key.json")
    assert str(caught.value).startswith("some/key.json: ") and "\n" not in str(caught.value)


def test_a_huge_integer_in_a_bundle_parses_but_cannot_be_written_as_canonical() -> None:
    """The bundle's rule is readable JSON; its content is `verify_bundle`'s to fail."""
    raw = VECTOR.read_bytes().replace(
        b'"bundle_version":"1.0"', b'"bundle_version":123456789012345678901234567890'
    )
    try:
        bundle = Bundle.parse(raw, "pith/x/bundle.json")
    except IntegrityError as exc:  # orjson refuses integers beyond 64 bits
        assert str(exc).startswith("pith/x/bundle.json: unreadable bundle (")
    else:
        assert bundle.doc["bundle_version"] != "1.0"


def test_a_key_document_that_lists_a_key_twice_is_refused() -> None:
    head = SIGNER.public_key_doc()
    doc = KeyDocument.of(head, [head, head])
    with pytest.raises(IntegrityError, match=r"^pith-signing-key.json: not a usable key document \(key id"):
        KeyDocument.parse(doc.to_bytes(), "pith-signing-key.json")


def test_a_key_document_keeps_its_log_member() -> None:
    head = SIGNER.public_key_doc()
    doc = KeyDocument.of(head, [head], log={"origin": "example.org/log"})
    again = KeyDocument.parse(doc.to_bytes(), "pith-signing-key.json")
    assert again.log == {"origin": "example.org/log"} and again.to_bytes() == doc.to_bytes()
