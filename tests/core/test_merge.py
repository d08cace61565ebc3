"""The merge is deterministic: independent of event order and duplication."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pith_pipeline.core.arxiv_record import ArxivRecord
from pith_pipeline.core.builder import Identity, build_record_events, correction_event
from pith_pipeline.core.canonical_json import canonical_sha256, dumps
from pith_pipeline.core.events import SignerInfo, make_event, sign_event
from pith_pipeline.core.keys import Ed25519Signer, PublicKey
from pith_pipeline.core.merge import merge

SIGNER = Ed25519Signer.generate("merge-test-key")
OTHER = Ed25519Signer.generate("unlisted-key")
T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)


def _record(version: int = 1) -> ArxivRecord:
    return ArxivRecord.from_json(
        {
            "id": "2101.00001",
            "title": "A title",
            "abstract": "An abstract.",
            "categories": "cs.LG stat.ML",
            "versions": [
                {"version": f"v{i}", "created": "Fri, 1 Jan 2021 10:00:00 GMT"} for i in range(1, version + 1)
            ],
        }
    )


IDENT = Identity.of(_record())
SUBJECT = IDENT.subject


def _event(
    event_type: str,
    payload: dict[str, Any],
    at: datetime,
    *,
    signer: Ed25519Signer = SIGNER,
    prev: str | None = None,
    supersedes: list[str] | None = None,
    subject: str = SUBJECT,
) -> dict[str, Any]:
    ev = make_event(
        event_type=event_type,
        subject=subject,
        payload=payload,
        signer_info=SignerInfo.for_signer(signer, "tester"),
        created_at=at.strftime("%Y-%m-%dT%H:%M:%SZ"),
        prev_event=prev,
        supersedes=supersedes,
    )
    return sign_event(ev, signer, at.strftime("%Y-%m-%dT%H:%M:%S.%fZ"))


def scenario() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Events covering every rule: valid lists, supersedes, equivocations, invalid events."""
    built = build_record_events(IDENT, SIGNER, "tester", T0)
    created, snap = built.events
    later = T0 + timedelta(hours=1)
    anchor = _event("timestamp_anchor", {"n": 1}, later)
    anchor2 = _event(
        "timestamp_anchor", {"n": 2}, later + timedelta(minutes=1), supersedes=[anchor["event_id"]]
    )
    fork_a = _event("author_attestation", {"who": "a"}, later, prev=snap["event_id"])
    fork_b = _event("author_attestation", {"who": "b"}, later, prev=snap["event_id"])
    other_creation = _event("record_created", {"x": 1}, T0 + timedelta(days=1))
    hint = _event("mirror_hint", {"base_url": "https://m.example"}, later)
    bad_sig = copy.deepcopy(hint)
    bad_sig["payload"] = {"base_url": "https://evil.example"}
    bad_sig = sign_event(_rehash(bad_sig), SIGNER, "2026-03-01T13:00:00.000000Z")
    bad_sig["signature"]["signature_b64"] = OTHER.sign_hex_b64(bad_sig["content_sha256"])
    unknown = _event("replication_record", {"r": 1}, later, signer=OTHER)
    foreign = _event("correction", {"kind": "x"}, later, subject="pith:2021:" + "A" * 26)
    tampered = copy.deepcopy(_event("citation_signature", {"c": 1}, later))
    tampered["payload"]["c"] = 2
    typo = _event("storage_attestation", {"s": 1}, later)
    typo_bad = dict(typo, event_type="storage_attestation_v9")
    typo_bad = sign_event(_rehash(typo_bad), SIGNER, "2026-03-01T13:00:00.000000Z")
    malformed = {"event_id": "sha256:" + "0" * 64, "event_type": "graph_snapshot"}
    events = [
        created,
        snap,
        anchor,
        anchor2,
        fork_a,
        fork_b,
        other_creation,
        hint,
        bad_sig,
        unknown,
        foreign,
        tampered,
        typo_bad,
        malformed,
    ]
    return events, built.aliases


def _rehash(ev: dict[str, Any]) -> dict[str, Any]:
    from pith_pipeline.core.events import finalize_event

    return finalize_event(ev)


KEYS = [SIGNER.public_key_doc()]


def test_reference_state_reproduced(reference_bundle: dict[str, Any]) -> None:
    keys = [PublicKey.from_json(k) for k in reference_bundle["public_keys"]]
    state = merge(
        reference_bundle["events"], reference_bundle["source_aliases"], keys, reference_bundle["pith_number"]
    )
    assert state == reference_bundle["state"]
    assert state["state_sha256"].startswith("f84bfa06")


