"""One transient-error rule: the class of an error decides whether Airflow retries it.

The DAGs' retry policy (`airflow_tasks.default_args`) fails fast on `TerminalError`
only. A storage or signing error that no retry can fix (AccessDenied, a missing
staged chunk) must therefore be a `TerminalError`, and one that a retry can fix
(throttling) must not be.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from pith_pipeline import airflow_tasks as at
from pith_pipeline.errors import SigningError, StorageError, TerminalError, TransientError
from pith_pipeline.signing.kms import call_kms
from pith_pipeline.storage.factory import open_store
from pith_pipeline.storage.s3 import S3Store
from pith_pipeline.storage.staging import staged_key


def _decision(exc: BaseException) -> Any:
    """What the DAGs' retry policy decides for `exc` on the first of four tries."""
    from airflow.sdk import RetryAction

    policy = at.default_args(env={})["retry_policy"]
    action = policy.evaluate(exc, try_number=1, max_tries=4).action
    return action == RetryAction.FAIL


def _client_error(code: str, status: int, op: str = "PutObject") -> ClientError:
    return ClientError({"Error": {"Code": code}, "ResponseMetadata": {"HTTPStatusCode": status}}, op)


def _s3_failure(code: str, status: int) -> StorageError:
    return S3Store("bucket", "prefix", client=object())._fail(
        "PUT", "pith/A/bundle.json", _client_error(code, status)
    )


def test_a_missing_staged_chunk_in_a_task_fails_at_once(tmp_path: Path) -> None:
    store = open_store(str(tmp_path / "store"))
    with pytest.raises(StorageError) as info:
        at.publish_staged(at.Settings(store=store.url), [staged_key("run-1", 0)], store=store)
    assert "staged chunk" in str(info.value)
    assert _decision(info.value) is True


@pytest.mark.parametrize(("code", "status"), [("AccessDenied", 403), ("NoSuchBucket", 404)])
def test_a_non_transient_s3_error_is_not_retried(code: str, status: int) -> None:
    err = _s3_failure(code, status)
    assert isinstance(err, TerminalError) and not err.transient
    assert _decision(err) is True


@pytest.mark.parametrize(("code", "status"), [("SlowDown", 503), ("ThrottlingException", 400), ("X", 500)])
def test_a_throttling_s3_error_is_retried(code: str, status: int) -> None:
    err = _s3_failure(code, status)
    assert isinstance(err, TransientError) and err.transient
    assert _decision(err) is False


def test_kms_errors_follow_the_same_rule() -> None:
    def fail(code: str, status: int) -> SigningError:
        def call() -> None:
            raise _client_error(code, status, "Sign")

        with pytest.raises(SigningError) as info:
            call_kms(call, "KMS Sign")
        return info.value

    denied = fail("AccessDeniedException", 400)
    throttled = fail("ThrottlingException", 400)
    assert _decision(denied) is True and _decision(throttled) is False
    assert isinstance(denied, TerminalError) and isinstance(throttled, TransientError)


def test_the_class_survives_pickling_to_an_airflow_worker() -> None:
    for err in (StorageError("a", transient=True), StorageError("b"), SigningError("c", transient=True)):
        back = pickle.loads(pickle.dumps(err))
        assert type(back) is type(err) and str(back) == str(err) and back.transient is err.transient
        assert _decision(back) is (not err.transient)
