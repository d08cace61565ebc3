"""The typed arXiv record, in the field layout of arXiv's public metadata snapshot.

The same JSON-lines layout (`id, submitter, authors, title, comments, journal-ref,
doi, report-no, categories, license, abstract, versions, update_date,
authors_parsed`) is read from the bulk snapshot, from our sample and from the
OAI-PMH parser, so one model and one set of checks serve every source. A record
checks itself when built: bad input raises `InputError` naming record and field.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import Any

from pith_pipeline.core.limits import DEFAULT_LIMITS, InputLimits, utf8_size
from pith_pipeline.core.text import collapse_ws, shown
from pith_pipeline.core.timeutil import parse_iso_day, parse_rfc2822
from pith_pipeline.errors import InputError

# Identifiers, categories and version labels come from outside: every pattern is used
# with `fullmatch` and ASCII classes only (`$` admits a trailing newline, `\d` any
# Unicode digit), so no look-alike value becomes an alias, a key or a file name.
# The year and month are a real month of the scheme's time: new-style ids began in
# April 2007 (`0704.0001`), old-style ones (`archive/YYMMNNN`) ran from 1991 to March
# 2007; `2113.00021` or `hep-th/9900001` name no paper. The number within the month
# has exactly four digits up to 1412 and exactly five from 1501 (arXiv's scheme), and
# starts at 1: `1412.00001` or `1501.0001` would be a second spelling of a real paper's
# id (or of none), so a look-alike alias. This is the one id rule: every reader of ids
# (sources, CLI, pointers) calls `is_arxiv_id`.
NEW_STYLE_ID = re.compile(
    r"(?:(?:07(?:0[4-9]|1[0-2])|(?:0[89]|1[0-4])(?:0[1-9]|1[0-2]))\.(?!0000)[0-9]{4}"
    r"|(?:1[5-9]|[2-9][0-9])(?:0[1-9]|1[0-2])\.(?!00000)[0-9]{5})",
    re.ASCII,
)
OLD_STYLE_ID = re.compile(
    r"[a-z][a-z\-]*(?:\.[A-Z]{2})?/(?:(?:9[1-9]|0[0-6])(?:0[1-9]|1[0-2])|070[1-3])(?!000)[0-9]{3}", re.ASCII
)
CATEGORY = re.compile(r"[a-z][a-z\-]*(\.[A-Za-z][A-Za-z\-]*)?", re.ASCII)
#: `v1` .. `v9999` (InputLimits.max_version): no leading zero, no sign, ASCII digits
VERSION = re.compile(r"v([1-9][0-9]{0,3})", re.ASCII)
_PARENS = re.compile(r"\([^()]*\)")
_AND_SPLIT = re.compile(r"\s*,\s*and\s+|\s*,\s*|\s+and\s+")

SNAPSHOT_FIELDS = (
    "id",
    "submitter",
    "authors",
    "title",
    "comments",
    "journal-ref",
    "doi",
    "report-no",
    "categories",
    "license",
    "abstract",
    "versions",
    "update_date",
    "authors_parsed",
)


def is_arxiv_id(value: str) -> bool:
    return isinstance(value, str) and bool(NEW_STYLE_ID.fullmatch(value) or OLD_STYLE_ID.fullmatch(value))


_TEXT_FIELDS = (
    # (attribute, snapshot key, required)
    ("title", "title", True),
    ("abstract", "abstract", True),
    ("categories", "categories", True),
    ("authors", "authors", True),
    ("submitter", "submitter", False),
    ("comments", "comments", False),
    ("journal_ref", "journal-ref", False),
    ("doi", "doi", False),
    ("report_no", "report-no", False),
    ("license", "license", False),
    ("update_date", "update_date", False),
)


def _size(text: str, name: str, bad: Callable[[str, str], InputError]) -> int:
    try:
        return utf8_size(text)
    except UnicodeEncodeError as exc:
        raise bad(name, f"not encodable as UTF-8 ({exc.reason} at character {exc.start})") from None


def _check_text(rec: ArxivRecord, limits: InputLimits, bad: Callable[[str, str], InputError]) -> int:
    """Type, encodability and size of every text field; returns their total UTF-8 size."""
    total = len(rec.id)
    for attr, key, required in _TEXT_FIELDS:
        value = getattr(rec, attr)
        if value is None and not required:
            continue
        if not isinstance(value, str):
            raise bad(key, "missing" if value is None else f"not a string: {type(value).__name__}")
        size = _size(value, key, bad)
        limit = limits.field_limit(key)
        if size > limit:
            raise bad(key, f"{size} bytes, over the limit of {limit}")
        total += size
    return total


def split_authors(authors: str) -> list[str]:
    """Split arXiv's authors string (`A, B and C`) into names, dropping `(affiliations)`."""
    text = collapse_ws(authors)
    prev = None
    while prev != text:  # nested parentheses, innermost first
        prev = text
        text = _PARENS.sub(" ", text)
    text = collapse_ws(text)
    return [n for n in (collapse_ws(p) for p in _AND_SPLIT.split(text)) if n]


