"""Timestamps as the format writes them, and the `Clock` type the builder is given.

The core never reads the time or the environment itself: callers pass a clock.
`pith_pipeline.clock.system_clock` is the one the commands use (it honours
`SOURCE_DATE_EPOCH`); tests pass fixed ones.
"""

from __future__ import annotations

import email.utils
import re
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta

from pith_pipeline.core.text import shown

Clock = Callable[[], datetime]

# Full matches with ASCII classes only: `$` would admit a trailing newline and `\d`
# non-ASCII digits, both of which turn hostile input into look-alike values.
_ISO_SECONDS = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z", re.ASCII)
_ISO_MICROS = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{6}Z", re.ASCII)
_ISO_DAY = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})", re.ASCII)
_DAYS = "Mon|Tue|Wed|Thu|Fri|Sat|Sun"
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
# arXiv's version dates: `Tue, 24 Sep 2019 19:40:59 GMT`, a few 1990s ones a bare date.
# The year has exactly four digits (email.utils reads `0001` and `01` as 2001).
_RFC2822 = re.compile(
    rf"(?:({_DAYS}),\s*)?([0-9]{{1,2}})\s+({'|'.join(_MONTHS)})\s+([0-9]{{4}})"
    r"(?:\s+([0-9]{2}):([0-9]{2})(?::([0-9]{2}))?\s+(GMT|UT|UTC|Z|[+-][0-9]{4}))?",
    re.ASCII | re.IGNORECASE,
)


def epoch_clock(seconds: int) -> Clock:
    """A clock stopped at `seconds` after the Unix epoch (reproducible builds)."""
    instant = datetime.fromtimestamp(seconds, tz=UTC)
    return lambda: instant


def iso_seconds(dt: datetime) -> str:
    """`2019-09-24T19:40:59Z`: created_at, submitted_at, built_at."""
    return dt.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def iso_micros(dt: datetime) -> str:
    """`2026-08-17T16:31:38.452329Z`: signed_at, first_computed_at, last_reissued_at."""
    return dt.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def is_iso_seconds(text: str) -> bool:
    return bool(_ISO_SECONDS.fullmatch(text))


def is_iso_micros(text: str) -> bool:
    return bool(_ISO_MICROS.fullmatch(text))


def parse_iso_day(text: str) -> date:
    """A `YYYY-MM-DD` day, strictly: four ASCII digits of year, nothing around it."""
    if not isinstance(text, str) or not _ISO_DAY.fullmatch(text):
        raise ValueError(f"not a date YYYY-MM-DD: {shown(text)}")
    return date.fromisoformat(text)


def parse_iso(text: str) -> datetime:
    """Parse a `...Z` timestamp written by this format."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)


def parse_rfc2822(text: str) -> datetime:
    """arXiv's version dates (`Tue, 24 Sep 2019 19:40:59 GMT`), as UTC.

    A few 1990s records carry only a date; they get midnight UTC. Strict: the whole
    text must match (surrounding blanks aside), digits are ASCII, the year has four
    of them, a weekday given is the date's and an offset is at most 23:59. Raises
    ValueError on anything else.
    """
    if not isinstance(text, str) or not text.strip():
        raise ValueError("empty date")
    m = _RFC2822.fullmatch(text.strip(" \t"))
    if not m:
        raise ValueError(f"not an RFC 2822 date: {shown(text)}")
    weekday, day, mon, year, hh, mm, ss, zone = m.groups()
    try:
        dt = datetime(
            int(year),
            _MONTHS.index(mon.capitalize()) + 1,
            int(day),
            int(hh or 0),
            int(mm or 0),
            int(ss or 0),
            tzinfo=UTC,
        )
    except ValueError:
        raise ValueError(f"not an RFC 2822 date: {shown(text)}") from None
    # a weekday that is not the date's, or an offset no clock has (`+2500`, `+0060`),
    # says two things at once: refused rather than one part silently dropped
    if weekday and _DAYS.split("|").index(weekday.capitalize()) != dt.weekday():
        raise ValueError(f"not an RFC 2822 date: {shown(text)} ({day} {mon} {year} is not a {weekday})")
    if zone and zone[0] in "+-":
        if int(zone[1:3]) > 23 or int(zone[3:5]) > 59:
            raise ValueError(f"not an RFC 2822 date: {shown(text)} (no time zone is {zone})")
        offset = (int(zone[1:3]) * 60 + int(zone[3:5])) * (1 if zone[0] == "+" else -1)
        dt -= timedelta(minutes=offset)
    return dt


def format_rfc2822(dt: datetime) -> str:
    return email.utils.format_datetime(dt.astimezone(UTC), usegmt=True)
