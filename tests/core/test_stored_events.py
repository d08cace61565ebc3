"""`check_stored_event`: every object of the event store is checked before it counts."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

import pytest

from pith_pipeline.core.arxiv_record import ArxivRecord
from pith_pipeline.core.builder import Identity, build_record_events
from pith_pipeline.core.canonical_json import dumps_compact
from pith_pipeline.core.events import finalize_event, sign_event
from pith_pipeline.core.keys import Ed25519Signer, PublicKey
from pith_pipeline.core.stored_events import KeyRing, check_stored_event

SIGNER = Ed25519Signer(b"\x07" * 32, "pith-test")
OTHER = Ed25519Signer(b"\x08" * 32, "pith-other")
NOW = datetime(2026, 5, 1, tzinfo=UTC)


def _events() -> list[dict[str, Any]]:
    rec = ArxivRecord.from_json(
        {
            "id": "2101.00001",
            "title": "T",
            "abstract": "A",
            "categories": "cs.LG",
            "versions": [{"version": "v1", "created": "Fri, 1 Jan 2021 00:00:00 GMT"}],
        }
    )
    return build_record_events(Identity.of(rec), SIGNER, "pith-test", NOW).events


def _key(ev: dict[str, Any], suffix: str = "") -> str:
    body = ev["subject_pith_number"].split(":")[2]
    return f"events/{body}/{ev['content_sha256']}{suffix}.json"


RING = KeyRing([SIGNER.public_key_doc(), OTHER.public_key_doc()])


def test_sound_events_pass() -> None:
    for ev in _events():
        got, problem = check_stored_event(_key(ev), dumps_compact(ev), RING)
        assert problem is None and got == ev


def _resigned(ev: dict[str, Any], signer: Ed25519Signer) -> dict[str, Any]:
    copy_ = copy.deepcopy(ev)
    return sign_event(copy_, signer, "2026-06-01T00:00:00.000000Z")


def test_a_re_signed_copy_passes_under_its_key_name_only() -> None:
    ev = _resigned(_events()[0], OTHER)
    assert check_stored_event(_key(ev, ".sig-pith-other"), dumps_compact(ev), RING)[1] is None
    problem = check_stored_event(_key(ev, ".sig-pith-test"), dumps_compact(ev), RING)[1]
    assert problem is not None and "re-signed by pith-test but signed by pith-other" in problem


def _tampered_valid_json(ev: dict[str, Any]) -> bytes:
    ev = copy.deepcopy(ev)
    ev["payload"]["canonical_record"]["metadata"]["primary_cat"] = "math.AG"
    return dumps_compact(ev)


def _rehashed(ev: dict[str, Any]) -> tuple[str, bytes]:
    """Content changed and hash/id recomputed, old signature kept: only the signature catches it."""
    ev = copy.deepcopy(ev)
    ev["created_at"] = "2026-05-02T00:00:00Z"
    finalize_event(ev)
    return _key(ev), dumps_compact(ev)


def _with(ev: dict[str, Any], path: tuple[Any, ...], value: Any) -> bytes:
    ev = copy.deepcopy(ev)
    obj: Any = ev
    for p in path[:-1]:
        obj = obj[p]
    obj[path[-1]] = value
    return dumps_compact(ev)


@pytest.mark.parametrize(
    ("case", "reason"),
    [
        ("not json", "not valid JSON"),
        ("array", "not a JSON object"),
        ("duplicate key", "duplicate key"),
        ("tampered", "content_sha256 does not recompute"),
        ("rehashed", "signature does not verify"),
        ("wrong name", "but its content hashes to"),
        ("not an event name", "not an event object name"),
        ("other directory", "stored under events/"),
        ("unlisted key", "key the key document does not list"),
        ("extra signature field", "unknown fields trust_me"),
        ("float", "malformed"),
        ("huge int", "malformed"),
        ("wrong event id", "event_id does not match"),
    ],
)
def test_damaged_objects_are_named_with_a_reason(case: str, reason: str) -> None:
    ev = _events()[0]
    key, data = _key(ev), dumps_compact(ev)
    if case == "not json":
        data = data[:-7]
    elif case == "array":
        data = b"[" + data + b"]"
    elif case == "duplicate key":
        data = b'{"event_type":"graph_snapshot",' + data[1:]
    elif case == "tampered":
        data = _tampered_valid_json(ev)
    elif case == "rehashed":
        key, data = _rehashed(ev)
    elif case == "wrong name":
        key = key.replace(ev["content_sha256"], "0" * 64)
    elif case == "not an event name":
        key = key.replace(".json", ".txt")
    elif case == "other directory":
        key = key.replace(ev["subject_pith_number"].split(":")[2], "A" * 26)
    elif case == "unlisted key":
        _, problem = check_stored_event(key, data, KeyRing([OTHER.public_key_doc()]))
        assert problem is not None and reason in problem
        return
    elif case == "extra signature field":
        data = _with(ev, ("signature", "trust_me"), "yes")
    elif case == "float":
        data = _with(ev, ("payload", "receipt", "signed_at"), 1.5)
    elif case == "huge int":
        data = data.replace(b'"created_at":"', b'"x":123456789012345678901234567890,"created_at":"', 1)
    elif case == "wrong event id":
        data = _with(ev, ("event_id",), "sha256:" + "1" * 64)
    _, problem = check_stored_event(key, data, RING)
    assert problem is not None and reason in problem, problem


def test_a_rotated_key_counts_only_for_content_created_before_its_rotation() -> None:
    ev = _events()[0]  # created 2026-05-01
    data = dumps_compact(ev)
    before = PublicKey(SIGNER.key_id, SIGNER.public_key, rotates_at="2026-06-01T00:00:00.000000Z")
    after = PublicKey(SIGNER.key_id, SIGNER.public_key, rotates_at="2026-04-01T00:00:00.000000Z")
    assert check_stored_event(_key(ev), data, KeyRing([before]))[1] is None
    problem = check_stored_event(_key(ev), data, KeyRing([after]))[1]
    assert problem is not None and "outside the validity of key pith-test" in problem
    # the unsigned signed_at cannot move it back inside
    forged = _with(ev, ("signature", "signed_at"), "2026-03-01T00:00:00.000000Z")
    assert check_stored_event(_key(ev), forged, KeyRing([after]))[1] == problem
