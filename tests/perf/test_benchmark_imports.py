"""The benchmarks import the library by name; a module moved or renamed breaks them.

Benchmarks are not run by the suite (they are long and timed), so without this test a
rename only shows when someone next reproduces a README figure. Every
``from pith_pipeline... import name`` in ``benchmarks/``, nested ones included, must
resolve.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

BENCHMARKS = sorted((Path(__file__).resolve().parents[2] / "benchmarks").glob("*.py"))


def _imports(path: Path) -> list[tuple[str, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: list[tuple[str, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("pith_pipeline"):
            found += [(node.module, alias.name) for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [(alias.name, "") for alias in node.names if alias.name.startswith("pith_pipeline")]
    return found


@pytest.mark.parametrize("path", BENCHMARKS, ids=lambda p: p.name)
def test_every_library_name_a_benchmark_imports_exists(path: Path) -> None:
    missing = []
    for module_name, name in _imports(path):
        module = importlib.import_module(module_name)
        if name and not hasattr(module, name):
            try:
                importlib.import_module(f"{module_name}.{name}")
            except ImportError:
                missing.append(f"{module_name}.{name}")
    assert not missing, f"{path.name} imports names that do not exist: {missing}"
