"""The stored documents, typed: events, bundles, states, arXiv pointers, the key document.

Each model has one rule, `parse(raw, key)`, which refuses what breaks it with an
`IntegrityError` naming the object's key and what is wrong (one line), and one
`to_bytes()`, the bytes the publisher writes for it. Every reader of a stored
document (the publisher, the store audit, `verify`) goes through `parse`, so they
agree on what is damaged.

Why views over the parsed JSON rather than fields decoded into structs: a
document's bytes are what is published and hashed, and the registry's files put
their members in an order of their own (insertion order, not sorted), so each
model keeps the JSON value it was parsed from (`doc`) and serialises exactly it.
The typed fields are read from it once, after its checks. Parsing costs one
`orjson` parse plus the checks (tests/perf/documents_timing.py times them).

What each rule covers:
- an event: exactly the fields of spec section 6, each of its JSON type, the
  signer and signature blocks exactly their string fields. Its hash, id and
  signature are the merge's and `check_stored_event`'s (they need the keys).
- a bundle and a state: a JSON object without repeated members; their content is
  checked by `verify_bundle`'s named checks (spec section 9), which report every
  failure rather than the first.
- an arXiv pointer: `core.arxiv_pointer.ArxivPointer`, with the pointer's sort key.
- the key document (spec section 5): `core.keys.read_key_document`'s rule.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pith_pipeline.core.canonical_json import dumps_compact, dumps_pretty, loads
from pith_pipeline.core.keys import PublicKey, read_key_document
from pith_pipeline.core.signature_blocks import EVENT_SIGNATURE_FIELDS, block_problem
from pith_pipeline.errors import IntegrityError

__all__ = ["Bundle", "Event", "KeyDocument", "State", "event_problem", "json_object"]

#: An event's members (spec section 6) and the JSON type of each.
EVENT_MEMBERS: dict[str, type | tuple[type, ...]] = {
    "event_type": str,
    "subject_pith_number": str,
    "target": str,
    "payload": dict,
    "signer": dict,
    "created_at": str,
    "supersedes": list,
    "prev_event": (str, type(None)),
    "schema_version": str,
    "content_sha256": str,
    "event_id": str,
    "signature": dict,
}
SIGNER_FIELDS = frozenset({"signer_id", "signer_type", "key_id", "public_key_fingerprint"})


def json_object(raw: bytes, key: str, what: str | None) -> dict[str, Any]:
    """`raw` parsed as one JSON object without repeated members, or an
    `IntegrityError` naming `key`: "unreadable <what> (<why>)", or for an event
    (`what` None) the why alone ("not valid JSON (...)", "not a JSON object")."""
    try:
        doc = loads(raw)
    except RecursionError:
        why = "not valid JSON (nested too deeply)" if what is None else "nested too deeply"
        raise IntegrityError(why if what is None else f"unreadable {what} ({why})", key=key) from None
    except ValueError as exc:  # orjson's errors, duplicate keys, non-UTF-8
        why = str(exc)[:160]
        raise IntegrityError(
            f"not valid JSON ({why})" if what is None else f"unreadable {what} ({why})", key=key
        ) from None
    if type(doc) is not dict:
        why = "not a JSON object"
        raise IntegrityError(why if what is None else f"unreadable {what} ({why})", key=key)
    return doc


# -- events ------------------------------------------------------------------


_EVENT_KEYS = frozenset(EVENT_MEMBERS)
_STR_MEMBERS = tuple(k for k, t in EVENT_MEMBERS.items() if t is str)


def _sound(doc: Mapping[str, Any]) -> bool:
    """The event rule's fast path (every stored event is read through it): True when
    nothing is wrong; `event_problem` then names what is."""
    if doc.keys() != _EVENT_KEYS:
        return False
    for name in _STR_MEMBERS:
        if type(doc[name]) is not str:
            return False
    signer, sig, prev = doc["signer"], doc["signature"], doc["prev_event"]
    return (
        type(doc["payload"]) is dict
        and type(signer) is dict
        and type(sig) is dict
        and type(doc["supersedes"]) is list
        and (prev is None or type(prev) is str)
        and signer.keys() == SIGNER_FIELDS
        and sig.keys() == EVENT_SIGNATURE_FIELDS
        and all(type(v) is str for v in signer.values())
        and all(type(v) is str for v in sig.values())
        and all(type(s) is str for s in doc["supersedes"])
    )


def event_problem(doc: Mapping[str, Any]) -> str | None:
    """Why a parsed event breaks the event rule, or None (for `Event.parse` and
    `check_stored_event`, which names the object with it)."""
    if _sound(doc):
        return None
    extra = sorted(str(k) for k in doc if k not in EVENT_MEMBERS)
    if extra:
        return f"unknown field {extra[0][:80]!r}"
    for name, typ in EVENT_MEMBERS.items():
        if name not in doc:
            return f"field {name!r} missing"
        value = doc[name]
        if not isinstance(value, typ) or type(value) is bool:
            return f"field {name!r} is {type(value).__name__}, not of its type"
    why = block_problem(doc["signer"], SIGNER_FIELDS, "signer")
    if why:
        return why
    why = block_problem(doc["signature"], EVENT_SIGNATURE_FIELDS, "signature")
    if why:
        return why
    return "supersedes lists a non-string"


@dataclass(frozen=True, slots=True)
class Event:
    """One stored event object (`events/<ID>/<content_sha256>[.sig-<key>].json`).

    Its members are read from `doc` on demand: every stored event of a paper is
    parsed on each of its re-publications, and most are only hashed and verified."""

    doc: dict[str, Any]

    @classmethod
    def parse(cls, raw: bytes, key: str) -> Event:
        doc = json_object(raw, key, None)
        why = event_problem(doc)
        if why:
            raise IntegrityError(f"malformed event ({why})", key=key)
        return cls(doc)

    @property
    def event_id(self) -> str:
        return str(self.doc["event_id"])

    @property
    def event_type(self) -> str:
        return str(self.doc["event_type"])

    @property
    def subject(self) -> str:
        return str(self.doc["subject_pith_number"])

    @property
    def created_at(self) -> str:
        return str(self.doc["created_at"])

    def to_bytes(self) -> bytes:
        """Compact JSON in the event's own member order, as the publisher writes it."""
        return dumps_compact(self.doc)


