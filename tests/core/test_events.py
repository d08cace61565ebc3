"""Events and receipts assemble exactly as the registry's."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from pith_pipeline.core.arxiv_record import ArxivRecord
from pith_pipeline.core.builder import Identity, build_record_events
from pith_pipeline.core.canonical_json import canonical_sha256
from pith_pipeline.core.events import (
    SignerInfo,
    authors_text,
    content_sha256,
    graph_snapshot_payload,
    make_event,
    record_created_payload,
)
from pith_pipeline.core.keys import Ed25519Signer, verify_signature


def test_record_created_content_hash_reproduced(reference_bundle: dict[str, Any], asset) -> None:  # type: ignore[no-untyped-def]
    ref = reference_bundle["events"][0]
    ident = Identity.of(ArxivRecord.from_json(json.loads(asset("arxiv-1909.11150.jsonl").read_text())))
    payload = record_created_payload(ident.canonical, ident.canonical_sha256, ref["payload"]["receipt"])
    info = SignerInfo(**ref["signer"])
    ev = make_event(
        event_type="record_created",
        subject=ident.subject,
        payload=payload,
        signer_info=info,
        created_at=ref["created_at"],
    )
    assert ev["content_sha256"] == ref["content_sha256"]
    assert ev["event_id"] == ref["event_id"]
    assert content_sha256(ref) == ref["content_sha256"]


def test_graph_snapshot_paper_section_matches_reference(reference_bundle: dict[str, Any], asset) -> None:  # type: ignore[no-untyped-def]
    ref = reference_bundle["events"][1]["payload"]["graph_snapshot"]
    rec = ArxivRecord.from_json(json.loads(asset("arxiv-1909.11150.jsonl").read_text()))
    ident = Identity.of(rec)
    ours = graph_snapshot_payload(rec, ident.canonical)["graph_snapshot"]
    assert ours["paper"] == ref["paper"]
    assert list(ours) == list(ref)  # same sections, same order
    assert ours["source"] == ref["source"] and ours["verdict"] == ref["verdict"]
    for section in ("claims", "references", "formal_canon", "author_claims", "integrity"):
        body = {k: v for k, v in ours[section].items() if k != "snapshot_sha256"}
        ref_body = {k: v for k, v in ref[section].items() if k != "snapshot_sha256"}
        assert body == ref_body
        assert ours[section]["snapshot_sha256"] == canonical_sha256(body)  # our documented rule


def test_authors_text_order_of_reference() -> None:
    names = ["M. Todd Young", "Michael Matheson", "Albina Borisevich"]
    assert authors_text(names) == "Albina Borisevich, Michael Matheson, M. Todd Young"


def test_built_events_are_signed_over_raw_digest_bytes() -> None:
    signer = Ed25519Signer.generate("k1")
    rec = ArxivRecord.from_json(
        {
            "id": "2101.00001",
            "title": "T",
            "abstract": "A",
            "categories": "cs.LG",
            "versions": [{"version": "v1", "created": "Fri, 1 Jan 2021 00:00:00 GMT"}],
        }
    )
    now = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
    built = build_record_events(Identity.of(rec), signer, "me", now)
    created, snap = built.events
    assert created["created_at"] == "2026-01-02T03:04:05Z"
    receipt = created["payload"]["receipt"]
    assert receipt["first_computed_at"] == receipt["signed_at"] == "2026-01-02T03:04:05.678901Z"
    assert verify_signature(signer.public_key, receipt["canonical_sha256"], receipt["signature_b64"])
    for ev in (created, snap):
        assert ev["content_sha256"] == content_sha256(ev)
        assert verify_signature(signer.public_key, ev["content_sha256"], ev["signature"]["signature_b64"])
        # signing the hex text instead would not verify
        assert not verify_signature(
            signer.public_key, ev["content_sha256"].encode().hex(), ev["signature"]["signature_b64"]
        )
        assert list(ev) == list(json.loads(json.dumps(ev)))
