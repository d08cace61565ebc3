"""Key rotation and receipt re-issue: ids stay, receipts move to the new key, all verify."""

from __future__ import annotations

import copy
import hashlib
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from signing_consts import SAMPLE
from testclock import StepClock

from pith_pipeline.core.bundle import build_bundle
from pith_pipeline.core.keys import Ed25519Signer, PublicKey, read_key_document
from pith_pipeline.core.verify import verify_bundle
from pith_pipeline.errors import InputError
from pith_pipeline.publish import BuildConfig, Publisher
from pith_pipeline.reissue import reissue
from pith_pipeline.sources.jsonl import iter_jsonl
from pith_pipeline.storage.local import LocalStore

OLD = Ed25519Signer(hashlib.sha256(b"old").digest(), "pith-v1-2026-01")
NEW = Ed25519Signer(hashlib.sha256(b"new").digest(), "pith-v2-2026-06")
ROGUE = Ed25519Signer(hashlib.sha256(b"rogue").digest(), "pith-v3-rogue")


def files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def bundles(root: Path) -> dict[str, dict[str, Any]]:
    return {p.parent.name: json.loads(p.read_bytes()) for p in root.glob("pith/*/bundle.json")}


def trusted(root: Path) -> list[PublicKey]:
    return read_key_document((root / "pith-signing-key.json").read_bytes(), "pith-signing-key.json")


@pytest.fixture(scope="module")
def rotated(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, dict[str, dict[str, Any]], dict[str, bytes]]:
    """A store built with OLD, then re-issued with NEW (tests only read it, or re-run reissue)."""
    store = LocalStore(tmp_path_factory.mktemp("rotated") / "store")
    Publisher(store, OLD, BuildConfig(), clock=StepClock(datetime(2026, 1, 5, tzinfo=UTC))).publish(
        iter_jsonl(SAMPLE)
    )
    before = bundles(store.root)
    before_files = files(store.root)
    summary = reissue(store, NEW, BuildConfig(), clock=StepClock(datetime(2026, 6, 1, tzinfo=UTC)), workers=4)
    assert summary.rotated == [OLD.key_id]
    assert summary.subjects == 30 and summary.receipts_reissued == 30
    return store.root, before, before_files


def test_reissue_keeps_ids_and_first_computed_at(rotated) -> None:  # type: ignore[no-untyped-def]
    root, before, before_files = rotated
    after = bundles(root)
    # the write-once event store only grew
    now = files(root)
    assert all(now[k] == v for k, v in before_files.items() if k.startswith("events/"))
    for body, old in before.items():
        new = after[body]
        old_ids = {e["event_id"] for e in old["events"]}
        new_events = {e["event_id"]: e for e in new["events"]}
        assert old_ids <= set(new_events)  # ids unchanged
        for eid in old_ids:
            assert new_events[eid]["signature"]["key_id"] == NEW.key_id
        (extra,) = [e for e in new["events"] if e["event_id"] not in old_ids]
        assert extra["event_type"] == "correction"
        assert extra["payload"]["kind"] == "receipt_reissued"
        rc = next(e for e in old["events"] if e["event_type"] == "record_created")
        old_r, new_r = rc["payload"]["receipt"], extra["payload"]["receipt"]
        assert extra["payload"]["record_created"] == rc["event_id"]
        assert new_r["first_computed_at"] == old_r["first_computed_at"]
        assert new_r["last_reissued_at"] > old_r["last_reissued_at"]
        assert new_r["key_id"] == NEW.key_id and new_r["signature_b64"] != old_r["signature_b64"]
        assert new["bundle_signature"]["key_id"] == NEW.key_id
        assert new["state"]["current"]["record_created"]["event_id"] == rc["event_id"]


def test_bundles_before_and_after_rotation_verify(rotated) -> None:  # type: ignore[no-untyped-def]
    root, before, _ = rotated
    keys = trusted(root)
    rotates = {k.key_id: k.rotates_at for k in keys}
    assert rotates[NEW.key_id] is None and set(rotates) == {OLD.key_id, NEW.key_id}
    assert "2026-06-01T00:00:00Z" < str(rotates[OLD.key_id]) < "2026-06-01T00:01:00Z"
    for b in [*before.values(), *bundles(root).values()]:
        report = verify_bundle(b, trusted_keys=keys)
        assert report.ok, report.failed
    for b in bundles(root).values():
        report = verify_bundle(b, pinned_fingerprint=NEW.fingerprint, trusted_keys=keys)
        assert report.ok, report.failed
        assert "re-issued by pith-v2-2026-06" in next(c.detail for c in report.checks if c.name == "receipt")


def test_reissue_twice_changes_nothing(rotated) -> None:  # type: ignore[no-untyped-def]
    root, _, _ = rotated
    snap = files(root)
    summary = reissue(LocalStore(root), NEW, BuildConfig(), clock=StepClock(datetime(2026, 6, 2, tzinfo=UTC)))
    assert (summary.events_resigned, summary.receipts_reissued, summary.bundles_signed) == (0, 0, 0)
    assert files(root) == snap


def test_rotated_key_cannot_sign_again(rotated) -> None:  # type: ignore[no-untyped-def]
    root, _, _ = rotated
    with pytest.raises(InputError, match="was rotated"):
        Publisher(LocalStore(root), OLD, clock=StepClock(datetime(2026, 7, 1, tzinfo=UTC)))


