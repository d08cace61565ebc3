"""The arXiv pointer (`arxiv/<id>.json`): every record of one arXiv paper, and the newest.

[ours] (spec section 3: the `arxiv` alias resolves to the newest version). One rule,
`ArxivPointer.parse`, for every reader (the publisher, the store audit): the arXiv
id its key names, at least one record (a pointer is written with the first record
of its paper; with none it would name no newest version), each record exactly its
five fields, no Pith number twice, and `latest` the newest record by the one sort
key, `pointer_sort_key`. One form, `to_bytes`. The records a pointer lists are
derived from verified `record_created` events (`pointer_entry`), and trusted only
as far as those say (`pointer_record_problem`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pith_pipeline.core.canonical_json import MAX_SAFE_INT, dumps_pretty, loads
from pith_pipeline.core.documents import json_object
from pith_pipeline.core.layout import POINTERS, pointer_key
from pith_pipeline.core.pith_record import PithNumber
from pith_pipeline.errors import IntegrityError

__all__ = [
    "ArxivPointer",
    "PointerRecord",
    "arxiv_id_of_pointer",
    "first_record_created",
    "listed_bodies",
    "pointer_entry",
    "pointer_record_problem",
    "pointer_sort_key",
]

_EVENT_ID = re.compile(r"sha256:[0-9a-f]{64}")
_HEX64 = re.compile(r"[0-9a-f]{64}")


def _short(value: Any) -> str:
    return repr(value)[:80]


@dataclass(frozen=True, slots=True)
class PointerRecord:
    """One version of a paper in its arXiv pointer: the record and its creation."""

    version: int
    pith_number: str
    record_created: str
    created_at: str
    canonical_sha256: str

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "pith_number": self.pith_number,
            "record_created": self.record_created,
            "created_at": self.created_at,
            "canonical_sha256": self.canonical_sha256,
        }

    @property
    def body(self) -> str:
        return PithNumber.parse(self.pith_number).body


_RECORD_FIELDS = frozenset(PointerRecord.__slots__)


def pointer_sort_key(record: PointerRecord) -> tuple[int, str, str]:
    """The order of a paper's versions: (version, created_at, pith_number); the
    last is the newest, the one `latest` names and the `arxiv` alias resolves to."""
    return (record.version, record.created_at, record.pith_number)


def _pointer_record(entry: Any) -> PointerRecord:
    if type(entry) is not dict:
        raise ValueError("records must be objects")
    extra = sorted(str(k) for k in entry if k not in _RECORD_FIELDS)
    missing = sorted(_RECORD_FIELDS - set(entry))
    if extra or missing:
        raise ValueError(
            "a record has " + ("unknown field " + repr(extra[0][:80]) if extra else f"no {missing[0]}")
        )
    version = entry["version"]
    if type(version) is not int or not 1 <= version <= MAX_SAFE_INT:
        raise ValueError(f"version {_short(version)} is not a positive integer")
    for name in ("pith_number", "record_created", "created_at", "canonical_sha256"):
        if type(entry[name]) is not str:
            raise ValueError(f"{name} {_short(entry[name])} is not a string")
    try:
        PithNumber.parse(entry["pith_number"])
    except ValueError:
        raise ValueError(f"lists {entry['pith_number'][:80]!r}, not a Pith number") from None
    if not _EVENT_ID.fullmatch(entry["record_created"]):
        raise ValueError(f"record_created {entry['record_created'][:80]!r} is not an event id")
    if not _HEX64.fullmatch(entry["canonical_sha256"]):
        raise ValueError(f"canonical_sha256 {entry['canonical_sha256'][:80]!r} is not a SHA-256")
    return PointerRecord(**entry)


def first_record_created(
    events: Iterable[Mapping[str, Any]], subject: str | None = None
) -> Mapping[str, Any] | None:
    """The record_created a subject's state applies: the first by (created_at,
    event_id), the merge's order (spec section 7, step 3). `subject`: only its events."""
    creations = [
        e
        for e in events
        if e.get("event_type") == "record_created"
        and (subject is None or e.get("subject_pith_number") == subject)
    ]
    return min(creations, key=lambda e: (e["created_at"], e["event_id"])) if creations else None


def pointer_entry(creation: Mapping[str, Any]) -> tuple[str, PointerRecord] | None:
    """(arXiv id, its pointer's record) of a verified `record_created` of an arXiv
    record, or None for a record of another source: what the publisher adds to a
    pointer and what `rebuild` re-derives pointers from."""
    payload = creation.get("payload")
    record = payload.get("canonical_record") if isinstance(payload, dict) else None
    source = record.get("source") if isinstance(record, dict) else None
    if not isinstance(source, dict) or source.get("kind") != "arxiv":
        return None
    arxiv_id, version = source.get("id"), source.get("version")
    if not isinstance(arxiv_id, str) or type(version) is not int:
        return None
    assert isinstance(payload, dict)
    entry = PointerRecord(
        version=version,
        pith_number=str(creation["subject_pith_number"]),
        record_created=str(creation["event_id"]),
        created_at=str(creation["created_at"]),
        canonical_sha256=str(payload["canonical_sha256"]),
    )
    return arxiv_id, entry


