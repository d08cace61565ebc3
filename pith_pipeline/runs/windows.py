"""The window of days a run owns, and how runs are named after it.

Standard library only at import time: DAG files import this while the scheduler
parses them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

from pith_pipeline.errors import InputError
from pith_pipeline.runs.chunks import MAX_CHUNKS

#: OAI-PMH metadata format harvested: arXiv's full record with every version.
METADATA_PREFIX = "arXivRaw"
_DAY = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
_SET_SPEC = re.compile(r"[A-Za-z0-9\-:.]+")


@dataclass(frozen=True, slots=True, order=True)
class Window:
    """Whole UTC days `[start, end)`: `start` inclusive, `end` exclusive.

    The one date range of the project: `--from`/`--until` of every command, the
    DAGs' `from`/`until`, run manifests and the library all mean `[from, until)`,
    like a Python range, so consecutive windows share their boundary day without
    overlap (`[a, b)` then `[b, c)`) and a day is `[d, d+1)`. Why not inclusive:
    Airflow's data intervals and the backfill DAG were half-open already, and
    splitting a range needs no "+1 day" arithmetic. OAI-PMH's own `until` is
    inclusive; `oai_until` converts at that one boundary. An open end (None) means
    from arXiv's earliest record, or up to the latest. Days are matched against a
    record's datestamp, its last change (docs/pages/date-ranges.md).
    """

    start: date | None = None
    end: date | None = None
    #: OAI set (e.g. cs, physics:hep-th), for harvests restricted to one.
    set_spec: str | None = None
    metadata_prefix: str = METADATA_PREFIX

    def __post_init__(self) -> None:
        if self.start is not None and self.end is not None and self.end <= self.start:
            raise InputError(f"empty window: until {self.end} is not after from {self.start}")
        if self.set_spec is not None and not _SET_SPEC.fullmatch(self.set_spec):
            raise InputError(f"not an OAI set spec: {self.set_spec!r} (e.g. cs, physics:hep-th)")

    @property
    def id(self) -> str:
        """The run-id part: `YYYY-MM-DD` for one day, else `FROM--UNTIL` (until exclusive)."""
        if self.start is None or self.end is None:
            return self.label
        if self.end - self.start == timedelta(days=1):
            return self.start.isoformat()
        return f"{self.start.isoformat()}--{self.end.isoformat()}"

    @property
    def oai_from(self) -> str | None:
        """OAI-PMH `from` (inclusive, day granularity)."""
        return None if self.start is None else self.start.isoformat()

    @property
    def oai_until(self) -> str | None:
        """OAI-PMH `until` is inclusive: the window's last day."""
        return None if self.end is None else (self.end - timedelta(days=1)).isoformat()

    @property
    def label(self) -> str:
        """Where the harvest of this window is stored: named after the OAI request
        (`FROM_LASTDAY[_set]`), as it always was, so earlier raw pages are found."""
        base = f"{self.oai_from or 'earliest'}_{self.oai_until or 'latest'}"
        return f"{base}_{self.set_spec.replace(':', '~')}" if self.set_spec else base

    def params(self) -> dict[str, str]:
        """The OAI-PMH `ListRecords` query for this window."""
        q = {"verb": "ListRecords", "metadataPrefix": self.metadata_prefix}
        if self.oai_from:
            q["from"] = self.oai_from
        if self.oai_until:
            q["until"] = self.oai_until
        if self.set_spec:
            q["set"] = self.set_spec
        return q

    def oai_json(self) -> dict[str, Any]:
        """The OAI request, as harvest checkpoints record it (`until` inclusive)."""
        return {
            "from": self.oai_from,
            "until": self.oai_until,
            "set": self.set_spec,
            "metadataPrefix": self.metadata_prefix,
        }

    def contains(self, day: date) -> bool:
        return (self.start is None or self.start <= day) and (self.end is None or day < self.end)

    def days(self) -> Iterator[Window]:
        start, end = self.bounds("days")
        d = start
        while d < end:
            yield Window(d, d + timedelta(days=1), self.set_spec, self.metadata_prefix)
            d += timedelta(days=1)

    def bounds(self, what: str) -> tuple[date, date]:
        """(start, end), refused by name for a window open at either end."""
        if self.start is None or self.end is None:
            raise InputError(f"{what} needs both --from and --until")
        return self.start, self.end

    def to_json(self) -> dict[str, str]:
        """`{"from", "until"}` of a run (until exclusive), for run manifests and XComs."""
        start, end = self.bounds("a run's window")
        return {"from": start.isoformat(), "until": end.isoformat()}

    @classmethod
    def from_json(cls, obj: Mapping[str, str]) -> Window:
        return cls(parse_day(obj["from"], "from"), parse_day(obj["until"], "until"))


def parse_day(value: str | date | datetime, what: str) -> date:
    """`2024-01-31` (or a datetime, taken in UTC) -> a date; errors name the option.

    The one day parser of the project: every `--from`/`--until`/`--through`, DAG
    param and conf goes through it, so they accept and refuse the same text.
    """
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise InputError(f"{what}: datetime {value} has no time zone")
        return value.astimezone(UTC).date()
    if isinstance(value, date):
        return value
    text = str(value)
    try:
        if _DAY.fullmatch(text):
            return date.fromisoformat(text)
        if _DAY.fullmatch(text[:10]) and text[10:11] in ("T", " "):
            return parse_day(datetime.fromisoformat(text), what)
    except ValueError:
        pass
    raise InputError(f"{what} must be a date YYYY-MM-DD, not {value!r}")


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
