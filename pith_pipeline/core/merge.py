"""The deterministic merge (spec section 7).

Any mirror holding the same events, aliases and keys computes the same state,
whatever order or duplication the events arrive in: events are deduplicated by
id, validated, then applied in the order `(created_at, record_created first,
event_id)`.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Any

from pith_pipeline.core.canonical_json import FAST, CanonicalJSON
from pith_pipeline.core.documents import EVENT_MEMBERS, SIGNER_FIELDS
from pith_pipeline.core.events import EVENT_TYPES, content_sha256
from pith_pipeline.core.keys import PublicKey, verify_signature
from pith_pipeline.errors import CanonicalJSONError

MERGE_VERSION = "pith-open-graph-merge-v1"
CURRENT_LISTS = (
    "graph_snapshots",
    "author_attestations",
    "timestamp_anchors",
    "storage_attestations",
    "citation_signatures",
    "replication_records",
    "corrections",
    "mirror_hints",
)
_SIGNATURE_FIELDS = (
    "signature_status",
    "algorithm",
    "key_id",
    "public_key_fingerprint",
    "signature_b64",
    "signed_message",
    "signed_at",
)


def _malformed(event: Mapping[str, Any]) -> bool:
    for name, typ in EVENT_MEMBERS.items():
        if name not in event or not isinstance(event[name], typ):
            return True
    if isinstance(event["prev_event"], bool):
        return True
    signer, sig = event["signer"], event["signature"]
    if any(not isinstance(signer.get(f), str) for f in SIGNER_FIELDS):
        return True
    if any(not isinstance(sig.get(f), str) for f in _SIGNATURE_FIELDS):
        return True
    return any(not isinstance(s, str) for s in event["supersedes"])


_FINGERPRINTS: dict[bytes, str] = {}


def _fingerprint(key: PublicKey) -> str:
    """A key's fingerprint, hashed once per key rather than four times per event."""
    fp = _FINGERPRINTS.get(key.public_key)
    if fp is None:
        if len(_FINGERPRINTS) > 4096:
            _FINGERPRINTS.clear()
        fp = _FINGERPRINTS[key.public_key] = key.fingerprint
    return fp


def _key_ok(keys: Mapping[str, PublicKey], key_id: str, fingerprint: str) -> bool:
    key = keys.get(key_id)
    return key is not None and _fingerprint(key) == fingerprint


def validate_event(
    event: Any,
    subject: str,
    keys: Mapping[str, PublicKey],
    *,
    trusted: bool = False,
    canon: CanonicalJSON = FAST,
) -> str | None:
    """None when the event is valid, else the reason the spec names.

    `trusted`: the caller made and signed this very object in this process, so its
    content hash and signature are not recomputed (the structural checks still run).
    `canon`: how the content hash is recomputed.
    """
    if not isinstance(event, dict) or _malformed(event):
        return "malformed"
    if event["event_type"] not in EVENT_TYPES:
        return "unknown_event_type"
    try:
        digest = event["content_sha256"] if trusted else content_sha256(event, canon=canon)
    except CanonicalJSONError:
        return "malformed"
    if digest != event["content_sha256"]:
        return "bad_content_hash"
    if event["event_id"] != "sha256:" + digest:
        return "bad_event_id"
    if event["subject_pith_number"] != subject:
        return "subject_mismatch"
    signer, sig = event["signer"], event["signature"]
    if not _key_ok(keys, signer["key_id"], signer["public_key_fingerprint"]):
        return "unknown_key"
    if not _key_ok(keys, sig["key_id"], sig["public_key_fingerprint"]):
        return "unknown_key"
    if (
        sig["algorithm"] != "ed25519"
        or sig["signed_message"] != "open_graph_event_sha256_bytes"
        or sig["signature_status"] != "signed_v1"
    ):
        return "bad_signature"
    if not trusted and not verify_signature(keys[sig["key_id"]].public_key, digest, sig["signature_b64"]):
        return "bad_signature"
    return None


def _event_id_of(event: Any) -> str | None:
    if isinstance(event, dict) and isinstance(event.get("event_id"), str):
        return str(event["event_id"])
    return None


def _order_key(event: Mapping[str, Any]) -> tuple[str, int, str]:
    return (event["created_at"], 0 if event["event_type"] == "record_created" else 1, event["event_id"])


def state_entry(event: Mapping[str, Any]) -> dict[str, Any]:
    """How an event appears in a state's `current` lists (spec section 7): the builder
    writes a new record's state directly, so it shares this shape with the merge."""
    return {
        "event_id": event["event_id"],
        "target": event["target"],
        "created_at": event["created_at"],
        "signer": event["signer"],
        "payload": event["payload"],
    }


