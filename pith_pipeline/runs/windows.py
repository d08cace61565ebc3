"""The window of days a run owns, and how runs are named after it.

Standard library only at import time: DAG files import this while the scheduler
parses them.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

from pith_pipeline.errors import InputError
from pith_pipeline.runs.chunks import MAX_CHUNKS


@dataclass(frozen=True, slots=True, order=True)
class Window:
    """OAI datestamps `[start, end)` in whole UTC days."""

    start: date
    end: date

    def __post_init__(self) -> None:
        if self.end <= self.start:
            raise InputError(f"empty window: until {self.end} is not after from {self.start}")

    @property
    def id(self) -> str:
        if self.end - self.start == timedelta(days=1):
            return self.start.isoformat()
        return f"{self.start.isoformat()}--{self.end.isoformat()}"

    @property
    def oai_from(self) -> str:
        """OAI-PMH `from` (inclusive, day granularity)."""
        return self.start.isoformat()

    @property
    def oai_until(self) -> str:
        """OAI-PMH `until` is inclusive: the window's last day."""
        return (self.end - timedelta(days=1)).isoformat()

    def days(self) -> Iterator[Window]:
        d = self.start
        while d < self.end:
            yield Window(d, d + timedelta(days=1))
            d += timedelta(days=1)

    def to_json(self) -> dict[str, str]:
        return {"from": self.start.isoformat(), "until": self.end.isoformat()}

    @classmethod
    def from_json(cls, obj: Mapping[str, str]) -> Window:
        return cls(parse_day(obj["from"], "from"), parse_day(obj["until"], "until"))


def parse_day(value: str | date | datetime, what: str) -> date:
    """`2024-01-31` (or a datetime, taken in UTC) -> a date; errors name the parameter."""
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise InputError(f"{what}: datetime {value} has no time zone")
        return value.astimezone(UTC).date()
    if isinstance(value, date):
        return value
    try:
        return date.fromisoformat(str(value).strip()[:10])
    except ValueError:
        raise InputError(f"{what}: not a date YYYY-MM-DD: {value!r}") from None


def window_from_interval(start: datetime, end: datetime) -> Window:
    """The window an Airflow data interval owns (days; both ends must be midnight UTC)."""
    s, e = start.astimezone(UTC), end.astimezone(UTC)
    for name, dt in (("data_interval_start", s), ("data_interval_end", e)):
        if (dt.hour, dt.minute, dt.second, dt.microsecond) != (0, 0, 0, 0):
            raise InputError(
                f"{name} {dt.isoformat()} is not midnight UTC; OAI-PMH "
                "windows are whole days (use the daily timetable)"
            )
    return Window(s.date(), e.date())


#: arXiv's first day: no window may start before it.
ARXIV_FIRST_DAY = date(1991, 8, 14)


def check_window_dates(window: Window, *, today: date | None = None) -> Window:
    """Refuse windows arXiv cannot have data for, loudly, instead of doing nothing.

    Why: a run that harvested nothing because its day was out of range must not be
    marked success (it would also block that day for `backfill create`).
    """
    today = today or datetime.now(tz=UTC).date()
    if window.start < ARXIV_FIRST_DAY:
        raise InputError(
            f"window {window.id} starts before arXiv's first day ({ARXIV_FIRST_DAY}); choose a later day"
        )
    if window.start > today:
        raise InputError(f"window {window.id} starts after today ({today}); nothing to harvest yet")
    return window


def window_for_run(
    data_interval_start: datetime | None,
    data_interval_end: datetime | None,
    *,
    logical_date: datetime | None = None,
    run_type: str | None = None,
    conf: Mapping[str, Any] | None = None,
    today: date | None = None,
) -> Window:
    """The day a `pith_ingest` run owns, for scheduled, backfill and manual runs alike.

    - `conf {"day": "YYYY-MM-DD"}` names it outright (any run type);
    - a manual run with a logical date owns that date's day: in Airflow 3 a manual
      run's data interval comes from the trigger time, so
      `airflow dags trigger pith_ingest --logical-date 2019-09-26` would otherwise
      harvest yesterday instead;
    - otherwise the data interval, which must be whole days.
    Days before arXiv's first or after today fail loudly.
    """
    conf = conf or {}
    if conf.get("day") is not None:
        text = str(conf["day"])
        try:
            day = date.fromisoformat(text)
        except ValueError:
            raise InputError(f"conf day {text!r}: expected YYYY-MM-DD") from None
        window = Window(day, day + timedelta(days=1))
    elif run_type == "manual" and logical_date is not None:
        day = logical_date.astimezone(UTC).date()
        window = Window(day, day + timedelta(days=1))
    else:
        if data_interval_start is None or data_interval_end is None:
            raise InputError('this run has no data interval; trigger it with conf {"day": "YYYY-MM-DD"}')
        window = window_from_interval(data_interval_start, data_interval_end)
    return check_window_dates(window, today=today)


def split_windows(window: Window, max_windows: int = MAX_CHUNKS) -> list[Window]:
    """Day windows, merged into longer ones when there would be more than `max_windows`."""
    n_days = (window.end - window.start).days
    step = max(1, math.ceil(n_days / max_windows))
    out = []
    d = window.start
    while d < window.end:
        out.append(Window(d, min(window.end, d + timedelta(days=step))))
        d += timedelta(days=step)
    return out


def run_id_for(kind: str, window: Window) -> str:
    """Deterministic per window, so a re-run finds (and rewrites identically) its files."""
    return f"{kind}-{window.id}"
