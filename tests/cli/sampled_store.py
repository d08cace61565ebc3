"""Fixtures of the newcomer's command-line tests: a directory where `ingest --sample` ran.

A module the tests import by name (`from sampled_store import here, sampled`) rather
than a conftest.py: test modules elsewhere import their own directory's `conftest`
by name, and one more module called `conftest` could shadow theirs.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from pith_pipeline.cli import cli


def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("PITH_") or name == "SOURCE_DATE_EPOCH":
            monkeypatch.delenv(name)


@pytest.fixture(scope="module", name="sampled")
def sampled_fixture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory where `pith-pipeline ingest --sample` ran once (store and key)."""
    root = tmp_path_factory.mktemp("sampled")
    with pytest.MonkeyPatch.context() as mp:
        _clean_env(mp)
        mp.chdir(root)
        result = CliRunner().invoke(cli, ["ingest", "--sample", "--workers", "1"])
    assert result.exit_code == 0, result.output
    return root


@pytest.fixture(name="here")
def here_fixture(sampled: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fresh copy of the sampled directory, as the working directory."""
    work = tmp_path / "work"
    shutil.copytree(sampled, work)
    _clean_env(monkeypatch)
    monkeypatch.chdir(work)
    yield work
