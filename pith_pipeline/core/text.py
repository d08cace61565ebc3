"""Text canonicalisation (spec section 2)."""

from __future__ import annotations

import hashlib
import unicodedata


def collapse_ws(text: str) -> str:
    """Every run of whitespace (str.isspace) becomes one space; ends stripped.

    `str.split()` without arguments splits on exactly the characters for which
    `str.isspace()` is true, so this is the spec's rule, done in C.
    """
    return " ".join(text.split())


def canon(text: str) -> str:
    """NFC, lower-case (not casefold), whitespace collapsed; TeX kept as written."""
    return collapse_ws(unicodedata.normalize("NFC", text).lower())


def canon_sha256(text: str) -> str:
    """Hash of the canonical text itself, not of its JSON encoding."""
    return hashlib.sha256(canon(text).encode("utf-8")).hexdigest()


def shown(value: object, limit: int = 60) -> str:
    """`repr(value)` cut to about `limit` characters, for messages naming a bad value.

    Why: a hostile value can be megabytes; it is kept whole in the quarantine's raw
    input, so a reason (printed, logged) only needs enough of it to recognise it.
    """
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 3]}... ({len(text)} characters)"
