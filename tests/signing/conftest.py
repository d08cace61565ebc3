"""Fixtures for signer tests: a local KMS-protocol endpoint, AWS test credentials, keys."""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from cli_in_process import run_cli
from signing_consts import KMS_ALIAS

from pith_pipeline.signing import envelope
from pith_pipeline.signing.local import generate_key
from pith_pipeline.testing.kms_server import LocalKey, LocalKmsServer


def _clean_aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "AWS_PROFILE",
        "AWS_SESSION_TOKEN",
        "AWS_ENDPOINT_URL",
        "AWS_ENDPOINT_URL_KMS",
        "AWS_ENDPOINT_URL_S3",
        "PITH_SIGNER",
        "PITH_KEY",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing-access-key")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing-secret-key")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/dev/null")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")


@pytest.fixture
def local_kms(monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalKmsServer]:
    """The local KMS endpoint on 127.0.0.1 with one Ed25519 key behind `alias/pith-signing`.

    AWS_ENDPOINT_URL_KMS points boto3 at it, exactly as an operator would point it
    at a VPC endpoint; it is stopped when the test ends.
    """
    _clean_aws_env(monkeypatch)
    server = LocalKmsServer()
    server.state.add_key("1234abcd-12ab-34cd-56ef-1234567890ab", alias=KMS_ALIAS)
    server.start()
    monkeypatch.setenv("AWS_ENDPOINT_URL_KMS", server.url)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def kms_key(local_kms: LocalKmsServer) -> LocalKey:
    return local_kms.state.keys["1234abcd-12ab-34cd-56ef-1234567890ab"]


@pytest.fixture
def kms_env(s3_env: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """moto's server (the shared one) as the endpoint for KMS and S3; returns its URL."""
    monkeypatch.delenv("AWS_ENDPOINT_URL_KMS", raising=False)
    envelope.clear_cache()
    return s3_env


@pytest.fixture
def wrap_key(kms_env: str) -> str:
    """A fresh symmetric key on moto's KMS, behind a fresh alias; returns the alias."""
    import uuid

    import boto3

    kms = boto3.client("kms")
    key_id = kms.create_key(KeySpec="SYMMETRIC_DEFAULT", KeyUsage="ENCRYPT_DECRYPT")["KeyMetadata"]["KeyId"]
    alias = f"alias/pith-wrap-{uuid.uuid4().hex[:8]}"
    kms.create_alias(AliasName=alias, TargetKeyId=key_id)
    return alias


@pytest.fixture
def file_key(tmp_path: Path) -> Path:
    priv, _pub, _doc = generate_key(tmp_path / "keys-old", key_id="pith-old-2026-01")
    return priv


@pytest.fixture
def file_key2(tmp_path: Path) -> Path:
    priv, _pub, _doc = generate_key(tmp_path / "keys-new", key_id="pith-new-2026-06")
    return priv


@pytest.fixture
def log_key(tmp_path: Path) -> Path:
    """A key file for a store's transparency log, in a directory of its own (a
    registry key with no file has no directory to make one beside)."""
    priv, _pub, _doc = generate_key(tmp_path / "log-key", key_id="pith-log-test")
    return priv


@pytest.fixture
def kms_log_signer(local_kms: LocalKmsServer) -> str:
    """A second Ed25519 key on the local KMS, as a log key spec (`kms:alias/pith-log`):
    the log signed in KMS, as an operator whose registry key is there would."""
    local_kms.state.add_key("5678abcd-12ab-34cd-56ef-1234567890ab", alias="alias/pith-log")
    return "kms:alias/pith-log"


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Any:
    """Run `pith-pipeline ARGS...` in this process; returns exit code and output."""
    return partial(run_cli, capsys)
