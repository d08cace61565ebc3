"""Hostile bundles: each is a FAIL of that bundle, never an exception; trust rests on
signed data only, and signature blocks carry exactly their fields."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

import pytest

from pith_pipeline.core.bundle import Site, build_bundle
from pith_pipeline.core.keys import Ed25519Signer, PublicKey
from pith_pipeline.core.timeutil import iso_micros, iso_seconds
from pith_pipeline.core.verify import FAIL, verify_bundle

PIN = "8d4b5ee74e4693bcd1df2446408b0d54"


def _hostile(bundle: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    b = copy.deepcopy(bundle)
    obj: Any = b
    for p in path[:-1]:
        obj = obj[p]
    obj[path[-1]] = value
    return b


#: (path, value): a hostile value there fails the bundle (also run in a browser by
#: tests/pages/test_browser_verify.py)
HOSTILE_VALUES: list[tuple[tuple[Any, ...], Any]] = [
    (("canonical_record", "metadata", "primary_cat"), 1.5),
    (("canonical_record", "metadata", "primary_cat"), 2**60),
    (("canonical_record", "metadata", "primary_cat"), -(2**53)),
    (("events", 0, "payload", "receipt", "signed_at"), 1e300),
    (("events", 1, "created_at"), 2**64),
    (("events",), [1.5, {"event_id": 2**70}]),
    (("public_keys",), 5),
    (("public_keys",), "keys"),
    (("public_keys", 0, "public_key_b64"), 7),
    (("source_aliases",), [{"alias_kind": 0.5}]),
    (("state",), {"current": 1e9}),
    (("bundle_signature",), {"key_id": 2**65, "signed_at": 0.1}),
    (("built_at",), 3.25),
    (("pith_number",), 12),
    (("canonical_record",), [[[[[[[[[[[]]]]]]]]]]]),
]


@pytest.mark.parametrize(("path", "value"), HOSTILE_VALUES)
def test_a_hostile_value_fails_the_bundle_without_raising(
    reference_bundle: dict[str, Any], path: tuple[Any, ...], value: Any
) -> None:
    report = verify_bundle(_hostile(reference_bundle, path, value), pinned_fingerprint=PIN, source="x.json")
    assert not report.ok
    assert all(c.detail for c in report.failed)


def test_deep_nesting_fails_the_bundle_without_raising(reference_bundle: dict[str, Any]) -> None:
    deep: Any = "x"
    for _ in range(5000):
        deep = [deep]
    report = verify_bundle(_hostile(reference_bundle, ("canonical_record", "extra"), deep))
    assert not report.ok


# -- signature blocks: exactly their fields -------------------------------------------


#: (path, check): an unknown field in that signature block fails that check
SIGNATURE_BLOCKS: list[tuple[tuple[Any, ...], str]] = [
    (("bundle_signature",), "bundle_signature"),
    (("events", 1, "signature"), "event_signatures"),
    (("events", 0, "signature"), "event_signatures"),
]


@pytest.mark.parametrize(("path", "check"), SIGNATURE_BLOCKS)
def test_unknown_fields_in_signature_blocks_fail(
    reference_bundle: dict[str, Any], path: tuple[Any, ...], check: str
) -> None:
    b = copy.deepcopy(reference_bundle)
    block: Any = b
    for p in path:
        block = block[p]
    block["trust_me"] = "yes"
    report = verify_bundle(b, pinned_fingerprint=PIN)
    failed = {c.name: c.detail for c in report.failed}
    assert check in failed, report.checks
    assert "trust_me" in failed[check]


def test_unknown_fields_in_a_receipt_fail(reference_bundle: dict[str, Any]) -> None:
    """A self-consistent bundle (events re-hashed and re-signed) whose receipt has an extra field."""
    from pith_pipeline.core.events import finalize_event, sign_event

    b = copy.deepcopy(reference_bundle)
    created = b["events"][0]
    created["payload"]["receipt"]["trust_me"] = "yes"
    finalize_event(created)
    sign_event(created, OLD, "2026-05-01T00:00:00.000000Z")
    rebuilt = _signed_by_old(b, datetime(2026, 5, 1, tzinfo=UTC), datetime(2026, 5, 1, tzinfo=UTC))
    report = verify_bundle(rebuilt)
    failed = {c.name: c.detail for c in report.failed}
    assert list(failed) == ["receipt"], report.checks
    assert "unknown fields trust_me" in failed["receipt"]


#: fields whose absence from the bundle signature fails it
MISSING_FIELDS = ["signed_at", "signature_status", "bundle_sha256"]


@pytest.mark.parametrize("missing", MISSING_FIELDS)
def test_missing_fields_in_the_bundle_signature_fail(reference_bundle: dict[str, Any], missing: str) -> None:
    del reference_bundle["bundle_signature"][missing]
    report = verify_bundle(reference_bundle, pinned_fingerprint=PIN)
    assert "bundle_signature" in {c.name for c in report.failed}


# -- the rotation check reads the signed built_at, not the unsigned signed_at ----------

OLD = Ed25519Signer(b"\x01" * 32, "pith-old")
NEW = Ed25519Signer(b"\x02" * 32, "pith-new")
ROTATED_AT = datetime(2026, 6, 1, tzinfo=UTC)


def _signed_by_old(reference_bundle: dict[str, Any], built: datetime, signed: datetime) -> dict[str, Any]:
    """The reference's content re-signed by OLD, built at `built`, claiming `signed`."""
    b = copy.deepcopy(reference_bundle)
    keys = [PublicKey.from_json(k) for k in b["public_keys"]] + [OLD.public_key_doc()]
    return build_bundle(
        subject=b["pith_number"],
        canonical=b["canonical_record"],
        canonical_hex=b["canonical_sha256"],
        events=b["events"],
        aliases=b["source_aliases"],
        public_keys=keys,
        site=Site(base_url="https://pith.example.org"),
        built_at=iso_seconds(built),
        signer=OLD,
        signed_at=iso_micros(signed),
    )


