"""Signing with an Ed25519 key held in AWS KMS (`--signer kms:KEY_ID_OR_ALIAS`).

The private key never leaves KMS. Each signature is one `Sign` call with
`SigningAlgorithm=ED25519_SHA_512` and `MessageType=RAW` on the raw 32 bytes of
the digest, which yields a plain RFC 8032 signature over those bytes (the same
bytes a local key signs). The public key comes from `GetPublicKey` (a DER
SubjectPublicKeyInfo).

Why the extra care:
- KMS answers in milliseconds and the account-wide ECC quota is about 300
  requests per second, so `sign_digests` fans out over a bounded thread pool and
  an optional client-side rate limit keeps a run inside its share of the quota.
- Throttling and KMS-side hiccups are normal at that rate: botocore retries them
  in its `adaptive` mode (full-jitter exponential backoff, and a client-side rate
  that drops when KMS throttles and recovers as it stops), and when its attempts
  run out the failure is raised as a *transient* `SigningError` so Airflow retries
  the task. Permission, key state and key usage problems are *terminal*: botocore
  does not retry them, and neither does Airflow.
- Every signature is checked locally with pynacl against the key's public key
  before it is returned, so a wrong key or algorithm fails on the first
  signature of a run, before anything is published.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import nacl.exceptions
import nacl.signing

from pith_pipeline._internal.aws_env import region_from_env
from pith_pipeline._internal.aws_errors import classify as aws_classify
from pith_pipeline._internal.error_text import one_line
from pith_pipeline.core.keys import Signer, fingerprint_b32
from pith_pipeline.errors import SigningError

SIGNING_ALGORITHM = "ED25519_SHA_512"
MESSAGE_TYPE = "RAW"
KEY_SPEC = "ECC_NIST_EDWARDS25519"
# DER prefix of an Ed25519 SubjectPublicKeyInfo (RFC 8410): SEQUENCE { SEQUENCE { OID
# 1.3.101.112 }, BIT STRING (0 unused bits) } followed by the 32 raw key bytes.
ED25519_SPKI_PREFIX = bytes.fromhex("302a300506032b6570032100")
SELF_TEST_DIGEST = hashlib.sha256(b"pith-pipeline signer self-test").digest()
#: Attempts botocore makes of one KMS call (the first and its retries) before the call
#: fails as transient: with its backoff (up to 1, 2, 4, ... 20 s) about a minute.
KMS_ATTEMPTS = 8

T = TypeVar("T")

HINTS = {
    "AccessDeniedException": "the caller's IAM policy or the key policy does not allow this "
    "call (kms:Sign / kms:GetPublicKey / kms:Decrypt)",
    "DisabledException": "the KMS key is disabled; enable it or use another key",
    "NotFoundException": "no such KMS key or alias in this account and region",
    "InvalidKeyUsageException": "the key is not an Ed25519 SIGN_VERIFY key (key spec ECC_NIST_EDWARDS25519)",
    "KMSInvalidStateException": "the key is pending deletion or import; it cannot sign",
    "UnrecognizedClientException": "AWS credentials are invalid for this region",
    "InvalidArnException": "the key id or alias is not a valid KMS identifier",
    "IncorrectKeyException": "the ciphertext was not encrypted under this KMS key",
    "InvalidCiphertextException": "the ciphertext or its encryption context is wrong",
}


def spki_to_raw(der: bytes) -> bytes:
    """The raw 32-byte key inside an Ed25519 SubjectPublicKeyInfo; anything else is refused."""
    if len(der) != 44 or not der.startswith(ED25519_SPKI_PREFIX):
        raise SigningError(
            f"KMS returned a public key that is not an Ed25519 SubjectPublicKeyInfo ({len(der)} bytes)"
        )
    return der[len(ED25519_SPKI_PREFIX) :]


def make_kms_client(
    *,
    region: str | None = None,
    endpoint_url: str | None = None,
    max_pool: int = 32,
    timeout: float = 10.0,
    attempts: int = KMS_ATTEMPTS,
) -> Any:
    """A boto3 KMS client that retries in botocore's `adaptive` mode, `attempts` in all
    per call (throttling, 5xx answers and dropped connections; never a refusal).

    The region is `region`, else `AWS_REGION` (which the messages, `--region` and the S3
    docs name, but botocore ignores), else botocore's own (`AWS_DEFAULT_REGION`, the
    profile). A client that cannot be made (no region, a region or endpoint that is no
    name or URL, an unknown profile, a broken config file) is configuration: one
    terminal `SigningError` naming the setting, never an "unexpected" ValueError.
    """
    import boto3
    from botocore.config import Config

    region = region or os.environ.get("AWS_REGION") or None
    cfg = Config(
        retries={"total_max_attempts": max(1, attempts), "mode": "adaptive"},
        max_pool_connections=max_pool,
        connect_timeout=timeout,
        read_timeout=timeout,
    )
    try:
        return boto3.session.Session().client(
            "kms", region_name=region or region_from_env(), endpoint_url=endpoint_url, config=cfg
        )
    except Exception as exc:  # botocore raises BotoCoreErrors and plain ValueErrors here
        raise SigningError(_client_setup_problem(exc, region, endpoint_url), transient=False) from None


def _client_setup_problem(exc: Exception, region: str | None, endpoint_url: str | None) -> str:
    """One line naming the setting that kept a KMS client from being made."""
    from botocore.exceptions import InvalidRegionError, NoRegionError, ProfileNotFound

    fix = "set AWS_REGION or AWS_DEFAULT_REGION (or ?region= in a kms: signer, --region for envelope-create)"
    if isinstance(exc, NoRegionError):
        return f"cannot use KMS: no AWS region configured; {fix}"
    if isinstance(exc, InvalidRegionError):
        return f"cannot use KMS: the AWS region {region!r} is not a region name; {fix}"
    if isinstance(exc, ProfileNotFound):
        profile = os.environ.get("AWS_PROFILE", "")
        return f"cannot use KMS: the AWS profile {profile!r} (AWS_PROFILE) is not configured"
    if isinstance(exc, ValueError):  # "Invalid endpoint: X", urllib's "Invalid IPv6 URL"
        for name, value in (
            ("the endpoint URL", endpoint_url),
            ("AWS_ENDPOINT_URL_KMS", os.environ.get("AWS_ENDPOINT_URL_KMS")),
            ("AWS_ENDPOINT_URL", os.environ.get("AWS_ENDPOINT_URL")),
        ):
            if value:
                return f"cannot use KMS: {name} {value!r} is not a URL (like https://kms.eu-west-1.amazonaws.com)"
        return f"cannot use KMS: the AWS region {region or ''!r} gives no valid endpoint; {fix}"
    return f"cannot create a KMS client: {type(exc).__name__}: {one_line(str(exc))}"


def classify(exc: BaseException) -> tuple[bool, str]:
    """(transient, description) for an exception raised by a botocore call.

    Transient or not by the one AWS table (`aws_errors`, shared with the S3 store); a
    failure it cannot name is terminal here, since it is most likely configuration.
    The description carries the AWS error code and HTTP status only: AWS's free
    text is left out so nothing the service echoes back can reach a log.
    """
    failure = aws_classify(exc)
    if failure.kind == "client":
        code = failure.code or "Unknown"
        hint = HINTS.get(code, "")
        desc = f"{code} (HTTP {failure.status})" + (f": {hint}" if hint else "")
        return bool(failure.transient), desc
    if failure.kind == "credentials":
        return False, "no AWS credentials found (set AWS_PROFILE or AWS_ACCESS_KEY_ID/...)"
    if failure.kind == "region":
        return False, "no AWS region configured (set AWS_REGION or AWS_DEFAULT_REGION)"
    if failure.kind == "connection":
        return True, f"{type(exc).__name__} talking to KMS"
    return False, type(exc).__name__


class RateLimiter:
    """A token bucket shared by the worker threads (None rate: unlimited)."""

    def __init__(
        self,
        rate: float | None,
        burst: int = 1,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.rate = rate
        self.burst = max(1, burst)
        self._tokens = float(self.burst)
        self._clock = clock
        self._sleep = sleep
        self._last = clock()
        self._lock = threading.Lock()

    def acquire(self) -> None:
        if not self.rate:
            return
        while True:
            with self._lock:
                now = self._clock()
                self._tokens = min(self.burst, self._tokens + (now - self._last) * self.rate)
                self._last = now
                if self._tokens >= 1:
                    self._tokens -= 1
                    return
                wait = (1 - self._tokens) / self.rate
            self._sleep(wait)


def call_kms(fn: Callable[[], T], what: str, attempts: int = KMS_ATTEMPTS) -> T:
    """`fn()`, one KMS call that botocore has already retried as far as it will (the
    client's `adaptive` mode); its failure raised as one `SigningError`: transient
    (retry later) or terminal (`classify`), naming the call, the error code and how
    many attempts were made (`attempts`: the client's, when the error does not say).
    No AWS free text reaches the message."""
    try:
        return fn()
    except SigningError:
        raise
    except Exception as exc:
        transient, desc = classify(exc)
        if not transient:
            raise SigningError(f"{what} failed: {desc}", transient=False) from None
        raise SigningError(
            f"{what} failed after {_attempts(exc, attempts)} attempts: {desc} "
            "(transient; retry later or lower the concurrency)",
            transient=True,
        ) from None


def _attempts(exc: BaseException, configured: int) -> int:
    """How many attempts botocore made of the call that failed with `exc`."""
    response = getattr(exc, "response", None)
    meta = response.get("ResponseMetadata", {}) if isinstance(response, dict) else {}
    retried = meta.get("RetryAttempts") if isinstance(meta, dict) else None
    return retried + 1 if isinstance(retried, int) else configured


class KmsSigner(Signer):
    """An Ed25519 key in AWS KMS. Thread-safe; holds no private material at all."""

    def __init__(
        self,
        kms_key: str,
        *,
        key_id: str | None = None,
        client: Any = None,
        region: str | None = None,
        endpoint_url: str | None = None,
        concurrency: int = 16,
        max_rps: float | None = None,
        attempts: int = KMS_ATTEMPTS,
    ) -> None:
        if not kms_key:
            raise SigningError("kms: needs a key id, key ARN or alias (kms:alias/pith-signing)")
        self.kms_key = kms_key
        self.concurrency = max(1, concurrency)
        self.attempts = max(1, attempts)
        self._client = (
            client
            if client is not None
            else make_kms_client(
                region=region, endpoint_url=endpoint_url, max_pool=self.concurrency, attempts=self.attempts
            )
        )
        self._limiter = RateLimiter(max_rps, burst=max(1, int(max_rps or 1) // 10))
        self._public = self._fetch_public_key()
        self._verify_key = nacl.signing.VerifyKey(self._public)
        self.key_id = key_id or f"pith-kms-{fingerprint_b32(self._public)[:8].lower()}"
        self.calls = 0  # Sign calls made (botocore's retries of one count once); for benchmarks and tests
        self._calls_lock = threading.Lock()

    @property
    def public_key(self) -> bytes:
        return self._public

    def _fetch_public_key(self) -> bytes:
        resp = call_kms(
            lambda: self._client.get_public_key(KeyId=self.kms_key),
            f"KMS GetPublicKey on {self.kms_key}",
            self.attempts,
        )
        spec = resp.get("KeySpec") or resp.get("CustomerMasterKeySpec")
        if spec is not None and spec != KEY_SPEC:
            raise SigningError(
                f"KMS key {self.kms_key} has key spec {spec}; an Ed25519 key ({KEY_SPEC}) is needed"
            )
        if resp.get("KeyUsage") not in (None, "SIGN_VERIFY"):
            raise SigningError(
                f"KMS key {self.kms_key} has key usage {resp.get('KeyUsage')}; SIGN_VERIFY is needed"
            )
        algs = resp.get("SigningAlgorithms")
        if algs is not None and SIGNING_ALGORITHM not in algs:
            raise SigningError(f"KMS key {self.kms_key} does not offer {SIGNING_ALGORITHM}")
        return spki_to_raw(bytes(resp["PublicKey"]))

    def _sign_once(self, digest: bytes) -> bytes:
        self._limiter.acquire()
        with self._calls_lock:
            self.calls += 1
        resp = self._client.sign(
            KeyId=self.kms_key, Message=digest, MessageType=MESSAGE_TYPE, SigningAlgorithm=SIGNING_ALGORITHM
        )
        return bytes(resp["Signature"])

    def sign_message(self, message: bytes) -> bytes:
        """A log checkpoint's note text (KMS signs RAW messages of up to 4096 bytes)."""
        if len(message) > 4096:
            raise SigningError("KMS signs messages of at most 4096 bytes")
        return self._sign_checked(message)

    def sign_digest(self, digest: bytes) -> bytes:
        if len(digest) != 32:
            raise SigningError("a signer signs the raw 32 bytes of a SHA-256 digest")
        return self._sign_checked(digest)

    def _sign_checked(self, digest: bytes) -> bytes:
        sig = call_kms(lambda: self._sign_once(digest), f"KMS Sign with {self.kms_key}", self.attempts)
        try:
            if len(sig) != 64:
                raise nacl.exceptions.BadSignatureError
            self._verify_key.verify(digest, sig)
        except (nacl.exceptions.BadSignatureError, nacl.exceptions.CryptoError, ValueError):
            raise SigningError(
                f"KMS key {self.kms_key} returned a signature that does not verify with its own "
                f"public key (key {self.key_id}); check the key is Ed25519 and the algorithm is "
                f"{SIGNING_ALGORITHM} with MessageType {MESSAGE_TYPE}",
                transient=False,
            ) from None
        return sig

    def sign_digests(self, digests: Sequence[bytes]) -> list[bytes]:
        """Sign concurrently, at most `concurrency` requests in flight; order is kept."""
        if len(digests) <= 1 or self.concurrency == 1:
            return [self.sign_digest(d) for d in digests]
        with ThreadPoolExecutor(
            max_workers=min(self.concurrency, len(digests)), thread_name_prefix="kms-sign"
        ) as pool:
            return list(pool.map(self.sign_digest, digests))

    def self_test(self) -> None:
        """One signature, verified locally: a wrong key or algorithm fails before any work."""
        self.sign_digest(SELF_TEST_DIGEST)

    def __reduce__(self) -> Any:
        raise TypeError("KMS signers hold a live client and are not pickled; pass the spec")
