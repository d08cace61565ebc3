"""Which keys a bundle's signatures may rely on (the `key_trust` and `pinned_key`
checks of `verify_bundle`).

A certified (short-lived) key counts only through a valid certificate from a root
key: one in the trusted key document when given, else one listed in the bundle.
Every signature must fall inside its key's window (certificate validity, and
before `rotates_at`; the trusted document's value wins, since a bundle built
before a rotation cannot know it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pith_pipeline.core.certificate import certificate_problem, within_window
from pith_pipeline.core.keys import PublicKey

#: The `kind` of a correction that carries a re-issued receipt.
RECEIPT_REISSUED = "receipt_reissued"


def pin_ok(pinned: str | None, keys: Mapping[str, PublicKey], key: PublicKey | None) -> bool:
    """The pinned key itself, or a key it certified (a short-lived backfill key)."""
    if key is None:
        return False
    if key.fingerprint == pinned:
        return True
    cert = key.certificate
    if cert is None or cert.get("issuer_fingerprint") != pinned:
        return False
    issuer = keys.get(str(cert.get("issuer_key_id")))
    return issuer is not None and certificate_problem(key, {issuer.key_id: issuer}) is None


def _receipt_signatures(i: int, ev: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    out: list[tuple[str, Any, Any]] = []
    payload = ev.get("payload")
    if not isinstance(payload, dict) or not isinstance(payload.get("receipt"), dict):
        return out
    r = payload["receipt"]
    if ev.get("event_type") == "record_created":
        out.append((f"events[{i}] receipt", r.get("key_id"), r.get("signed_at")))
    if payload.get("kind") == RECEIPT_REISSUED:
        out.append((f"events[{i}] re-issued receipt", r.get("key_id"), r.get("signed_at")))
    return out


def signatures_relied_on(
    events: list[Any], bundle_signature: dict[str, Any], built_at: Any, merged: dict[str, Any]
) -> list[tuple[str, Any, Any]]:
    """(where, key_id, when) of every registry signature the bundle relies on.

    `when` comes from signed data only: a receipt's `signed_at` is inside its
    event's hashed payload, an event's `signed_at` inside the bundle's hash, and
    the bundle signature's own `signed_at`, which nothing covers, is replaced by
    the bundle's `built_at`. `merged`: the state `events` merge to.
    """
    out: list[tuple[str, Any, Any]] = []
    valid_ids = set(merged["applied_event_ids"]) | {
        eid for eq in merged["equivocations"] for eid in eq["event_ids"]
    }
    for i, ev in enumerate(events):
        if isinstance(ev, dict) and ev.get("event_id") in valid_ids and isinstance(ev.get("signature"), dict):
            out.append((f"events[{i}]", ev["signature"].get("key_id"), ev["signature"].get("signed_at")))
            out.extend(_receipt_signatures(i, ev))
    # the bundle's own signed_at is outside every hash: the signed built_at decides
    out.append(("bundle_signature", bundle_signature.get("key_id"), built_at))
    return out


def _outside_window(
    keys: Mapping[str, PublicKey],
    trusted: Mapping[str, PublicKey] | None,
    signatures: list[tuple[str, Any, Any]],
    used: set[str],
) -> list[str]:
    problems: list[str] = []
    for what, kid, signed_at in signatures:
        key = keys.get(kid) if isinstance(kid, str) else None
        if key is None:
            continue  # keys_listed reports it
        used.add(key.key_id)
        known = (trusted or {}).get(key.key_id)
        if known is not None and known.public_key == key.public_key:
            key = PublicKey(
                key.key_id, key.public_key, rotates_at=known.rotates_at, certificate=key.certificate
            )
        if not within_window(key, signed_at):
            problems.append(f"{what}: signed at {signed_at}, outside the validity of key {key.key_id}")
    return problems


def trust_problems(
    keys: Mapping[str, PublicKey],
    trusted: Mapping[str, PublicKey] | None,
    signatures: list[tuple[str, Any, Any]],
) -> list[str]:
    """Why the bundle's keys (`keys`, listed in it) cannot be relied on for
    `signatures` (`signatures_relied_on`), given the `trusted` key document."""
    roots = {k.key_id: k for k in (trusted or keys).values() if k.certificate is None}
    problems: list[str] = []
    for k in keys.values():
        why = certificate_problem(k, roots) if k.certificate is not None else None
        if why:
            problems.append(why)
    used: set[str] = set()
    problems += _outside_window(keys, trusted, signatures, used)
    if trusted is not None:
        for kid in sorted(used):
            key = keys[kid]
            known = trusted.get(kid)
            if known is not None and known.public_key == key.public_key and known.certificate is None:
                continue
            if key.certificate is not None and certificate_problem(key, roots) is None:
                continue
            problems.append(f"key {kid} is neither in the trusted key document nor certified by a key in it")
    return problems
