"""Short-lived keys certified by a root key: accepted only through a valid certificate."""

from __future__ import annotations

import copy
import hashlib
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from signing_consts import KMS_ALIAS, SAMPLE
from testclock import StepClock

from pith_pipeline.core.certificate import certificate_problem
from pith_pipeline.core.keys import Ed25519Signer, PublicKey, read_key_document
from pith_pipeline.core.verify import verify_bundle
from pith_pipeline.publish import BuildConfig, Publisher
from pith_pipeline.signing.certified import CertifiedSigner
from pith_pipeline.sources.jsonl import iter_jsonl
from pith_pipeline.storage.local import LocalStore
from pith_pipeline.testing.kms_server import LocalKmsServer

ROOT = Ed25519Signer(hashlib.sha256(b"root").digest(), "pith-root-2026")
OTHER = Ed25519Signer(hashlib.sha256(b"other").digest(), "pith-other")
T0 = datetime(2026, 3, 1, tzinfo=UTC)


@pytest.fixture(scope="module")
def certified_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, CertifiedSigner]:
    signer = CertifiedSigner(ROOT, run_id="backfill-test", now=T0, validity=timedelta(hours=12))
    store = LocalStore(tmp_path_factory.mktemp("cert") / "store")
    Publisher(store, signer, BuildConfig(), clock=StepClock(T0)).publish(iter_jsonl(SAMPLE))
    return store.root, signer


def one_bundle(root: Path) -> dict[str, Any]:
    return json.loads(next(iter(sorted(root.glob("pith/*/bundle.json")))).read_bytes())


def test_published_key_document_and_certificate(certified_store) -> None:  # type: ignore[no-untyped-def]
    root, signer = certified_store
    doc = json.loads((root / "pith-signing-key.json").read_text())
    assert doc["key_id"] == ROOT.key_id  # the root heads the document
    keys = {
        k.key_id: k
        for k in read_key_document((root / "pith-signing-key.json").read_bytes(), "pith-signing-key.json")
    }
    assert set(keys) == {ROOT.key_id, signer.key_id}
    eph = keys[signer.key_id]
    assert eph.certificate is not None and eph.certificate["run_id"] == "backfill-test"
    assert certificate_problem(eph, {ROOT.key_id: keys[ROOT.key_id]}) is None
    cert_file = json.loads((root / "keys" / "certs" / f"{signer.key_id}.json").read_text())
    assert cert_file == eph.certificate
    b = one_bundle(root)
    assert {k["key_id"] for k in b["public_keys"]} == {ROOT.key_id, signer.key_id}
    assert b["bundle_signature"]["key_id"] == signer.key_id


def test_certified_bundles_verify_through_the_root(certified_store) -> None:  # type: ignore[no-untyped-def]
    root, _signer = certified_store
    trusted = read_key_document((root / "pith-signing-key.json").read_bytes(), "pith-signing-key.json")
    roots_only = [k for k in trusted if k.certificate is None]
    for p in root.glob("pith/*/bundle.json"):
        b = json.loads(p.read_bytes())
        for kwargs in ({}, {"pinned_fingerprint": ROOT.fingerprint}, {"trusted_keys": roots_only}):
            report = verify_bundle(b, **kwargs)  # type: ignore[arg-type]
            assert report.ok, (kwargs, report.failed)
    report = verify_bundle(one_bundle(root), pinned_fingerprint=OTHER.fingerprint)
    assert [c.name for c in report.failed] == ["pinned_key"]


def _entry(b: dict[str, Any], key_id: str) -> dict[str, Any]:
    return next(k for k in b["public_keys"] if k["key_id"] == key_id)


def test_uncertified_short_lived_key_is_rejected(certified_store) -> None:  # type: ignore[no-untyped-def]
    root, signer = certified_store
    b = one_bundle(root)
    del _entry(b, signer.key_id)["certificate"]
    roots = [PublicKey.from_json(_entry(b, ROOT.key_id))]
    # the bundle hash changed too, so look only at trust: the uncertified key is refused
    report = verify_bundle(b, trusted_keys=roots)
    assert "key_trust" in [c.name for c in report.failed]
    assert f"key {signer.key_id} is neither" in next(c.detail for c in report.failed if c.name == "key_trust")
    assert "pinned_key" in [c.name for c in verify_bundle(b, pinned_fingerprint=ROOT.fingerprint).failed]


