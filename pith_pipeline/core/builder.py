"""From an arXiv record to its signed events and bundle: the build path.

Pure: it takes a record, a signer and instants, and returns objects. Deciding
what is new, unchanged or superseded needs the store and lives in `pipeline`.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from itertools import pairwise
from typing import Any

from pith_pipeline.core.arxiv_record import ArxivRecord
from pith_pipeline.core.bundle import BUNDLE_TYPE, BUNDLE_VERSION, Site, build_bundle
from pith_pipeline.core.canonical_json import FAST, CanonicalJSON
from pith_pipeline.core.documents import Bundle, Event, State
from pith_pipeline.core.events import (
    BUILDER_VERSION,
    BUNDLE_SIGNED_MESSAGE,
    SignerInfo,
    graph_snapshot_payload,
    make_event,
    receipt,
    record_created_payload,
    sign_event,
    signature_block,
)
from pith_pipeline.core.keys import PublicKey, Signer
from pith_pipeline.core.merge import CURRENT_LISTS, MERGE_VERSION, normalize_aliases, state_entry
from pith_pipeline.core.pith_record import (
    PithNumber,
    canonical_record,
    canonical_sha256,
    source_aliases,
)
from pith_pipeline.core.timeutil import iso_micros, iso_seconds


@lru_cache(maxsize=64)
def _stamps(now: datetime) -> tuple[str, str]:
    """(seconds, microseconds) forms of an instant; a run formats the same few over and over."""
    return iso_seconds(now), iso_micros(now)


@dataclass(frozen=True, slots=True)
class Identity:
    """What a record is named by, computed before anything is signed."""

    record: ArxivRecord
    canonical: dict[str, Any]
    canonical_sha256: str
    pith: PithNumber

    @property
    def subject(self) -> str:
        return str(self.pith)

    @property
    def body(self) -> str:
        return self.pith.body

    @classmethod
    def of(cls, rec: ArxivRecord, *, canon: CanonicalJSON = FAST) -> Identity:
        record = canonical_record(rec)
        digest = canonical_sha256(record, canon=canon)
        return cls(rec, record, digest, PithNumber.from_canonical(record, digest))


@dataclass(frozen=True, slots=True)
class RecordEvents:
    identity: Identity
    events: list[dict[str, Any]]
    aliases: list[dict[str, Any]]

    @property
    def record_created_id(self) -> str:
        return str(self.events[0]["event_id"])


def build_record_events(
    identity: Identity,
    signer: Signer,
    signer_id: str,
    now: datetime,
    *,
    supersedes: Sequence[str] = (),
    builder_version: str = BUILDER_VERSION,
    canon: CanonicalJSON = FAST,
) -> RecordEvents:
    """A new record's `record_created` and `graph_snapshot` events, signed."""
    created_at, micros = _stamps(now)
    info = SignerInfo.for_signer(signer, signer_id)
    rcpt = receipt(
        signer=signer,
        canonical_sha256=identity.canonical_sha256,
        first_computed_at=micros,
        last_reissued_at=micros,
        signed_at=micros,
        builder_version=builder_version,
    )
    created = make_event(
        event_type="record_created",
        subject=identity.subject,
        payload=record_created_payload(identity.canonical, identity.canonical_sha256, rcpt),
        signer_info=info,
        created_at=created_at,
        supersedes=list(supersedes),
        trusted=True,
        canon=canon,
    )
    snapshot = make_event(
        event_type="graph_snapshot",
        subject=identity.subject,
        payload=graph_snapshot_payload(identity.record, identity.canonical, builder_version, canon=canon),
        signer_info=info,
        created_at=created_at,
        trusted=True,
        canon=canon,
    )
    sign_event(created, signer, micros)
    sign_event(snapshot, signer, micros)
    src = identity.canonical["source"]  # the record's version, parsed once already
    aliases = source_aliases(src["id"], src["version"], identity.body, created_at)
    return RecordEvents(identity, [created, snapshot], aliases)


def snapshot_for(
    identity: Identity,
    created: dict[str, Any],
    signer: Signer,
    signer_id: str,
    *,
    canon: CanonicalJSON = FAST,
) -> dict[str, Any]:
    """The `graph_snapshot` that belongs with a stored `record_created`.

    Why: a run killed between a new record's two events leaves `record_created`
    alone, and a rerun sees the record as already there. Made with the stored event's
    `created_at`, signing time and builder version, by the same key (Ed25519 signs
    deterministically), it is the very event the killed run would have written.
    """
    micros = str(created["signature"]["signed_at"])
    version = str(created["payload"]["receipt"].get("builder_version", BUILDER_VERSION))
    snapshot = make_event(
        event_type="graph_snapshot",
        subject=identity.subject,
        payload=graph_snapshot_payload(identity.record, identity.canonical, version, canon=canon),
        signer_info=SignerInfo.for_signer(signer, signer_id),
        created_at=str(created["created_at"]),
        trusted=True,
        canon=canon,
    )
    return sign_event(snapshot, signer, micros)


