"""The canonical-JSON strategy the core is given (`canon=`): `FAST`, every run's, and
`REFERENCE`, rfc8785 for every hash with nothing taken on trust, agree on every byte;
what differs is only how much work they do, and a strategy reaches every hash it is
given to."""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
from datetime import UTC, datetime
from typing import Any

import pytest
import rfc8785

from pith_pipeline.core.arxiv_record import ArxivRecord
from pith_pipeline.core.builder import FreshBuilder, Identity, build_record_events, sign_bundle
from pith_pipeline.core.bundle import Site
from pith_pipeline.core.canonical_json import FAST, REFERENCE, CanonicalJSON
from pith_pipeline.core.events import graph_snapshot_payload
from pith_pipeline.core.keys import Ed25519Signer
from pith_pipeline.core.merge import merge
from pith_pipeline.errors import CanonicalJSONError
from pith_pipeline.sources.jsonl import parse_line

SIGNER = Ed25519Signer(bytes(range(32)), "canon-test")
NOW = datetime(2026, 7, 1, tzinfo=UTC)
SITE = Site(base_url="https://x.example/\u2028", registry_name="R \U0001f600")

VALUES: list[Any] = [
    {"b": 1, "a": [True, None, "x"], "": {}},
    {"\U00010000x": 1, "\uffff": 2, "\U0001f600": 3, "z": "\u2028\x01\x7f"},  # UTF-16 key order
    {"n": 2**53 - 1, "m": -(2**53 - 1)},
    [[[[[]]]]],
]


def _records(sample_lines: list[str]) -> list[ArxivRecord]:
    out = []
    for line in sample_lines:
        rec = parse_line(line.encode(), "t")
        assert isinstance(rec, ArxivRecord)
        out.append(rec)
    return out


@pytest.mark.parametrize("value", VALUES)
def test_both_strategies_give_rfc8785_bytes(value: Any) -> None:
    want = rfc8785.dumps(value)
    for canon in (FAST, REFERENCE):
        assert canon.dumps(value) == want
        assert canon.sha256(value) == hashlib.sha256(want).hexdigest()
    assert REFERENCE.dumps_trusted(value) == want


@pytest.mark.parametrize("value", [{"x": 1.5}, [2**53], {1: "a"}, {"s": {1, 2}}])
def test_the_reference_refuses_what_the_fast_path_refuses(value: Any) -> None:
    for call in (FAST.dumps, REFERENCE.dumps, REFERENCE.dumps_trusted, FAST.fast_safe, REFERENCE.fast_safe):
        with pytest.raises(CanonicalJSONError):
            call(value)


def test_a_lone_surrogate_is_refused_by_both() -> None:
    for canon in (FAST, REFERENCE):
        with pytest.raises(CanonicalJSONError):
            canon.dumps(["\ud800"])


def test_the_reference_takes_nothing_on_trust() -> None:
    assert FAST.trust and FAST.fast_safe({"a": "b"})
    assert not REFERENCE.trust and not REFERENCE.fast_safe({"a": "b"})


def test_the_reference_builds_the_same_records_events_and_bundles(sample_lines: list[str]) -> None:
    keys = [SIGNER.public_key_doc(url=SITE.key_url)]
    fast_builder = FreshBuilder(SIGNER, "s", SITE, keys)
    ref_builder = FreshBuilder(SIGNER, "s", SITE, keys, canon=REFERENCE)
    for rec in _records(sample_lines):
        fast, ref = Identity.of(rec), Identity.of(rec, canon=REFERENCE)
        assert ref == fast
        a, b = fast_builder.build(fast, NOW, NOW), ref_builder.build(ref, NOW, NOW)
        assert (a.event_bytes, a.bundle_bytes, a.state_bytes) == (
            b.event_bytes,
            b.bundle_bytes,
            b.state_bytes,
        )


def test_merge_under_the_reference_checks_even_trusted_events(sample_lines: list[str]) -> None:
    """`trusted` lets the fast merge skip re-hashing the caller's own objects; the
    reference re-hashes them, so a changed one is found whatever the caller claims."""
    ident = Identity.of(_records(sample_lines)[0])
    built = build_record_events(ident, SIGNER, "s", NOW)
    changed = copy.deepcopy(built.events)
    changed[1]["payload"]["graph_snapshot"]["paper"]["title"] = "changed after signing"
    keys = [SIGNER.public_key_doc()]
    trusting = merge(changed, built.aliases, keys, ident.subject, trusted=changed)
    checking = merge(changed, built.aliases, keys, ident.subject, trusted=changed, canon=REFERENCE)
    assert trusting["invalid_event_count"] == 0
    assert checking["invalid_events"] == [{"event_id": changed[1]["event_id"], "reason": "bad_content_hash"}]
    assert checking == merge(changed, built.aliases, keys, ident.subject)


def _tagged() -> CanonicalJSON:
    """A strategy whose every hash differs from RFC 8785's: which hashes it made shows."""
    return dataclasses.replace(
        REFERENCE,
        name="tagged",
        dumps=lambda v: b"tag" + rfc8785.dumps(v),
        dumps_trusted=lambda v: b"tag" + rfc8785.dumps(v),
    )


def _tag_hash(value: Any) -> str:
    return hashlib.sha256(b"tag" + rfc8785.dumps(value)).hexdigest()


def test_empty_snapshot_sections_are_hashed_by_the_strategy_given(sample_lines: list[str]) -> None:
    """A fresh paper's empty sections are hashed once per strategy, not once for all."""
    rec = _records(sample_lines)[0]
    canonical = Identity.of(rec).canonical
    tagged = _tagged()
    for canon, digest in (
        (FAST, lambda v: hashlib.sha256(rfc8785.dumps(v)).hexdigest()),
        (tagged, _tag_hash),
    ):
        snapshot = graph_snapshot_payload(rec, canonical, canon=canon)["graph_snapshot"]
        for name in ("claims", "references", "formal_canon", "author_claims", "integrity"):
            section = snapshot[name]
            body = {k: v for k, v in section.items() if k != "snapshot_sha256"}
            assert section["snapshot_sha256"] == digest(body), (canon.name, name)


def test_a_strategy_reaches_every_hash_of_a_bundle(sample_lines: list[str]) -> None:
    """Identity, events, sections, state and bundle: every hash is the given strategy's."""
    rec = _records(sample_lines)[0]
    tagged = _tagged()
    ident = Identity.of(rec, canon=tagged)
    assert ident.canonical_sha256 == _tag_hash(ident.canonical)
    built = build_record_events(ident, SIGNER, "s", NOW, canon=tagged)
    bundle = sign_bundle(
        subject=ident.subject,
        canonical=ident.canonical,
        canonical_hex=ident.canonical_sha256,
        events=built.events,
        aliases=built.aliases,
        public_keys=[SIGNER.public_key_doc(url=SITE.key_url)],
        site=SITE,
        signer=SIGNER,
        now=NOW,
        canon=tagged,
    )
    unhashed = ("signature", "content_sha256", "event_id")
    for ev in built.events:
        assert ev["content_sha256"] == _tag_hash({k: v for k, v in ev.items() if k not in unhashed})
    state = bundle["state"]
    assert state["valid_event_count"] == 2, state["invalid_events"]
    assert state["state_sha256"] == _tag_hash({k: v for k, v in state.items() if k != "state_sha256"})
    body = {k: v for k, v in bundle.items() if k != "bundle_signature"}
    assert bundle["bundle_signature"]["bundle_sha256"] == _tag_hash(body)
    assert json.loads(json.dumps(bundle)) == bundle  # plain JSON throughout
