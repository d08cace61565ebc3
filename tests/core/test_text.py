from __future__ import annotations

import hashlib
import json

from pith_pipeline.core.text import canon, canon_sha256, collapse_ws


def test_canon_lowercases_and_collapses_every_whitespace_run() -> None:
    assert canon("  Hello\n  World\t\u2003X\u00a0Y ") == "hello world x y"


def test_tex_and_punctuation_are_kept() -> None:
    text = r"Schr\"odinger $\Omega$ {\bf 89} -- \$"
    assert canon(text) == text.lower()


def test_nfc_makes_composed_and_decomposed_accents_hash_alike() -> None:
    assert canon_sha256("Caf\u00e9") == canon_sha256("Cafe\u0301")


def test_lower_not_casefold() -> None:
    assert canon("Straße") == "straße"


def test_reference_title_and_abstract_hashes(asset) -> None:  # type: ignore[no-untyped-def]
    rec = json.loads(asset("arxiv-1909.11150.jsonl").read_text())
    assert canon_sha256(rec["title"]).startswith("74e55f40")
    # as arXiv serves it: leading spaces, line breaks, trailing newline
    assert "\n" in rec["abstract"]
    assert canon_sha256(rec["abstract"]) == (
        "fcddcd180372ff254186cf799be41607f7024944936910916ea5cadbba0b1dc1"
    )
    # a hash of the text, not of its JSON encoding
    assert (
        canon_sha256(rec["title"]) == hashlib.sha256(collapse_ws(rec["title"]).lower().encode()).hexdigest()
    )
