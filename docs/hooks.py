"""MkDocs hooks of this site (`hooks:` in docs/mkdocs.yml).

Why: mkdocs-click renders a command's help as Markdown, but our help is click's plain
text. `pith/<ID>/bundle.json` became an HTML tag that the browser hides (the page said
`pith//bundle.json`), and the `\\b` blocks (click's "print these lines as they are":
examples, lists of sources) were reflowed into one paragraph. So the reference shows
each command's description exactly as `--help` prints it, in a text block.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from typing import Any

import click
from mkdocs_click import _docs

if not hasattr(_docs, "_make_description"):  # a private function: fail loudly, not render wrongly
    raise RuntimeError("mkdocs-click changed: docs/hooks.py replaces _docs._make_description")


def _description_as_help_prints_it(ctx: click.Context, remove_ascii_art: bool = False) -> Iterator[str]:
    text = ctx.command.help or ctx.command.short_help
    if not text:
        return
    lines = [line for line in inspect.cleandoc(text).splitlines() if line.strip() != "\b"]
    yield "```text"
    yield from lines
    yield "```"
    yield ""


def on_startup(**kwargs: Any) -> None:
    _docs._make_description = _description_as_help_prints_it
