"""The two forms of a log entry: an event inline, or a hash commitment to it.

Why two: tlog-tiles bundles prefix each entry with a uint16 length, so an entry
holds at most 65,535 bytes, while an event can be larger (a graph snapshot of a
paper with 3,000 authors is about 74 KB). The log must still hold every event the
store publishes, so:

- an event whose canonical JSON (RFC 8785, signature included) fits in
  `MAX_ENTRY` bytes is the entry itself, byte for byte (the form every log had
  before, so existing logs verify unchanged and cost nothing more);
- a larger one is logged as a *committed entry*, a small fixed-form ASCII text
  naming the event and the SHA-256 of its canonical JSON; the event itself is the
  one already in the event store at the key the entry names.

A committed entry, exactly (each line ends with one LF, nothing else)::

    pith-log-entry/sha256/v1
    event_id sha256:<64 lowercase hex>
    event_key events/<subject>/<64 lowercase hex>.json
    size <decimal byte count of the canonical JSON, no leading zeros>
    sha256 <64 lowercase hex: SHA-256 of the canonical JSON>

It never starts with `{`, so no entry can be read as both forms. An auditor
checks it by reading the event at `event_key`, serialising it as RFC 8785
canonical JSON, and comparing its length and SHA-256 with the entry; the
`event_id` then recomputes from that event as from an inline entry. The leaf hash
is RFC 6962's hash of the committed entry's bytes, so Go's `sumdb/tlog` and any
tlog-tiles client verify inclusion of either form unchanged.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from pith_pipeline.core.canonical_json import loads
from pith_pipeline.core.layout import EVENT_OBJECT
from pith_pipeline.tlog.tiles import MAX_ENTRY

COMMITTED_MAGIC = b"pith-log-entry/sha256/v1\n"

_COMMITTED = re.compile(
    rb"pith-log-entry/sha256/v1\n"
    rb"event_id sha256:([0-9a-f]{64})\n"
    rb"event_key (events/[A-Z2-7]{26}/[0-9a-f]{64}\.json)\n"
    rb"size (0|[1-9][0-9]{0,18})\n"
    rb"sha256 ([0-9a-f]{64})\n"
)


@dataclass(frozen=True, slots=True)
class Committed:
    """A committed entry: the event's id (hex), its store key, and the length and
    SHA-256 of its canonical JSON."""

    event_hex: str
    event_key: str
    size: int
    sha256: str

    def matches(self, canonical: bytes) -> bool:
        """Whether `canonical` (an event's RFC 8785 JSON) is the event committed to."""
        return len(canonical) == self.size and hashlib.sha256(canonical).hexdigest() == self.sha256


def committed_entry(canonical: bytes, event_hex: str, event_key: str) -> bytes:
    """The committed entry for an event (its canonical JSON, id hex and store key)."""
    out = (
        COMMITTED_MAGIC
        + f"event_id sha256:{event_hex}\n".encode("ascii")
        + f"event_key {event_key}\n".encode("ascii")
        + f"size {len(canonical)}\n".encode("ascii")
        + f"sha256 {hashlib.sha256(canonical).hexdigest()}\n".encode("ascii")
    )
    if parse_committed(out) is None:  # an id or key outside the layout's form
        raise ValueError(f"event sha256:{event_hex} at {event_key!r} cannot be named by a log entry")
    return out


def log_entry(canonical: bytes, event_hex: str, event_key: str) -> bytes:
    """The log entry for an event: its canonical JSON when that fits a bundle entry
    (`MAX_ENTRY` bytes, inclusive), else its committed entry."""
    if len(canonical) <= MAX_ENTRY:
        return canonical
    return committed_entry(canonical, event_hex, event_key)


def parse_committed(entry: bytes) -> Committed | None:
    """The committed entry `entry` is, or None (an inline event, or anything else)."""
    if not entry.startswith(COMMITTED_MAGIC):
        return None
    m = _COMMITTED.fullmatch(entry)
    if m is None:
        return None
    key = m.group(2).decode("ascii")
    hex_id = m.group(1).decode("ascii")
    km = EVENT_OBJECT.fullmatch(key)
    if km is None or km.group(2) != hex_id:
        return None
    return Committed(hex_id, key, int(m.group(3)), m.group(4).decode("ascii"))


def entry_event_hex(entry: bytes) -> str | None:
    """The event id (hex) an entry names, by its own claim (None: not an event). An
    inline entry's claim is its `event_id` member; checking it is the caller's."""
    c = parse_committed(entry)
    if c is not None:
        return c.event_hex
    try:
        ev = loads(entry)
        return str(ev["event_id"]).removeprefix("sha256:") if isinstance(ev, dict) else None
    except (ValueError, TypeError, KeyError):
        return None
