"""The one date range of the project: `Window`, whole UTC days `[start, end)`.

A source harvests a window, a run owns one, a manifest records one: so it lives
below all of them (sources, runs, the loader), with the one day parser
`parse_day`. The policies around windows (run names, Airflow intervals, backfill
splits, `--from`/`--until`/`--through`) stay in `runs/windows.py`.

Standard library and the error classes only: DAG files import this while the
scheduler parses them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

from pith_pipeline.errors import InputError

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
