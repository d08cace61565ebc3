"""How we ask arXiv for anything: the one place that enforces politeness.

arXiv asks bulk users for at most one request every 3 seconds, one connection at a
time, a descriptive User-Agent, and to honour `Retry-After`. Every request this
package makes to arXiv (OAI-PMH pages, `GetRecord`, the Atom search API through the
`arxiv` package) goes through one `Gate` per run, so the limit holds across all of
them and cannot be forgotten by a new caller. The gate is transport-agnostic: it
takes a zero-argument callable that performs one HTTP request and returns anything
with `status_code` and `headers` (httpx and requests responses both do).
"""

from __future__ import annotations

import email.utils
import logging
import os
import random
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol, TypeVar

from pith_pipeline import __version__
from pith_pipeline.errors import TransientError

log = logging.getLogger(__name__)

#: arXiv's published limit: one request every 3 seconds.
ARXIV_MIN_INTERVAL = 3.0
USER_AGENT_ENV = "PITH_USER_AGENT"
CONTACT_ENV = "PITH_CONTACT"


def default_user_agent() -> str:
    """Name, version and purpose; a contact address when `PITH_CONTACT` is set."""
    override = os.environ.get(USER_AGENT_ENV)
    if override:
        return override
    contact = os.environ.get(CONTACT_ENV)
    tail = f"; mailto:{contact}" if contact else ""
    return (
        f"pith-pipeline/{__version__} (arXiv metadata harvester for Pith bundles; "
        f"one request per {ARXIV_MIN_INTERVAL:g} s{tail})"
    )


class HasStatus(Protocol):
    @property
    def status_code(self) -> int: ...

    @property
    def headers(self) -> Mapping[str, str]: ...


R = TypeVar("R", bound=HasStatus)


def is_retryable_status(status: int) -> bool:
    return status == 429 or 500 <= status <= 599


def parse_retry_after(value: str | None, *, now: datetime | None = None) -> float | None:
    """Seconds to wait from a `Retry-After` header: delta-seconds or an HTTP-date.

    None when absent or unreadable (the caller then falls back to backoff). A date in
    the past means "now" (0 s).
    """
    if value is None:
        return None
    text = value.strip()
    if not text:
        return None
    if text.isdigit():
        return float(int(text))
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # RFC 9110 dates are GMT
        when = when.replace(tzinfo=UTC)
    current = now or datetime.now(tz=UTC)
    return max(0.0, (when - current).total_seconds())


@dataclass(frozen=True, slots=True, kw_only=True)
class Politeness:
    """Limits for one run. Defaults are arXiv's; tests and local copies lower them."""

    min_interval: float = ARXIV_MIN_INTERVAL
    max_retries: int = 6
    backoff_initial: float = 5.0
    backoff_max: float = 300.0
    #: a `Retry-After` longer than this ends the run with a transient error instead
    max_wait: float = 3600.0
    timeout: float = 60.0
    user_agent: str = field(default_factory=default_user_agent)

    def __post_init__(self) -> None:
        if self.min_interval < 0 or self.backoff_initial <= 0 or self.max_retries < 0:
            raise ValueError("politeness limits must be positive")

    def backoff(self, attempt: int, rng: random.Random) -> float:
        """Jittered exponential backoff: uniform in [b/2, b], b = initial * 2^attempt."""
        b = min(self.backoff_max, self.backoff_initial * (2**attempt))
        return rng.uniform(b / 2, b)


class Gate:
    """Spaces requests and retries them; one per run, shared by every client.

    The interval is measured from the end of one response to the start of the next
    request, so the server never sees two requests closer than `min_interval`. A lock
    serialises requests, which also means one connection at a time.
    """

    def __init__(
        self,
        policy: Politeness | None = None,
        *,
        sleep: Callable[[float], None] = time.sleep,
        monotonic: Callable[[], float] = time.monotonic,
        wallclock: Callable[[], datetime] = lambda: datetime.now(tz=UTC),
        rng: random.Random | None = None,
    ) -> None:
        self.policy = policy or Politeness()
        self._sleep = sleep
        self._monotonic = monotonic
        self._wallclock = wallclock
        self._rng = rng or random.Random()
        self._lock = threading.Lock()
        self._not_before = float("-inf")
        self.requests = 0
        self.retries = 0
        self.waited = 0.0

    def _wait_turn(self) -> None:
        delay = self._not_before - self._monotonic()
        if delay > 0:
            self.waited += delay
            self._sleep(delay)

    def _done(self, extra: float = 0.0) -> None:
        """Called after each response (or failure): nothing may go before this."""
        gap = max(self.policy.min_interval, extra)
        self._not_before = max(self._not_before, self._monotonic() + gap)

    def penalize(self, attempt: int) -> None:
        """Back off before the next request after a response we could not use."""
        with self._lock:
            self._done(self.policy.backoff(attempt, self._rng))
            self.retries += 1

    def send(
        self, request: Callable[[], R], *, what: str, retry_on: tuple[type[BaseException], ...] = ()
    ) -> R:
        """Perform `request` politely; returns the first non-retryable response.

        429 and 5xx are retried after `Retry-After` (seconds or HTTP-date) when given,
        else after jittered exponential backoff; so are the exceptions in `retry_on`
        (timeouts, dropped connections). Gives up with `TransientError` naming `what`.
        """
        p = self.policy
        with self._lock:
            attempt = 0
            while True:
                self._wait_turn()
                self.requests += 1
                try:
                    response = request()
                except retry_on as exc:
                    problem = f"{type(exc).__name__}: {exc}"
                    wait = p.backoff(attempt, self._rng)
                else:
                    status = response.status_code
                    if not is_retryable_status(status):
                        self._done()
                        return response
                    problem = f"HTTP {status}"
                    asked = parse_retry_after(_header(response, "retry-after"), now=self._wallclock())
                    if asked is not None and asked > p.max_wait:
                        self._done()
                        raise TransientError(
                            f"{what}: the server asked us to wait {asked:.0f} s (Retry-After), "
                            f"longer than the limit of {p.max_wait:.0f} s; try again later"
                        )
                    wait = asked if asked is not None else p.backoff(attempt, self._rng)
                if attempt >= p.max_retries:
                    self._done()
                    raise TransientError(
                        f"{what}: {problem}; gave up after {attempt + 1} tries; rerun to resume"
                    )
                log.warning(
                    "%s: %s; retrying in %.1f s (try %d of %d)",
                    what,
                    problem,
                    max(wait, p.min_interval),
                    attempt + 2,
                    p.max_retries + 1,
                )
                self._done(wait)
                self.retries += 1
                attempt += 1


def _header(response: Any, name: str) -> str | None:
    headers = getattr(response, "headers", None)
    if headers is None:
        return None
    value = headers.get(name)  # httpx and requests headers ignore case; a plain dict not
    if value is None:
        value = next((v for k, v in headers.items() if k.lower() == name), None)
    return value if isinstance(value, str) else None
