"""An S3 store: the bucket layout is the URL layout, so a static site or CDN serves it.

boto3 is imported only here, and only when an `s3://` store is opened. The endpoint
comes from the standard `AWS_ENDPOINT_URL` / `AWS_ENDPOINT_URL_S3` (botocore reads
them itself), credentials from the standard chain (environment, profile, SSO,
instance role), the region from `AWS_REGION` first (`_internal.aws_env`: botocore
alone reads only `AWS_DEFAULT_REGION` and the profile). Write-once objects use
`PutObject` with `If-None-Match: *`: S3 refuses to replace an existing key, so two
writers can never overwrite an event.

Every botocore failure is mapped to `StorageError` with `transient` set for what a
retry can fix (throttling, 5xx, timeouts, conditional-write races) and clear for what
it cannot (access denied, missing bucket). Messages name the operation, bucket and
key, never a credential: they are built from the error code, not from the request.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any

from pith_pipeline._internal.aws_errors import classify
from pith_pipeline.errors import StorageError, WriteConflictError
from pith_pipeline.storage.base import (
    Digest,
    Store,
    StoreLocation,
    Writable,
    check_key,
    file_sha256,
    too_large,
)
from pith_pipeline.storage.s3_client import content_type_for, error_code, make_client, retried

#: botocore's own connection pool size, kept unless a loader asks for more.
DEFAULT_MAX_CONNECTIONS = 10
#: Conditional writes that race another writer (HTTP 409) are retried this many times.
CONFLICT_RETRIES = 5


class S3Store(Store):
    """Objects under `s3://bucket/prefix/`; keys are relative to the prefix."""

    def __init__(self, bucket: str, prefix: str = "", *, client: Any | None = None) -> None:
        if not bucket:
            raise StorageError("an S3 store needs a bucket: s3://bucket/prefix")
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.url = f"s3://{bucket}/{self.prefix}" if self.prefix else f"s3://{bucket}"
        self._client = client
        self._own_client = client is None
        self._session: Any | None = None
        # connections the client keeps open: botocore's default (10) unless a loader
        # with more requests in flight asks for more (`reserve_connections`)
        self._max_connections = DEFAULT_MAX_CONNECTIONS
        self._client_lock = threading.Lock()

    @classmethod
    def from_url(cls, url: str) -> S3Store:
        """`s3://bucket` or `s3://bucket/some/prefix`."""
        if not url.startswith("s3://"):
            raise StorageError(f"not an S3 URL: {url!r} (expected s3://bucket/prefix)")
        bucket, _, prefix = url[len("s3://") :].partition("/")
        return cls(bucket, prefix)

    def __repr__(self) -> str:
        return f"S3Store({self.url!r})"

    # -- client -------------------------------------------------------------
    @property
    def client(self) -> Any:
        """The boto3 client, made once (under a lock: a loader's threads share it)."""
        if self._client is None:
            with self._client_lock:
                if self._client is None:
                    self._session, self._client = make_client(max_connections=self._max_connections)
        return self._client

    def reserve_connections(self, n: int) -> None:
        """Keep at least `n` connections open, for `n` requests in flight at once.

        Why: botocore's pool holds 10; with more threads sending, requests past the
        tenth open a connection each and drop it afterwards (and log a warning), so
        the pool must match the loader's concurrency. A client given to the
        constructor is used as it is.
        """
        with self._client_lock:
            if n <= self._max_connections:
                return
            self._max_connections = n
            if self._own_client and self._client is not None:
                self._session, self._client = make_client(max_connections=n)

    @property
    def max_connections(self) -> int:
        return self._max_connections

    def _key(self, key: str) -> str:
        check_key(key)
        return f"{self.prefix}/{key}" if self.prefix else key

    def _fail(self, op: str, key: str, exc: Exception) -> StorageError:
        """A StorageError naming what failed; built from codes only, never the request.

        Transient or terminal by the one AWS table (`aws_errors`); a failure it cannot
        name is transient here, because every S3 call this store makes is safe to
        repeat (reads, and writes that are conditional or replace identical bytes).
        """
        where = f"{op} s3://{self.bucket}/{self._key(key) if key else self.prefix}"
        failure = classify(exc)
        if failure.kind in ("credentials", "region"):
            return StorageError(
                f"{where}: no usable AWS credentials found (set them in the "
                "environment, a profile or an instance role)"
                if failure.kind == "credentials"
                else f"{where}: no AWS region configured (set AWS_REGION or AWS_DEFAULT_REGION)"
            )
        if failure.kind == "connection":
            return StorageError(
                f"{where}: cannot reach the S3 endpoint ({type(exc).__name__})", transient=True
            )
        if failure.kind == "other":
            return StorageError(f"{where}: {type(exc).__name__}", transient=True)
        code, status = failure.code, failure.status
        hint = ""
        if code in ("AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch"):
            hint = " (check the credentials and the bucket policy)"
        elif code == "NoSuchBucket":
            hint = f" (bucket {self.bucket!r} does not exist)"
        return StorageError(
            f"{where}: {code or 'error'} (HTTP {status}){hint}", transient=bool(failure.transient)
        )

    # -- reads --------------------------------------------------------------
    def _get_object(self, key: str) -> dict[str, Any] | None:
        """The GetObject response for `key` (its body not yet read), None when absent;
        any other failure is the store's error naming the key."""
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            resp: dict[str, Any] = self.client.get_object(Bucket=self.bucket, Key=self._key(key))
        except ClientError as exc:
            code, status = error_code(exc)
            if code in ("NoSuchKey", "404") or (status == 404 and code != "NoSuchBucket"):
                return None
            raise self._fail("GET", key, exc) from None
        except BotoCoreError as exc:
            raise self._fail("GET", key, exc) from None
        return resp

    def get_tagged(self, key: str) -> tuple[bytes, str] | None:
        from botocore.exceptions import BotoCoreError

        resp = self._get_object(key)
        if resp is None:
            return None
        try:
            return resp["Body"].read(), str(resp["ETag"])
        except BotoCoreError as exc:
            raise self._fail("GET", key, exc) from None

    def get(self, key: str) -> bytes | None:
        got = self.get_tagged(key)
        return None if got is None else got[0]

    def read_into(self, key: str, out: Writable) -> bool:
        """`base.read_into`: the object's body to `out.write`, 1 MiB at a time."""
        from botocore.exceptions import BotoCoreError

        resp = self._get_object(key)
        if resp is None:
            return False
        body = resp["Body"]
        try:
            while chunk := body.read(1 << 20):
                out.write(chunk)
        except BotoCoreError as exc:
            raise self._fail("GET", key, exc) from None
        finally:
            body.close()
        return True

    def get_capped(self, key: str, limit: int) -> bytes | None:
        """Like `get`, but an object over `limit` bytes is refused by its
        Content-Length, its body never read (`base.get_capped`)."""
        from botocore.exceptions import BotoCoreError

        resp = self._get_object(key)
        if resp is None:
            return None
        body = resp["Body"]
        try:
            size = int(resp.get("ContentLength") or 0)
            if size > limit:
                raise too_large(key, size, limit)
            data: bytes = body.read(limit + 1)
        except BotoCoreError as exc:
            raise self._fail("GET", key, exc) from None
        finally:
            body.close()
        if len(data) > limit:
            raise too_large(key, None, limit)
        return data

    def exists(self, key: str) -> bool:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            self.client.head_object(Bucket=self.bucket, Key=self._key(key))
            return True
        except ClientError as exc:
            code, status = error_code(exc)
            if status == 404 and code != "NoSuchBucket":
                return False
            raise self._fail("HEAD", key, exc) from None
        except BotoCoreError as exc:
            raise self._fail("HEAD", key, exc) from None

    def list(self, prefix: str) -> Iterator[str]:
        return iter(sorted(self.iter_unsorted(prefix)))

    def iter_unsorted(self, prefix: str) -> Iterator[str]:
        """The keys of `list`, streamed page by page (S3 returns them sorted; nothing
        is held beyond a page of 1,000)."""
        from botocore.exceptions import BotoCoreError, ClientError

        full = f"{self.prefix}/{prefix}" if self.prefix else prefix
        strip = len(self.prefix) + 1 if self.prefix else 0
        try:
            pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=full)
            for page in pages:
                for obj in page.get("Contents", ()):
                    yield obj["Key"][strip:]
        except (ClientError, BotoCoreError) as exc:
            raise self._fail("LIST", prefix, exc) from None

    def list_after(self, prefix: str, start_after: str, limit: int) -> Sequence[str]:
        """Up to `limit` keys under `prefix` that sort after `start_after`, sorted:
        one LIST request, whatever the bucket holds (`loader`: which papers are new)."""
        from botocore.exceptions import BotoCoreError, ClientError

        full = f"{self.prefix}/{prefix}" if self.prefix else prefix
        strip = len(self.prefix) + 1 if self.prefix else 0
        after = f"{self.prefix}/{start_after}" if self.prefix else start_after
        try:
            resp = self.client.list_objects_v2(
                Bucket=self.bucket, Prefix=full, StartAfter=after, MaxKeys=max(1, min(limit, 1000))
            )
        except (ClientError, BotoCoreError) as exc:
            raise self._fail("LIST", prefix, exc) from None
        return sorted(obj["Key"][strip:] for obj in resp.get("Contents", ()))

    # -- writes -------------------------------------------------------------
    def _put_object(self, key: str, data: Any, content_type: str, **extra: str) -> None:
        self.client.put_object(
            Bucket=self.bucket,
            Key=self._key(key),
            Body=data,
            ContentType=content_type_for(key, content_type),
            **extra,
        )

    def put(self, key: str, data: bytes, *, content_type: str = "application/json") -> None:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            self._put_object(key, data, content_type)
        except (ClientError, BotoCoreError) as exc:
            raise self._fail("PUT", key, exc) from None

    def put_file(
        self, key: str, src: str | os.PathLike[str], *, content_type: str = "application/json"
    ) -> None:
        """`put` of a file, streamed from disk by botocore (up to S3's 5 GB PUT)."""
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            with open(src, "rb") as fh:
                self._put_object(key, fh, content_type)
        except (ClientError, BotoCoreError) as exc:
            raise self._fail("PUT", key, exc) from None

    def put_once(self, key: str, data: bytes, *, content_type: str = "application/json") -> bool:
        return self._put_once(
            key,
            content_type,
            lambda: contextlib.nullcontext(data),
            lambda digest: digest == hashlib.sha256(data).hexdigest(),
        )

    def put_once_file(
        self, key: str, src: str | os.PathLike[str], *, content_type: str = "application/json"
    ) -> bool:
        """`put_once` of a file, streamed from disk by botocore (up to S3's 5 GB PUT)."""
        return self._put_once(
            key,
            content_type,
            lambda: open(src, "rb"),
            lambda digest: digest == file_sha256(src),
        )

    def _put_once(
        self,
        key: str,
        content_type: str,
        body: Callable[[], AbstractContextManager[Any]],
        same: Callable[[str], bool],
    ) -> bool:
        """A conditional PUT (`If-None-Match: *`); on 412, identical content counts as done.

        `same` judges the SHA-256 (hex) of the object found, read a piece at a time: a
        write-once object (a quarantine, a run manifest) may be larger than memory."""
        from botocore.exceptions import BotoCoreError, ClientError

        for attempt in range(CONFLICT_RETRIES + 1):
            try:
                with body() as data:
                    self._put_object(key, data, content_type, IfNoneMatch="*")
                return True
            except ClientError as exc:
                code, status = error_code(exc)
                if status == 412 or code == "PreconditionFailed":
                    found = self._stored_sha256(key)
                    if found is None:  # deleted in between: try again
                        continue
                    if same(found):
                        # ours when botocore had sent it before (the response was lost)
                        return retried(exc)
                    raise WriteConflictError(
                        f"{key} already exists in {self.url} with different content; "
                        "write-once objects are never overwritten"
                    ) from None
                if (status == 409 or code == "ConditionalRequestConflict") and attempt < CONFLICT_RETRIES:
                    time.sleep(min(2.0, 0.05 * 2**attempt))  # another writer mid-PUT
                    continue
                raise self._fail("PUT", key, exc) from None
            except BotoCoreError as exc:
                raise self._fail("PUT", key, exc) from None
        raise StorageError(
            f"PUT s3://{self.bucket}/{self._key(key)}: conditional write kept "
            "conflicting with another writer",
            transient=True,
        )

    def _stored_sha256(self, key: str) -> str | None:
        """The SHA-256 (hex) of the object's bytes, read a piece at a time; None when
        absent. The one check behind every conditional write's 412: S3 may have applied
        a write whose response was lost, and botocore's retry then finds the object
        already there, or no longer matching the tag; stored bytes identical to ours
        mean the write is done."""
        found = Digest()
        return found.hexdigest() if self.read_into(key, found) else None

    def put_if_match(
        self, key: str, data: bytes, tag: str | None, *, content_type: str = "application/json"
    ) -> bool:
        from botocore.exceptions import BotoCoreError, ClientError

        extra = {"IfMatch": tag} if tag is not None else {"IfNoneMatch": "*"}
        try:
            self._put_object(key, data, content_type, **extra)
            return True
        except ClientError as exc:
            code, status = error_code(exc)
            if status in (409, 412) or code in ("PreconditionFailed", "ConditionalRequestConflict"):
                # a 412 whose stored bytes are ours: our own write, applied by S3 and
                # retried by botocore after its response was lost (lease documents
                # carry a per-holder token, so identical bytes are never a rival's)
                return self._stored_sha256(key) == hashlib.sha256(data).hexdigest()
            if status == 404 and tag is not None and code != "NoSuchBucket":
                return False  # deleted since it was read
            raise self._fail("PUT", key, exc) from None
        except BotoCoreError as exc:
            raise self._fail("PUT", key, exc) from None

    def delete(self, key: str) -> None:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            self.client.delete_object(Bucket=self.bucket, Key=self._key(key))
        except (ClientError, BotoCoreError) as exc:
            raise self._fail("DELETE", key, exc) from None

    # -- for readers and writers that reach the objects themselves -------------
    def _frozen_credentials(self) -> Any | None:
        """The credentials boto3 uses, resolved once by botocore's chain (frozen: a
        refreshable role's current set), or None for anonymous access."""
        if self._session is None:
            self.client  # noqa: B018 - makes the session with the client
        if self._session is None:  # a client given to the constructor
            import boto3

            self._session = boto3.session.Session()
        creds = self._session.get_credentials()
        return None if creds is None else creds.get_frozen_credentials()

    def _custom_endpoint(self) -> str | None:
        """The endpoint when one is configured (`AWS_ENDPOINT_URL[_S3]`), else None."""
        if os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL"):
            return str(self.client.meta.endpoint_url)
        return None

    def object_store_options(self) -> dict[str, str]:
        """The storage options (object_store's names, as deltalake takes them) that
        reach this bucket with the same endpoint, region and credentials as boto3.

        Why handed over in memory: deltalake and boto3 then always agree on who is
        writing. The values are secrets: never log or show them.
        """
        opts: dict[str, str] = {"AWS_REGION": self.client.meta.region_name or "us-east-1"}
        frozen = self._frozen_credentials()
        if frozen is not None:
            opts["AWS_ACCESS_KEY_ID"] = frozen.access_key
            opts["AWS_SECRET_ACCESS_KEY"] = frozen.secret_key
            if frozen.token:
                opts["AWS_SESSION_TOKEN"] = frozen.token
        else:
            opts["AWS_SKIP_SIGNATURE"] = "true"
        endpoint = self._custom_endpoint()
        if endpoint is not None:
            opts["AWS_ENDPOINT_URL"] = endpoint
            opts["AWS_VIRTUAL_HOSTED_STYLE_REQUEST"] = "false"  # path style, as boto3 uses for MinIO/moto
            if endpoint.startswith("http://"):
                opts["AWS_ALLOW_HTTP"] = "true"
        return opts

    def _root(self) -> str:
        return f"{self.bucket}/{self.prefix}" if self.prefix else self.bucket

    def location(self) -> StoreLocation:
        return StoreLocation(f"s3://{self._root()}", self.object_store_options(), False, self)

    def arrow_filesystem(self) -> tuple[Any, str]:
        """A pyarrow S3FileSystem on the same endpoint, region and credentials, and the root.

        Credentials are resolved once by botocore's chain and handed over in memory,
        so pyarrow and boto3 always agree on who is reading.
        """
        from pyarrow import fs as pafs  # pyarrow only for a reader of Parquet

        kwargs: dict[str, Any] = {"region": self.client.meta.region_name or "us-east-1"}
        frozen = self._frozen_credentials()
        if frozen is not None:
            kwargs.update(
                access_key=frozen.access_key, secret_key=frozen.secret_key, session_token=frozen.token
            )
        else:
            kwargs["anonymous"] = True
        endpoint = self._custom_endpoint()
        if endpoint is not None:
            kwargs["endpoint_override"] = endpoint
        return pafs.S3FileSystem(**kwargs), self._root()