def _resign(
    bundle: dict[str, Any], signer: Ed25519Signer, keys: list[PublicKey], signed_at: datetime
) -> dict[str, Any]:
    b = copy.deepcopy(bundle)
    from pith_pipeline.core.bundle import Site

    site = Site(base_url="https://pith.example.org")
    return build_bundle(
        subject=b["pith_number"],
        canonical=b["canonical_record"],
        canonical_hex=b["canonical_sha256"],
        events=b["events"],
        aliases=b["source_aliases"],
        public_keys=keys,
        site=site,
        built_at=signed_at.strftime("%Y-%m-%dT%H:%M:%SZ"),  # signed, so it dates the signature
        signer=signer,
        signed_at=signed_at.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
    )


def test_unlisted_or_late_keys_are_rejected(rotated) -> None:  # type: ignore[no-untyped-def]
    root, before, _ = rotated
    keys = trusted(root)
    b = next(iter(bundles(root).values()))
    listed = [PublicKey.from_json(k) for k in b["public_keys"]]
    # a bundle signed by a key the bundle does not list
    unlisted = _resign(b, ROGUE, listed, datetime(2026, 6, 3, tzinfo=UTC))
    assert [c.name for c in verify_bundle(unlisted).failed] == ["bundle_signature", "keys_listed"]
    # listed in the bundle, but not in the registry's key document: rejected when trusted
    rogue = _resign(b, ROGUE, [*listed, ROGUE.public_key_doc()], datetime(2026, 6, 3, tzinfo=UTC))
    assert verify_bundle(rogue).ok  # self-consistent ...
    report = verify_bundle(rogue, trusted_keys=keys)  # ... but not the registry's key
    assert [c.name for c in report.failed] == ["key_trust"]
    assert "pith-v3-rogue is neither in the trusted key document" in report.failed[0].detail
    # the old key signing after its rotates_at
    old_b = next(iter(before.values()))
    late = _resign(
        old_b, OLD, [PublicKey.from_json(k) for k in old_b["public_keys"]], datetime(2026, 6, 5, tzinfo=UTC)
    )
    assert verify_bundle(late).ok  # the bundle alone cannot know about the rotation
    report = verify_bundle(late, trusted_keys=keys)
    assert [c.name for c in report.failed] == ["key_trust"]
    assert "outside the validity of key pith-v1-2026-01" in report.failed[0].detail


def test_reissued_receipt_must_keep_first_computed_at(rotated) -> None:  # type: ignore[no-untyped-def]
    root, _, _ = rotated
    b = next(iter(bundles(root).values()))
    ev = next(e for e in b["events"] if e["payload"].get("kind") == "receipt_reissued")
    ev["payload"]["receipt"]["first_computed_at"] = "2026-06-01T00:00:00.000000Z"
    from pith_pipeline.core.events import finalize_event, sign_event

    finalize_event(ev)
    sign_event(ev, NEW, ev["signature"]["signed_at"])
    b["state"] = None
    fixed = _resign(
        b, NEW, [PublicKey.from_json(k) for k in b["public_keys"]], datetime(2026, 6, 3, tzinfo=UTC)
    )
    report = verify_bundle(fixed)
    assert "receipt" in [c.name for c in report.failed]
    assert "changes first_computed_at" in next(c.detail for c in report.failed if c.name == "receipt")


def test_cli_reissue_and_verify_with_key_document(
    tmp_path: Path, file_key: Path, file_key2: Path, cli
) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "out"
    assert cli("build", "--input", str(SAMPLE), "--store", str(out), "--key", str(file_key)).code == 0
    reissue = ["receipts", "reissue", "--store", str(out), "--signer", f"file:{file_key2}"]
    # the store keeps a log (a new store's default), whose key is beside the old key, not
    # the new one: said before anything is re-signed, and given, the reissue logs its events
    r = cli(*reissue)
    assert r.code == 1 and "nothing was published" in r.err and "--log-signer" in r.err, r.err
    log_key = file_key.parent / "pith-log-private-key.json"
    r = cli(*reissue, "--log-signer", f"file:{log_key}")
    assert r.code == 0, r.err
    assert "30 receipts re-issued" in r.out and "rotated: pith-old-2026-01" in r.out
    r = cli("verify", str(out), "--keys", str(out / "pith-signing-key.json"), "-q")
    assert r.code == 0 and "30 verified" in r.out, r.out
    r = cli("keys", "show", "--store", str(out))
    assert "pith-new-2026-06" in r.out and "rotates_at=None" in r.out
    r = cli("build", "--input", str(SAMPLE), "--store", str(out), "--key", str(file_key))
    assert r.code == 1 and "was rotated" in r.err


def test_reference_bundle_still_verifies(reference_bundle: dict[str, Any]) -> None:
    keys = [PublicKey.from_json(k) for k in reference_bundle["public_keys"]]
    pin = "8d4b5ee74e4693bcd1df2446408b0d54"
    report = verify_bundle(reference_bundle, pinned_fingerprint=pin, trusted_keys=keys)
    assert report.ok and all(c.status == "ok" for c in report.checks), report.checks
