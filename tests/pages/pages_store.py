"""Stores with pages, for the page tests (imported by name, like `sampled_store`).

`sample_dir`: a directory where `pith-pipeline ingest --sample` ran once (the store
`pith-store/` and its key `pith-keys/`), as a newcomer's first command leaves it.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from pith_pipeline.core.layout import page_key

BODY = re.compile(r"[A-Z2-7]{26}")
STORE = "pith-store"
KEY = "pith-keys/pith-private-key.json"


def clean_env(mp: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("PITH_") or name == "SOURCE_DATE_EPOCH":
            mp.delenv(name)


def cli(*args: str) -> tuple[int, str]:
    """`pith-pipeline ARGS` through the real entry point; (exit code, stdout + stderr)."""
    from click.testing import CliRunner

    from pith_pipeline.cli import cli as command

    result = CliRunner().invoke(command, list(args))
    return result.exit_code, result.output + (result.stderr if result.stderr_bytes is not None else "")


@pytest.fixture(scope="module", name="sample_dir")
def sample_dir_fixture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("pages-sample")
    with pytest.MonkeyPatch.context() as mp:
        clean_env(mp)
        mp.chdir(root)
        code, out = cli("ingest", "--sample", "--workers", "1")
    assert code == 0, out
    return root


@pytest.fixture(name="here")
def here_fixture(sample_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fresh copy of the sample directory, as the working directory."""
    work = tmp_path / "work"
    shutil.copytree(sample_dir, work)
    clean_env(monkeypatch)
    monkeypatch.chdir(work)
    yield work


def bodies(store: Path) -> list[str]:
    """Every record's ID, from its bundle."""
    return sorted(p.parent.name for p in store.glob("pith/*/bundle.json") if BODY.fullmatch(p.parent.name))


def page(store: Path, body: str) -> Path:
    return store / page_key(body)
