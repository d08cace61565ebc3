"""The politeness gate, on a fake clock: intervals, Retry-After in both forms, backoff."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from itertools import pairwise
from pathlib import Path

import pytest

from pith_pipeline.config import load_settings
from pith_pipeline.errors import TransientError
from pith_pipeline.sources.politeness import (
    ARXIV_MIN_INTERVAL,
    Gate,
    Politeness,
    default_user_agent,
    parse_retry_after,
)

NOW = datetime(2026, 6, 30, 12, 0, 0, tzinfo=UTC)


def test_production_defaults_are_arxivs() -> None:
    p = Politeness()
    assert ARXIV_MIN_INTERVAL == 3.0 and p.min_interval == 3.0
    assert p.max_retries >= 3 and p.timeout > 0
    assert p.user_agent.startswith("pith-pipeline/") and "harvester" in p.user_agent


def test_user_agent_contact() -> None:
    assert "mailto:ops@example.org" in default_user_agent(contact="ops@example.org")
    assert default_user_agent("mine/1.0", contact="ops@example.org") == "mine/1.0"


def test_politeness_comes_from_the_settings(tmp_path: Path) -> None:
    """The run's settings, resolved at the edge, give the User-Agent, the shared turn
    directory and the interval; the module reads no environment."""
    env = {
        "PITH_CONTACT": "ops@example.org",
        "PITH_POLITENESS_DIR": str(tmp_path / "turns"),
        "PITH_OAI_MIN_INTERVAL": "0.5",
    }
    p = Politeness.of(load_settings(env=env))
    assert "mailto:ops@example.org" in p.user_agent and p.min_interval == 0.5
    assert p.shared_dir == tmp_path / "turns"
    assert Gate(p).shared_dir == tmp_path / "turns"
    assert (
        Politeness.of(load_settings(env={"PITH_USER_AGENT": "ua/2"}), min_interval=0.0).user_agent == "ua/2"
    )
    assert Politeness.of(load_settings(env={})).min_interval == ARXIV_MIN_INTERVAL
    assert "mailto" not in Politeness().user_agent  # no settings: none of the environment's


def test_parse_retry_after_both_forms() -> None:
    assert parse_retry_after("120", now=NOW) == 120.0
    later = format_datetime(NOW + timedelta(seconds=90), usegmt=True)
    assert later.endswith("GMT")
    assert parse_retry_after(later, now=NOW) == 90.0
    assert parse_retry_after("Tue, 30 Jun 2026 12:01:30 GMT", now=NOW) == 90.0
    assert parse_retry_after(format_datetime(NOW - timedelta(hours=1), usegmt=True), now=NOW) == 0.0
    assert parse_retry_after(None) is None
    assert parse_retry_after("soon") is None
    assert parse_retry_after("  ") is None


@pytest.mark.parametrize("value", ["\xb2", "1\xb9", "\u0661\u0662", "\uff11", "+5", "1_0"])
def test_retry_after_seconds_are_ascii_digits_only(value: str) -> None:
    """Delta-seconds are ASCII digits (RFC 9110). `str.isdigit` also takes `²` (a
    latin-1 header byte, on which `int` then raised out of the retry loop) and other
    scripts' digits; such a header is unreadable, and the caller backs off as usual."""
    assert parse_retry_after(value, now=NOW) is None


@dataclass
class Resp:
    status_code: int
    headers: dict[str, str] = field(default_factory=dict)


class FakeTime:
    def __init__(self) -> None:
        self.t = 1000.0
        self.sent: list[float] = []
        self.sleeps: list[float] = []

    def sleep(self, s: float) -> None:
        self.sleeps.append(s)
        self.t += s

    def monotonic(self) -> float:
        return self.t

    def wall(self) -> datetime:
        return NOW + timedelta(seconds=self.t - 1000.0)


def make_gate(ft: FakeTime, **kw: float) -> Gate:
    return Gate(
        Politeness(**kw),
        sleep=ft.sleep,
        monotonic=ft.monotonic,  # type: ignore[arg-type]
        wallclock=ft.wall,
        rng=random.Random(7),
    )