def test_scenario_rules() -> None:
    events, aliases = scenario()
    state = merge(events, aliases, KEYS, SUBJECT)
    created, _snap, anchor, anchor2, fork_a, fork_b, other = events[:7]
    reasons = {e["event_id"]: e["reason"] for e in state["invalid_events"]}
    assert reasons[events[8]["event_id"]] == "bad_signature"
    assert reasons[events[9]["event_id"]] == "unknown_key"
    assert reasons[events[10]["event_id"]] == "subject_mismatch"
    assert reasons[events[11]["event_id"]] == "bad_content_hash"
    assert reasons[events[12]["event_id"]] == "unknown_event_type"
    assert reasons["sha256:" + "0" * 64] == "malformed"
    assert state["equivocations"] == [
        {"kind": "conflicting_record", "event_ids": sorted([created["event_id"], other["event_id"]])},
        {"kind": "fork", "event_ids": sorted([fork_a["event_id"], fork_b["event_id"]])},
    ]
    assert state["current"]["record_created"]["event_id"] == created["event_id"]
    assert other["event_id"] not in state["applied_event_ids"]
    anchors = [e["event_id"] for e in state["current"]["timestamp_anchors"]]
    assert anchors == [anchor2["event_id"]]  # superseded one dropped from current
    assert anchor["event_id"] in state["applied_event_ids"]
    assert state["applied_event_ids"][0] == created["event_id"]
    assert (
        state["event_count"] == len(events) == state["valid_event_count"] + state["invalid_event_count"]
    )  # every distinct id counts, valid or not
    assert state["state_sha256"] == canonical_sha256({k: v for k, v in state.items() if k != "state_sha256"})


def test_resigned_copy_keeps_the_first_verifying_signature() -> None:
    events, aliases = scenario()
    snap = events[1]
    broken = copy.deepcopy(snap)
    broken["signature"]["signature_b64"] = OTHER.sign_hex_b64(snap["content_sha256"])
    resigned = sign_event(copy.deepcopy(snap), SIGNER, "2027-01-01T00:00:00.000000Z")
    a = merge([broken, *events], aliases, KEYS, SUBJECT)
    b = merge([resigned, *events], aliases, KEYS, SUBJECT)
    assert a == b == merge(events, aliases, KEYS, SUBJECT)
    only_broken = merge([events[0], broken], aliases, KEYS, SUBJECT)
    assert {"event_id": snap["event_id"], "reason": "bad_signature"} in only_broken["invalid_events"]


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_merge_is_independent_of_order_and_duplication(data: st.DataObject) -> None:
    events, aliases = scenario()
    expected = dumps(merge(events, aliases, KEYS, SUBJECT))
    dup = data.draw(st.lists(st.sampled_from(events), max_size=8))
    shuffled = data.draw(st.permutations(events + dup))
    assert dumps(merge(shuffled, aliases, KEYS, SUBJECT)) == expected


def test_aliases_are_carried_in_the_bundles_order() -> None:
    """A registry state lists its bundle's aliases as they are; so does ours."""
    events, aliases = scenario()
    later = [*aliases[3:], *aliases[:3]]
    assert merge(events, later, KEYS, SUBJECT)["current"]["source_aliases"] == later
    assert [a["alias_kind"] for a in aliases] == sorted(a["alias_kind"] for a in aliases)


def test_merge_is_idempotent_over_its_own_inputs() -> None:
    events, aliases = scenario()
    assert merge(events + events, aliases, KEYS, SUBJECT) == merge(events, aliases, KEYS, SUBJECT)


def test_correction_event_for_superseded_record() -> None:
    new = Identity.of(_record(version=2))
    ev = correction_event(
        old_subject=SUBJECT,
        new_subject=new.subject,
        arxiv_version="2101.00001v2",
        signer=SIGNER,
        signer_id="tester",
        now=T0 + timedelta(days=3),
    )
    events, aliases = scenario()
    state = merge([*events[:2], ev], aliases, KEYS, SUBJECT)
    assert state["current"]["corrections"][0]["payload"] == {
        "kind": "superseded",
        "pith_number": new.subject,
        "arxiv_version": "2101.00001v2",
    }


@pytest.mark.parametrize("field", ["created_at", "payload", "signer", "supersedes"])
def test_wrong_types_are_malformed(field: str) -> None:
    events, aliases = scenario()
    ev = copy.deepcopy(events[2])
    ev[field] = 12345
    state = merge([events[0], ev], aliases, KEYS, SUBJECT)
    assert {"event_id": ev["event_id"], "reason": "malformed"} in state["invalid_events"]