def normalize_aliases(aliases: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The subject's aliases, as given (copied).

    The state carries the aliases in the order the bundle lists them: the registry's
    published states repeat their bundle's `source_aliases` list exactly, and a
    re-ordering rule of our own would fail to recompute any registry state whose
    aliases were listed in another order (added later, say). Our builder emits
    them in the spec's order, so our bundles are deterministic too.
    """
    return [dict(a) for a in aliases]


def _validated(
    events: Iterable[Any],
    subject: str,
    key_map: Mapping[str, PublicKey],
    trusted_ids: set[int],
    canon: CanonicalJSON,
) -> tuple[dict[str, dict[str, Any]], dict[str, str], list[str]]:
    """Step 1: distinct ids, the first verifying copy of an id winning. Returns the
    valid events by id, the reason of each invalid id, and the reasons of events
    without an id."""
    valid: dict[str, dict[str, Any]] = {}
    invalid: dict[str, str] = {}
    anonymous: list[str] = []
    for ev in events:
        eid = _event_id_of(ev)
        if eid is not None and eid in valid:
            continue
        reason = validate_event(ev, subject, key_map, trusted=id(ev) in trusted_ids, canon=canon)
        if eid is None:
            anonymous.append(reason or "malformed")
            continue
        if reason is None:
            valid[eid] = ev
            invalid.pop(eid, None)
        else:
            invalid.setdefault(eid, reason)
    return valid, invalid, anonymous


def _equivocations(ordered: list[dict[str, Any]], creations: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Step 3: every valid record_created after the first, and two events of one
    signer continuing the same `prev_event`."""
    found: list[dict[str, Any]] = []
    if len(creations) > 1:
        found.append({"kind": "conflicting_record", "event_ids": sorted(e["event_id"] for e in creations)})
    forks: dict[tuple[str, str], list[str]] = {}
    for e in ordered:
        if e["prev_event"] is not None:
            forks.setdefault((e["signer"]["signer_id"], e["prev_event"]), []).append(e["event_id"])
    for (_sid, _prev), ids in sorted(forks.items()):
        if len(ids) > 1:
            found.append({"kind": "fork", "event_ids": sorted(ids)})
    return found


def _current(
    applied: list[dict[str, Any]], creation: dict[str, Any] | None, aliases: Iterable[Mapping[str, Any]]
) -> dict[str, Any]:
    """Steps 4 and 5: the state's `current` lists, without what an applied event supersedes."""
    superseded = {s for e in applied for s in e["supersedes"]}
    current: dict[str, Any] = {
        "canonical_record": creation["payload"].get("canonical_record") if creation else None,
        "source_aliases": normalize_aliases(aliases),
    }
    for name in CURRENT_LISTS:
        current[name] = []
    for e in applied:
        list_name = EVENT_TYPES[e["event_type"]][1]
        if list_name is not None and e["event_id"] not in superseded:
            current[list_name].append(state_entry(e))
    current["record_created"] = (
        state_entry(creation) if creation and creation["event_id"] not in superseded else None
    )
    return current


def merge(
    events: Iterable[Any],
    aliases: Iterable[Mapping[str, Any]],
    keys: Iterable[PublicKey],
    subject: str,
    *,
    trusted: Collection[Any] = (),
    canon: CanonicalJSON = FAST,
) -> dict[str, Any]:
    """Compute the state of `subject` from its events, aliases and trusted keys.

    `trusted`: event objects (by identity, not id) the caller built and signed
    itself; they skip re-hashing and signature verification unless `canon` takes
    nothing on trust. The state is the same either way.
    """
    trusted_ids = {id(e) for e in trusted} if canon.trust else set()
    valid, invalid, anonymous = _validated(events, subject, {k.key_id: k for k in keys}, trusted_ids, canon)
    ordered = sorted(valid.values(), key=_order_key)  # 2. order
    creations = [e for e in ordered if e["event_type"] == "record_created"]
    applied_creation = creations[0] if creations else None
    equivocations = _equivocations(ordered, creations)
    applied = [e for e in ordered if e["event_type"] != "record_created" or e is applied_creation]
    current = _current(applied, applied_creation, aliases)
    invalid_list: list[dict[str, str | None]] = [
        {"event_id": eid, "reason": r} for eid, r in sorted(invalid.items())
    ]
    invalid_list += [{"event_id": None, "reason": r} for r in sorted(anonymous)]
    state: dict[str, Any] = {
        "state_type": "pith_open_graph_state",
        "state_version": "1.0",
        "pith_number": subject,
        "merge_version": MERGE_VERSION,
        "event_count": len(valid) + len(invalid) + len(anonymous),
        "valid_event_count": len(valid),
        "invalid_event_count": len(invalid) + len(anonymous),
        "equivocation_count": len(equivocations),
        "current": current,
        "equivocations": equivocations,
        "invalid_events": invalid_list,
        "applied_event_ids": [e["event_id"] for e in applied],
    }
    if (
        canon.trust
        and all(id(e) in trusted_ids for e in applied)
        and canon.fast_safe(current["source_aliases"])
    ):
        state["state_sha256"] = canon.sha256_trusted(state)
    else:
        state["state_sha256"] = canon.sha256(state)
    return state
