"""A subject's bundle: signed from its checked events, and repaired where a killed or
damaged run left it out of step with them.

Events are write-once and written before their bundle, so the bundle can always be
derived again; what must never happen is a bundle re-derived in a way that hides a
loss (an event deleted, a stored event reordered): those stop the subject with an
`IntegrityError` naming the object.
"""

from __future__ import annotations

from typing import Any

from pith_pipeline.audit import reordered_events
from pith_pipeline.core.builder import aliases_from_events, sign_bundle
from pith_pipeline.core.bundle import Site, bundle_sha256
from pith_pipeline.core.canonical_json import loads
from pith_pipeline.core.keys import Signer, verify_signature
from pith_pipeline.core.layout import bundle_paths, event_prefix
from pith_pipeline.core.pith_record import PithNumber
from pith_pipeline.core.timeutil import Clock
from pith_pipeline.core.verify import verify_bundle
from pith_pipeline.errors import IntegrityError
from pith_pipeline.publish.context import Codec, Paper
from pith_pipeline.publish.keys import KeyBook
from pith_pipeline.publish.reading import StoredState
from pith_pipeline.publish.writing import Writer
from pith_pipeline.storage.base import Store

#: What a rebuild of unchanged events changes anyway (the moment and its signature).
REBUILD_VOLATILE = frozenset({"built_at", "bundle_signature"})


