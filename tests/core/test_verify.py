"""The verifier accepts the registry's bundle and rejects any single-character change."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from pith_pipeline.core.arxiv_record import ArxivRecord
from pith_pipeline.core.builder import Identity, build_record_events, sign_bundle
from pith_pipeline.core.bundle import Site
from pith_pipeline.core.events import SignerInfo, make_event, sign_event
from pith_pipeline.core.keys import Ed25519Signer
from pith_pipeline.core.merge import merge
from pith_pipeline.core.verify import CHECKS, FAIL, OK, WARN, verify_bundle

PIN = "8d4b5ee74e4693bcd1df2446408b0d54"
# the only fields neither hashed nor signed: when the bundle signature was made
UNPROTECTED = {("bundle_signature", "signed_at")}


def leaves(obj: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any]]:
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from leaves(v, (*path, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from leaves(v, (*path, i))
    else:
        yield path, obj


def set_at(obj: Any, path: tuple[Any, ...], value: Any) -> None:
    for p in path[:-1]:
        obj = obj[p]
    obj[path[-1]] = value


def one_char_change(value: Any) -> Any:
    if isinstance(value, bool) or value is None:
        return None if value is not None else "x"
    if isinstance(value, int):
        return value + 1 if value < 9 else int(str(value)[:-1] + str((value + 1) % 10))
    if not value:
        return "x"
    i = len(value) // 2
    return value[:i] + ("A" if value[i] != "A" else "B") + value[i + 1 :]


def test_reference_verifies_unchanged_with_pinned_key(reference_bundle: dict[str, Any]) -> None:
    report = verify_bundle(reference_bundle, pinned_fingerprint=PIN)
    assert report.ok, [c for c in report.checks if c.status != OK]
    assert [c.name for c in report.checks] == list(CHECKS)
    assert all(c.status == OK for c in report.checks)


def test_wrong_pin_fails(reference_bundle: dict[str, Any]) -> None:
    report = verify_bundle(reference_bundle, pinned_fingerprint="00" * 16)
    assert [c.name for c in report.failed] == ["pinned_key"]


def test_every_single_character_change_is_rejected(reference_bundle: dict[str, Any]) -> None:
    paths = [(p, v) for p, v in leaves(reference_bundle) if p not in UNPROTECTED]
    assert len(paths) > 250
    for path, value in paths:
        mutated = copy.deepcopy(reference_bundle)
        set_at(mutated, path, one_char_change(value))
        report = verify_bundle(mutated, pinned_fingerprint=PIN)
        assert not report.ok, f"change at {path} was accepted"
        assert all(c.name in CHECKS for c in report.failed)
    # and the one unprotected field really is outside every hash and signature
    mutated = copy.deepcopy(reference_bundle)
    set_at(mutated, ("bundle_signature", "signed_at"), "2026-08-17T16:31:39.452329Z")
    assert verify_bundle(mutated, pinned_fingerprint=PIN).ok


#: (path, check): a one-character change there fails that check (also run in a
#: browser by tests/pages/test_browser_verify.py)
NAMED_FAILURES: list[tuple[tuple[Any, ...], str]] = [
    (("canonical_record", "metadata", "primary_cat"), "canonical_hash"),
    (("canonical_sha256",), "canonical_hash"),
    (("pith_number",), "pith_number"),
    (("events", 0, "payload", "receipt", "signature_b64"), "receipt"),
    (("events", 1, "payload", "graph_snapshot", "paper", "title"), "event_hashes"),
    (("events", 1, "event_id"), "event_ids"),
    (("events", 1, "signature", "signature_b64"), "event_signatures"),
    (("built_at",), "bundle_hash"),
    (("bundle_signature", "signature_b64"), "bundle_signature"),
    (("state", "state_sha256"), "state"),
    (("source_aliases", 0, "alias_value"), "state"),
]


@pytest.mark.parametrize(("path", "check"), NAMED_FAILURES)
def test_failures_name_the_check(reference_bundle: dict[str, Any], path: tuple[Any, ...], check: str) -> None:
    value = reference_bundle
    for p in path:
        value = value[p]
    set_at(reference_bundle, path, one_char_change(value))
    report = verify_bundle(reference_bundle, pinned_fingerprint=PIN)
    assert check in [c.name for c in report.failed]


#: values that are no bundle at all
GARBAGE: list[Any] = [[], {"events": "x"}, {"bundle_signature": 3, "public_keys": [1]}]


def test_garbage_is_reported_not_raised() -> None:
    for garbage in GARBAGE:
        report = verify_bundle(garbage)
        assert not report.ok


def _our_bundle(extra: list[dict[str, Any]] | None = None) -> tuple[dict[str, Any], Any]:
    signer = Ed25519Signer.generate("ours-2026")
    rec = ArxivRecord.from_json(
        {
            "id": "2101.00001",
            "title": "T",
            "abstract": "A",
            "categories": "cs.LG",
            "versions": [{"version": "v1", "created": "Fri, 1 Jan 2021 00:00:00 GMT"}],
        }
    )
    now = datetime(2026, 5, 1, tzinfo=UTC)
    built = build_record_events(Identity.of(rec), signer, "ours", now)
    events = built.events + (extra or [])
    ident = built.identity
    bundle = sign_bundle(
        subject=ident.subject,
        canonical=ident.canonical,
        canonical_hex=ident.canonical_sha256,
        events=events,
        aliases=built.aliases,
        public_keys=[signer.public_key_doc()],
        site=Site(base_url="https://pith.example.org"),
        signer=signer,
        now=now,
    )
    return bundle, signer


def test_our_bundles_verify() -> None:
    bundle, signer = _our_bundle()
    report = verify_bundle(bundle, pinned_fingerprint=signer.fingerprint)
    assert report.ok and all(c.status == OK for c in report.checks)


def test_third_party_invalid_event_accounted_in_state_is_a_warning() -> None:
    bundle, signer = _our_bundle()
    stranger = Ed25519Signer.generate("stranger")
    ev = make_event(
        event_type="author_attestation",
        subject=bundle["pith_number"],
        payload={"claim": "mine"},
        signer_info=SignerInfo.for_signer(stranger, "someone", "author"),
        created_at="2026-05-02T00:00:00Z",
    )
    sign_event(ev, stranger, "2026-05-02T00:00:00.000000Z")
    bundle2, _ = _rebundle(bundle, signer, [*bundle["events"], ev])
    report = verify_bundle(bundle2)
    assert report.ok
    statuses = {c.name: c.status for c in report.checks}
    assert statuses["event_signatures"] == WARN
    # the same invalid event, when the state does not account for it, fails
    bundle3 = copy.deepcopy(bundle2)
    bundle3["state"]["invalid_events"] = []
    assert not verify_bundle(bundle3).ok


def _rebundle(
    bundle: dict[str, Any], signer: Ed25519Signer, events: list[dict[str, Any]]
) -> tuple[dict[str, Any], dict[str, Any]]:
    keys = [signer.public_key_doc()]
    state = merge(events, bundle["source_aliases"], keys, bundle["pith_number"])
    out = sign_bundle(
        subject=bundle["pith_number"],
        canonical=bundle["canonical_record"],
        canonical_hex=bundle["canonical_sha256"],
        events=events,
        aliases=bundle["source_aliases"],
        public_keys=keys,
        site=Site(base_url="https://pith.example.org"),
        signer=signer,
        now=datetime(2026, 5, 3, tzinfo=UTC),
    )
    return out, state


def test_unlisted_signing_key_fails() -> None:
    bundle, _signer = _our_bundle()
    intruder = Ed25519Signer.generate("ours-2026")  # same id, different key
    forged, _ = _rebundle(bundle, intruder, bundle["events"])
    forged["public_keys"] = bundle["public_keys"]
    failed = {c.name for c in verify_bundle(forged).checks if c.status == FAIL}
    assert "bundle_signature" in failed