def pointer_record_problem(
    arxiv_id: str, record: PointerRecord, events: Iterable[Mapping[str, Any]]
) -> str | None:
    """Why a pointer's record is not backed by its subject's verified stored events
    (`events`), or None.

    Why: the pointer is not signed, and what it lists becomes signed data (the
    `supersedes` of a new version, a `correction` of an older one). A record must
    name a verified `record_created` of its Pith number whose record is that version
    of this arXiv id; a genuine record of another paper is refused.
    """
    for ev in events:
        if ev.get("event_id") != record.record_created or ev.get("event_type") != "record_created":
            continue
        payload = ev.get("payload")
        canonical = payload.get("canonical_record") if isinstance(payload, dict) else None
        source = canonical.get("source") if isinstance(canonical, dict) else None
        if ev.get("subject_pith_number") == record.pith_number and source == {
            "kind": "arxiv",
            "id": arxiv_id,
            "version": record.version,
        }:
            return None
        return (
            f"lists {record.pith_number} as version {record.version} of {arxiv_id}, but its "
            f"record_created is of {source!r}"
        )
    return (
        f"lists {record.pith_number} with record_created {record.record_created}, "
        "which is not a stored event of it"
    )


def arxiv_id_of_pointer(key: str) -> str | None:
    """The arXiv id a pointer's key names (`arxiv/<id>.json`), or None."""
    if not key.startswith(POINTERS) or not key.endswith(".json"):
        return None
    arxiv_id = key[len(POINTERS) : -len(".json")]
    return arxiv_id if arxiv_id and pointer_key(arxiv_id) == key else None


@dataclass(frozen=True, slots=True)
class ArxivPointer:
    """`arxiv/<id>.json`: every record of one arXiv paper, oldest first, and the newest.

    Not signed: a reader trusts a record in it only as far as that record's stored
    `record_created` says (the publisher and the audit both check it).
    """

    arxiv_id: str
    records: tuple[PointerRecord, ...]

    @classmethod
    def parse(cls, raw: bytes, key: str) -> ArxivPointer:
        doc = json_object(raw, key, "arXiv pointer")
        try:
            return cls._checked(doc, arxiv_id_of_pointer(key))
        except ValueError as exc:
            raise IntegrityError(f"unreadable arXiv pointer ({str(exc)[:200]})", key=key) from None

    @classmethod
    def _checked(cls, doc: dict[str, Any], arxiv_id: str | None) -> ArxivPointer:
        extra = sorted(str(k) for k in doc if k not in ("arxiv_id", "records", "latest"))
        if extra:
            raise ValueError(f"unknown field {extra[0][:80]!r}")
        if doc.get("arxiv_id") != arxiv_id or arxiv_id is None:
            raise ValueError(f"arxiv_id is {_short(doc.get('arxiv_id'))}, not the id its key names")
        entries = doc.get("records")
        if type(entries) is not list or not entries:
            raise ValueError("records must be a non-empty list")
        records = tuple(_pointer_record(e) for e in entries)
        if len({r.pith_number for r in records}) != len(records):
            raise ValueError("a Pith number is listed twice")
        pointer = cls(arxiv_id, records)
        if doc.get("latest") != pointer.latest:
            raise ValueError(f"latest is {_short(doc.get('latest'))}, not the newest record")
        return pointer

    @classmethod
    def of(cls, arxiv_id: str, records: Iterable[PointerRecord]) -> ArxivPointer:
        """A pointer listing `records` in their order (`pointer_sort_key`); at least one."""
        ordered = tuple(sorted(records, key=pointer_sort_key))
        if not ordered:
            raise ValueError(f"an arXiv pointer of {arxiv_id} needs a record")
        return cls(arxiv_id, ordered)

    @property
    def latest(self) -> str:
        """The Pith number of the newest record."""
        return max(self.records, key=pointer_sort_key).pith_number

    def lists(self, pith_number: str) -> bool:
        return any(r.pith_number == pith_number for r in self.records)

    def with_record(self, record: PointerRecord) -> ArxivPointer:
        """This pointer with `record` added (itself when its Pith number is listed)."""
        if self.lists(record.pith_number):
            return self
        return ArxivPointer.of(self.arxiv_id, (*self.records, record))

    def newest_at_or_below(self, version: int, *, besides: str) -> PointerRecord | None:
        """The newest record of a version up to `version` other than `besides`."""
        older = [r for r in self.records if r.pith_number != besides and r.version <= version]
        return max(older, key=pointer_sort_key) if older else None

    def to_bytes(self) -> bytes:
        doc = {
            "arxiv_id": self.arxiv_id,
            "records": [r.to_json() for r in self.records],
            "latest": self.latest,
        }
        return dumps_pretty(doc) + b"\n"


def listed_bodies(raw: bytes | None) -> set[str]:
    """The record IDs a stored pointer's records name, as far as it parses.

    For the readers that must see what a damaged pointer still names (the audit
    checks those subjects too; `rebuild` does not re-derive a pointer that names a
    paper it cannot account for); everyone else reads `ArxivPointer.parse`.
    """
    try:
        doc = loads(raw) if raw else None
    except ValueError:
        return set()
    found: set[str] = set()
    entries = doc.get("records") if isinstance(doc, dict) else None
    for r in entries if isinstance(entries, list) else []:
        pn = r.get("pith_number") if isinstance(r, dict) else None
        if isinstance(pn, str):
            try:
                found.add(PithNumber.parse(pn).body)
            except ValueError:
                continue
    return found