def correction_event(
    *,
    old_subject: str,
    new_subject: str,
    arxiv_version: str,
    signer: Signer,
    signer_id: str,
    now: datetime,
    canon: CanonicalJSON = FAST,
) -> dict[str, Any]:
    """Tells readers of a superseded record where the newer version lives."""
    ev = make_event(
        event_type="correction",
        subject=old_subject,
        payload={"kind": "superseded", "pith_number": new_subject, "arxiv_version": arxiv_version},
        signer_info=SignerInfo.for_signer(signer, signer_id),
        created_at=iso_seconds(now),
        trusted=True,
        canon=canon,
    )
    return sign_event(ev, signer, iso_micros(now))


def aliases_from_events(events: Sequence[dict[str, Any]], body: str) -> list[dict[str, Any]]:
    """Re-derive a record's aliases from its applied `record_created` (for rebuilds)."""
    creations = sorted(
        (e for e in events if e.get("event_type") == "record_created"),
        key=lambda e: (e["created_at"], e["event_id"]),
    )
    if not creations:
        return []
    first = creations[0]
    src = first["payload"]["canonical_record"]["source"]
    return source_aliases(src["id"], int(src["version"]), body, first["created_at"])


def sign_bundle(
    *,
    subject: str,
    canonical: dict[str, Any],
    canonical_hex: str,
    events: Sequence[dict[str, Any]],
    aliases: Sequence[dict[str, Any]],
    public_keys: Sequence[PublicKey],
    site: Site,
    signer: Signer,
    now: datetime,
    trusted: Collection[Any] = (),
    canon: CanonicalJSON = FAST,
) -> dict[str, Any]:
    """`trusted`: the event objects this process just built and signed (see `merge`);
    `canon`: how everything is hashed (see `build_bundle`)."""
    return build_bundle(
        subject=subject,
        canonical=canonical,
        canonical_hex=canonical_hex,
        events=events,
        aliases=aliases,
        public_keys=public_keys,
        site=site,
        built_at=_stamps(now)[0],
        signer=signer,
        signed_at=_stamps(now)[1],
        trusted=trusted,
        canon=canon,
    )


@dataclass(frozen=True, slots=True)
class FreshBuild:
    """A new record, built, signed and serialised: what a fresh store receives."""

    identity: Identity
    events: list[dict[str, Any]]
    aliases: list[dict[str, Any]]
    bundle: dict[str, Any]
    event_bytes: list[bytes]
    bundle_bytes: bytes
    state_bytes: bytes


