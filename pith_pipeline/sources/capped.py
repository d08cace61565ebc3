"""Reading an HTTP response body with a size cap and a total deadline.

Why: a read timeout bounds each wait for bytes, not the request; a server sending one
byte every 20 s (under a 60 s read timeout) held a run forever. And a body read whole
before it is looked at lets one response (a 200 MB `<title>`) take gigabytes of memory.
Both HTTP stacks we use (httpx2 for OAI-PMH, requests for the search API) stream the
body in the chunks the socket delivers; this module consumes such a stream.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

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
