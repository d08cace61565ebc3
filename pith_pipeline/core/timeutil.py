"""Timestamps as the format writes them, and the clock the builder reads.

`SOURCE_DATE_EPOCH` (reproducible-builds convention) pins every timestamp the
builder writes to one instant, so two builds of the same input are byte-identical.
"""

from __future__ import annotations

import email.utils
import os
import re
from collections.abc import Callable
from datetime import UTC, datetime

Clock = Callable[[], datetime]

_ISO_SECONDS = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")
_ISO_MICROS = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$")
_DATE_ONLY = re.compile(r"^\s*(?:[A-Za-z]{3},\s*)?(\d{1,2})\s+([A-Za-z]{3})\s+(\d{4})\s*$")


def system_clock() -> datetime:
    """Now, or SOURCE_DATE_EPOCH when it is set."""
    sde = os.environ.get("SOURCE_DATE_EPOCH")
    if sde:
        return datetime.fromtimestamp(int(sde), tz=UTC)
    return datetime.now(tz=UTC)


def iso_seconds(dt: datetime) -> str:
    """`2019-09-24T19:40:59Z`: created_at, submitted_at, built_at."""
    return dt.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def iso_micros(dt: datetime) -> str:
    """`2026-08-17T16:31:38.452329Z`: signed_at, first_computed_at, last_reissued_at."""
    return dt.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def is_iso_seconds(text: str) -> bool:
    return bool(_ISO_SECONDS.match(text))


def is_iso_micros(text: str) -> bool:
    return bool(_ISO_MICROS.match(text))


def parse_iso(text: str) -> datetime:
    """Parse a `...Z` timestamp written by this format."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)


def parse_rfc2822(text: str) -> datetime:
    """arXiv's version dates (`Tue, 24 Sep 2019 19:40:59 GMT`), as UTC.

    A few 1990s records carry only a date; they get midnight UTC. Raises ValueError
    on anything else.
    """
    if not isinstance(text, str) or not text.strip():
        raise ValueError("empty date")
    try:
        dt = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        m = _DATE_ONLY.match(text)
        if not m:
            raise ValueError(f"not an RFC 2822 date: {text!r}") from None
        try:
            dt = datetime.strptime(" ".join(m.groups()), "%d %b %Y")
        except ValueError:
            raise ValueError(f"not an RFC 2822 date: {text!r}") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.astimezone(UTC)


def format_rfc2822(dt: datetime) -> str:
    return email.utils.format_datetime(dt.astimezone(UTC), usegmt=True)
