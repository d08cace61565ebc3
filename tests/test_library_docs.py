"""docs/pages/library.md: its script runs as written, with only names `pith_pipeline` exports."""

from __future__ import annotations

import ast
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from doc_blocks import fenced_blocks

import pith_pipeline

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / "docs/pages/library.md").read_text(encoding="utf-8")


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_the_library_script_builds_a_store_and_verifies_it(tmp_path: Path) -> None:
    [(_, shell)] = fenced_blocks(PAGE, "sh")
    for line in shell.splitlines():
        argv = shlex.split(line)
        if argv[0] == "pith-pipeline":
            r = _run([sys.executable, "-m", "pith_pipeline", *argv[1:]], tmp_path)
            assert r.returncode == 0, r.stderr
        else:  # cp, from the top of a checkout
            assert argv[0] == "cp"
            shutil.copy(ROOT / argv[1], tmp_path / argv[2])
    [(_, script)] = fenced_blocks(PAGE, "python")
    assert len(script.splitlines()) <= 12
    r = _run([sys.executable, "-c", script], tmp_path)
    assert r.returncode == 0, r.stderr
    assert "fetched 30, built 30" in r.stdout and "30 bundles verified" in r.stdout
    assert (tmp_path / "my-store/runs").is_dir()
    again = _run([sys.executable, "-c", script], tmp_path)
    assert "built 0, unchanged 30" in again.stdout, again.stderr


def test_the_script_uses_only_the_public_surface() -> None:
    [(_, script)] = fenced_blocks(PAGE, "python")
    for node in ast.walk(ast.parse(script)):
        if isinstance(node, ast.ImportFrom):
            assert node.module == "pith_pipeline"
            assert {a.name for a in node.names} <= set(pith_pipeline.__all__)
        elif isinstance(node, ast.Import):
            assert all(a.name in sys.stdlib_module_names for a in node.names)


def test_every_exported_name_resolves_and_import_stays_light() -> None:
    for name in pith_pipeline.__all__:
        assert getattr(pith_pipeline, name) is not None
    r = _run([sys.executable, "-c", "import sys, pith_pipeline; print('pyarrow' in sys.modules)"], ROOT)
    assert r.stdout.strip() == "False", r.stderr
