"""Fenced code blocks of a Markdown page, for the tests that run a page's examples."""

from __future__ import annotations

import re

FENCE = re.compile(r"^```(\S*)[ \t]*(.*)$")


def fenced_blocks(text: str, language: str) -> list[tuple[str, str]]:
    """Every fenced block of `text` in `language`: (the text after the language on its
    opening fence, stripped; its body)."""
    found: list[tuple[str, str]] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if m is None:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        if m.group(1) == language:
            found.append((m.group(2).strip(), "\n".join(lines[i + 1 : end])))
        i = end + 1
    return found
