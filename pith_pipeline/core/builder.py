"""From an arXiv record to its signed events and bundle: the build path.

Pure: it takes a record, a signer and instants, and returns objects. Deciding
what is new, unchanged or superseded needs the store and lives in `pipeline`.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from typing import Any

from pith_pipeline.core.bundle import Site, build_bundle
from pith_pipeline.core.events import (
    BUILDER_VERSION,
    SignerInfo,
    graph_snapshot_payload,
    make_event,
    receipt,
    record_created_payload,
    sign_event,
)
from pith_pipeline.core.keys import PublicKey, Signer
from pith_pipeline.core.model import ArxivRecord
from pith_pipeline.core.record import (
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
    def of(cls, rec: ArxivRecord) -> Identity:
        canon = canonical_record(rec)
        digest = canonical_sha256(canon)
        return cls(rec, canon, digest, PithNumber.from_canonical(canon, digest))


@dataclass(frozen=True, slots=True)
class RecordEvents:
    identity: Identity
    events: list[dict[str, Any]]
    aliases: list[dict[str, Any]]

    @property
    def record_created_id(self) -> str:
        return str(self.events[0]["event_id"])


def build_record_events(identity: Identity, signer: Signer, signer_id: str, now: datetime, *,
                        supersedes: Sequence[str] = (),
                        builder_version: str = BUILDER_VERSION) -> RecordEvents:
    """A new record's `record_created` and `graph_snapshot` events, signed."""
    created_at, micros = _stamps(now)
    info = SignerInfo.for_signer(signer, signer_id)
    rcpt = receipt(signer=signer, canonical_sha256=identity.canonical_sha256,
                   first_computed_at=micros, last_reissued_at=micros, signed_at=micros,
                   builder_version=builder_version)
    created = make_event(
        event_type="record_created", subject=identity.subject,
        payload=record_created_payload(identity.canonical, identity.canonical_sha256, rcpt),
        signer_info=info, created_at=created_at, supersedes=list(supersedes), trusted=True)
    snapshot = make_event(
        event_type="graph_snapshot", subject=identity.subject,
        payload=graph_snapshot_payload(identity.record, identity.canonical, builder_version),
        signer_info=info, created_at=created_at, trusted=True)
    sign_event(created, signer, micros)
    sign_event(snapshot, signer, micros)
    src = identity.canonical["source"]  # the record's version, parsed once already
    aliases = source_aliases(src["id"], src["version"], identity.body, created_at)
    return RecordEvents(identity, [created, snapshot], aliases)


def correction_event(*, old_subject: str, new_subject: str, arxiv_version: str, signer: Signer,
                     signer_id: str, now: datetime) -> dict[str, Any]:
    """Tells readers of a superseded record where the newer version lives."""
    ev = make_event(
        event_type="correction", subject=old_subject,
        payload={"kind": "superseded", "pith_number": new_subject,
                 "arxiv_version": arxiv_version},
        signer_info=SignerInfo.for_signer(signer, signer_id), created_at=iso_seconds(now),
        trusted=True)
    return sign_event(ev, signer, iso_micros(now))


def aliases_from_events(events: Sequence[dict[str, Any]], body: str) -> list[dict[str, Any]]:
    """Re-derive a record's aliases from its applied `record_created` (for rebuilds)."""
    creations = sorted((e for e in events if e.get("event_type") == "record_created"),
                       key=lambda e: (e["created_at"], e["event_id"]))
    if not creations:
        return []
    first = creations[0]
    src = first["payload"]["canonical_record"]["source"]
    return source_aliases(src["id"], int(src["version"]), body, first["created_at"])


def sign_bundle(*, subject: str, canonical: dict[str, Any], canonical_hex: str,
                events: Sequence[dict[str, Any]], aliases: Sequence[dict[str, Any]],
                public_keys: Sequence[PublicKey], site: Site, signer: Signer,
                now: datetime, trusted: Collection[Any] = ()) -> dict[str, Any]:
    """`trusted`: the event objects this process just built and signed (see `merge`)."""
    return build_bundle(subject=subject, canonical=canonical, canonical_hex=canonical_hex,
                        events=events, aliases=aliases, public_keys=public_keys, site=site,
                        built_at=_stamps(now)[0], signer=signer, signed_at=_stamps(now)[1],
                        trusted=trusted)