class FreshBuilder:
    """The build path for a record with no stored events, the common case of a backfill.

    It writes the same bytes as `build_record_events` followed by `sign_bundle` over
    those two events (tests/perf holds the two, and a reference path with `rfc8785`
    and `json`, byte-equal), doing each piece of work once: the state of a record
    whose only events are the two just signed is known without a general merge
    (nothing to deduplicate, verify or order), the per-run parts (signer block, key
    documents, links) are made once, and every hash is on the trusted fast path.
    Anything unusual (foreign supersedes, a key list without this signer's key)
    goes through the general path instead, and so does everything when `canon` takes
    nothing on trust (the reference).
    """

    def __init__(
        self,
        signer: Signer,
        signer_id: str,
        site: Site,
        public_keys: Sequence[PublicKey],
        *,
        builder_version: str = BUILDER_VERSION,
        canon: CanonicalJSON = FAST,
    ) -> None:
        self.signer = signer
        self.signer_id = signer_id
        self.site = site
        self.public_keys = list(public_keys)
        self.builder_version = builder_version
        self.canon = canon
        self._info = SignerInfo.for_signer(signer, signer_id)
        fp = signer.fingerprint
        # the general merge would find these events' key unknown: let it say so
        self._keys_ok = any(k.key_id == signer.key_id and k.fingerprint == fp for k in self.public_keys)
        self._key_docs = [k.to_json() for k in self.public_keys]
        self._keys_fast = canon.trust and canon.fast_safe(self._key_docs)
        # flat documents are copied per bundle; nested ones (certificates) rebuilt
        self._keys_flat = all(getattr(k, "certificate", None) is None for k in self.public_keys)

    def build(
        self, identity: Identity, now: datetime, bundle_now: datetime, *, supersedes: Sequence[str] = ()
    ) -> FreshBuild:
        """Events at `now`, the bundle at `bundle_now` (the publisher's two clock reads)."""
        built = build_record_events(
            identity,
            self.signer,
            self.signer_id,
            now,
            supersedes=supersedes,
            builder_version=self.builder_version,
            canon=self.canon,
        )
        events = built.events
        created, snapshot = events
        if (
            not self._keys_ok
            or not self._keys_fast
            or not all(type(s) is str for s in created["supersedes"])
            or {created["event_id"], snapshot["event_id"]} & set(created["supersedes"])
        ):
            bundle = sign_bundle(
                subject=identity.subject,
                canonical=identity.canonical,
                canonical_hex=identity.canonical_sha256,
                events=events,
                aliases=built.aliases,
                public_keys=self.public_keys,
                site=self.site,
                signer=self.signer,
                now=bundle_now,
                trusted=events,
                canon=self.canon,
            )
        else:
            bundle = self._bundle(identity, created, snapshot, built.aliases, bundle_now)
        return FreshBuild(
            identity,
            events,
            built.aliases,
            bundle,
            [Event(e).to_bytes() for e in events],
            Bundle(bundle).to_bytes(),
            State(bundle["state"]).to_bytes(),
        )

    def _state(
        self, subject: str, created: dict[str, Any], snapshot: dict[str, Any], aliases: list[dict[str, Any]]
    ) -> dict[str, Any]:
        """`merge` of exactly these two valid events, written out."""
        kinds = [a.get("alias_kind") for a in aliases]
        ours = all(type(k) is str for k in kinds) and all(str(x) < str(y) for x, y in pairwise(kinds))
        current: dict[str, Any] = {
            "canonical_record": created["payload"].get("canonical_record"),
            # `source_aliases` made them distinct and sorted by kind: normalising is copying
            "source_aliases": [dict(a) for a in aliases] if ours else normalize_aliases(aliases),
        }
        for name in CURRENT_LISTS:
            current[name] = []
        current["graph_snapshots"].append(state_entry(snapshot))
        current["record_created"] = state_entry(created)
        state: dict[str, Any] = {
            "state_type": "pith_open_graph_state",
            "state_version": "1.0",
            "pith_number": subject,
            "merge_version": MERGE_VERSION,
            "event_count": 2,
            "valid_event_count": 2,
            "invalid_event_count": 0,
            "equivocation_count": 0,
            "current": current,
            "equivocations": [],
            "invalid_events": [],
            "applied_event_ids": [created["event_id"], snapshot["event_id"]],
        }
        state["state_sha256"] = self.canon.sha256_trusted(state)
        return state

    def _bundle(
        self,
        identity: Identity,
        created: dict[str, Any],
        snapshot: dict[str, Any],
        aliases: list[dict[str, Any]],
        bundle_now: datetime,
    ) -> dict[str, Any]:
        """`build_bundle` for a fresh record, hashed once on the trusted path."""
        subject, body = identity.subject, identity.body
        canonical = identity.canonical
        src = canonical["source"]
        bundle: dict[str, Any] = {
            "bundle_type": BUNDLE_TYPE,
            "bundle_version": BUNDLE_VERSION,
            "pith_number": subject,
            "short_pith_number": identity.pith.short,
            "canonical_record": canonical,
            "canonical_sha256": identity.canonical_sha256,
            "source": {"kind": src["kind"], "id": src["id"], "version": src["version"]},
            "source_aliases": list(aliases),
            "events": [created, snapshot],
            "timestamp_proofs": [],
            "mirror_hints": [self.site.mirror_hint(body)],
            "public_keys": [dict(k) for k in self._key_docs]
            if self._keys_flat
            else [k.to_json() for k in self.public_keys],
            "merge_version": MERGE_VERSION,
            "built_at": _stamps(bundle_now)[0],
            "links": self.site.links(body),
            "state": self._state(subject, created, snapshot, aliases),
        }
        digest = self.canon.sha256_trusted(bundle)
        sig = signature_block(self.signer, digest, BUNDLE_SIGNED_MESSAGE, _stamps(bundle_now)[1])
        sig["bundle_sha256"] = digest
        bundle["bundle_signature"] = sig
        return bundle
