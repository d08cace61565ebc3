"""Events, receipts and graph snapshots (spec sections 4 and 6).

An event's identity is the hash of its content without the signature, so an
event keeps its id when it is re-signed. Key order follows the registry's files
(hashes do not depend on it; readers comparing files by eye do).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

from pith_pipeline.core.arxiv_record import ArxivRecord
from pith_pipeline.core.canonical_json import FAST, CanonicalJSON
from pith_pipeline.core.keys import Signer
from pith_pipeline.core.text import collapse_ws

SCHEMA_VERSION = "1.0"
BUILDER_VERSION = "pith-pipeline-builder-v1"
RECEIPT_VERSION = "0.3"
SIGNATURE_STATUS = "signed_v1"
EVENT_SIGNED_MESSAGE = "open_graph_event_sha256_bytes"
RECEIPT_SIGNED_MESSAGE = "canonical_sha256_bytes"
BUNDLE_SIGNED_MESSAGE = "bundle_sha256_bytes"

# event_type -> (target, the state's `current` list it merges into)
EVENT_TYPES: dict[str, tuple[str, str | None]] = {
    "record_created": ("record", None),
    "graph_snapshot": ("graph", "graph_snapshots"),
    "author_attestation": ("record", "author_attestations"),
    "timestamp_anchor": ("record", "timestamp_anchors"),
    "storage_attestation": ("record", "storage_attestations"),
    "citation_signature": ("record", "citation_signatures"),
    "replication_record": ("record", "replication_records"),
    "correction": ("record", "corrections"),
    "mirror_hint": ("record", "mirror_hints"),
}
EVENT_FIELDS = (
    "event_type",
    "subject_pith_number",
    "target",
    "payload",
    "signer",
    "created_at",
    "supersedes",
    "prev_event",
    "signature",
    "content_sha256",
    "schema_version",
    "event_id",
)
UNHASHED_FIELDS = ("signature", "content_sha256", "event_id")


@dataclass(frozen=True, slots=True, kw_only=True)
class SignerInfo:
    """Who signs: the registry's name, its kind, and the key it signs with."""

    signer_id: str
    key_id: str
    public_key_fingerprint: str
    signer_type: str = "pith_registry"

    def to_json(self) -> dict[str, str]:
        return {
            "signer_id": self.signer_id,
            "signer_type": self.signer_type,
            "key_id": self.key_id,
            "public_key_fingerprint": self.public_key_fingerprint,
        }

    @classmethod
    def for_signer(cls, signer: Signer, signer_id: str, signer_type: str = "pith_registry") -> SignerInfo:
        return cls(
            signer_id=signer_id,
            signer_type=signer_type,
            key_id=signer.key_id,
            public_key_fingerprint=signer.fingerprint,
        )


def content_sha256(event: dict[str, Any], *, trusted: bool = False, canon: CanonicalJSON = FAST) -> str:
    """canonical_sha256(event without signature, content_sha256, event_id).

    `trusted`: the builder made every value itself (see `dumps_trusted`), so the
    per-value check of the checked path is skipped; the bytes are the same.
    """
    body = {k: v for k, v in event.items() if k not in UNHASHED_FIELDS}
    return canon.sha256_trusted(body) if trusted else canon.sha256(body)


def signature_block(
    signer: Signer, digest_hex: str, signed_message: str, signed_at: str, signature_b64: str | None = None
) -> dict[str, Any]:
    sig = signature_b64 if signature_b64 is not None else signer.sign_hex_b64(digest_hex)
    return {
        "signature_status": SIGNATURE_STATUS,
        "algorithm": "ed25519",
        "key_id": signer.key_id,
        "public_key_fingerprint": signer.fingerprint,
        "signature_b64": sig,
        "signed_message": signed_message,
        "signed_at": signed_at,
    }


def hashed_view(event: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in event.items() if k not in UNHASHED_FIELDS}


def finalize_event(
    event: dict[str, Any], *, trusted: bool = False, canon: CanonicalJSON = FAST
) -> dict[str, Any]:
    """Recompute content hash and id after `schema_version` joined the content."""
    digest = content_sha256(event, trusted=trusted, canon=canon)
    event["content_sha256"] = digest
    event["event_id"] = "sha256:" + digest
    return event


def make_event(
    *,
    event_type: str,
    subject: str,
    payload: dict[str, Any],
    signer_info: SignerInfo,
    created_at: str,
    supersedes: list[str] | None = None,
    prev_event: str | None = None,
    trusted: bool = False,
    canon: CanonicalJSON = FAST,
) -> dict[str, Any]:
    """An unsigned event with its content hash and id (sign it with `sign_event`).

    `trusted=True` only for payloads the builder assembled from checked parts.
    """
    if event_type not in EVENT_TYPES:
        raise ValueError(f"unknown event type {event_type!r}")
    event: dict[str, Any] = {
        "event_type": event_type,
        "subject_pith_number": subject,
        "target": EVENT_TYPES[event_type][0],
        "payload": payload,
        "signer": signer_info.to_json(),
        "created_at": created_at,
        "supersedes": list(supersedes or []),
        "prev_event": prev_event,
        "signature": None,
        "content_sha256": "",
        "schema_version": SCHEMA_VERSION,
        "event_id": "",
    }
    return finalize_event(event, trusted=trusted, canon=canon)


