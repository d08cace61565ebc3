"""What a newcomer meets in a fresh clone, before running anything (issue 11)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_default_private_key_directory_is_git_ignored() -> None:
    """`ingest` without --key writes pith-keys/pith-private-key.json in the working directory."""
    from pith_pipeline.signing.local import DEFAULT_KEY_DIR

    patterns = (ROOT / ".gitignore").read_text().split()
    assert f"/{DEFAULT_KEY_DIR}/" in patterns or f"{DEFAULT_KEY_DIR}/" in patterns


def test_the_format_spec_ships_in_the_repository() -> None:
    spec = ROOT / "docs/pages/spec/pith-bundle-v1.md"
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


BLOCK_AIRFLOW = """
import sys


class _NoAirflow:
    def find_spec(self, name, path=None, target=None):
        if name == "airflow" or name.startswith("airflow."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, _NoAirflow())
"""


def _pytest_without_airflow(tmp_path: Path, *, ci: bool) -> subprocess.CompletedProcess[str]:
    """The DAG tests run in an interpreter where `import airflow` fails, as without the extra."""
    (tmp_path / "sitecustomize.py").write_text(BLOCK_AIRFLOW)
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "PYTHONPATH")}
    env["PYTHONPATH"] = str(tmp_path)
    if ci:
        env["CI"] = "true"
    args = ["-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "-p", "no:xdist"]
    return subprocess.run(
        [sys.executable, *args, "tests/airflow/test_tlog_dag.py"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_dag_tests_without_airflow_skip_naming_the_extra(tmp_path: Path) -> None:
    result = _pytest_without_airflow(tmp_path, ci=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "pip install -e '.[test,airflow]'" in result.stdout
    assert " skipped" in result.stdout and "error" not in result.stdout.lower()


def test_dag_tests_without_airflow_fail_in_ci(tmp_path: Path) -> None:
    """CI installs the extra: a missing Airflow there must not turn into a green build."""
    result = _pytest_without_airflow(tmp_path, ci=True)
    assert result.returncode != 0
    assert "pip install -e '.[test,airflow]'" in result.stdout + result.stderr
