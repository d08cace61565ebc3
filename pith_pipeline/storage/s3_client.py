"""The boto3 side of the S3 store (`s3`): the client it makes, and how it reads
botocore's answers (error codes, retried requests, content types).

boto3 is imported only when a client is made, so opening a local store never loads it.
"""

from __future__ import annotations

import os
from typing import Any

from pith_pipeline._internal.aws_env import region_from_env
from pith_pipeline.errors import StorageError


def content_type_for(key: str, default: str) -> str:
    if key.endswith(".parquet"):
        return "application/vnd.apache.parquet"
    if key.endswith(".jsonl"):
        return "application/x-ndjson"
    if key.endswith(".json"):
        return "application/json"
    return default


def error_code(exc: Exception) -> tuple[str, int]:
    response: dict[str, Any] = getattr(exc, "response", None) or {}
    code = str(response.get("Error", {}).get("Code", ""))
    status = int(response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
    return code, status


def retried(exc: Exception) -> bool:
    """Whether botocore sent the request more than once before this error: an
    earlier attempt may have been applied by S3 and only its response lost."""
    response = getattr(exc, "response", None) or {}
    meta = response.get("ResponseMetadata") if isinstance(response, dict) else None
    attempts = meta.get("RetryAttempts") if isinstance(meta, dict) else None
    return isinstance(attempts, int) and attempts > 0


def make_client(*, max_connections: int = 10) -> tuple[Any, Any]:
    """A boto3 session and its S3 client: standard retry mode, bounded timeouts, a
    connection pool of `max_connections` (one per request in flight)."""
    try:
        import boto3
        from botocore.config import Config
    except ImportError as exc:  # pragma: no cover - boto3 is a dependency
        raise StorageError("s3:// stores need boto3 (pip install boto3)") from exc
    custom_endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    try:  # the standard variable, which an explicit retries config would otherwise hide
        attempts = max(1, int(os.environ.get("AWS_MAX_ATTEMPTS", "5")))
    except ValueError:
        attempts = 5
    config = Config(
        retries={"mode": "standard", "max_attempts": attempts},
        connect_timeout=10,
        read_timeout=60,
        max_pool_connections=max_connections,
        # S3-compatible servers (MinIO, moto) rarely serve virtual-host names
        s3={"addressing_style": "path"} if custom_endpoint else {},
    )
    try:
        session = boto3.session.Session()
        return session, session.client("s3", region_name=region_from_env(), config=config)
    except Exception as exc:  # region/profile misconfiguration: name it, no secrets
        raise StorageError(f"cannot create an S3 client: {type(exc).__name__}: {exc}") from None