def _trusted(reference_bundle: dict[str, Any]) -> list[PublicKey]:
    ref = [PublicKey.from_json(k) for k in reference_bundle["public_keys"]]
    old = OLD.public_key_doc(rotates_at=iso_micros(ROTATED_AT))
    return [*ref, old, NEW.public_key_doc()]


def test_built_after_rotation_fails_whatever_signed_at_claims(reference_bundle: dict[str, Any]) -> None:
    late = _signed_by_old(
        reference_bundle, datetime(2026, 7, 1, tzinfo=UTC), datetime(2026, 5, 1, tzinfo=UTC)
    )
    assert verify_bundle(late).ok  # alone, the bundle cannot know of the rotation
    report = verify_bundle(late, trusted_keys=_trusted(reference_bundle))
    assert [c.name for c in report.failed] == ["key_trust"]
    assert "outside the validity of key pith-old" in report.failed[0].detail


def test_built_before_rotation_passes_whatever_signed_at_claims(reference_bundle: dict[str, Any]) -> None:
    early = _signed_by_old(
        reference_bundle, datetime(2026, 5, 1, tzinfo=UTC), datetime(2026, 7, 1, tzinfo=UTC)
    )
    report = verify_bundle(early, trusted_keys=_trusted(reference_bundle))
    assert report.ok, report.failed
    # signed_at is outside every hash: editing it changes no verdict either way
    early["bundle_signature"]["signed_at"] = "2099-01-01T00:00:00.000000Z"
    assert verify_bundle(early, trusted_keys=_trusted(reference_bundle)).ok


def test_reference_still_passes_every_check(reference_bundle: dict[str, Any]) -> None:
    report = verify_bundle(reference_bundle, pinned_fingerprint=PIN, trusted_keys=_trusted(reference_bundle))
    assert report.ok and not [c for c in report.checks if c.status == FAIL]


def test_unknown_fields_in_a_certificate_signature_fail() -> None:
    from pith_pipeline.core.certificate import certificate_problem, issue_certificate

    short = Ed25519Signer(b"\x03" * 32, "short-lived")
    cert = issue_certificate(
        issuer=OLD,
        subject_key_id=short.key_id,
        subject_public_key=short.public_key,
        not_before="2026-01-01T00:00:00.000000Z",
        not_after="2026-01-02T00:00:00.000000Z",
        run_id="r",
        issued_at="2026-01-01T00:00:00.000000Z",
    )
    key = PublicKey(short.key_id, short.public_key, certificate=cert)
    assert certificate_problem(key, {OLD.key_id: OLD.public_key_doc()}) is None
    cert["signature"]["trust_me"] = "yes"
    problem = certificate_problem(key, {OLD.key_id: OLD.public_key_doc()})
    assert problem is not None and "trust_me" in problem
