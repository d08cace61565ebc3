"""The signature blocks of events, receipts and bundles: their exact fields.

A block is not open for extension: a field no check reads is a place for a forger
to put claims that some other reader may believe. So every block carries exactly
its fields, every one a string, and `block_problem` says which are not.
"""

from __future__ import annotations

from typing import Any

EVENT_SIGNATURE_FIELDS = frozenset(
    {
        "signature_status",
        "algorithm",
        "key_id",
        "public_key_fingerprint",
        "signature_b64",
        "signed_message",
        "signed_at",
    }
)
BUNDLE_SIGNATURE_FIELDS = EVENT_SIGNATURE_FIELDS | {"bundle_sha256"}
RECEIPT_FIELDS = EVENT_SIGNATURE_FIELDS | {
    "kind",
    "builder_version",
    "receipt_version",
    "canonical_sha256",
    "last_reissued_at",
    "first_computed_at",
}


def block_problem(block: Any, fields: frozenset[str], what: str) -> str | None:
    """Why a signature block is not exactly `fields` with string values, or None."""
    if not isinstance(block, dict):
        return f"{what} is not an object"
    extra = sorted(str(k) for k in block if k not in fields)
    missing = sorted(fields - set(block))
    parts = []
    if extra:
        parts.append("unknown fields " + ", ".join(extra))
    if missing:
        parts.append("missing fields " + ", ".join(missing))
    not_str = sorted(k for k in fields if k in block and not isinstance(block[k], str))
    if not_str:
        parts.append("non-string " + ", ".join(not_str))
    return f"{what}: " + "; ".join(parts) if parts else None
