"""Key rotation and receipt re-issue: the loader re-signing a store (beside
`publish.Publisher`, which it drives; `signing/` holds only the signers).

Rotation: the store's `pith-signing-key.json` lists every key that ever signed
there; rotating to a new key sets `rotates_at` on the keys it replaces (their
signatures count up to that instant; a verifier given the document rejects
later ones) and makes the new key the document's head.

Re-issue (`pith-pipeline receipts reissue --store S --signer NEW`), and why it
looks the way it does. A record's receipt sits inside its `record_created`
payload, and that payload is hashed into the event id; re-signing the receipt in
place would change the event id, break every `supersedes`/`prev_event` link and
turn the old and the new `record_created` into an equivocation. So re-issue:

1. re-signs every registry event's `signature` block with the new key. The
   signature is outside the hashed content, so ids do not change. The event store
   is write-once, so the re-signed copy is a new object beside the original:
   `events/<ID>/<content_sha256>.sig-<key_id>.json`. The merge keeps the first
   copy of an id whose signature verifies; bundles carry the most recently signed
   copy (`publish.bundles.dedupe_sorted`).
2. publishes the re-issued receipt (new `key_id`, `signature_b64`, `signed_at`,
   `last_reissued_at`; the same `canonical_sha256` and `first_computed_at`) in a
   new `correction` event, payload `{"kind": "receipt_reissued", "record_created":
   <event id>, "receipt": {...}}`, which `supersedes` the record's previous
   re-issue event so only the latest one is current. The original receipt stays
   in `record_created`, still valid under the old key (signed before its
   `rotates_at`). The verifier checks both and reports the re-issue.
3. rebuilds and re-signs every bundle with the new key.

Running it again with the same key changes nothing.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from pith_pipeline.clock import system_clock
from pith_pipeline.core.canonical_json import dumps_compact, loads_stored
from pith_pipeline.core.events import (
    EVENT_SIGNED_MESSAGE,
    SignerInfo,
    make_event,
    receipt,
    sign_event,
    signature_block,
)
from pith_pipeline.core.keys import PublicKey, Signer
from pith_pipeline.core.layout import bundle_paths, event_key, resigned_event_key
from pith_pipeline.core.pith_record import PithNumber
from pith_pipeline.core.timeutil import Clock, iso_micros, iso_seconds
from pith_pipeline.core.verify import RECEIPT_REISSUED
from pith_pipeline.publish import BuildConfig, Publisher
from pith_pipeline.storage.base import Store


def rotate_keys(pub: Publisher, now: str) -> list[str]:
    """Set `rotates_at = now` on every other root key; return the ids rotated."""
    rotated = []
    current = {k.key_id for k in pub.signer.published_keys()}
    for kid, k in list(pub.keys.items()):
        if kid in current or k.certificate is not None or k.rotates_at:
            continue
        pub.keys[kid] = PublicKey(k.key_id, k.public_key, url=k.url, notes=k.notes, rotates_at=now)
        rotated.append(kid)
    pub.publish_key_document()
    return rotated


@dataclass(slots=True)
class ReissueSummary:
    """What a re-issue did: records (subjects) seen, and what it re-signed."""

    subjects: int = 0
    events_resigned: int = 0
    receipts_reissued: int = 0
    bundles_signed: int = 0
    rotated: list[str] = field(default_factory=list)

    def line(self) -> str:
        return (
            f"{self.subjects} records, {self.events_resigned} events re-signed, "
            f"{self.receipts_reissued} receipts re-issued, {self.bundles_signed} bundles "
            f"signed; rotated: {', '.join(self.rotated) or 'none'}"
        )


class Reissuer:
    """Re-signs one store's events, receipts and bundles with a new key."""

    def __init__(
        self,
        store: Store,
        signer: Signer,
        config: BuildConfig | None = None,
        *,
        clock: Clock = system_clock,
        log_signer_spec: str | None = None,
        publisher: Publisher | None = None,
    ) -> None:
        """`log_signer_spec`: the log key the command ends with (as for `Publisher`).
        `publisher`: the one a `Run` opened with `rotating=True`, used in place of a
        new one (its clock is then the run's)."""
        self.pub = publisher or Publisher(
            store, signer, config, clock=clock, rotating=True, log_signer_spec=log_signer_spec
        )
        clock = self.pub.clock
        self.store = store
        self.signer = signer
        self.clock = clock
        self.summary = ReissueSummary()

    def subjects(self) -> list[str]:
        """The ids of every subject with stored events (`events/<ID>/`), sorted."""
        return sorted({k.split("/")[1] for k in self.store.list("events/")})

    def run(self, *, workers: int = 8, progress: Callable[[int], None] | None = None) -> ReissueSummary:
        """Rotate the store's other root keys, then re-issue every subject on `workers`
        threads (`progress(1)` after each); safe to run again."""
        self.summary.rotated = rotate_keys(self.pub, iso_micros(self.clock()))
        bodies = self.subjects()

        def one(body: str) -> None:
            self.reissue_body(body)
            if progress:
                progress(1)

        if workers <= 1:
            for body in bodies:
                one(body)
        else:
            with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="reissue") as pool:
                list(pool.map(one, bodies))
        return self.summary

    def _ours(self, ev: dict[str, Any]) -> bool:
        """An event signed by this registry with a key of the store's."""
        signer = ev.get("signer") or {}
        return signer.get("signer_type") == "pith_registry" and signer.get("key_id") in self.pub.keys

    def reissue_body(self, body: str) -> None:
        """Re-sign one subject's events, re-issue its receipts and re-sign its bundles,
        each write fenced by the run's lease; what is already done is left alone."""
        if self.pub.lease is not None:  # a writer whose lease is gone stops here
            self.pub.lease.check()
        events = self.pub.reader.subject_events(self.pub.run_paper(), body)
        by_id: dict[str, list[dict[str, Any]]] = {}
        for e in events:
            by_id.setdefault(e["event_id"], []).append(e)
        now = self.clock()
        signed_at = iso_micros(now)
        # 1. a copy of every registry event signed by the new key
        todo = [
            copies[0]
            for copies in by_id.values()
            if self._ours(copies[0])
            and not any(c["signature"]["key_id"] == self.signer.key_id for c in copies)
        ]
        sigs = self.signer.sign_digests([bytes.fromhex(e["content_sha256"]) for e in todo])
        for e, sig in zip(todo, sigs, strict=True):
            copy = {
                **e,
                "signature": signature_block(
                    self.signer,
                    e["content_sha256"],
                    EVENT_SIGNED_MESSAGE,
                    signed_at,
                    base64.b64encode(sig).decode("ascii"),
                ),
            }
            self.pub.writer.put_once(
                self.pub.run_paper(),
                resigned_event_key(body, e["content_sha256"], self.signer.key_id),
                dumps_compact(copy),
            )
            events.append(copy)
        self.summary.events_resigned += len(todo)
        # 2. the re-issued receipt of each subject's applied record_created
        for subject in sorted({e["subject_pith_number"] for e in events}):
            mine = [e for e in events if e["subject_pith_number"] == subject]
            extra = self._reissue_receipt(subject, mine, now)
            if extra is not None:
                self.pub.writer.put_once(
                    self.pub.run_paper(), event_key(body, extra["content_sha256"]), dumps_compact(extra)
                )
                mine.append(extra)
                events.append(extra)
                self.summary.receipts_reissued += 1
            # 3. the bundle, signed by the new key (left alone when it already is and
            # nothing changed, so a second run writes nothing)
            if todo or extra is not None or not self._bundle_signed_by_me(subject):
                self.pub.bundles.write(self.pub.run_paper(), subject, mine)
                self.summary.bundles_signed += 1
        self.summary.subjects += 1

    def _bundle_signed_by_me(self, subject: str) -> bool:
        """The subject's published bundle is signed by the new key."""
        key = bundle_paths(PithNumber.parse(subject).body)[0]
        raw = self.store.get(key)
        if raw is None:
            return False
        bundle = loads_stored(raw, key)
        sig = bundle.get("bundle_signature") if isinstance(bundle, dict) else None
        return isinstance(sig, dict) and sig.get("key_id") == self.signer.key_id

    def _reissue_receipt(
        self, subject: str, events: Iterable[dict[str, Any]], now: Any
    ) -> dict[str, Any] | None:
        evs = list(events)
        creations = sorted(
            (e for e in evs if e["event_type"] == "record_created"),
            key=lambda e: (e["created_at"], e["event_id"]),
        )
        if not creations:
            return None
        rc = creations[0]
        previous = [
            e
            for e in evs
            if e["event_type"] == "correction"
            and e["payload"].get("kind") == RECEIPT_REISSUED
            and e["payload"].get("record_created") == rc["event_id"]
        ]
        if any(e["payload"]["receipt"]["key_id"] == self.signer.key_id for e in previous):
            return None  # already re-issued with this key
        old = rc["payload"]["receipt"]
        micros = iso_micros(now)
        new = receipt(
            signer=self.signer,
            canonical_sha256=old["canonical_sha256"],
            first_computed_at=old["first_computed_at"],
            last_reissued_at=micros,
            signed_at=micros,
            builder_version=old.get("builder_version", self.pub.config.builder_version),
        )
        ev = make_event(
            event_type="correction",
            subject=subject,
            payload={"kind": RECEIPT_REISSUED, "record_created": rc["event_id"], "receipt": new},
            signer_info=SignerInfo.for_signer(self.signer, self.pub.config.signer_id),
            created_at=iso_seconds(now),
            supersedes=sorted({e["event_id"] for e in previous}),
        )
        return sign_event(ev, self.signer, micros)


def reissue(
    store: Store,
    signer: Signer,
    config: BuildConfig | None = None,
    *,
    clock: Clock = system_clock,
    workers: int = 8,
    progress: Callable[[int], None] | None = None,
    log_signer_spec: str | None = None,
) -> ReissueSummary:
    """Rotate to `signer` and re-sign every receipt, event and bundle in `store`."""
    reissuer = Reissuer(store, signer, config, clock=clock, log_signer_spec=log_signer_spec)
    return reissuer.run(workers=workers, progress=progress)
