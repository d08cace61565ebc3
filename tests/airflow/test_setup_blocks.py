"""Every Airflow set-up block of the docs waits for SQLite's lock, or uses PostgreSQL.

Why (issue 25): the documented SQLite set-up broke under the documented concurrent
backfills (`database is locked` beside a trigger, and a scheduler dead of
`StaleDataError`); the fix, `?timeout=60` in the connection string, was only in a
"What is tested" paragraph, not in the blocks an operator copies.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs" / "pages").glob("*.md"))]
FENCE = re.compile(r"^```(\S*)")
SQLITE_WAITS = re.compile(r"AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=\S*sqlite:///\S*\?timeout=60\b")
POSTGRES = re.compile(r"AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=\S*postgresql")


def code_blocks(text: str) -> list[tuple[int, str]]:
    """(first line number, body) of every fenced block."""
    out, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        if FENCE.match(lines[i]):
            end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
            out.append((i + 1, "\n".join(lines[i + 1 : end])))
            i = end + 1
        else:
            i += 1
    return out


def test_every_airflow_setup_block_sets_a_lock_timeout_for_sqlite() -> None:
    setups = [
        (page, line, body)
        for page in PAGES
        for line, body in code_blocks(page.read_text(encoding="utf-8"))
        if "airflow db migrate" in body
    ]
    assert setups, "no Airflow set-up block found"
    bad = [
        f"{page.relative_to(ROOT)}:{line}"
        for page, line, body in setups
        if not (SQLITE_WAITS.search(body) or POSTGRES.search(body))
    ]
    assert not bad, f"SQLite set-up without ?timeout=60 (or PostgreSQL): {bad}"


def test_the_block_pattern_refuses_the_old_form() -> None:
    old = 'export AIRFLOW__DATABASE__SQL_ALCHEMY_CONN="sqlite:///$AIRFLOW_HOME/airflow.db"'
    assert not SQLITE_WAITS.search(old)
    assert SQLITE_WAITS.search(old[:-1] + '?timeout=60"')
