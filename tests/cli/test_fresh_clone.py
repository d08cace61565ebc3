"""What a newcomer meets in a fresh clone, before running anything (issue 11)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_default_private_key_directory_is_git_ignored() -> None:
    """`ingest` without --key writes pith-keys/pith-private-key.json in the working directory."""
    from pith_pipeline.cli.ingest import DEFAULT_KEY_DIR

    patterns = (ROOT / ".gitignore").read_text().split()
    assert f"/{DEFAULT_KEY_DIR}/" in patterns or f"{DEFAULT_KEY_DIR}/" in patterns


def test_the_format_spec_ships_in_the_repository() -> None:
    spec = ROOT / "docs/spec/pith-bundle-v1.md"
    assert spec.is_file()
    assert spec.read_text().startswith("# Pith open-graph bundle, version 1.0")


def test_no_document_points_outside_the_clone() -> None:
    """Paths like ../shared/... exist only on the machine the project was started on."""
    outside = re.compile(r"\.\./(shared|vectors)/")
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    offenders = [str(p.relative_to(ROOT)) for p in docs if outside.search(p.read_text())]
    assert offenders == []


def test_python_version_and_strict_typing_are_declared() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["requires-python"] == ">=3.11"
    assert project["tool"]["mypy"]["strict"] is True
