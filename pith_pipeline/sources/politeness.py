"""How we ask arXiv for anything: the one place that enforces politeness.

arXiv asks bulk users for at most one request every 3 seconds, one connection at a
time, a descriptive User-Agent, and to honour `Retry-After`. Every request this
package makes to arXiv (OAI-PMH pages, `GetRecord`, the Atom search API through the
`arxiv` package) goes through one `Gate` per run, so the limit holds across all of
them and cannot be forgotten by a new caller. The gate is transport-agnostic: it
takes a zero-argument callable that performs one HTTP request and returns anything
with `status_code` and `headers` (httpx and requests responses both do).

Across runs and processes: a backfill opens a client per window, Airflow runs mapped
harvests in separate task processes, and an operator may start a CLI backfill beside
the daily DAG. So the gate also takes its turn from a small state file per endpoint
(the `politeness_dir` setting, default `~/.cache/pith-pipeline/politeness`), under an
exclusive `flock` held for the request: the file holds the wall-clock time before
which nobody on this machine may ask that endpoint again. Machines that harvest the
same endpoint should share that directory (or, better, one harvesting machine).
"""

from __future__ import annotations

import email.utils
import errno
import fcntl
import hashlib
import logging
import math
import os
import random
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol, TypeVar
from urllib.parse import urlsplit

from pith_pipeline import __version__
from pith_pipeline.config import Settings
from pith_pipeline.errors import TransientError

log = logging.getLogger(__name__)

#: arXiv's published limit: one request every 3 seconds.
ARXIV_MIN_INTERVAL = 3.0
#: a delta-seconds `Retry-After` with more digits than this is taken as "forever"
_RETRY_AFTER_DIGITS = 15


def politeness_dir(explicit: str | Path | None = None) -> Path:
    """Where the per-endpoint turn files live (shared by every process of a user):
    `explicit` (the `politeness_dir` setting), else the user's cache directory."""
    if explicit:
        return Path(explicit)
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "pith-pipeline" / "politeness"