def name_from_parsed(entry: list[str]) -> str:
    """`["Young", "M. Todd", ""]` -> `M. Todd Young` (first, last, suffix)."""
    last = entry[0] if len(entry) > 0 else ""
    first = entry[1] if len(entry) > 1 else ""
    suffix = entry[2] if len(entry) > 2 else ""
    return collapse_ws(" ".join(p for p in (first, last, suffix) if p and p.strip()))


@dataclass(frozen=True, slots=True)
class Version:
    version: str
    created: str

    @property
    def number(self) -> int:
        m = VERSION.fullmatch(self.version) if isinstance(self.version, str) else None
        return int(m.group(1)) if m else 0


@dataclass(frozen=True, slots=True, kw_only=True)
class ArxivRecord:
    """One arXiv paper as the snapshot describes it (latest version's metadata)."""

    id: str
    title: str
    abstract: str
    categories: str
    versions: tuple[Version, ...]
    authors: str = ""
    submitter: str | None = None
    comments: str | None = None
    journal_ref: str | None = None
    doi: str | None = None
    report_no: str | None = None
    license: str | None = None
    update_date: str | None = None
    authors_parsed: tuple[tuple[str, ...], ...] | None = None
    #: where the input was read (`file:line`, `page record n`) and its exact bytes or
    #: text: a record refused after parsing (a date after the run's tomorrow, an index
    #: row that does not fit) is quarantined with these, never with a re-serialisation
    source_where: str | None = field(default=None, repr=False, compare=False)
    source_raw: bytes | str | None = field(default=None, repr=False, compare=False)
    # derived once at construction, so hot paths never re-parse
    _category_list: tuple[str, ...] = field(default=(), repr=False, compare=False)
    _submitted: datetime | None = field(default=None, repr=False, compare=False)
    _newest: date | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        rid = self.id if isinstance(self.id, str) else None
        limits = DEFAULT_LIMITS

        def bad(field_name: str, message: str) -> InputError:
            return InputError(message, record_id=rid, field=field_name)

        if not isinstance(self.id, str) or not is_arxiv_id(self.id):
            raise bad("id", f"not an arXiv identifier without version: {shown(self.id)}")
        total = _check_text(self, limits, bad)
        for name in ("title", "abstract"):
            value = getattr(self, name)
            if not value.strip():
                raise bad(name, "missing or empty")
        if not self.categories.strip():
            raise bad("categories", "missing or empty category list")
        cats = tuple(self.categories.split())
        for c in cats:
            if not CATEGORY.fullmatch(c):
                raise bad("categories", f"bad category {shown(c)} in {shown(self.categories)}")
        total += _check_versions(self.versions, limits, bad)
        if self.authors_parsed is not None:
            for entry in self.authors_parsed:
                for part in entry:
                    if not isinstance(part, str):
                        raise bad("authors_parsed", f"not a string: {part!r}")
                    total += _size(part, "authors_parsed", bad)
        if total > limits.record_bytes:
            raise bad("record", f"{total} bytes of text, over the limit of {limits.record_bytes}")
        dates, newest = _check_dates(self, limits, bad)
        first = min(self.versions, key=lambda v: v.number)
        object.__setattr__(self, "_newest", newest)
        object.__setattr__(self, "_category_list", cats)
        object.__setattr__(self, "_submitted", dates[first.version])

    def check_dates(self, *, today: date, limits: InputLimits = DEFAULT_LIMITS) -> None:
        """Refuse dates after `today` plus `limits.future_days` (the run's clock).

        Why not in `__post_init__`: a record is a pure value, and "the future" depends
        on when the run happens; the publisher calls this with its own today. A new-style
        id's month (`YYMM`, 20YY) is a date too: `9912.00001` names no paper yet.
        """
        horizon = today + timedelta(days=limits.future_days)
        id_month = (2000 + int(self.id[:2]), int(self.id[2:4])) if NEW_STYLE_ID.fullmatch(self.id) else None
        if id_month is not None and id_month > (horizon.year, horizon.month):
            raise InputError(
                f"{self.id} names a month after tomorrow (the run's today is {today.isoformat()})",
                record_id=self.id,
                field="id",
            )
        if self._newest is not None and self._newest <= horizon:
            return
        for v in self.versions:
            if parse_rfc2822(v.created).date() > horizon:
                raise InputError(
                    f"{v.created!r} is after tomorrow (the run's today is {today.isoformat()})",
                    record_id=self.id,
                    field=f"versions[{v.version}].created",
                )
        if self.update_date is not None and parse_iso_day(self.update_date) > horizon:
            raise InputError(
                f"{self.update_date!r} is after tomorrow (the run's today is {today.isoformat()})",
                record_id=self.id,
                field="update_date",
            )

    # ---- derived views -------------------------------------------------
    @property
    def version(self) -> int:
        """The latest arXiv version number."""
        return max(v.number for v in self.versions)

    @property
    def submitted_at(self) -> datetime:
        """v1 submission time, whatever the latest version is."""
        assert self._submitted is not None
        return self._submitted

    @property
    def primary_cat(self) -> str:
        return self._category_list[0]

    @property
    def cross_cats_sorted(self) -> list[str]:
        primary = self._category_list[0]
        return sorted({c for c in self._category_list[1:] if c != primary})

    @property
    def license_url(self) -> str:
        return self.license or ""

    @property
    def author_names(self) -> list[str]:
        if self.authors_parsed:
            names = [name_from_parsed(list(e)) for e in self.authors_parsed]
            return [n for n in names if n]
        return split_authors(self.authors or "")

    # ---- JSON-lines form ----------------------------------------------
    @classmethod
    def from_json(cls, obj: Any, *, where: str | None = None, raw: bytes | str | None = None) -> ArxivRecord:
        """Build from one snapshot-layout object; errors name the record and field.

        `where` and `raw` (the input's exact bytes) travel with the record, for the
        quarantine of a record refused after parsing."""
        rid = obj.get("id") if isinstance(obj, dict) else None
        rid = rid if isinstance(rid, str) else None
        try:
            if not isinstance(obj, dict):
                raise InputError("not a JSON object")
            versions_raw = obj.get("versions")
            if not isinstance(versions_raw, list):
                raise InputError("missing or not a list", record_id=rid, field="versions")
            versions = []
            for i, v in enumerate(versions_raw):
                if (
                    not isinstance(v, dict)
                    or not isinstance(v.get("version"), str)
                    or not isinstance(v.get("created"), str)
                ):
                    raise InputError(
                        f"entry {i} needs string 'version' and 'created'", record_id=rid, field="versions"
                    )
                versions.append(Version(version=v["version"], created=v["created"]))
            parsed = obj.get("authors_parsed")
            parsed_t: tuple[tuple[str, ...], ...] | None = None
            if parsed is not None:
                if not isinstance(parsed, list) or not all(
                    isinstance(e, list) and all(isinstance(p, str) for p in e) for e in parsed
                ):
                    raise InputError(
                        "must be a list of lists of strings", record_id=rid, field="authors_parsed"
                    )
                parsed_t = tuple(tuple(e) for e in parsed)
            for key in (
                "title",
                "abstract",
                "categories",
                "authors",
                "submitter",
                "comments",
                "journal-ref",
                "doi",
                "report-no",
                "license",
                "update_date",
            ):
                value = obj.get(key)
                if value is not None and not isinstance(value, str):
                    raise InputError(
                        f"must be a string, not {type(value).__name__}", record_id=rid, field=key
                    )
            return cls(
                id=obj.get("id"),  # type: ignore[arg-type]
                title=obj.get("title"),  # type: ignore[arg-type]
                abstract=obj.get("abstract"),  # type: ignore[arg-type]
                categories=obj.get("categories"),  # type: ignore[arg-type]
                versions=tuple(versions),
                authors=obj.get("authors") or "",
                submitter=obj.get("submitter"),
                comments=obj.get("comments"),
                journal_ref=obj.get("journal-ref"),
                doi=obj.get("doi"),
                report_no=obj.get("report-no"),
                license=obj.get("license"),
                update_date=obj.get("update_date"),
                authors_parsed=parsed_t,
                source_where=where,
                source_raw=raw,
            )
        except InputError as exc:
            raise InputError(
                exc.message, record_id=exc.record_id or rid, field=exc.field, where=where or exc.where
            ) from None

    def to_json(self) -> dict[str, Any]:
        """The snapshot layout, same 14 keys in the same order."""
        return {
            "id": self.id,
            "submitter": self.submitter,
            "authors": self.authors,
            "title": self.title,
            "comments": self.comments,
            "journal-ref": self.journal_ref,
            "doi": self.doi,
            "report-no": self.report_no,
            "categories": self.categories,
            "license": self.license,
            "abstract": self.abstract,
            "versions": [{"version": v.version, "created": v.created} for v in self.versions],
            "update_date": self.update_date,
            "authors_parsed": [list(e) for e in self.authors_parsed]
            if self.authors_parsed is not None
            else None,
        }


