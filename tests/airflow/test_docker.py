"""The docker deployment: compose file, Dockerfile and .env.example agree with the repo.

Docker cannot run here; these checks catch what breaks a `docker compose up` first:
invalid YAML, a missing service or command flag, a COPY of a file that does not exist,
a variable the compose file uses that .env.example does not document.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DOCKER = REPO / "docker"


@pytest.fixture(scope="module")
def compose() -> Any:
    return yaml.safe_load((DOCKER / "compose.yaml").read_text())


def test_compose_has_the_airflow_stack(compose: Any) -> None:
    services = compose["services"]
    assert {
        "postgres",
        "minio",
        "minio-init",
        "kms",
        "airflow-init",
        "airflow-apiserver",
        "airflow-scheduler",
        "airflow-dag-processor",
        "airflow-triggerer",
        "redis",
        "airflow-worker",
    } <= set(services)
    assert services["airflow-apiserver"]["command"] == "api-server"
    assert "--skip-serve-logs" in services["airflow-scheduler"]["command"].split()
    assert services["airflow-dag-processor"]["command"] == "dag-processor"
    assert services["airflow-triggerer"]["command"] == "triggerer"
    assert services["redis"]["profiles"] == services["airflow-worker"]["profiles"] == ["celery"]


def test_airflow_services_share_settings_and_postgres(compose: Any) -> None:
    for name in (
        "airflow-apiserver",
        "airflow-scheduler",
        "airflow-dag-processor",
        "airflow-triggerer",
        "airflow-worker",
        "airflow-init",
    ):
        env = compose["services"][name]["environment"]
        assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].startswith("postgresql")
        assert env["AIRFLOW__CORE__LOAD_EXAMPLES"] == "False"
        for var in ("PITH_STORE", "PITH_SIGNER", "PITH_OAI_URL", "PITH_BASE_URL"):
            assert var in env, (name, var)
        assert env["PITH_SIGNER"].startswith("${PITH_SIGNER:-kms-envelope:")


def test_published_ports_bind_to_localhost_only(compose: Any) -> None:
    for name, svc in compose["services"].items():
        for port in svc.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), (name, port)


def test_env_example_documents_every_variable_compose_uses() -> None:
    text = (DOCKER / "compose.yaml").read_text()
    used = set(re.findall(r"(?<!\$)\$\{([A-Z0-9_]+)", text))
    documented = {
        line.split("=", 1)[0]
        for line in (DOCKER / ".env.example").read_text().splitlines()
        if "=" in line and not line.startswith("#")
    }
    assert used <= documented, used - documented


def test_dockerfile_copies_files_that_exist() -> None:
    lines = (DOCKER / "Dockerfile").read_text().splitlines()
    assert next(ln for ln in lines if ln.startswith("FROM")) == "FROM apache/airflow:3.3.2-python3.11"
    copies = [ln.split()[1:-1] for ln in lines if ln.startswith("COPY")]
    sources = [s for args in copies for s in args if not s.startswith("--")]
    assert sources
    for src in sources:
        assert (REPO / src).exists(), src
    assert any("apache-airflow==3.3.2" in ln for ln in lines)


def test_init_script_creates_the_pool_and_the_envelope() -> None:
    script = (DOCKER / "airflow-init.sh").read_text()
    assert "airflow db migrate" in script
    assert "airflow pools set arxiv_oai 1" in script
    assert "keys envelope-create" in script
    compose_text = (DOCKER / "compose.yaml").read_text()
    assert "/opt/pith/airflow-init.sh" in compose_text