class SharedTurn:
    """One endpoint's turn across processes: an flock'ed file holding `not_before`.

    `take()` blocks until no other process is asking the endpoint and its last
    response is at least the agreed gap ago; `give(gap)` records when the next request
    may start and lets the next process go. Wall-clock time, because monotonic clocks
    are not shared between processes.
    """

    def __init__(self, endpoint: str, directory: Path | None = None) -> None:
        # one turn per host and port: arXiv's OAI-PMH and search API share a host and
        # its limit
        parts = urlsplit(endpoint)
        host = f"{parts.hostname or 'local'}-{parts.port or ''}"
        safe = "".join(c if c.isalnum() or c in "-." else "_" for c in host)[:80]
        digest = hashlib.sha256(host.encode("utf-8")).hexdigest()[:8]
        self.path = (directory or politeness_dir()) / f"{safe}-{digest}.turn"
        self._fd: int | None = None

    def take(self, sleep: Callable[[float], None], wallclock: Callable[[], float] = time.time) -> float:
        """Wait for our turn; returns the seconds waited for other processes."""
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            raw = os.pread(fd, 64, 0).decode("ascii", "replace").strip()
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        try:
            not_before = float(raw) if raw else 0.0
        except ValueError:
            not_before = 0.0
        delay = not_before - wallclock()
        if delay > 0:
            sleep(min(delay, 3600.0))
            return delay
        return 0.0

    def give(self, gap: float, wallclock: Callable[[], float] = time.time) -> None:
        """Nobody asks the endpoint again before `gap` seconds from now."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            data = f"{wallclock() + max(0.0, gap):.6f}\n".encode("ascii")
            os.ftruncate(fd, 0)
            os.pwrite(fd, data, 0)
        except OSError as exc:  # the in-process gate still holds; say why the shared one did not
            if exc.errno != errno.EINTR:
                log.warning("could not record the request time in %s: %s", self.path, exc)
        finally:
            os.close(fd)  # closing releases the flock


def default_user_agent(user_agent: str | None = None, contact: str | None = None) -> str:
    """`user_agent` (the setting) when given, else name, version and purpose, with the
    `contact` address when given."""
    if user_agent:
        return user_agent
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
    the past means "now" (0 s); a number too long to hold is `math.inf`.
    """
    if value is None:
        return None
    text = value.strip()
    if not text:
        return None
    if text.isascii() and text.isdigit():  # `"²".isdigit()` is true too
        # more digits than any real wait (or than float and Python's int parsing take):
        # infinitely long, which the gate refuses as longer than its `max_wait`
        return float(int(text)) if len(text) <= _RETRY_AFTER_DIGITS else math.inf
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
    #: the directory of the turn files shared between processes (None: `politeness_dir()`)
    shared_dir: Path | None = None

    def __post_init__(self) -> None:
        if self.min_interval < 0 or self.backoff_initial <= 0 or self.max_retries < 0:
            raise ValueError("politeness limits must be positive")

    @classmethod
    def of(cls, settings: Settings, **limits: Any) -> Politeness:
        """The run's limits from its settings: `user_agent` / `contact`, `politeness_dir`
        and `oai_min_interval` (unset: arXiv's policy); `limits` override them."""
        base: dict[str, Any] = {
            "user_agent": default_user_agent(settings.user_agent, settings.contact),
            "shared_dir": Path(settings.politeness_dir) if settings.politeness_dir else None,
        }
        if settings.oai_min_interval is not None:
            base["min_interval"] = settings.oai_min_interval
        return cls(**{**base, **limits})

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
        shared_dir: Path | None = None,
    ) -> None:
        self.policy = policy or Politeness()
        self._sleep = sleep
        self._monotonic = monotonic
        self._wallclock = wallclock
        self._rng = rng or random.Random()
        self._lock = threading.Lock()
        self._not_before = float("-inf")
        self._shared: dict[str, SharedTurn] = {}
        self.shared_dir = shared_dir or self.policy.shared_dir
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

    def _turn(self, endpoint: str | None) -> SharedTurn | None:
        if endpoint is None:
            return None
        turn = self._shared.get(endpoint)
        if turn is None:
            turn = self._shared[endpoint] = SharedTurn(endpoint, self.shared_dir)
        return turn

    def send(
        self,
        request: Callable[[], R],
        *,
        what: str,
        retry_on: tuple[type[BaseException], ...] = (),
        endpoint: str | None = None,
    ) -> R:
        """Perform `request` politely; returns the first non-retryable response.

        429 and 5xx are retried after `Retry-After` (seconds or HTTP-date) when given,
        else after jittered exponential backoff; so are the exceptions in `retry_on`
        (timeouts, dropped connections). Gives up with `TransientError` naming `what`.
        `endpoint` (the URL asked): the turn is also shared with every other process
        of this machine asking the same endpoint (see the module docstring).
        """
        p = self.policy
        turn = self._turn(endpoint)
        with self._lock:
            attempt = 0
            while True:
                if turn is not None:
                    self.waited += turn.take(self._sleep)
                gap = p.min_interval  # what the next request, in any process, waits
                try:
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
                                f"{what}: the server asked us to wait {_seconds(asked)} (Retry-After), "
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
                    gap = max(wait, p.min_interval)
                    self.retries += 1
                    attempt += 1
                finally:
                    if turn is not None:
                        turn.give(gap)


def _seconds(value: float) -> str:
    """A wait for a message: `86400 s`, or for an unbounded one, `forever`."""
    return f"{value:.0f} s" if math.isfinite(value) else "forever"


def _header(response: Any, name: str) -> str | None:
    headers = getattr(response, "headers", None)
    if headers is None:
        return None
    value = headers.get(name)  # httpx and requests headers ignore case; a plain dict not
    if value is None:
        value = next((v for k, v in headers.items() if k.lower() == name), None)
    return value if isinstance(value, str) else None
