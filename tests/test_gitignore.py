"""What the documented set-ups leave in a clone is git-ignored, so `git add -A` never
commits it: `docker/.env` holds the stack's secrets (docker/make-env.sh writes it),
`docker/snapshots/` the bulk snapshots compose mounts (gigabytes), `airflow-home/` the
Airflow home the README's Airflow block makes (its database and logs)."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: paths the documented set-ups create, which must never be committed
IGNORED = [
    "docker/.env",
    "docker/snapshots/arxiv-metadata-oai-snapshot.json",
    "docker/snapshots/sample.jsonl.gz",
    "airflow-home/airflow.db",
    "airflow-home/logs/dag_id=pith_ingest/run.log",
    "airflow-home/airflow.cfg",
]
#: tracked files next to them, which must stay visible to git
KEPT = ["docker/.env.example", "docker/compose.yaml", "docker/make-env.sh", "dags/pith_ingest.py"]


def _check_ignore(paths: list[str]) -> set[str]:
    """The paths of `paths` that the repository's .gitignore ignores (whether or not they
    exist or are tracked: `--no-index`)."""
    done = subprocess.run(
        ["git", "check-ignore", "--no-index", "--stdin"],
        cwd=ROOT,
        input="\n".join(paths) + "\n",
        capture_output=True,
        text=True,
    )
    assert done.returncode in (0, 1), done.stderr  # 1: none of them is ignored
    return set(done.stdout.split())


def test_what_the_setups_leave_is_ignored() -> None:
    assert _check_ignore(IGNORED) == set(IGNORED)


def test_tracked_files_beside_them_are_not_ignored() -> None:
    assert _check_ignore(KEPT) == set()
