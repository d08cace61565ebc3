"""The index's column list has one source in the docs: the table generated from
`pith_pipeline/index/schema.py` in docs/pages/index-tables.md (checked against the schema
by tests/index/test_dictionary.py). docs/pages/analysts.md links to it and lists no column
by hand.

Why: analysts.md kept a hand-written copy that had already drifted (it lacked
`authors_unicode`, `authors_text_unicode`, and every NOT NULL).
"""

from __future__ import annotations

import re
from pathlib import Path

from pith_pipeline.index.dictionary import BEGIN, DOC_PAGE
from pith_pipeline.index.schema import TABLES

ROOT = Path(__file__).resolve().parent.parent
ANALYSTS = ROOT / "docs" / "pages" / "analysts.md"
#: a Markdown table row whose first cell starts with a backticked name
_ROW = re.compile(r"^\|\s*`([A-Za-z0-9_]+)`", re.M)


def _column_rows(text: str) -> list[str]:
    """Names of index columns that start a table row in `text`."""
    columns = {f.name for spec in TABLES.values() for f in spec.schema}
    return [m.group(1) for m in _ROW.finditer(text) if m.group(1) in columns]


def test_analysts_page_lists_no_column_by_hand() -> None:
    assert _column_rows(ANALYSTS.read_text(encoding="utf-8")) == []


def test_analysts_page_links_to_the_generated_column_table() -> None:
    text = ANALYSTS.read_text(encoding="utf-8")
    assert "(index-tables.md#columns)" in text
    generated = (ROOT / DOC_PAGE).read_text(encoding="utf-8")
    # the anchor is the heading right above the generated table
    heading = generated.index("\n## Columns\n")
    assert heading < generated.index(BEGIN)
    assert "\n## " not in generated[heading + 1 : generated.index(BEGIN)]
    # and the generated table has a row for every column of every table
    assert sorted(set(_column_rows(generated))) == sorted({f.name for s in TABLES.values() for f in s.schema})


def test_the_check_finds_a_hand_written_row() -> None:
    """The check above is not vacuous: a row like the old copy's is found."""
    assert _column_rows("| `pith_number` | string | the record's id |\n") == ["pith_number"]
