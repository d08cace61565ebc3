"""Key certificates: a root key vouches for a short-lived signing key.

A backfill signs millions of digests; doing that through KMS is bound by the
account's request quota. Instead a run generates an Ed25519 key in memory and
asks the root (KMS) key for one signature over a *certificate*: the short-lived
key's public key, its key id, the window in which its signatures count and the
run that made it. Trust still roots in the KMS key: a verifier accepts the
short-lived key only through a certificate that verifies with a root it trusts,
and only for signatures whose `signed_at` falls inside the window.

    certificate_sha256 = canonical_sha256(certificate without certificate_sha256 and signature)
    signature          = Ed25519(root, bytes.fromhex(certificate_sha256))

Certificates are one level deep: an issuer must itself be uncertified.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pith_pipeline.core.canonical_json import canonical_sha256
from pith_pipeline.core.keys import PublicKey, Signer, fingerprint_hex, verify_signature

CERTIFICATE_KIND = "pith_key_certificate"
CERTIFICATE_VERSION = "1.0"
CERTIFICATE_SIGNED_MESSAGE = "key_certificate_sha256_bytes"
_UNHASHED = ("certificate_sha256", "signature")
#: The certificate's signature block, exactly (it is outside the certificate's hash).
SIGNATURE_FIELDS = frozenset(
    ("algorithm", "key_id", "public_key_fingerprint", "signed_message", "signature_b64", "signed_at")
)


def certificate_sha256(cert: Mapping[str, Any]) -> str:
    return canonical_sha256({k: v for k, v in cert.items() if k not in _UNHASHED})


def issue_certificate(
    *,
    issuer: Signer,
    subject_key_id: str,
    subject_public_key: bytes,
    not_before: str,
    not_after: str,
    run_id: str,
    issued_at: str,
) -> dict[str, Any]:
    """A certificate for `subject_public_key`, signed by `issuer` (one signature)."""
    cert: dict[str, Any] = {
        "kind": CERTIFICATE_KIND,
        "certificate_version": CERTIFICATE_VERSION,
        "key_id": subject_key_id,
        "algorithm": "ed25519",
        "public_key_hex": subject_public_key.hex(),
        "public_key_fingerprint": fingerprint_hex(subject_public_key),
        "not_before": not_before,
        "not_after": not_after,
        "run_id": run_id,
        "issuer_key_id": issuer.key_id,
        "issuer_fingerprint": issuer.fingerprint,
        "issued_at": issued_at,
    }
    digest = certificate_sha256(cert)
    cert["certificate_sha256"] = digest
    cert["signature"] = {
        "algorithm": "ed25519",
        "key_id": issuer.key_id,
        "public_key_fingerprint": issuer.fingerprint,
        "signed_message": CERTIFICATE_SIGNED_MESSAGE,
        "signature_b64": issuer.sign_hex_b64(digest),
        "signed_at": issued_at,
    }
    return cert


def certificate_problem(key: PublicKey, issuers: Mapping[str, PublicKey]) -> str | None:
    """None when `key.certificate` is valid for `key` and issued by one of `issuers`."""
    cert = key.certificate
    if not isinstance(cert, dict):
        return f"key {key.key_id} has no certificate"
    try:
        if cert.get("kind") != CERTIFICATE_KIND or cert.get("algorithm") != "ed25519":
            return f"key {key.key_id}: not a pith key certificate"
        if cert.get("key_id") != key.key_id or cert.get("public_key_hex") != key.public_key.hex():
            return f"key {key.key_id}: the certificate is for another key"
        window = (cert.get("not_before"), cert.get("not_after"))
        if not all(isinstance(t, str) for t in window) or str(window[0]) > str(window[1]):
            return f"key {key.key_id}: the certificate's validity window is malformed"
        issuer = issuers.get(str(cert.get("issuer_key_id")))
        if issuer is None:
            return f"key {key.key_id}: issuer {cert.get('issuer_key_id')!r} is not a trusted root key"
        if issuer.certificate is not None:
            return f"key {key.key_id}: issuer {issuer.key_id} is itself certified (no chains)"
        if cert.get("issuer_fingerprint") != issuer.fingerprint:
            return f"key {key.key_id}: issuer fingerprint does not match {issuer.key_id}"
        digest = certificate_sha256(cert)
        if cert.get("certificate_sha256") != digest:
            return f"key {key.key_id}: certificate_sha256 does not recompute"
        sig = cert.get("signature")
        if (
            not isinstance(sig, dict)
            or sig.get("key_id") != issuer.key_id
            or sig.get("signed_message") != CERTIFICATE_SIGNED_MESSAGE
        ):
            return f"key {key.key_id}: certificate signature block malformed"
        if set(sig) != SIGNATURE_FIELDS:
            unknown = ", ".join(sorted(str(k) for k in set(sig) - SIGNATURE_FIELDS)) or "none"
            return (
                f"key {key.key_id}: certificate signature block has unknown fields ({unknown}) or lacks some"
            )
        if not verify_signature(issuer.public_key, digest, str(sig.get("signature_b64"))):
            return f"key {key.key_id}: certificate signature does not verify with {issuer.key_id}"
    except (TypeError, ValueError, AttributeError) as exc:
        return f"key {key.key_id}: malformed certificate ({type(exc).__name__})"
    return None


def within_window(key: PublicKey, signed_at: Any) -> bool:
    """Whether a signature made at `signed_at` counts for `key`.

    A certified key counts inside its certificate's window; a rotated key counts
    up to `rotates_at`. Timestamps are ISO 8601 UTC with `Z`, so text order is
    time order (second- and microsecond-precision values compare correctly once
    the shorter one is read as `.000000`).
    """
    if not isinstance(signed_at, str):
        return False
    t = _norm(signed_at)
    cert = key.certificate
    if isinstance(cert, dict) and not (
        _norm(str(cert.get("not_before"))) <= t <= _norm(str(cert.get("not_after")))
    ):
        return False
    return not (key.rotates_at and t > _norm(key.rotates_at))


def _norm(ts: str) -> str:
    """`2026-01-01T00:00:00Z` -> `2026-01-01T00:00:00.000000Z` so text order is time order."""
    if ts.endswith("Z") and "." not in ts:
        return ts[:-1] + ".000000Z"
    return ts
