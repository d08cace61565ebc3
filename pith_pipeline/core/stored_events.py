"""The event store: which stored event objects count, checked one by one.

Objects live at `events/<ID>/<content_sha256>[.sig-<key>].json` (`core.layout`).
They are the source of truth for bundles, states and pointers, so the publisher and
the store audit check each one here, by the same rule, before it is used: a
damaged object is named with a one-line reason instead of being merged, re-signed
and spread. The keys whose signatures count are a `KeyRing` (the store's key
document, or a trusted one).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pith_pipeline.core.certificate import certificate_problem, within_window
from pith_pipeline.core.documents import Event, event_problem, json_object
from pith_pipeline.core.keys import PublicKey
from pith_pipeline.core.layout import EVENT_OBJECT, resigned_suffix
from pith_pipeline.core.merge import validate_event
from pith_pipeline.core.pith_record import PithNumber
from pith_pipeline.errors import CanonicalJSONError, IntegrityError

#: What a malformed hostile value may raise inside a check of it (each becomes a
#: reason, or a FAIL of `verify_bundle`, never a stop).
MALFORMED = (
    ValueError,
    TypeError,
    KeyError,
    AttributeError,
    IndexError,
    OverflowError,
    RecursionError,
    CanonicalJSONError,
)


class KeyRing:
    """The keys whose signatures count on stored events: those the store's key
    document lists (or a trusted document). A certified key counts only through a
    valid certificate from an uncertified key of the ring; checked once per key."""

    def __init__(self, keys: Iterable[PublicKey]) -> None:
        self.keys: dict[str, PublicKey] = {}
        for k in keys:
            self.keys.setdefault(k.key_id, k)
        self._roots = {kid: k for kid, k in self.keys.items() if k.certificate is None}
        self._cert_problems: dict[str, str | None] = {}

    def __len__(self) -> int:
        return len(self.keys)

    def __repr__(self) -> str:
        return f"KeyRing({sorted(self.keys)})"

    def certificate_problem(self, key: PublicKey) -> str | None:
        if key.certificate is None:
            return None
        if key.key_id not in self._cert_problems:
            self._cert_problems[key.key_id] = certificate_problem(key, self._roots)
        return self._cert_problems[key.key_id]


def check_stored_event(key: str, data: bytes, keyring: KeyRing) -> tuple[dict[str, Any] | None, str | None]:
    """Check one object of the event store; `(event, None)` when it is sound.

    Otherwise `(event or None, reason)`, the reason one line. Sound means: the name
    is `events/<ID>/<content_sha256>.json` (or `.sig-<key id>.json` for a copy
    re-signed after a rotation), the bytes keep the event rule (`documents.Event`:
    JSON without duplicate keys, exactly the spec's fields), the content hash and
    event id recompute, the subject is this directory's, the signature verifies
    with a key of the ring, the key was not retired (rotated, or outside its
    certificate) before the event's signed `created_at`, and the bytes are the
    publisher's (`Event.to_bytes`). Pure: the caller reads the bytes.
    """
    m = EVENT_OBJECT.fullmatch(key)
    if m is None:
        return None, "not an event object name (events/<ID>/<content sha256>.json)"
    body, name_hash, suffix = m.groups()
    try:
        doc = json_object(data, key, None)
    except IntegrityError as exc:
        return None, exc.message
    why = event_problem(doc)
    if why:  # the parsed object is returned: the id it claims still counts as stored
        return doc, f"malformed event ({why})"
    event = Event(doc)
    try:
        reason = validate_event(doc, event.subject, keyring.keys)
    except MALFORMED as exc:
        reason = f"malformed ({type(exc).__name__})"
    if reason is not None:
        return doc, _EVENT_REASONS.get(reason, reason)
    try:
        if PithNumber.parse(event.subject).body != body:
            return doc, f"event of {event.subject} stored under events/{body}/"
    except ValueError:
        return doc, f"subject {event.subject[:80]!r} is not a Pith number"
    if doc["content_sha256"] != name_hash:
        return doc, f"named {name_hash[:16]}... but its content hashes to {doc['content_sha256'][:16]}..."
    sig = doc["signature"]
    if suffix is not None and suffix != resigned_suffix(sig["key_id"]):
        return doc, f"named as re-signed by {suffix} but signed by {sig['key_id']}"
    pk = keyring.keys[sig["key_id"]]
    cert_why = keyring.certificate_problem(pk)
    if cert_why:
        return doc, cert_why
    # created_at is hashed and signed; signed_at is not. A re-signed copy is signed
    # after its content was made, so only the end of its key's validity applies.
    bound = pk if suffix is None else PublicKey(pk.key_id, pk.public_key, rotates_at=_retired_at(pk))
    if not within_window(bound, event.created_at):
        return doc, f"created at {event.created_at}, outside the validity of key {pk.key_id}"
    written = event.to_bytes()
    if written != data:
        # same content, other bytes: harmless to the hash, but not what any publisher
        # wrote, so someone rewrote the object (and could have meant more)
        return (
            doc,
            f"re-serialised: not the compact JSON the publisher writes ({_first_difference(written, data)})",
        )
    return doc, None


def _first_difference(want: bytes, data: bytes) -> str:
    """Where the stored bytes first differ from the publisher's form, for the finding."""
    at = next(
        (i for i, (a, b) in enumerate(zip(want, data, strict=False)) if a != b), min(len(want), len(data))
    )
    return f"byte {at} of {len(data)}"


_EVENT_REASONS = {
    "malformed": "malformed event (a field missing or of the wrong type)",
    "unknown_event_type": "unknown event type",
    "bad_content_hash": "content_sha256 does not recompute (the content was changed)",
    "bad_event_id": "event_id does not match the content hash",
    "unknown_key": "signed by a key the key document does not list (or with a wrong fingerprint)",
    "bad_signature": "signature does not verify with the listed key",
}


def _retired_at(key: PublicKey) -> str | None:
    """When a key stopped counting: its rotation, or its certificate's end."""
    if key.rotates_at:
        return key.rotates_at
    cert = key.certificate
    end = cert.get("not_after") if isinstance(cert, dict) else None
    return end if isinstance(end, str) else None
