"""Shared fixtures: test data assets."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

DATA = Path(__file__).parent / "data"
REFERENCE_FINGERPRINT = "8d4b5ee74e4693bcd1df2446408b0d54"


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
    """moto's S3 API server on 127.0.0.1 and a free port, for this test process.

    One server per xdist worker; tests isolate themselves with their own bucket.
    """
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


@pytest.fixture
def s3_env(s3_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """Dummy credentials and the endpoint in the standard AWS variables; returns the endpoint."""
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3",
                 "AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE"):
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
