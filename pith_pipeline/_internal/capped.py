"""Reading an HTTP response body with a size cap and a total deadline.

Why: a read timeout bounds each wait for bytes, not the request; a server sending one
byte every 20 s (under a 60 s read timeout) held a run forever. And a body read whole
before it is looked at lets one response (a 200 MB `<title>`) take gigabytes of memory.
Both HTTP stacks we use (httpx2 for OAI-PMH, requests for the search API) stream the
body in the chunks the socket delivers; this module consumes such a stream.
"""

from __future__ import annotations

import ssl
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpcore2
import httpx2

from pith_pipeline.errors import RequestDeadlineError


@dataclass(frozen=True, slots=True)
class Body:
    """What was read: the bytes (at most `cap`), and whether the response had more."""

    data: bytes
    too_large: bool


def read_capped(
    chunks: Iterable[bytes],
    *,
    cap: int,
    started: float,
    deadline: float,
    what: str,
    monotonic: Callable[[], float] = time.monotonic,
) -> Body:
    """Join `chunks` until the end, `cap` bytes, or `deadline` seconds after `started`.

    Raises `RequestDeadlineError` (transient: the gate retries it) when the deadline
    passes; over the cap, stops reading and returns the first `cap` bytes flagged.
    """
    parts: list[bytes] = []
    size = 0
    for chunk in chunks:
        if monotonic() - started > deadline:
            raise RequestDeadlineError(
                f"{what}: no complete response within the deadline of {deadline:g} s ({size} bytes received)"
            )
        if not chunk:
            continue
        if size + len(chunk) > cap:
            parts.append(chunk[: cap - size])
            return Body(b"".join(parts), True)
        parts.append(chunk)
        size += len(chunk)
    if monotonic() - started > deadline:
        raise RequestDeadlineError(
            f"{what}: no complete response within the deadline of {deadline:g} s ({size} bytes received)"
        )
    return Body(b"".join(parts), False)


# -- the deadline below HTTP: connect, request, status line and headers too --------------
_SCOPE = threading.local()


@contextmanager
def deadline_scope(seconds: float) -> Iterator[float]:
    """Within this block, every socket operation of a `DeadlineBackend` connection waits
    at most until `seconds` from now; yields the monotonic start."""
    started = time.monotonic()
    previous = getattr(_SCOPE, "until", None)
    _SCOPE.until = started + seconds
    try:
        yield started
    finally:
        _SCOPE.until = previous


def _wait(timeout: float | None) -> float | None:
    """`timeout` shortened to what is left of the current deadline (raising when none is)."""
    until: float | None = getattr(_SCOPE, "until", None)
    if until is None:
        return timeout
    left = until - time.monotonic()
    if left <= 0:
        raise httpcore2.ReadTimeout("the request's total deadline has passed")
    return left if timeout is None else min(timeout, left)


class _DeadlineStream(httpcore2.NetworkStream):
    def __init__(self, inner: httpcore2.NetworkStream) -> None:
        self.inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self.inner.read(max_bytes, _wait(timeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self.inner.write(buffer, _wait(timeout))

    def close(self) -> None:
        self.inner.close()

    def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore2.NetworkStream:
        return _DeadlineStream(self.inner.start_tls(ssl_context, server_hostname, _wait(timeout)))

    def get_extra_info(self, info: str) -> Any:
        return self.inner.get_extra_info(info)


class DeadlineBackend(httpcore2.NetworkBackend):
    """httpcore's socket layer with each wait cut to the current `deadline_scope`.

    Why below HTTP: the read timeout restarts with every byte, so a server that drips
    its status line or headers (not only its body) would otherwise never be stopped.
    """

    def __init__(self, inner: httpcore2.NetworkBackend) -> None:
        self.inner = inner

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.NetworkStream:
        return _DeadlineStream(
            self.inner.connect_tcp(host, port, _wait(timeout), local_address, socket_options)
        )

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore2.NetworkStream:
        return _DeadlineStream(self.inner.connect_unix_socket(path, _wait(timeout), socket_options))

    def sleep(self, seconds: float) -> None:
        self.inner.sleep(seconds)


def deadline_transport(limits: httpx2.Limits) -> httpx2.HTTPTransport:
    """An HTTP transport whose connections honour `deadline_scope`."""
    transport = httpx2.HTTPTransport(limits=limits)
    pool = transport._pool
    pool._network_backend = DeadlineBackend(pool._network_backend)
    return transport
