"""A real Airflow for DAG tests: a temporary AIRFLOW_HOME with a migrated SQLite DB.

Airflow reads its configuration once, when first imported, so the session fixture
sets the environment *before* anything here imports `airflow`. Each xdist worker
is its own process with its own `tmp_path_factory` directory, so workers never
share a database.

Without Airflow (installed by the `airflow` extra) these tests are skipped, each
with the command that installs it; in CI (the CI variable set) a missing Airflow is
an error instead, so no DAG test can be skipped into a green build.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

#: What a newcomer without the extra reads (pytest -rs) instead of 14 errors.
AIRFLOW_MISSING = "Airflow is not installed: pip install -e '.[test,airflow]' to run the DAG tests"


def _airflow_installed() -> bool:
    """Without importing it: Airflow reads its configuration once, when first imported."""
    try:
        return importlib.util.find_spec("airflow") is not None
    except ImportError:
        return False


if not _airflow_installed() and os.environ.get("CI"):
    raise pytest.UsageError(f"{AIRFLOW_MISSING} (CI must run them)")


#: The fixtures that start a real Airflow; a test using none of them runs without it.
AIRFLOW_FIXTURES = frozenset({"airflow_env", "airflow_home", "dagbag"})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip the tests that need a real Airflow, naming the extra, when it is not installed."""
    if _airflow_installed():
        return
    skip = pytest.mark.skip(reason=AIRFLOW_MISSING)
    for item in items:
        if AIRFLOW_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(skip)


REPO = Path(__file__).resolve().parents[2]
DAGS = REPO / "dags"
POOL = "arxiv_oai"


def airflow_env(home: Path) -> dict[str, str]:
    """The settings a test Airflow runs with (no examples, SQLite, our dags/)."""
    return {
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__LOGGING__LOGGING_LEVEL": "WARNING",
        "AIRFLOW__CORE__ALLOWED_DESERIALIZATION_CLASSES_REGEXP": "pith_pipeline\\..*",
        # Retries happen within the test, without waiting minutes.
        "PITH_RETRY_DELAY_SECONDS": "0",
        "PITH_RETRIES": "2",
        "PITH_INGEST_START": "2020-01-01",
    }


@pytest.fixture(scope="session", name="airflow_env")
def airflow_env_fixture() -> Any:
    """`airflow_env(home)`: the environment of a test Airflow in `home`."""
    return airflow_env


def run_airflow(args: list[str], env: dict[str, str], timeout: float = 300) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "airflow", *args],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if proc.returncode != 0:
        raise AssertionError(
            f"airflow {' '.join(args)} failed ({proc.returncode}):\n"
            f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        )
    return proc.stdout


@pytest.fixture(scope="session")
def airflow_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A migrated SQLite metadata DB and the `arxiv_oai` pool, for this test process.

    The environment stays set for the whole session: Airflow cannot be re-configured
    after import.
    """
    home = tmp_path_factory.mktemp("airflow-home")
    env = airflow_env(home)
    if "airflow.configuration" in sys.modules:
        from airflow.configuration import conf

        if conf.get("core", "dags_folder") != str(DAGS):
            raise AssertionError(
                "airflow was imported before the airflow_home fixture set "
                "its environment; import airflow only inside tests"
            )
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        run_airflow(["db", "migrate"], env)
        run_airflow(["pools", "set", POOL, "1", "arXiv OAI-PMH: one request at a time"], env)
        yield home
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture(scope="session")
def dagbag(airflow_home: Path) -> Any:
    """Every DAG in dags/, parsed the way the dag-processor parses them."""
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(DAGS))


@pytest.fixture
def pith_env(
    tmp_path: Path, oai_server: tuple[str, Any], s3_store_url: str, monkeypatch: pytest.MonkeyPatch
) -> dict[str, str]:
    """PITH_* settings for a run: moto's S3, the local OAI server, a local key."""
    from pith_pipeline.signing.local import generate_key

    priv, _pub, _doc = generate_key(tmp_path / "keys", key_id="pith-test-key")
    env = {
        "PITH_STORE": s3_store_url,
        "PITH_SIGNER": f"file:{priv}",
        "PITH_OAI_URL": oai_server[0],
        "PITH_OAI_MIN_INTERVAL": "0",
        "PITH_BASE_URL": "https://pith.test.example",
    }
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    return env
