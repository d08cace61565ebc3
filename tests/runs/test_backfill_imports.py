"""`pith-pipeline backfill` runs without Airflow: it must not lean on the DAG glue.

`airflow_tasks` is the Airflow-shaped layer (task bodies named after DAG tasks,
settings read from Airflow Variables). The backfill command and the modules it
plans and runs with must work where that layer is not importable at all.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pith_pipeline

PACKAGE = Path(pith_pipeline.__file__).parent

#: The backfill command and everything it plans or runs a window with.
BACKFILL_MODULES = (
    "backfill.py",
    "cli/backfill.py",
    "runs/__init__.py",
    "runs/backfill_plan.py",
    "runs/chunks.py",
    "runs/harvest.py",
    "runs/windows.py",
    "sources/snapshot_ranges.py",
    "storage/staging.py",
    "maintenance.py",
)

#: Names the backfill modules may still take from airflow_tasks: none (the settings
#: moved to `config.py`, the window steps to `runs/steps.py`).
MOVING_OUT: frozenset[str] = frozenset()


def _airflow_tasks_names(path: Path) -> set[str]:
    """Every name `path` takes from airflow_tasks, at module level or inside a function."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    aliases: set[str] = set()
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "pith_pipeline.airflow_tasks":
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module == "pith_pipeline":
            aliases.update(a.asname or a.name for a in node.names if a.name == "airflow_tasks")
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name == "pith_pipeline.airflow_tasks":
                    names.add("*whole module*")
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
            names.add(node.attr)
    return names


def test_backfill_takes_nothing_from_airflow_tasks_but_what_is_moving_out() -> None:
    used = {rel: _airflow_tasks_names(PACKAGE / rel) - MOVING_OUT for rel in BACKFILL_MODULES}
    assert {rel: sorted(n) for rel, n in used.items() if n} == {}


def test_the_check_sees_an_airflow_tasks_import(tmp_path: Path) -> None:
    """The AST check above would catch both import forms."""
    src = tmp_path / "m.py"
    src.write_text(
        "from pith_pipeline import airflow_tasks as at\n"
        "def f():\n"
        "    from pith_pipeline.airflow_tasks import plan_backfill\n"
        "    return at.harvest_for\n"
    )
    assert _airflow_tasks_names(src) == {"plan_backfill", "harvest_for"}


def test_backfill_imports_with_airflow_and_airflow_tasks_unavailable() -> None:
    """Importing the backfill modules loads neither Airflow nor airflow_tasks."""
    code = (
        "import sys\n"
        "sys.modules['airflow'] = None\n"
        "sys.modules['pith_pipeline.airflow_tasks'] = None\n"
        "import pith_pipeline.backfill, pith_pipeline.cli.backfill, pith_pipeline.maintenance\n"
        "import pith_pipeline.runs.backfill_plan, pith_pipeline.runs.harvest\n"
        "import pith_pipeline.sources.snapshot_ranges, pith_pipeline.storage.staging\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
