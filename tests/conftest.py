"""Shared fixtures: test data assets."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from oai_server import RecordedDays

DATA = Path(__file__).parent / "data"
REFERENCE_FINGERPRINT = "8d4b5ee74e4693bcd1df2446408b0d54"

# The PITH_* settings as the session started, before any fixture changed them.
_SESSION_PITH_ENV = {k: v for k, v in os.environ.items() if k.startswith("PITH_")}
# Fixtures whose settings last the whole session (tests/airflow/conftest.py).
_SESSION_ENV_FIXTURES = frozenset({"airflow_env", "airflow_home", "dagbag"})


@pytest.fixture(autouse=True)
def _pith_env_as_session_began(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Give every test outside Airflow the PITH_* settings the session started with.

    The Airflow fixtures set PITH_RETRIES and others in os.environ for the rest of the
    session (Airflow cannot be re-configured after import), so without this a test that
    happened to run after them on the same worker read them as the user's settings.
    """
    if _SESSION_ENV_FIXTURES.intersection(request.fixturenames):
        return
    for name in [k for k in os.environ if k.startswith("PITH_")]:
        if name not in _SESSION_PITH_ENV:
            monkeypatch.delenv(name)
    for name, value in _SESSION_PITH_ENV.items():
        if os.environ.get(name) != value:
            monkeypatch.setenv(name, value)


def asset_path(name: str) -> Path:
    return DATA / name


@pytest.fixture
def asset() -> Any:
    """`asset(name)` -> Path of a file in tests/data."""
    return asset_path


@pytest.fixture
def reference_bundle() -> dict[str, Any]:
    """A fresh copy of the registry's published bundle for 1909.11150."""
    return json.loads((DATA / "pith-bundle-1909.11150.json").read_bytes())


@pytest.fixture
def sample_lines() -> list[str]:
    return (DATA / "arxiv-sample.jsonl").read_text(encoding="utf-8").splitlines()


# --- S3 (moto's server on 127.0.0.1) ------------------------------------------------


@pytest.fixture(scope="session")
def s3_endpoint() -> Any:
    """moto's S3 API server on 127.0.0.1 and a free port, in its own process.

    One server per xdist worker; tests isolate themselves with their own bucket. Its
    own process, not a thread of the test process: deltalake (the index tables) blocks
    on requests to a server that shares its interpreter.
    """
    from pith_pipeline.testing.moto_server import moto_server

    with moto_server() as url:
        yield url


@pytest.fixture
def s3_env(s3_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """Dummy credentials and the endpoint in the standard AWS variables; returns the endpoint."""
    for name in (
        "AWS_PROFILE",
        "AWS_SESSION_TOKEN",
        "AWS_ENDPOINT_URL_S3",
        "AWS_SHARED_CREDENTIALS_FILE",
        "AWS_CONFIG_FILE",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing-access-key")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing-secret-key")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_endpoint)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/dev/null")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
    return s3_endpoint


@pytest.fixture
def s3_bucket(s3_env: str) -> str:
    """A fresh, empty bucket on the moto server; its name."""
    import uuid

    import boto3

    name = f"pith-test-{uuid.uuid4().hex[:12]}"
    boto3.client("s3").create_bucket(Bucket=name)
    return name


@pytest.fixture
def s3_store_url(s3_bucket: str) -> str:
    """`s3://<fresh bucket>/store` on the moto server, for `open_store`/`--store`."""
    return f"s3://{s3_bucket}/store"


# --- a local OAI-PMH server serving arXiv's recorded arXivRaw records ----------------

OAI_DATA = Path(__file__).parent / "data" / "oai"
OAI_NS = "http://www.openarchives.org/OAI/2.0/"


def recorded_records() -> dict[str, list[bytes]]:
    """Two consecutive days of real arXivRaw records, keyed by datestamp.

    2024-01-02: the nine records arXiv listed for that day (three recorded pages).
    2024-01-03: the two records of a later recorded day (a new version of
    2401.00001, and 1909.11150 again), re-dated so the windows are consecutive.
    """
    from lxml import etree

    days: dict[str, list[bytes]] = {}
    sources = [(f"listrecords-2024-01-01-p{n}.xml", "2024-01-02") for n in (1, 2, 3)]
    sources.append(("listrecords-2024-01-10-p1.xml", "2024-01-03"))
    for name, day in sources:
        root = etree.parse(str(OAI_DATA / name)).getroot()
        for rec in root.iter(f"{{{OAI_NS}}}record"):
            rec.find(f"{{{OAI_NS}}}header/{{{OAI_NS}}}datestamp").text = day
            days.setdefault(day, []).append(etree.tostring(rec))
    return days


@pytest.fixture(autouse=True)
def _own_politeness_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test takes its arXiv turns from its own directory, never the user's cache."""
    monkeypatch.setenv("PITH_POLITENESS_DIR", str(tmp_path_factory.mktemp("politeness")))


@pytest.fixture
def oai_server() -> Iterator[tuple[str, RecordedDays]]:
    """(base URL, server) on 127.0.0.1 and a free port; stopped after the test."""
    from oai_server import FakeArxiv, RecordedDays, Repository

    days = RecordedDays(recorded_records())
    with FakeArxiv(Repository(), listing=days) as fake:
        try:
            yield fake.oai_url, days
        finally:
            days.release()  # a request still held would keep the server from stopping