def _check_versions(versions: Any, limits: InputLimits, bad: Callable[[str, str], InputError]) -> int:
    """Each version's label and creation date text (within its limit), no number twice;
    returns their UTF-8 size toward the record's total."""
    total = 0
    if not isinstance(versions, tuple) or not versions:
        raise bad("versions", "no versions")
    numbers = []
    for v in versions:
        if (
            not isinstance(v, Version)
            or not isinstance(v.version, str)
            or not isinstance(v.created, str)
            or not VERSION.fullmatch(v.version)
        ):
            label = v.version if isinstance(v, Version) else v
            raise bad(
                "versions",
                f"bad version label {shown(label)} (expected v1 .. v{limits.max_version}, ASCII digits)",
            )
        numbers.append(v.number)
        created = _size(v.created, f"versions[{v.version}].created", bad)
        if created > limits.field_limit("created"):
            raise bad(
                f"versions[{v.version}].created",
                f"{created} bytes, over the limit of {limits.field_limit('created')}",
            )
        total += len(v.version) + created
    if len(set(numbers)) != len(numbers):
        raise bad("versions", f"duplicate version numbers {numbers}")
    return total


def _check_dates(
    rec: ArxivRecord, limits: InputLimits, bad: Callable[[str, str], InputError]
) -> tuple[dict[str, datetime], date]:
    """Every version's creation time and the update day parse and are not before arXiv;
    returns the times by version label and the newest day the record names."""
    dates = {}
    for v in rec.versions:
        try:
            dates[v.version] = parse_rfc2822(v.created)
        except ValueError as exc:
            raise bad(f"versions[{v.version}].created", str(exc)) from None
        if dates[v.version].date() < limits.earliest_date:
            raise bad(
                f"versions[{v.version}].created",
                f"{v.created!r} is before arXiv existed ({limits.earliest_date.year})",
            )
    if rec.update_date is not None:
        try:
            day = parse_iso_day(rec.update_date)
        except ValueError as exc:
            raise bad("update_date", str(exc)) from None
        if day < limits.earliest_date:
            raise bad(
                "update_date",
                f"{rec.update_date!r} is before arXiv existed ({limits.earliest_date.year})",
            )
    newest = max(d.date() for d in dates.values())
    if rec.update_date is not None:
        newest = max(newest, day)
    return dates, newest