def sign_event(
    event: dict[str, Any], signer: Signer, signed_at: str, signature_b64: str | None = None
) -> dict[str, Any]:
    """Attach a signature over the raw bytes of `content_sha256` (in place)."""
    event["signature"] = signature_block(
        signer, event["content_sha256"], EVENT_SIGNED_MESSAGE, signed_at, signature_b64
    )
    return event


def receipt(
    *,
    signer: Signer,
    canonical_sha256: str,
    first_computed_at: str,
    last_reissued_at: str,
    signed_at: str,
    builder_version: str = BUILDER_VERSION,
    signature_b64: str | None = None,
) -> dict[str, Any]:
    """The signed statement that a canonical record hashes to `canonical_sha256`."""
    sig = signature_b64 if signature_b64 is not None else signer.sign_hex_b64(canonical_sha256)
    return {
        "kind": "pith_receipt",
        "key_id": signer.key_id,
        "algorithm": "ed25519",
        "signed_at": signed_at,
        "signature_b64": sig,
        "signed_message": RECEIPT_SIGNED_MESSAGE,
        "builder_version": builder_version,
        "receipt_version": RECEIPT_VERSION,
        "canonical_sha256": canonical_sha256,
        "last_reissued_at": last_reissued_at,
        "signature_status": SIGNATURE_STATUS,
        "first_computed_at": first_computed_at,
        "public_key_fingerprint": signer.fingerprint,
    }


def record_created_payload(
    canonical: dict[str, Any], canonical_hex: str, receipt_obj: dict[str, Any]
) -> dict[str, Any]:
    src = canonical["source"]
    return {
        "canonical_record": canonical,
        "canonical_sha256": canonical_hex,
        "receipt": receipt_obj,
        "source_kind": src["kind"],
        "source_id": src["id"],
        "source_version": src["version"],
        "attestation_state": "computed",
    }


def sort_key_alnum(name: str) -> tuple[str, str]:
    """Letters and digits only, case-insensitive; the name itself breaks ties."""
    return ("".join(c for c in name if c.isalnum()).lower(), name)


def authors_text(names: list[str]) -> str:
    return ", ".join(sorted(names, key=sort_key_alnum))


def _section(body: dict[str, Any], canon: CanonicalJSON) -> dict[str, Any]:
    """A snapshot section with `snapshot_sha256 = canonical_sha256(section without it)` (our rule)."""
    return {**body, "snapshot_sha256": canon.sha256_trusted(body)}


@cache
def _empty_sections(canon: CanonicalJSON) -> dict[str, dict[str, Any]]:
    """A fresh paper's empty sections, the same for every paper: hashed once per
    strategy, copied per use (`_empty_section`)."""
    return {
        "claims": _section({"count": 0, "items": []}, canon),
        "references": _section({"count": 0, "sample": [], "resolved_work": 0, "internal_anchors": 0}, canon),
        "formal_canon": _section({"evidence_count": 0}, canon),
        "author_claims": _section({"count": 0, "strong_count": 0}, canon),
    }


def _empty_section(name: str, canon: CanonicalJSON) -> dict[str, Any]:
    """A fresh copy (callers may mutate what they get; the template stays intact)."""
    return {
        k: (v.copy() if isinstance(v, list | dict) else v) for k, v in _empty_sections(canon)[name].items()
    }


def graph_snapshot_payload(
    rec: ArxivRecord,
    canonical: dict[str, Any],
    builder_version: str = BUILDER_VERSION,
    *,
    canon: CanonicalJSON = FAST,
) -> dict[str, Any]:
    """The graph snapshot of a freshly ingested paper: paper facts, empty sections."""
    meta = canonical["metadata"]
    abstract = collapse_ws(rec.abstract)
    paper = {
        "title": collapse_ws(rec.title),
        "license": meta["license"],
        "headline": "",
        "cross_cats": list(meta["cross_cats_sorted"]),
        "primary_cat": meta["primary_cat"],
        "authors_text": authors_text(rec.author_names),
        "submitted_at": meta["submitted_at"],
        "abstract_excerpt": abstract[:600],
    }
    snapshot = {
        "paper": paper,
        "claims": _empty_section("claims", canon),
        "source": dict(canonical["source"]),
        "verdict": {
            "id": None,
            "model_set": {},
            "created_at": None,
            "strongest_claim": "",
            "one_line_summary": "",
            "pipeline_version": None,
            "weakest_assumption": "",
            "pith_extraction_headline": "",
        },
        "integrity": _section(
            {
                "clean": True,
                "summary": {"advisory": 0, "critical": 0, "by_detector": {}, "informational": 0},
                "endpoint": f"/pith/{rec.id}/integrity.json",
                "findings": [],
                "available": True,
                "detectors_run": [],
            },
            canon,
        ),
        "references": _empty_section("references", canon),
        "formal_canon": _empty_section("formal_canon", canon),
        "author_claims": _empty_section("author_claims", canon),
        "builder_version": builder_version,
    }
    return {"graph_snapshot": snapshot, "verdict_id": None}
