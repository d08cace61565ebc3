"""Canonical records, Pith numbers and source aliases (spec section 3)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from pith_pipeline.core.arxiv_record import ArxivRecord
from pith_pipeline.core.canonical_json import FAST, CanonicalJSON
from pith_pipeline.core.keys import b32
from pith_pipeline.core.text import canon_sha256
from pith_pipeline.core.timeutil import iso_seconds

SCHEMA_VERSION = "1.0"
PITH_NUMBER = re.compile(r"pith:([0-9]{4}):([A-Z2-7]{26})", re.ASCII)  # used with fullmatch
#: a Pith number's body, its 26 base-32 characters: how keys under `events/`, `pith/`
#: and `.well-known/pith/` name a paper (used with fullmatch)
BODY = re.compile(r"[A-Z2-7]{26}", re.ASCII)
ALIAS_KINDS = ("arxiv", "arxiv_version", "doi", "pith_short_12", "pith_short_16", "pith_short_8")


def canonical_record(rec: ArxivRecord) -> dict[str, Any]:
    """The object whose SHA-256 names the paper version; key order as published."""
    return {
        "source": {"id": rec.id, "kind": "arxiv", "version": rec.version},
        "metadata": {
            "license": rec.license_url,
            "primary_cat": rec.primary_cat,
            "submitted_at": iso_seconds(rec.submitted_at),
            "cross_cats_sorted": rec.cross_cats_sorted,
            "title_canon_sha256": canon_sha256(rec.title),
            "abstract_canon_sha256": canon_sha256(rec.abstract),
        },
        "schema_version": SCHEMA_VERSION,
    }


def canonical_bytes(record: dict[str, Any], *, canon: CanonicalJSON = FAST) -> bytes:
    """JCS of a canonical record (all strings and small ints, so the fast path is exact)."""
    return canon.dumps_trusted(record)


def pith_number_from_digest(digest: bytes, year: int | str) -> str:
    return f"pith:{int(year):04d}:{_body(digest)}"


def _body(digest: bytes) -> str:
    """First 26 base32 characters of a digest: 130 bits, so 20 bytes (32 characters) suffice."""
    return b32(digest[:20])[:26]


@dataclass(frozen=True, slots=True)
class PithNumber:
    """`pith:YYYY:<26 base32 chars>`; the body is the record's ID in paths and URLs."""

    year: int
    body: str

    @classmethod
    def parse(cls, text: str) -> PithNumber:
        m = PITH_NUMBER.fullmatch(text) if isinstance(text, str) else None
        if not m:
            raise ValueError(f"not a Pith number: {text!r}")
        return cls(int(m.group(1)), m.group(2))

    @classmethod
    def from_canonical(cls, record: dict[str, Any], canonical_sha256: str) -> PithNumber:
        year = int(record["metadata"]["submitted_at"][:4])
        return cls(year, _body(bytes.fromhex(canonical_sha256)))

    def __str__(self) -> str:
        return f"pith:{self.year:04d}:{self.body}"

    @property
    def short(self) -> str:
        return f"pith:{self.body[:8]}"


def canonical_sha256(record: dict[str, Any], *, canon: CanonicalJSON = FAST) -> str:
    """The SHA-256 that names a paper version: of its canonical record's JCS."""
    return canon.sha256_trusted(record)


def arxiv_doi(arxiv_id: str) -> str:
    """arXiv's DataCite DOI, with lower-case `arxiv` as the registry writes it."""
    return f"10.48550/arxiv.{arxiv_id}"


def source_aliases(arxiv_id: str, version: int, body: str, created_at: str) -> list[dict[str, Any]]:
    """The aliases of a record, in the published order (which is sorted by kind)."""
    values = {
        "arxiv": arxiv_id,
        "arxiv_version": f"{arxiv_id}v{version}",
        "doi": arxiv_doi(arxiv_id),
        "pith_short_12": body[:12],
        "pith_short_16": body[:16],
        "pith_short_8": body[:8],
    }
    return [{"alias_kind": k, "alias_value": values[k], "created_at": created_at} for k in ALIAS_KINDS]
