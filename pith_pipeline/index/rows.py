"""Index rows from a published bundle: the bundle is the only input.

Indexes are derived data: everything a row holds is read from the signed bundle
(canonical record, state, events, aliases), so `reindex` can rebuild them from the
store at any time and a row can always be checked against its bundle.

`check_bundle` (or `check` per row) validates rows against the tables' schema
before anything of a record is published, so one record cannot break the index.
"""

from __future__ import annotations

import functools
import unicodedata
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import pyarrow as pa

from pith_pipeline.core.layout import event_key
from pith_pipeline.core.timeutil import parse_iso
from pith_pipeline.errors import InputError
from pith_pipeline.index.schema import TABLES


def _ts(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    return _parse_ts(value)


@functools.lru_cache(maxsize=4096)
def _parse_ts(value: str) -> datetime | None:
    """Cached: a run's rows repeat a few timestamps (its build moment in every bundle,
    every event's), and a paper's rows hold about forty; datetimes are immutable."""
    try:
        return parse_iso(value)
    except ValueError:
        return None


#: Characters that start TeX markup in a name; a name without any is already plain text.
_TEX_MARKS = ("\\", "{", "$", "~")


def _has_tex(text: str) -> bool:
    return any(mark in text for mark in _TEX_MARKS)


@functools.lru_cache(maxsize=1)
def _latex() -> tuple[Any, Any]:
    """The converter and pylatexenc's default macro database, built once (built per
    call, the database was a fifth of a conversion's time)."""
    from pylatexenc.latex2text import LatexNodes2Text
    from pylatexenc.latexwalker import get_default_latex_context_db

    return LatexNodes2Text(), get_default_latex_context_db()


@functools.lru_cache(maxsize=65_536)
def unicode_name(name: str) -> str:
    """`name` with TeX accents and markup converted to Unicode (NFC), spaces collapsed:
    `Schr\\"odinger` -> `Schrödinger`, `\\v{S}r\\'amek` -> `Šrámek`, `{\\O}` -> `Ø`.

    Why: arXiv keeps authors' TeX, so a search for a name as people write it misses
    them; the canonical record and `authors` keep arXiv's text as it is, this is for
    reading and searching only. A name without TeX markup is returned as it is; one
    the converter cannot read keeps arXiv's text (pylatexenc parses tolerantly, so
    that is a safety net). `%` is not a TeX comment in a name. Cached: names repeat.
    """
    if not _has_tex(name):
        return name
    try:
        converter, macros = _latex()
        text = converter.latex_to_text(name.replace("%", "\\%"), latex_context=macros)
    except Exception:  # the converter's own failure on odd input: keep arXiv's text
        return name
    return unicodedata.normalize("NFC", " ".join(text.split()))


def _month(value: Any) -> str:
    return value[:7] if isinstance(value, str) and len(value) >= 7 else "unknown"


@dataclass(slots=True)
class Rows:
    """Rows for the three tables, as lists of dicts in schema column names."""

    records: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    aliases: list[dict[str, Any]] = field(default_factory=list)

    def extend(self, other: Rows) -> None:
        self.records.extend(other.records)
        self.events.extend(other.events)
        self.aliases.extend(other.aliases)

    def table(self, name: str) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = getattr(self, name)
        return rows


def _latest_paper(state: dict[str, Any]) -> dict[str, Any]:
    snaps = state.get("current", {}).get("graph_snapshots") or []
    if not snaps:
        return {}
    payload = snaps[-1].get("payload") or {}
    paper = (payload.get("graph_snapshot") or {}).get("paper")
    return paper if isinstance(paper, dict) else {}


def _superseded_by(state: dict[str, Any]) -> str | None:
    corrections = [
        c
        for c in state.get("current", {}).get("corrections") or []
        if (c.get("payload") or {}).get("kind") == "superseded"
    ]
    if not corrections:
        return None
    newest = max(corrections, key=lambda c: (c.get("created_at", ""), c.get("event_id", "")))
    value = newest["payload"].get("pith_number")
    return value if isinstance(value, str) else None


def rows_from_bundle(bundle: dict[str, Any], *, bundle_key: str, bundle_sha256: str) -> Rows:
    """One `records` row, one `events` row per event and one `aliases` row per alias."""
    subject = bundle["pith_number"]
    canonical = bundle["canonical_record"]
    md = canonical["metadata"]
    src = canonical["source"]
    state = bundle.get("state") or {}
    created = state.get("current", {}).get("record_created") or {}
    receipt = (created.get("payload") or {}).get("receipt") or {}
    paper = _latest_paper(state)
    aliases = bundle.get("source_aliases") or []
    doi = next((a["alias_value"] for a in aliases if a.get("alias_kind") == "doi"), None)
    primary = md["primary_cat"]
    authors_text = paper.get("authors_text")
    authors = authors_text.split(", ") if authors_text else []
    authors_unicode, authors_text_unicode = _unicode_authors(authors, authors_text)
    out = Rows()
    out.records.append(
        {
            "pith_number": subject,
            "short_pith_number": bundle.get("short_pith_number"),
            "arxiv_id": src["id"],
            "version": src["version"],
            "title": paper.get("title"),
            "authors": authors,
            "authors_text": authors_text,
            "authors_unicode": authors_unicode,
            "authors_text_unicode": authors_text_unicode,
            "primary_cat": primary,
            "primary_archive": primary.split(".", 1)[0],
            "categories": [primary, *md.get("cross_cats_sorted", [])],
            "license": md.get("license", ""),
            "submitted_at": _ts(md["submitted_at"]),
            "submitted_month": _month(md["submitted_at"]),
            "doi": doi,
            "canonical_sha256": bundle["canonical_sha256"],
            "title_canon_sha256": md.get("title_canon_sha256"),
            "abstract_canon_sha256": md.get("abstract_canon_sha256"),
            "created_at": _ts(created.get("created_at")),
            "record_created_event_id": created.get("event_id"),
            "key_id": receipt.get("key_id"),
            "public_key_fingerprint": receipt.get("public_key_fingerprint"),
            "superseded_by": _superseded_by(state),
            "event_count": state.get("event_count"),
            "bundle_key": bundle_key,
            "bundle_sha256": bundle_sha256,
            "state_sha256": state.get("state_sha256"),
            "built_at": _ts(bundle.get("built_at")),
        }
    )
    invalid = {i.get("event_id") for i in state.get("invalid_events") or []}
    body = subject.rsplit(":", 1)[-1]
    for e in bundle.get("events") or []:
        out.events.append(_event_row(e, body, invalid))
    for a in aliases:
        kind, value = a.get("alias_kind"), a.get("alias_value")
        out.aliases.append(
            {
                "alias_kind": kind,
                "alias_value": value,
                "alias": f"{kind}:{value}",
                "pith_number": subject,
                "arxiv_id": src["id"],
                "version": src["version"],
                "record_created_at": _ts(created.get("created_at")),
                "created_at": _ts(a.get("created_at")),
            }
        )
    return out


def _unicode_authors(authors: list[str], authors_text: str | None) -> tuple[list[str] | None, str | None]:
    """(authors_unicode, authors_text_unicode): the names with TeX converted, or (None,
    None) where that is arXiv's text. Only converted names are stored, so the table does
    not hold every plain name twice; readers take coalesce(authors_text_unicode, authors_text).
    """
    if authors_text and _has_tex(authors_text):
        converted = [unicode_name(a) for a in authors]
        if converted != authors:
            return converted, ", ".join(converted)
    return None, None


def _event_row(e: dict[str, Any], body: str, invalid: set[Any]) -> dict[str, Any]:
    """The `events` row of event `e` of the bundle of Pith number body `body`."""
    signer = e.get("signer") or {}
    sig = e.get("signature") or {}
    raw = e.get("payload")
    payload: dict[str, Any] = raw if isinstance(raw, dict) else {}
    return {
        "event_id": e.get("event_id"),
        "subject": e.get("subject_pith_number"),
        "event_type": e.get("event_type"),
        "target": e.get("target"),
        "created_at": _ts(e.get("created_at")),
        "created_month": _month(e.get("created_at")),
        "signer_id": signer.get("signer_id"),
        "signer_type": signer.get("signer_type"),
        "key_id": signer.get("key_id"),
        "public_key_fingerprint": signer.get("public_key_fingerprint"),
        "signed_at": _ts(sig.get("signed_at")),
        "supersedes": list(e.get("supersedes") or []),
        "prev_event": e.get("prev_event"),
        "correction_kind": payload.get("kind") if e.get("event_type") == "correction" else None,
        "valid": e.get("event_id") not in invalid,
        "event_key": event_key(body, str(e.get("content_sha256"))),
    }


# -- validation: before anything is published -------------------------------------

_CHECK_ERRORS = (pa.ArrowException, OverflowError, TypeError, ValueError)


def _utf8(value: Any) -> bool:
    if type(value) is not str:
        return False
    if value.isascii():
        return True
    try:
        value.encode("utf-8")  # a lone surrogate cannot be stored
    except UnicodeEncodeError:
        return False
    return True


def _int32(value: Any) -> bool:
    return type(value) is int and -(2**31) <= value < 2**31


def _strings(value: Any) -> bool:
    return type(value) is list and all(_utf8(v) for v in value)


#: Values of these Python types surely convert to the column's Arrow type, so `check`
#: skips their conversion (one `pa.array` per value cost more than building and
#: signing the bundle); anything else is converted, and refused as before.
_SURE: dict[str, Any] = {
    "string": _utf8,
    "int32": _int32,
    "bool": lambda v: type(v) is bool,
    "timestamp[us, tz=UTC]": lambda v: type(v) is datetime,
    "list<item: string>": _strings,
}


def check(row: dict[str, Any], table: str = "records") -> None:
    """Raise `InputError` naming the column if `row` does not fit `table`'s schema.

    Why: a row the index cannot hold (an int32 `version` of 3000000000, a non-string
    title) must stop only its record, before its bundle is published; found later, in
    the index update, it would fail every update and every `reindex` after it.
    """
    spec = TABLES[table]
    names, columns = _columns(table)
    record_id = row.get("pith_number") or row.get("subject") or row.get("arxiv_id")
    rid = record_id if isinstance(record_id, str) else None
    if not names.issuperset(row):
        unknown = sorted(set(row) - names)
        raise InputError(f"not a column of the {table} index", record_id=rid, field=unknown[0])
    for name in spec.required:
        if row.get(name) is None or row.get(name) == "":
            raise InputError(f"the {table} index needs a value here", record_id=rid, field=name)
    for name, arrow_type, sure in columns:
        value = row.get(name)
        if value is None or (sure is not None and sure(value)):
            continue  # nothing, or surely fits: no Arrow conversion of this value alone
        try:
            pa.array([value], type=arrow_type)
        except _CHECK_ERRORS as exc:
            shown = repr(value)
            shown = shown if len(shown) <= 60 else shown[:57] + "..."
            raise InputError(
                f"{shown} does not fit the {table} index column ({arrow_type}): {type(exc).__name__}",
                record_id=rid,
                field=name,
            ) from None


_COLUMNS: dict[str, tuple[frozenset[str], list[tuple[str, pa.DataType, Any]]]] = {}


def _columns(table: str) -> tuple[frozenset[str], list[tuple[str, pa.DataType, Any]]]:
    """A table's column names, and (name, Arrow type, shortcut) per column, read from
    the schema once (reading Arrow fields per row was most of `check`'s own time)."""
    got = _COLUMNS.get(table)
    if got is None:
        schema = TABLES[table].schema
        got = _COLUMNS[table] = (
            frozenset(schema.names),
            [(f.name, f.type, _SURE.get(str(f.type))) for f in schema],
        )
    return got


def check_rows(rows: Rows) -> None:
    """`check` every row of every table (see `check`)."""
    for name in TABLES:
        for row in rows.table(name):
            check(row, name)


def check_bundle(bundle: dict[str, Any]) -> Rows:
    """The index rows of a bundle about to be published, each checked; `InputError` if not.

    Call it after building and signing a bundle and before publishing anything of its
    record; the error is record-level (quarantine the record and go on).
    """
    subject = bundle.get("pith_number") if isinstance(bundle, dict) else None
    try:
        rows = rows_from_bundle(bundle, bundle_key="pith/check/bundle.json", bundle_sha256="0" * 64)
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise InputError(
            f"the bundle lacks what the index needs ({type(exc).__name__}: {exc})",
            record_id=subject if isinstance(subject, str) else None,
        ) from None
    check_rows(rows)
    return rows