# -- bundles and states --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Bundle:
    """A published bundle (`pith/<ID>/bundle.json`, and its `.well-known` copy)."""

    doc: dict[str, Any]

    @classmethod
    def parse(cls, raw: bytes, key: str) -> Bundle:
        return cls(json_object(raw, key, "bundle"))

    @property
    def pith_number(self) -> str | None:
        pn = self.doc.get("pith_number")
        return pn if isinstance(pn, str) else None

    @property
    def events(self) -> list[Any] | None:
        events = self.doc.get("events")
        return events if isinstance(events, list) else None

    @property
    def arxiv_source(self) -> tuple[str, Any] | None:
        """(arXiv id, version) its `source` names, when it is an arXiv record."""
        src = self.doc.get("source")
        if isinstance(src, dict) and src.get("kind") == "arxiv" and isinstance(src.get("id"), str):
            return src["id"], src.get("version")
        return None

    def to_bytes(self) -> bytes:
        return dumps_compact(self.doc)


@dataclass(frozen=True, slots=True)
class State:
    """A record's merged state (`pith/<ID>/state.json`): the bundle's `state`, alone."""

    doc: dict[str, Any]

    @classmethod
    def parse(cls, raw: bytes, key: str) -> State:
        return cls(json_object(raw, key, "state"))

    def to_bytes(self) -> bytes:
        return dumps_compact(self.doc)


# -- the key document ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class KeyDocument:
    """`pith-signing-key.json`: the head key, every key that signed here, and the
    transparency log's member (`log`) when the store keeps a log."""

    doc: dict[str, Any]
    keys: tuple[PublicKey, ...]

    @classmethod
    def parse(cls, raw: bytes, key: str) -> KeyDocument:
        keys = read_key_document(raw, key)  # the rule, and its IntegrityError
        return cls(json_object(raw, key, "key document"), tuple(keys))

    @classmethod
    def of(cls, head: PublicKey, keys: Iterable[PublicKey], log: Any = None) -> KeyDocument:
        """The document a writer publishes: `head` (spec section 5) and `keys`."""
        listed = tuple(keys)
        doc: dict[str, Any] = {**head.to_json(), "keys": [k.to_json() for k in listed]}
        if log is not None:
            doc["log"] = log
        return cls(doc, listed)

    @property
    def log(self) -> dict[str, Any] | None:
        member = self.doc.get("log")
        return member if isinstance(member, dict) else None

    def to_bytes(self) -> bytes:
        return dumps_pretty(self.doc) + b"\n"