@pytest.mark.parametrize(
    ("mutate", "why"),
    [
        (lambda c: c.update(not_after="2027-01-01T00:00:00.000000Z"), "does not recompute"),
        (
            lambda c: c.update(issuer_key_id="pith-other", issuer_fingerprint=OTHER.fingerprint),
            "not a trusted root",
        ),
        (
            lambda c: c["signature"].update(signature_b64=c["signature"]["signature_b64"][::-1]),
            "does not verify",
        ),
        (lambda c: c.update(public_key_hex="00" * 32), "for another key"),
    ],
)
def test_tampered_certificates_are_rejected(certified_store, mutate, why: str) -> None:  # type: ignore[no-untyped-def]
    root, signer = certified_store
    b = one_bundle(root)
    cert = copy.deepcopy(_entry(b, signer.key_id)["certificate"])
    mutate(cert)
    key = PublicKey.from_json({**_entry(b, signer.key_id), "certificate": cert})
    problem = certificate_problem(key, {ROOT.key_id: PublicKey.from_json(_entry(b, ROOT.key_id))})
    assert problem is not None and why in problem


def test_signature_outside_the_certificate_window_is_rejected(certified_store) -> None:  # type: ignore[no-untyped-def]
    from pith_pipeline.core.bundle import Site, build_bundle

    root, signer = certified_store
    b = one_bundle(root)
    keys = [PublicKey.from_json(k) for k in b["public_keys"]]
    late = build_bundle(
        subject=b["pith_number"],
        canonical=b["canonical_record"],
        canonical_hex=b["canonical_sha256"],
        events=b["events"],
        aliases=b["source_aliases"],
        public_keys=keys,
        site=Site(base_url="https://pith.example.org"),
        built_at="2026-03-02T00:00:00Z",  # signed: it decides (signed_at is outside every hash)
        signer=signer,
        signed_at="2026-03-02T00:00:00.000000Z",
    )
    report = verify_bundle(late)
    assert [c.name for c in report.failed] == ["key_trust"]
    assert "bundle_signature: signed at 2026-03-02T00:00:00Z, outside" in report.failed[0].detail


def test_certified_by_a_kms_root_via_cli(
    local_kms: LocalKmsServer, log_key: Path, tmp_path: Path, cli
) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "out"
    r = cli(
        "build",
        "--input",
        str(SAMPLE),
        "--store",
        str(out),
        "--signer",
        f"certified:kms:{KMS_ALIAS}?key_id=pith-kms-root",
        "--log-signer",  # a KMS root has no directory for a log key beside it
        f"file:{log_key}",
    )
    assert r.code == 0, r.err
    signs = [q for q in local_kms.state.requests if q["target"] == "TrentService.Sign"]
    assert len(signs) == 2  # the open-time self-test and the one certificate: 120 digests signed locally
    doc = json.loads((out / "pith-signing-key.json").read_text())
    assert doc["key_id"] == "pith-kms-root"
    r = cli("verify", str(out), "--pin", doc["fingerprint_sha256_hex"], "-q")
    assert r.code == 0 and "30 verified" in r.out, r.out


@pytest.mark.parametrize("hours", ["-1", "0", "nan", "inf", "-inf", "1e300", "x"])
def test_an_unusable_certificate_validity_is_refused_before_signing(hours: str, tmp_path: Path) -> None:
    """PITH_CERT_HOURS=-1 published certificates whose window ends before it starts,
    so every bundle of the run failed `verify`; nan, inf and 1e300 were tracebacks.
    The setting is refused in one line when the run's settings are read, and a window
    given directly is checked by the signer."""
    from pith_pipeline.config import SettingError, load_settings
    from pith_pipeline.errors import KeyFileError

    with pytest.raises(SettingError, match=f"^PITH_CERT_HOURS={hours!r}: expected"):
        load_settings(env={"PITH_CERT_HOURS": hours})
    if hours in ("-1", "0"):
        with pytest.raises(KeyFileError, match="PITH_CERT_HOURS"):
            CertifiedSigner(Ed25519Signer(bytes(32), "pith-root"), validity=timedelta(hours=float(hours)))


def test_the_run_id_and_validity_come_from_the_settings(file_key: Path) -> None:
    """`certified:` takes the run's settings (`run_id`, `cert_hours`): the signer reads
    no environment."""
    from pith_pipeline.config import load_settings
    from pith_pipeline.signing.factory import open_signer

    settings = load_settings(env={"PITH_RUN_ID": "run-7", "PITH_CERT_HOURS": "2"})
    signer = open_signer(f"certified:file:{file_key}", settings=settings)
    assert isinstance(signer, CertifiedSigner)
    assert signer.run_id == "run-7" and signer.certificate["run_id"] == "run-7"
    start = datetime.fromisoformat(signer.certificate["not_before"].replace("Z", "+00:00"))
    end = datetime.fromisoformat(signer.certificate["not_after"].replace("Z", "+00:00"))
    assert end - start == timedelta(hours=2, minutes=5)  # backdated five minutes
    default = open_signer(f"certified:file:{file_key}", settings=load_settings(env={}))
    assert isinstance(default, CertifiedSigner) and default.run_id != "run-7"
