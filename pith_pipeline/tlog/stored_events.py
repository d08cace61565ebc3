"""Stored events as log entries: which event store keys are events, the entry an
event is logged as, and why an entry is not a valid signed event.

- An entry is the RFC 8785 canonical JSON of a stored event, signature included,
  so the log alone is enough to recompute every `event_id` and check every
  signature. Re-signed copies (`<sha256>.sig-<key>.json`, after a key rotation) are
  the same event and are not logged again (`event_key_id` is None for them).
- An event larger than a bundle entry holds is logged hash-committed
  (`tlog.entry`); such an entry is checked against the event stored at its key.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Mapping

from pith_pipeline.core.canonical_json import dumps, dumps_trusted, loads
from pith_pipeline.core.events import content_sha256
from pith_pipeline.core.keys import PublicKey, verify_signature
from pith_pipeline.core.layout import EVENT_OBJECT, EVENTS
from pith_pipeline.errors import CanonicalJSONError, IntegrityError
from pith_pipeline.storage.base import Store
from pith_pipeline.tlog.entry import Committed, log_entry, parse_committed


def event_key_id(key: str) -> str | None:
    """The event id (hex) of an event store key, None for anything else (re-signed copies).

    The key's whole form, by the layout's one rule (`fullmatch`, ASCII classes): keys
    can be planted by anyone who can write the store, and a copy of an event under a
    look-alike name (a trailing newline, a subject that is no Pith number's body) must
    not become a second log entry."""
    m = EVENT_OBJECT.fullmatch(key)
    return m.group(2) if m and m.group(3) is None else None


def event_entry(data: bytes, where: str, written_sha256: str | None = None) -> tuple[bytes, str, str]:
    """(entry, event id hex, created_at) of a stored event; IntegrityError naming
    `where` when it does not parse or its id is not its content's hash.

    `written_sha256`: the SHA-256 of the bytes this run wrote under the key (its
    ledger). When the stored bytes still have it, they are the event the run built
    (its values the builder's: no floats, nothing canonical JSON refuses), so the
    entry and the id's hash are serialised without re-checking every value (that
    check was most of an append's CPU); the id must still recompute. Anything else
    (an event of another run, bytes changed since) is checked in full.
    """
    if written_sha256 is not None and hashlib.sha256(data).hexdigest() == written_sha256:
        try:
            ev = loads(data)
            created, digest = ev.get("created_at"), content_sha256(ev, trusted=True)
            # the id recomputes from the fast serialisation: had it differed from the
            # canonical one anywhere in the content, the hash would not match
            if (
                isinstance(created, str)
                and ev.get("content_sha256") == digest
                and ev.get("event_id") == "sha256:" + digest
            ):
                return dumps_trusted(ev), digest, created
        except (ValueError, TypeError, CanonicalJSONError, AttributeError):
            pass  # not what the builder makes: the full check names it
    try:
        ev = loads(data)
        if not isinstance(ev, dict):
            raise ValueError("not a JSON object")
        digest = content_sha256(ev)
        if ev.get("content_sha256") != digest or ev.get("event_id") != "sha256:" + digest:
            raise ValueError("its event_id is not the hash of its content")
        created = ev.get("created_at")
        if not isinstance(created, str):
            raise ValueError("created_at missing")
        return dumps(ev), digest, created
    except (ValueError, TypeError, CanonicalJSONError) as exc:
        raise IntegrityError(f"not logged: {exc}", key=where) from None


def logged_form(canonical: bytes, hex_id: str, key: str, where: str) -> bytes:
    """The log entry of an event (`entry.log_entry`: inline, or hash-committed when
    larger than a bundle entry holds); IntegrityError naming the event otherwise."""
    try:
        return log_entry(canonical, hex_id, key)
    except ValueError as exc:
        raise IntegrityError(
            f"not logged: {_event_name(canonical, hex_id)}: {exc}", key=f"{where}/{key}"
        ) from None


def _event_name(canonical: bytes, hex_id: str) -> str:
    """`<kind> event sha256:<id> of <pith number>` for an error message (what the
    event says of itself, as far as it parses)."""
    try:
        ev = loads(canonical)
        kind = str(ev.get("event_type") or "an")
        subject = str(ev.get("subject_pith_number") or "")
    except (ValueError, TypeError, AttributeError):
        kind, subject = "an", ""
    return f"{kind} event sha256:{hex_id}" + (f" of {subject}" if subject else "")


def committed_problem(c: Committed, get: Callable[[str], bytes | None]) -> str | None:
    """Why the event stored at a committed entry's key is not the one it commits to
    (None when it is: same canonical length and SHA-256, and its id recomputes)."""
    data = get(c.event_key)
    if data is None:
        return f"commits to {c.event_key}, which is missing"
    try:
        canonical, hex_id, _ = event_entry(data, c.event_key)
    except IntegrityError as exc:
        return f"commits to {c.event_key}: {exc}"
    if hex_id != c.event_hex or not c.matches(canonical):
        return f"commits to other bytes than the event at {c.event_key}"
    return None


def entry_problem(
    entry: bytes, keys: Mapping[str, PublicKey], get: Callable[[str], bytes | None] | None = None
) -> str | None:
    """Why a log entry is not a valid, signed, canonical event (None when it is).

    A hash-committed entry (`tlog.entry`) is checked against the event stored at its
    key, read with `get` (a store-relative reader; without one it cannot be checked),
    and that event is then checked as an inline entry would be."""
    c = parse_committed(entry)
    if c is not None:
        if get is None:
            return f"a committed entry for {c.event_key}, and no event store to check it against"
        bad = committed_problem(c, get)
        if bad is not None:
            return bad
        data = get(c.event_key)
        assert data is not None
        return entry_problem(dumps(loads(data)), keys)
    try:
        ev = loads(entry)
        if not isinstance(ev, dict):
            return "not a JSON object"
        if dumps(ev) != entry:
            return "not canonical JSON (RFC 8785)"
        digest = content_sha256(ev)
    except (ValueError, TypeError, CanonicalJSONError) as exc:
        return f"unreadable ({type(exc).__name__})"
    if ev.get("content_sha256") != digest:
        return "content_sha256 is not the hash of its content"
    if ev.get("event_id") != "sha256:" + digest:
        return "event_id is not sha256:<content_sha256>"
    sig = ev.get("signature")
    if not isinstance(sig, dict):
        return "unsigned"
    key = keys.get(str(sig.get("key_id")))
    if key is None:
        return f"signed by {sig.get('key_id')!r}, a key the registry's key document does not list"
    if not verify_signature(key.public_key, digest, str(sig.get("signature_b64"))):
        return f"signature by {key.key_id} does not verify"
    return None


def event_store_keys(store: Store) -> Iterator[str]:
    return (k for k in store.list(EVENTS) if event_key_id(k))
