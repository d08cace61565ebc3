"""The package's layers: import-linter's contracts, and the rules it cannot express.

The layers, the absence of import circles, the pure core, storage that reads no
config and the Airflow glue are contracts in pyproject.toml (`[tool.importlinter]`),
checked by `lint-imports` in .ci/run and by the first test here. What import-linter
cannot say is read from the source below:

- the core reads no environment (callers give it a clock and settings);
- no module imports another module's private name;
- store keys are built only by `core/layout.py`;
- `config/` and `window.py` are standard library only (DAG files import them
  while the scheduler parses them).
"""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import grimp

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "pith_pipeline"


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(package: str) -> list[Path]:
    found = sorted((ROOT / package.replace(".", "/")).rglob("*.py"))
    assert found, f"no modules under {package}"
    return found


def contracts() -> dict[str, dict[str, Any]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    return {c["id"]: c for c in config["contracts"]}


def children() -> set[str]:
    """Every module and package directly under pith_pipeline."""
    return {
        p.stem if p.is_file() else p.name
        for p in PACKAGE.iterdir()
        if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").is_file()
    }


def test_the_import_contracts_are_kept() -> None:
    """The same check as .ci/run, so that running the tests alone also sees a broken layer."""
    out = subprocess.run(
        [sys.executable, "-c", "from importlinter.cli import lint_imports_command; lint_imports_command()"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert f"{len(contracts())} kept, 0 broken" in out.stdout


def test_the_contracts_cover_every_module_of_the_package() -> None:
    """The layers contract is exhaustive (import-linter refuses a module it does not
    place); the Airflow rule lists its sources by hand, so a new module must be added."""
    layers = contracts()["layers"]
    assert layers["exhaustive"] is True and layers["containers"] == ["pith_pipeline"]
    placed = {name.strip() for layer in layers["layers"] for name in layer.split("|")}
    assert placed == children()
    glue = contracts()["airflow-glue"]
    sources = {s.removeprefix("pith_pipeline.") for s in glue["source_modules"]}
    assert sources == children() - {"airflow_tasks"}


def _function_level_imports() -> list[tuple[str, int, str]]:
    """(importer, line, imported module or package) for each import of the package's own
    modules made inside a function."""
    found = []
    for path in modules("pith_pipeline"):
        importer = module_name(path)
        for fn in ast.walk(ast.parse(path.read_text())):
            if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(fn):
                if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("pith_pipeline"):
                    found.extend((importer, node.lineno, f"{node.module}.{a.name}") for a in node.names)
                elif isinstance(node, ast.Import):
                    found.extend(
                        (importer, node.lineno, a.name)
                        for a in node.names
                        if a.name.startswith("pith_pipeline")
                    )
    return found


def test_the_contracts_see_imports_inside_functions() -> None:
    """The imports left inside functions (each keeps a measured start-up cost off a
    command, a DAG parse or a worker): the import graph the contracts are checked on
    must hold every one of them."""
    graph = grimp.build_graph("pith_pipeline", cache_dir=None)
    seen = []
    missed = []
    for importer, line, name in _function_level_imports():
        imported = name if name in graph.modules else name.rsplit(".", 1)[0]
        lines = {d["line_number"] for d in graph.get_import_details(importer=importer, imported=imported)}
        (seen if line in lines else missed).append(f"{importer}:{line} imports {imported}")
    assert missed == []
    assert len(seen) > 10  # the lazy imports the package keeps (each names its cost): not vacuous


def test_core_reads_no_environment() -> None:
    """The core is given its clock and settings; SOURCE_DATE_EPOCH is read at the edge."""
    bad = []
    for path in modules("pith_pipeline.core"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv", "environb"):
                bad.append(f"{path.relative_to(ROOT)}:{node.lineno} reads os.{node.attr}")
    assert bad == []


#: Where settings are resolved: the commands, the settings table itself, the DAG glue
#: (Airflow Variables), and the backfill command's entry point.
SETTINGS_EDGE = ("pith_pipeline.cli", "pith_pipeline.config", "pith_pipeline.airflow_tasks")

#: How code asks for a setting instead of being given one.
SETTINGS_READERS = {"load_settings", "resolve", "resolve_all", "from_env", "given", "flag"}


def settings_read_below_the_edge(path: Path) -> list[str]:
    """Calls in `path` that resolve a setting (`SETTINGS_READERS`) or read a PITH_
    variable from the environment (`os.environ[...]`, `os.environ.get(...)`, `os.getenv(...)`)."""
    where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name
    bad = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call):
            fn = node.func
            name = fn.attr if isinstance(fn, ast.Attribute) else getattr(fn, "id", "")
            path_resolve = (
                isinstance(fn, ast.Attribute) and name == "resolve" and ast.unparse(fn.value) != "config"
            )
            if name in SETTINGS_READERS and not path_resolve:  # `Path.resolve()` is no setting
                bad.append(f"{where}:{node.lineno} calls {name}")
        target, key = None, None
        if isinstance(node, ast.Subscript):
            target, key = node.value, node.slice
        elif isinstance(node, ast.Call) and node.args:
            target, key = node.func, node.args[0]
        if (
            target is not None
            and ast.unparse(target).endswith(("environ", "environ.get", "getenv", "environ.pop"))
            and isinstance(key, ast.Constant)
            and str(key.value).startswith("PITH_")
        ):
            bad.append(f"{where}:{node.lineno} reads a PITH_ variable")
    return bad


def test_no_setting_is_read_below_the_edge() -> None:
    """Settings are resolved once, where a command or task starts (`SETTINGS_EDGE`),
    and passed down as `Settings` or values: no module below asks for one (the store's
    fsync and lease TTL, the log key and origin, a certified key's validity)."""
    bad = []
    for path in sorted((ROOT / "pith_pipeline").rglob("*.py")):
        dotted = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        if dotted.startswith(SETTINGS_EDGE):
            continue
        bad += settings_read_below_the_edge(path)
    assert bad == []


def test_the_settings_check_sees_a_read(tmp_path: Path) -> None:
    planted = tmp_path / "planted.py"
    planted.write_text(
        "import os\nfrom pith_pipeline import config\n"
        "a = config.from_env('lease_ttl')\nb = os.environ.get('PITH_LEASE_TTL')\n"
    )
    found = settings_read_below_the_edge(planted)
    assert [f.split(" ", 1)[1] for f in found] == ["calls from_env", "reads a PITH_ variable"]


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_names_used(source: str, own: str) -> list[str]:
    """Private names module `own` (whose text is `source`) takes from other modules of
    the package: imported by name, or read as an attribute of a module it imported
    (`steps._store`)."""
    tree = ast.parse(source)
    bad = []
    aliases: dict[str, str] = {}  # local name -> the package's module or name it is bound to
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("pith_pipeline"):
            assert node.level == 0, f"{own}:{node.lineno}: relative import"
            for a in node.names:
                if node.module != own and _private(a.name):
                    bad.append(f"{own}:{node.lineno} imports {node.module}.{a.name}")
                aliases[a.asname or a.name] = f"{node.module}.{a.name}"
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("pith_pipeline"):
                    aliases[a.asname or a.name.split(".")[0]] = a.name
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in aliases
            and _private(node.attr)
        ):
            bad.append(f"{own}:{node.lineno} reads {aliases[node.value.id]}.{node.attr}")
    return bad


def test_no_module_uses_a_private_name_of_another() -> None:
    """A name another module needs is public in its owner, with a docstring saying its contract."""
    used = [
        bad
        for path in modules("pith_pipeline")
        for bad in private_names_used(path.read_text(), module_name(path))
    ]
    assert used == []


def test_the_private_name_check_sees_both_forms() -> None:
    source = (
        "from pith_pipeline.runs import steps\n"
        "from pith_pipeline.probe import _own\n"
        "def f():\n"
        "    from pith_pipeline.index.delta import _hidden\n"
        "    return steps._store, _own\n"
    )
    assert private_names_used(source, "pith_pipeline.probe") == [
        "pith_pipeline.probe:4 imports pith_pipeline.index.delta._hidden",
        "pith_pipeline.probe:5 reads pith_pipeline.runs.steps._store",
    ]


#: The top of every key a store holds (`core/layout.py` spells them).
STORE_PREFIXES = (
    "events/",
    "pith/",
    ".well-known/",
    "arxiv/",
    "quarantine/",
    "runs/",
    "keys/certs/",
    "assets/",
    "log/",
    "leases/",
    "staging/",
    "raw/",
    "maintenance/",
    ".tmp/",
)


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


def test_modules_dags_parse_with_are_standard_library_only() -> None:
    """DAG files import `config` and `window` while the scheduler parses them: they import
    no third-party package, and nothing of the package but the errors (and `config`'s
    own table)."""
    bad = []
    paths = [*sorted((PACKAGE / "config").glob("*.py")), PACKAGE / "window.py"]
    assert len(paths) > 2
    for path in paths:
        name = str(path.relative_to(PACKAGE))
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                mods = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                mods = [node.module or ""]
            else:
                continue
            bad.extend(
                f"{name}:{node.lineno} imports {mod}"
                for mod in mods
                if mod != "__future__"
                and mod.split(".")[0] not in sys.stdlib_module_names
                and mod not in ("pith_pipeline.errors", "pith_pipeline.config.table")
            )
    assert bad == []


def test_public_paths_of_names_that_live_elsewhere_resolve() -> None:
    """`runs.windows.Window` and `parse_day` (docs/pages/date-ranges.md) and the
    package-level `pith_pipeline.storage.open_store` (architecture.md) are public
    paths of the library: they are the very objects of the modules that hold them."""
    from pith_pipeline import storage, window
    from pith_pipeline.runs import windows
    from pith_pipeline.storage import factory

    assert windows.Window is window.Window and windows.parse_day is window.parse_day
    assert storage.open_store is factory.open_store
    assert storage.open_existing_store is factory.open_existing_store


def lazy_imports_without_a_reason(source: str, own: str) -> list[str]:
    """Imports of the package's own modules made inside a function of module `own`
    with no `lazy:` comment on the lines just above (or on the line itself) naming
    what a module-level import would cost."""
    lines = source.splitlines()
    bad = []
    for fn in ast.walk(ast.parse(source)):
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for node in ast.walk(fn):
            own_import = (
                isinstance(node, ast.ImportFrom) and (node.module or "").startswith("pith_pipeline")
            ) or (
                isinstance(node, ast.Import) and any(a.name.startswith("pith_pipeline") for a in node.names)
            )
            if own_import and "lazy" not in "\n".join(lines[max(0, node.lineno - 4) : node.end_lineno]):
                bad.append(f"{own}:{node.lineno}")
    return bad


def test_an_import_inside_a_function_names_its_cost() -> None:
    """A module imports the package's modules at its top, where the layers and a reader
    see them; one kept inside a function says why (`# lazy: pyarrow, 180 ms at every
    start`): the measured cost it keeps off a command, a DAG parse or a worker."""
    bad = [
        found
        for path in modules("pith_pipeline")
        for found in lazy_imports_without_a_reason(path.read_text(), module_name(path))
    ]
    assert bad == []


def test_the_lazy_import_check_sees_an_unexplained_one() -> None:
    source = (
        "def f():\n"
        "    from pith_pipeline.index import query\n"
        "def g():\n"
        "    # lazy: pyarrow, 180 ms at import\n"
        "    from pith_pipeline.index import query\n"
    )
    assert lazy_imports_without_a_reason(source, "pith_pipeline.probe") == ["pith_pipeline.probe:2"]