def test_requests_are_spaced_by_the_interval() -> None:
    ft = FakeTime()
    gate = make_gate(ft)

    def req() -> Resp:
        ft.sent.append(ft.t)
        ft.t += 0.4  # the response takes 0.4 s
        return Resp(200)

    for _ in range(4):
        assert gate.send(req, what="t").status_code == 200
    gaps = [b - a for a, b in pairwise(ft.sent)]
    assert all(g >= 3.0 + 0.4 - 1e-9 for g in gaps), gaps  # 3 s after the previous response


def test_retry_after_seconds_and_http_date_are_honoured() -> None:
    ft = FakeTime()
    gate = make_gate(ft, min_interval=3.0)
    script = [
        Resp(503, {"Retry-After": "20"}),
        Resp(429, {"Retry-After": format_datetime(NOW + timedelta(seconds=100), usegmt=True)}),
        Resp(200),
    ]

    def req() -> Resp:
        ft.sent.append(ft.t)
        return script.pop(0)

    assert gate.send(req, what="t").status_code == 200
    assert ft.sent[1] - ft.sent[0] == pytest.approx(20.0)
    # the date was 100 s after the clock's start; the second request went at +20 s
    assert ft.sent[2] - 1000.0 == pytest.approx(100.0)
    assert gate.retries == 2


def test_jittered_exponential_backoff_without_retry_after_then_give_up() -> None:
    ft = FakeTime()
    gate = make_gate(ft, min_interval=0.0, backoff_initial=2.0, max_retries=3)

    def req() -> Resp:
        ft.sent.append(ft.t)
        return Resp(502)

    with pytest.raises(TransientError) as e:
        gate.send(req, what="OAI-PMH ListRecords")
    assert "HTTP 502" in str(e.value) and "4 tries" in str(e.value)
    waits = [b - a for a, b in pairwise(ft.sent)]
    for attempt, w in enumerate(waits):
        top = 2.0 * 2**attempt
        assert top / 2 <= w <= top
    assert len(set(waits)) == len(waits)


def test_timeouts_are_retried_and_other_errors_are_not() -> None:
    ft = FakeTime()
    gate = make_gate(ft, min_interval=0.5, backoff_initial=1.0)
    calls = []

    def flaky() -> Resp:
        calls.append(ft.t)
        if len(calls) < 3:
            raise TimeoutError("read timed out")
        return Resp(200)

    assert gate.send(flaky, what="t", retry_on=(TimeoutError,)).status_code == 200
    assert len(calls) == 3

    def broken() -> Resp:
        raise KeyError("bug")

    with pytest.raises(KeyError):
        gate.send(broken, what="t", retry_on=(TimeoutError,))


def test_retry_after_longer_than_the_limit_is_a_transient_error() -> None:
    ft = FakeTime()
    gate = make_gate(ft, max_wait=60.0)
    with pytest.raises(TransientError) as e:
        gate.send(lambda: Resp(503, {"Retry-After": "86400"}), what="OAI")
    assert "86400" in str(e.value) and ft.sleeps == []


def test_client_errors_are_returned_not_retried() -> None:
    ft = FakeTime()
    gate = make_gate(ft)
    assert gate.send(lambda: Resp(404), what="t").status_code == 404
    assert gate.requests == 1 and gate.retries == 0


@pytest.mark.parametrize("value", ["9" * 400, "9" * 5000, "1" + "0" * 20])
def test_a_retry_after_too_large_for_a_number_is_a_transient_error(value: str) -> None:
    """Digits beyond a float (or Python's 4300-digit int limit) raised OverflowError or
    ValueError out of the gate, a traceback instead of one line."""
    ft = FakeTime()
    gate = make_gate(ft, max_wait=60.0)
    with pytest.raises(TransientError) as e:
        gate.send(lambda: Resp(503, {"Retry-After": value}), what="OAI")
    assert "Retry-After" in str(e.value) and len(str(e.value)) < 300 and ft.sleeps == []


@pytest.mark.parametrize("value", ["\u00b2", "\u0663", "-5", "1e9", "1.5", "0x10", "+3"])
def test_retry_after_that_is_not_ascii_delta_seconds_falls_back_to_backoff(value: str) -> None:
    """Only ASCII digits are delta-seconds (RFC 9110); `"²".isdigit()` is true and
    `int("²")` raised ValueError."""
    assert parse_retry_after(value, now=NOW) is None
