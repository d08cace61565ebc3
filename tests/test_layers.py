"""The package's layers, read from the source (every import, also those inside functions).

- `core/` is the format: it imports nothing else of the package but the errors
  (`errors.py`, the one root of every error, imports nothing itself), reads no
  environment (callers give it a clock) and no private name of another module;
- `storage/` and `signing/` are back ends: they never import the loader (the code
  that drives a run: `pipeline`, `parallel`, `ingest`, `backfill`, the Airflow
  tasks, the CLI);
- `index/` holds index data only: run manifests and the run's summary belong to
  the loader;
- only the DAG glue (`airflow_tasks` and `dags/`) imports Airflow.

A new module falls under its package's rule without being listed here.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "pith_pipeline"

#: The code that drives a run; back ends and the format never import it.
LOADER = (
    "pith_pipeline.pipeline",
    "pith_pipeline.parallel",
    "pith_pipeline.ingest",
    "pith_pipeline.backfill",
    "pith_pipeline.airflow_tasks",
    "pith_pipeline.cli",
    "pith_pipeline.reissue",
    "pith_pipeline.runs",
)
#: Modules allowed to import Airflow (the glue between DAGs and the library).
AIRFLOW_GLUE = ("pith_pipeline.airflow_tasks",)


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(package: str) -> list[Path]:
    found = sorted((ROOT / package.replace(".", "/")).rglob("*.py"))
    assert found, f"no modules under {package}"
    return found


def imports(path: Path) -> Iterator[tuple[str, str, int]]:
    """(module, imported name, line) for every import in the file."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, "", node.lineno
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}:{node.lineno}: relative import"
            for alias in node.names:
                yield node.module or "", alias.name, node.lineno


def within(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def violations(package: str, forbidden: tuple[str, ...]) -> list[str]:
    return [
        f"{path.relative_to(ROOT)}:{line} imports {mod}"
        for path in modules(package)
        for mod, _name, line in imports(path)
        if within(mod, forbidden)
    ]


def test_core_imports_nothing_else_of_the_package() -> None:
    bad = [
        f"{path.relative_to(ROOT)}:{line} imports {mod}"
        for path in modules("pith_pipeline.core")
        for mod, _name, line in imports(path)
        if within(mod, ("pith_pipeline",)) and not within(mod, ("pith_pipeline.core", "pith_pipeline.errors"))
    ]
    assert bad == []
    errors = [mod for mod, _n, _l in imports(PACKAGE / "errors.py") if within(mod, ("pith_pipeline",))]
    assert errors == []


def test_core_imports_no_private_name_of_another_module() -> None:
    bad = [
        f"{path.relative_to(ROOT)}:{line} imports {mod}.{name}"
        for path in modules("pith_pipeline.core")
        for mod, name, line in imports(path)
        if name.startswith("_") and name != "__future__" and mod != module_name(path) and mod != "__future__"
    ]
    assert bad == []


def test_core_reads_no_environment() -> None:
    """The core is given its clock and settings; SOURCE_DATE_EPOCH is read at the edge."""
    bad = []
    for path in modules("pith_pipeline.core"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv", "environb"):
                bad.append(f"{path.relative_to(ROOT)}:{node.lineno} reads os.{node.attr}")
    assert bad == []


@pytest.mark.parametrize("package", ["pith_pipeline.storage", "pith_pipeline.signing"])
def test_back_ends_do_not_import_the_loader(package: str) -> None:
    assert violations(package, LOADER) == []


def test_index_holds_no_run_data() -> None:
    """Run manifests and `RunSummary` belong to the loader, not to the index."""
    assert violations("pith_pipeline.index", LOADER) == []


def test_only_the_dag_glue_imports_airflow() -> None:
    bad = [
        f"{path.relative_to(ROOT)}:{line} imports {mod}"
        for path in modules("pith_pipeline")
        if not within(module_name(path), AIRFLOW_GLUE)
        for mod, _name, line in imports(path)
        if within(mod, ("airflow",))
    ]
    assert bad == []
    dags = [mod for path in sorted((ROOT / "dags").glob("*.py")) for mod, _n, _l in imports(path)]
    assert any(within(mod, ("airflow",)) for mod in dags)  # the rule above is not vacuous


def test_the_rules_see_function_level_imports() -> None:
    """Most imports of the loader are inside functions (to keep start-up fast)."""
    cli_imports = {mod for path in modules("pith_pipeline.cli") for mod, _n, _l in imports(path)}
    assert "pith_pipeline.pipeline" in cli_imports and "pith_pipeline.index" in cli_imports


#: The top of every key a store holds (`core/layout.py` spells them).
STORE_PREFIXES = ("events/", "pith/", ".well-known/", "arxiv/", "quarantine/", "runs/", "keys/certs/")


def test_store_keys_are_built_only_by_the_layout_module() -> None:
    """An f-string that starts like a store key is a key built outside `core/layout.py`."""
    bad = []
    for path in modules("pith_pipeline"):
        if path == PACKAGE / "core" / "layout.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.JoinedStr) and node.values:
                head = node.values[0]
                if isinstance(head, ast.Constant) and str(head.value).startswith(STORE_PREFIXES):
                    bad.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
    assert bad == []


def test_config_is_standard_library_only() -> None:
    """DAG files import `config` while the scheduler parses them: it imports no
    third-party package and nothing of the package but the errors."""
    import sys

    path = PACKAGE / "config.py"
    bad = [
        f"config.py:{line} imports {mod}"
        for mod, _name, line in imports(path)
        if mod != "__future__"
        and mod.split(".")[0] not in sys.stdlib_module_names
        and mod != "pith_pipeline.errors"
    ]
    assert bad == []


def test_internal_helpers_import_nothing_of_the_package_but_the_errors() -> None:
    """`_internal/` holds helpers every layer may use (spilling to disk, AWS error
    classes, capped reads, log redaction), so they depend on no layer themselves."""
    bad = [
        f"{path.relative_to(ROOT)}:{line} imports {mod}"
        for path in modules("pith_pipeline._internal")
        for mod, _name, line in imports(path)
        if within(mod, ("pith_pipeline",))
        and mod not in ("pith_pipeline.errors", "pith_pipeline._internal")
        and not mod.startswith("pith_pipeline._internal.")
    ]
    assert bad == []