class Bundles:
    """Signs, writes and repairs bundles for one run."""

    def __init__(
        self,
        signer: Signer,
        site: Site,
        clock: Clock,
        keys: KeyBook,
        reader: StoredState,
        writer: Writer,
    ) -> None:
        self.signer = signer
        self.site = site
        self.clock = clock
        self.keys = keys
        self.reader = reader
        self.writer = writer
        self.store: Store = writer.store
        self.codec: Codec = writer.codec

    def signed(
        self,
        subject: str,
        events: list[dict[str, Any]],
        aliases: list[dict[str, Any]] | None = None,
        *,
        trusted: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        """A subject's bundle built and signed from its events (nothing written)."""
        pn = PithNumber.parse(subject)
        events = dedupe_sorted(events)
        creations = [e for e in events if e.get("event_type") == "record_created"]
        if not creations:
            raise IntegrityError(f"no record_created event stored for {subject}", key=event_prefix(pn.body))
        first = min(creations, key=lambda e: (e["created_at"], e["event_id"]))
        if aliases is None:
            aliases = aliases_from_events(events, pn.body)
        key_ids = {self.signer.key_id}
        for e in events:
            key_ids.add(e["signer"]["key_id"])
            key_ids.add(e["signature"]["key_id"])
        payload = first["payload"]
        return sign_bundle(
            subject=subject,
            canonical=payload["canonical_record"],
            canonical_hex=payload["canonical_sha256"],
            events=events,
            aliases=aliases,
            public_keys=self.keys.keys_for(key_ids),
            site=self.site,
            signer=self.signer,
            now=self.clock(),
            trusted=trusted or (),
            canon=self.codec.canon,
        )

    def write(
        self,
        paper: Paper,
        subject: str,
        events: list[dict[str, Any]],
        aliases: list[dict[str, Any]] | None = None,
        *,
        trusted: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        """(Re)build a subject's bundle and state from its events, and write them.

        `trusted`: event objects this run just built and signed; merging skips
        re-hashing and re-verifying them (the bytes written are the same).
        """
        body = PithNumber.parse(subject).body
        self.refuse_dropping(paper, body, events, self.store.get(bundle_paths(body)[0]))
        bundle = self.signed(subject, events, aliases, trusted=trusted)
        self.writer.bundle_objects(paper, body, bundle)
        return bundle

    def rebuild(self, paper: Paper, subject: str, events: list[dict[str, Any]]) -> bool:
        """Rebuild a subject's bundle from its events unless the published one already
        says the same; True when it was written.

        Why: a rebuild re-signs, and a new signature carries a new `built_at`, so
        without this every `rebuild` would rewrite every bundle of an unchanged store.
        """
        body = PithNumber.parse(subject).body
        published = self.store.get(bundle_paths(body)[0])
        self.refuse_dropping(paper, body, events, published)
        bundle = self.signed(subject, events)
        if published_as(self.store, self.signer, self.codec, body, bundle, published):
            assert published is not None
            self.writer.ensure_page(paper, body, loads(published))  # the page of the bundle as published
            return False
        self.writer.bundle_objects(paper, body, bundle)
        return True

    def ensure(self, paper: Paper, subject: str, events: list[dict[str, Any]]) -> None:
        """Finish what a killed run left out for an already-published subject.

        - no bundle (killed between events and bundle), or a bundle that does not list
          exactly the stored events (killed between a correction event and the rewrite
          of its bundle): build it from the checked events;
        - a bundle whose `state.json`, `.well-known` copy or page is missing or holds
          other bytes (killed between a bundle's rewrite and its copies): copy from the
          bundle, so its published bytes stay as they are, unless the bundle does not
          verify, in which case it is rebuilt from the events.
        """
        body = PithNumber.parse(subject).body
        bkey, skey, wkey = bundle_paths(body)
        data = self.store.get(bkey)
        bundle: Any = None
        if data is not None:
            try:
                bundle = loads(data)
            except ValueError:
                bundle = None
        self.refuse_reordered(paper, body, bundle)
        if not self._is_sound(bundle, data, events):
            self.write(paper, subject, events)
            return
        assert data is not None
        state = bundle.get("state")
        state_data = self.codec.compact(state) if isinstance(state, dict) else None
        # missing, or stale: killed between a bundle's rewrite and its copies
        missing = [k for k, want in ((skey, state_data), (wkey, data)) if self.store.get(k) != want]
        if not missing:
            self.writer.ensure_page(paper, body, bundle)  # a page lost or stale on its own
            return
        if state_data is None or not verify_bundle(bundle).ok:
            self.write(paper, subject, events)
            return
        if skey in missing:
            self.writer.put(paper, skey, state_data, changed=True)
        if wkey in missing:
            self.writer.put_copy(paper, wkey, data, of=bkey)
        self.writer.ensure_page(paper, body, bundle)

    def _is_sound(self, bundle: Any, data: bytes | None, events: list[dict[str, Any]]) -> bool:
        """The published bundle lists exactly the stored events, in the publisher's
        bytes, with copies equal to the stored events and a signature that verifies.

        A bundle re-serialised by someone else is rebuilt too (the signature covers
        its content, not its bytes, so only the publisher's form is known good), and
        so is one whose content was changed (`verify STORE` fails it).
        """
        listed = (
            {e.get("event_id") for e in bundle.get("events", []) if isinstance(e, dict)}
            if isinstance(bundle, dict) and isinstance(bundle.get("events"), list)
            else None
        )
        return not (
            listed is None
            or listed != {e["event_id"] for e in events}
            or self.codec.compact(bundle) != data
            or not copies_are_stored(bundle["events"], events)
            or not self.keys.signed_by_known_key(bundle)
        )

    def refuse_dropping(
        self, paper: Paper, body: str, events: list[dict[str, Any]], published: bytes | None
    ) -> None:
        """Stop when the published bundle lists an event the store no longer holds.

        Why: events are write-once and written before their bundle, so a listed event
        that is not stored was deleted; a bundle re-derived without it would make the
        loss silent and signed. Only a bundle whose signature verifies with a key we
        know is believed (a forged list is no reason to stop; it is rebuilt).
        """
        if published is None:
            return
        try:
            old = loads(published)
        except ValueError:
            return  # not a bundle we signed: it is replaced from the verified events
        self.refuse_reordered(paper, body, old)
        if not self.keys.signed_by_known_key(old):
            return  # not a bundle we signed: it is replaced from the verified events
        try:
            listed = {e["event_id"] for e in old["events"]}
        except (KeyError, TypeError):
            return
        gone = sorted(listed - {e["event_id"] for e in events})
        if gone:
            more = f" (and {len(gone) - 1} more)" if len(gone) > 1 else ""
            raise IntegrityError(
                f"lists event {gone[0]}{more}, which is not in {event_prefix(body)} (deleted?); "
                "not re-derived without it; run `verify` on the store",
                key=bundle_paths(body)[0],
            )

    def refuse_reordered(self, paper: Paper, body: str, bundle: Any) -> None:
        """Stop when a stored event and its copy in the published bundle hold the same
        content in another key order (`audit.reordered_events`, as `verify` finds it).

        Why: such an event passes every per-object check, and nothing would be
        re-signed (its content is the same), so the paper's writers would end clean
        while `verify STORE` reported the object.
        """
        if not isinstance(bundle, dict):
            return
        bkey = bundle_paths(body)[0]
        events = self.reader.checked_events(paper, body)
        for key, reason in reordered_events(events, bundle.get("events"), bkey):
            raise IntegrityError(f"stored event {reason}; run `verify` on the store", key=key)


def published_as(
    store: Store, signer: Signer, codec: Codec, body: str, bundle: dict[str, Any], data: bytes | None
) -> bool:
    """The published bundle (`data`) is `bundle` apart from when it was built, it is
    signed by `signer` (the signature verifies), and its state and .well-known copies
    match it."""
    _, skey, wkey = bundle_paths(body)
    try:
        old = loads(data) if data is not None else None
    except ValueError:
        return False
    if not isinstance(old, dict) or not isinstance(old.get("bundle_signature"), dict):
        return False
    if {k: v for k, v in old.items() if k not in REBUILD_VOLATILE} != {
        k: v for k, v in bundle.items() if k not in REBUILD_VOLATILE
    }:
        return False
    sig = old["bundle_signature"]
    digest = bundle_sha256(old)
    if (
        sig.get("key_id") != signer.key_id
        or sig.get("bundle_sha256") != digest
        or not isinstance(sig.get("signature_b64"), str)
        or not verify_signature(signer.public_key, digest, sig["signature_b64"])
    ):
        return False
    if codec.compact(old) != data:  # re-serialised by someone else
        return False
    return store.get(skey) == codec.compact(old["state"]) and store.get(wkey) == data


def copies_are_stored(copies: list[Any], events: list[dict[str, Any]]) -> bool:
    """Each event copy a bundle holds equals a stored copy of that event."""
    stored: dict[str, list[dict[str, Any]]] = {}
    for e in events:
        stored.setdefault(e["event_id"], []).append(e)
    return all(
        isinstance(c, dict) and any(c == e for e in stored.get(str(c.get("event_id")), [])) for c in copies
    )


def dedupe_sorted(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One copy per event id, in merge order, so bundles list events deterministically.

    Of several copies of one id (an event re-signed after a key rotation), the most
    recently signed is kept, so a re-issued bundle carries the new key's signatures.
    """
    seen: dict[str, dict[str, Any]] = {}
    for e in events:
        have = seen.get(e["event_id"])
        if have is None or str(e["signature"].get("signed_at", "")) > str(
            have["signature"].get("signed_at", "")
        ):
            seen[e["event_id"]] = e
    return sorted(
        seen.values(),
        key=lambda e: (e["created_at"], 0 if e["event_type"] == "record_created" else 1, e["event_id"]),
    )
