"""S3-specific behaviour: endpoint and credentials from the standard chain, content
types, conditional-write races, error mapping that never leaks credentials."""

from __future__ import annotations

import socket

import boto3
import pytest
from botocore.stub import Stubber

from pith_pipeline.errors import StorageError
from pith_pipeline.storage.factory import open_store
from pith_pipeline.storage.s3 import S3Store

SECRET = "testing-secret-key"


def test_open_store_s3_url(s3_store_url: str, s3_env: str) -> None:
    store = open_store(s3_store_url)
    assert isinstance(store, S3Store)
    assert store.url == s3_store_url
    assert store.client.meta.endpoint_url == s3_env  # AWS_ENDPOINT_URL honoured by botocore
    store.put("pith/A/bundle.json", b"{}")
    # keys live under the prefix in the bucket
    raw = boto3.client("s3").get_object(Bucket=store.bucket, Key="store/pith/A/bundle.json")
    assert raw["Body"].read() == b"{}"


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("pith/A/bundle.json", "application/json"),
        ("quarantine/r.jsonl", "application/x-ndjson"),
        ("index/records/x.parquet", "application/vnd.apache.parquet"),
    ],
)
def test_content_type(s3_store_url: str, key: str, expected: str) -> None:
    store = S3Store.from_url(s3_store_url)
    store.put_once(key, b"x")
    head = boto3.client("s3").head_object(Bucket=store.bucket, Key=f"store/{key}")
    assert head["ContentType"] == expected


def test_missing_bucket_is_terminal_and_named(s3_env: str) -> None:
    store = S3Store.from_url("s3://pith-no-such-bucket/p")
    with pytest.raises(StorageError) as err:
        store.put("pith/A/bundle.json", b"x")
    assert err.value.transient is False
    assert "NoSuchBucket" in str(err.value) and "pith-no-such-bucket" in str(err.value)
    assert SECRET not in str(err.value) and "testing-access-key" not in str(err.value)


def _stubbed(s3_bucket: str) -> tuple[S3Store, Stubber]:
    client = boto3.client("s3")
    return S3Store(s3_bucket, "p", client=client), Stubber(client)


@pytest.mark.parametrize(
    ("code", "status", "transient"),
    [
        ("SlowDown", 503, True),
        ("InternalError", 500, True),
        ("RequestTimeout", 400, True),
        ("AccessDenied", 403, False),
        ("NoSuchBucket", 404, False),
    ],
)
def test_error_mapping(s3_bucket: str, code: str, status: int, transient: bool) -> None:
    store, stub = _stubbed(s3_bucket)
    stub.add_client_error("put_object", service_error_code=code, http_status_code=status)
    with stub, pytest.raises(StorageError) as err:
        store.put("pith/A/bundle.json", b"x")
    assert err.value.transient is transient
    assert code in str(err.value) and "pith/A/bundle.json" in str(err.value)
    assert SECRET not in str(err.value) and SECRET not in repr(err.value)


def test_conditional_conflict_409_is_retried(s3_bucket: str) -> None:
    store, stub = _stubbed(s3_bucket)
    stub.add_client_error("put_object", service_error_code="ConditionalRequestConflict", http_status_code=409)
    stub.add_response("put_object", {"ETag": '"abc"'})
    with stub:
        assert store.put_once("events/A/1.json", b"x") is True
        stub.assert_no_pending_responses()


def test_unreachable_endpoint_is_transient(s3_env: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    store = S3Store.from_url("s3://pith-unreachable/p")
    with pytest.raises(StorageError) as err:
        store.get("pith/A/bundle.json")
    assert err.value.transient is True
    assert SECRET not in str(err.value)


def test_repr_has_no_credentials(s3_store_url: str) -> None:
    store = S3Store.from_url(s3_store_url)
    store.put("a.json", b"{}")
    assert SECRET not in repr(store) and "testing-access-key" not in repr(store)


def test_arrow_filesystem_reads_the_same_objects(s3_store_url: str) -> None:
    store = S3Store.from_url(s3_store_url)
    store.put("index/x.bin", b"hello")
    fs, root = store.arrow_filesystem()
    with fs.open_input_stream(f"{root}/index/x.bin") as fh:
        assert fh.read() == b"hello"


@pytest.mark.parametrize(
    ("env", "region"),
    [
        ({"AWS_REGION": "eu-west-2"}, "eu-west-2"),
        ({"AWS_REGION": "eu-west-2", "AWS_DEFAULT_REGION": "eu-west-3"}, "eu-west-2"),
        ({"AWS_DEFAULT_REGION": "eu-west-3"}, "eu-west-3"),
        ({"AWS_REGION": "", "AWS_DEFAULT_REGION": "eu-west-3"}, "eu-west-3"),
    ],
)
def test_the_region_comes_from_aws_region_then_aws_default_region(
    s3_store_url: str, s3_env: str, monkeypatch: pytest.MonkeyPatch, env: dict[str, str], region: str
) -> None:
    """botocore reads only AWS_DEFAULT_REGION; AWS_REGION (what the AWS CLI v2 and the
    other SDKs read first, and what Lambda, ECS and many CI runners set) was ignored, so
    the S3 client, the Delta tables and pyarrow all used us-east-1 while the operator
    had named another region. The same client is used everywhere, and the endpoint
    still comes from AWS_ENDPOINT_URL."""
    from pith_pipeline.signing.kms import make_kms_client

    monkeypatch.delenv("AWS_REGION", raising=False)
    monkeypatch.delenv("AWS_DEFAULT_REGION", raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    store = open_store(s3_store_url)
    assert isinstance(store, S3Store)
    assert store.client.meta.region_name == region
    assert store.client.meta.endpoint_url == s3_env
    assert store.object_store_options()["AWS_REGION"] == region
    assert store.arrow_filesystem()[0].region == region
    assert make_kms_client().meta.region_name == region
    assert make_kms_client(region="ap-south-1").meta.region_name == "ap-south-1"  # an explicit one wins
    store.put("pith/A/bundle.json", b"{}")
    assert store.get("pith/A/bundle.json") == b"{}"
