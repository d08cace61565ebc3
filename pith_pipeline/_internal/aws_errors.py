"""One table for which AWS failures a retry can fix, for S3 (`storage/s3.py`) and KMS
(`signing/kms.py`).

Why one table: a run that meets throttling should retry it the same way whichever
service throttled, so S3 and KMS share one list of retryable botocore failures (every
service's spelling of throttling, HTTP 408 and 5xx among them) rather than two that
can drift apart. botocore is imported only inside `classify`, so this
module costs nothing until an AWS call has failed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: AWS error codes a retry can fix: throttling, service-side faults, timeouts and
#: conditional-write races, as S3 and KMS spell them.
TRANSIENT_CODES = frozenset(
    {
        # throttling
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestLimitExceeded",
        "TooManyRequests",
        "TooManyRequestsException",
        "LimitExceededException",
        # the service or something it depends on is briefly unavailable
        "InternalError",
        "InternalFailure",
        "KMSInternalException",
        "ServiceUnavailable",
        "ServiceUnavailableException",
        "DependencyTimeoutException",
        "KeyUnavailableException",
        # timeouts, clock skew and bytes damaged in transit
        "RequestTimeout",
        "RequestTimeoutException",
        "RequestTimeTooSkewed",
        "BadDigest",
        # a conditional write raced another writer
        "ConditionalRequestConflict",
        "OperationAborted",
    }
)
#: HTTP statuses a retry can fix besides every 5xx: timeout, conflict, too many requests.
TRANSIENT_STATUSES = frozenset({408, 409, 429})


@dataclass(frozen=True, slots=True)
class AwsFailure:
    """What a botocore failure was, from codes only (never AWS's free text or the request).

    `kind` is "client" (an error response: `code`, `status`), "connection" (the endpoint
    could not be reached or stopped answering), "credentials", "region", or "other".
    `transient` is None for "other": the caller knows whether retrying an unnamed
    failure of its own calls is safe.
    """

    kind: str
    code: str = ""
    status: int = 0
    transient: bool | None = None


def is_transient(code: str, status: int) -> bool:
    """Whether an AWS error response (`code`, HTTP `status`) may succeed when retried."""
    return code in TRANSIENT_CODES or status >= 500 or status in TRANSIENT_STATUSES


def error_code(exc: BaseException) -> tuple[str, int]:
    """The AWS error code and HTTP status of a botocore `ClientError` ("", 0 otherwise)."""
    response: Any = getattr(exc, "response", None)
    if not isinstance(response, dict):
        return "", 0
    err = response.get("Error", {})
    meta = response.get("ResponseMetadata", {})
    code = str(err.get("Code", "")) if isinstance(err, dict) else ""
    status = int(meta.get("HTTPStatusCode", 0) or 0) if isinstance(meta, dict) else 0
    return code, status


def classify(exc: BaseException) -> AwsFailure:
    """The one classification of a failed S3 or KMS call."""
    from botocore import exceptions as bex

    if isinstance(exc, bex.NoCredentialsError | bex.PartialCredentialsError):
        return AwsFailure("credentials", transient=False)
    if isinstance(exc, bex.NoRegionError):
        return AwsFailure("region", transient=False)
    if isinstance(
        exc,
        bex.ConnectionError  # endpoint, connect timeout, proxy, connection closed
        | bex.ReadTimeoutError
        | bex.HTTPClientError
        | TimeoutError
        | ConnectionError,
    ):
        return AwsFailure("connection", transient=True)
    code, status = error_code(exc)
    if code or status:
        return AwsFailure("client", code, status, is_transient(code, status))
    return AwsFailure("other")
