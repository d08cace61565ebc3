"""The window of days a run owns, and how runs are named after it: the policies
around `pith_pipeline.window.Window` (command options, Airflow data intervals and
run types, backfill splits, run ids).

Standard library only at import time: DAG files import this while the scheduler
parses them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import UTC, date, datetime, timedelta
from typing import Any

from pith_pipeline.errors import InputError
from pith_pipeline.runs.chunks import MAX_CHUNKS

# public here too: a path of the library that docs/pages/date-ranges.md names
from pith_pipeline.window import Window as Window
from pith_pipeline.window import parse_day as parse_day


def window_from_options(
    from_: str | date | None,
    until: str | date | None,
    *,
    through: str | date | None = None,
    set_spec: str | None = None,
) -> Window:
    """The window of a command's `--from`, `--until` (exclusive) or `--through` (inclusive).

    `--through` is there for ranges thought of by their last day, and for scripts
    written when `ingest --until` was inclusive. The old one-day form
    `--from D --until D` is now empty; its error says what to write instead.
    """
    if until is not None and through is not None:
        raise InputError(
            "give --until (the day after the last, exclusive) or --through (the last day), not both"
        )
    start = None if from_ is None else parse_day(from_, "--from")
    end = None if until is None else parse_day(until, "--until")
    if through is not None:
        end = parse_day(through, "--through") + timedelta(days=1)
    if start is not None and end is not None and end <= start and through is None:
        raise InputError(
            f"--until {end} is not after --from {start}: --until is exclusive (the day after the last); "
            f"for the single day {start} give --until {start + timedelta(days=1)} or --through {start}"
        )
    if start is not None and end is not None and end <= start:
        raise InputError(f"--through {end - timedelta(days=1)} is before --from {start}")
    return Window(start, end, set_spec)


def until_notice(until: str | date | None, window: Window) -> str | None:
    """One line for `ingest --until`, whose meaning changed from inclusive to exclusive."""
    if until is None or window.end is None:
        return None
    last = window.end - timedelta(days=1)
    return (
        f"note: --until {window.end} is exclusive (it used to be inclusive for ingest): "
        f"the last day is {last}; to include {window.end} give --through {window.end}"
    )


def windows_of_days(window: Window, days: int | None) -> list[Window]:
    """The window as consecutive windows of at most `days` days (all of it when None).

    Backfills go window by window, each with its own checkpoint, so a long range is
    never one fragile chain of resumption tokens.
    """
    if not days:
        return [window]
    if days < 1:
        raise InputError(f"--window-days must be at least 1, not {days}")
    start, end = window.bounds("--window-days")
    out = []
    while start < end:
        stop = min(end, start + timedelta(days=days))
        out.append(Window(start, stop, window.set_spec, window.metadata_prefix))
        start = stop
    return out


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
    marked success (it would also block that day for `backfill create`). Today (UTC)
    is refused too, until it is over: its harvest would be incomplete, yet stored as
    the day's complete one, which every later run of the day replays instead of asking
    arXiv again, so the rest of the day would never be published. (Airflow's trigger
    form proposes the trigger time as the logical date, which is today.)
    """
    today = today or datetime.now(tz=UTC).date()
    start, _end = window.bounds(f"window {window.id}")
    if start < ARXIV_FIRST_DAY:
        raise InputError(
            f"window {window.id} starts before arXiv's first day ({ARXIV_FIRST_DAY}); choose a later day"
        )
    if start > today:
        raise InputError(f"window {window.id} starts after today ({today}); nothing to harvest yet")
    if start == today:
        raise InputError(
            f"window {window.id}: {today} is not over yet (UTC), so its harvest would be "
            f"incomplete; run it from {today + timedelta(days=1)} 00:00 UTC"
        )
    return window


#: airflow-core names the backfill member `BACKFILL_JOB`; its value, like the Task SDK's, is "backfill".
_RUN_KIND_ALIASES = {"backfill_job": "backfill"}


def run_kind(run_type: object) -> str:
    """An Airflow run type as its plain value: `manual`, `scheduled`, `backfill`, ...

    Why: the Task SDK's context gives `dag_run.run_type` as a str enum whose `str()` is
    `DagRunType.MANUAL` (airflow-core's enum prints `manual`), and the REST API, the
    database and older code give the plain string. Every form is read here, by the
    enum's value when it has one, else by the name after any `DagRunType.` prefix, so
    a comparison can never silently miss (which made a manual trigger harvest
    yesterday and report success). None (no run) is "".
    """
    if run_type is None:
        return ""
    value = getattr(run_type, "value", run_type)
    text = str(value).strip().lower()
    text = text.removeprefix("dagruntype.")
    return _RUN_KIND_ALIASES.get(text, text)


def window_for_run(
    data_interval_start: datetime | None,
    data_interval_end: datetime | None,
    *,
    logical_date: datetime | None = None,
    run_type: object = None,
    conf: Mapping[str, Any] | None = None,
    today: date | None = None,
) -> Window:
    """The day a `pith_ingest` run owns, for scheduled, backfill and manual runs alike.

    - `conf {"day": "YYYY-MM-DD"}` names it outright (any run type);
    - a manual run with a logical date owns that date's day (UTC): in Airflow 3 a
      manual run's data interval comes from the trigger time, so
      `airflow dags trigger pith_ingest --logical-date 2019-09-26` would otherwise
      harvest yesterday instead. `run_type` may be Airflow's enum (either package's)
      or its string, in any of the forms `run_kind` reads;
    - otherwise (scheduled and backfill runs) the data interval, which must be whole
      days: for the daily timetable it starts at the logical date, so every kind of
      run owns the day of its logical date.
    Days before arXiv's first, today (not over yet) or later fail loudly.
    """
    conf = conf or {}
    if conf.get("day") is not None:
        day = parse_day(str(conf["day"]), "conf day")
        window = Window(day, day + timedelta(days=1))
    elif run_kind(run_type) == "manual" and logical_date is not None:
        day = parse_day(logical_date, "logical_date")
        window = Window(day, day + timedelta(days=1))
    else:
        if data_interval_start is None or data_interval_end is None:
            raise InputError(
                "this run has neither a logical date nor a data interval: trigger it with "
                '--logical-date YYYY-MM-DD or --conf \'{"day": "YYYY-MM-DD"}\''
            )
        window = window_from_interval(data_interval_start, data_interval_end)
    return check_window_dates(window, today=today)


def split_windows(window: Window, max_windows: int = MAX_CHUNKS) -> list[Window]:
    """Day windows, merged into longer ones when there would be more than `max_windows`."""
    start, end = window.bounds("a backfill")
    n_days = (end - start).days
    step = max(1, math.ceil(n_days / max_windows))
    out = []
    d = start
    while d < end:
        out.append(Window(d, min(end, d + timedelta(days=step))))
        d += timedelta(days=step)
    return out


def run_id_for(kind: str, window: Window) -> str:
    """Deterministic per window, so a re-run finds (and rewrites identically) its files."""
    return f"{kind}-{window.id}"
