"""Canonical records and Pith numbers, checked against an independent computation."""

from __future__ import annotations

import base64
import email.utils
import hashlib
import json
from datetime import UTC
from typing import Any

import pytest

from pith_pipeline.core.arxiv_record import ArxivRecord
from pith_pipeline.core.builder import Identity
from pith_pipeline.core.pith_record import PithNumber, canonical_record, source_aliases

REGISTRY_NUMBERS = {
    "2606.18380": "pith:2026:SG6QNWFIOVZEMA3A2RIEOEVPD6",
    "2606.02226": "pith:2026:FB7EI2ZX4R67OX2UW4ZBVAEDPX",
    "2606.00972": "pith:2026:QFNLYXY3A3MFRS4IYJABHRTBHK",
}


def by_hand(obj: dict[str, Any]) -> str:
    """Spec section 3 from first principles, sharing no code with the package."""

    def c(t: str) -> str:
        return " ".join(t.lower().split())

    cats = obj["categories"].split()
    v1 = min(obj["versions"], key=lambda v: int(v["version"][1:]))
    sub = email.utils.parsedate_to_datetime(v1["created"]).astimezone(UTC)
    rec = {
        "source": {
            "id": obj["id"],
            "kind": "arxiv",
            "version": max(int(v["version"][1:]) for v in obj["versions"]),
        },
        "metadata": {
            "license": obj["license"] or "",
            "primary_cat": cats[0],
            "submitted_at": sub.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "cross_cats_sorted": sorted(set(cats[1:]) - {cats[0]}),
            "title_canon_sha256": hashlib.sha256(c(obj["title"]).encode()).hexdigest(),
            "abstract_canon_sha256": hashlib.sha256(c(obj["abstract"]).encode()).hexdigest(),
        },
        "schema_version": "1.0",
    }
    digest = hashlib.sha256(
        json.dumps(rec, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    ).digest()
    return f"pith:{sub.year}:" + base64.b32encode(digest).decode().rstrip("=")[:26]


def test_1909_11150_reproduced_from_its_metadata(asset, reference_bundle) -> None:  # type: ignore[no-untyped-def]
    obj = json.loads(asset("arxiv-1909.11150.jsonl").read_text())
    ident = Identity.of(ArxivRecord.from_json(obj))
    assert ident.canonical == reference_bundle["canonical_record"]
    assert ident.canonical_sha256 == reference_bundle["canonical_sha256"]
    assert ident.subject == reference_bundle["pith_number"] == "pith:2019:CDU3BX5RMZUBC43H42ZNV4JXNI"
    assert ident.pith.short == reference_bundle["short_pith_number"]
    aliases = source_aliases(obj["id"], 1, ident.body, "2026-07-05T00:07:08Z")
    assert aliases == reference_bundle["source_aliases"]


def test_every_sample_record_matches_the_hand_computation(sample_lines: list[str]) -> None:
    for line in sample_lines:
        obj = json.loads(line)
        assert Identity.of(ArxivRecord.from_json(obj)).subject == by_hand(obj), obj["id"]


@pytest.mark.parametrize("arxiv_id", sorted(REGISTRY_NUMBERS))
def test_registry_published_numbers(sample_lines: list[str], arxiv_id: str) -> None:
    obj = next(json.loads(ln) for ln in sample_lines if json.loads(ln)["id"] == arxiv_id)
    assert str(Identity.of(ArxivRecord.from_json(obj)).pith) == REGISTRY_NUMBERS[arxiv_id]


def test_submitted_at_is_v1_even_for_later_versions(sample_lines: list[str]) -> None:
    obj = next(json.loads(ln) for ln in sample_lines if json.loads(ln)["id"] == "0704.0098")
    canon = canonical_record(ArxivRecord.from_json(obj))
    assert canon["source"]["version"] == 5
    assert canon["metadata"]["submitted_at"] == "2007-04-01T18:27:26Z"


def test_missing_licence_is_empty_string_and_old_ids_kept(sample_lines: list[str]) -> None:
    obj = json.loads(sample_lines[0])
    canon = canonical_record(ArxivRecord.from_json(obj))
    assert canon["metadata"]["license"] == ""
    assert canon["source"]["id"] == "hep-th/9901001"


def test_date_only_versions_get_midnight() -> None:
    rec = ArxivRecord.from_json(
        {
            "id": "hep-lat/0305021",
            "title": "T",
            "abstract": "A",
            "categories": "hep-lat",
            "versions": [{"version": "v1", "created": "Mon, 8 Mar 1993"}],
        }
    )
    assert canonical_record(rec)["metadata"]["submitted_at"] == "1993-03-08T00:00:00Z"


def test_pith_number_parse_roundtrip() -> None:
    pn = PithNumber.parse("pith:2019:CDU3BX5RMZUBC43H42ZNV4JXNI")
    assert str(pn) == "pith:2019:CDU3BX5RMZUBC43H42ZNV4JXNI" and pn.short == "pith:CDU3BX5R"
    with pytest.raises(ValueError):
        PithNumber.parse("pith:2019:cdu3")


def test_any_canonical_change_gives_a_new_number(sample_lines: list[str]) -> None:
    obj = json.loads(sample_lines[6])
    base = Identity.of(ArxivRecord.from_json(obj)).subject
    for field, value in (
        ("title", obj["title"] + " II"),
        ("abstract", "Other."),
        ("license", "http://creativecommons.org/licenses/by/4.0/"),
        ("categories", obj["categories"] + " cs.AI"),
    ):
        changed = dict(obj, **{field: value})
        assert Identity.of(ArxivRecord.from_json(changed)).subject != base, field
    # whitespace and case in the title do not change it
    same = dict(obj, title="  " + obj["title"].upper().replace(" ", "\n   "))
    assert Identity.of(ArxivRecord.from_json(same)).subject == base
