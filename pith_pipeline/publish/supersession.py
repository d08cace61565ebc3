"""A paper's versions: its arXiv pointer, and the corrections that tell each older
record where the newer one lives; both repaired on every touch of the paper.
"""

from __future__ import annotations

import itertools
from datetime import datetime
from typing import Any

from pith_pipeline.core.builder import Identity, correction_event, snapshot_for
from pith_pipeline.core.keys import Signer
from pith_pipeline.core.layout import event_key, event_prefix, pointer_key
from pith_pipeline.core.pith_record import PithNumber
from pith_pipeline.core.timeutil import Clock
from pith_pipeline.errors import IntegrityError
from pith_pipeline.publish.bundles import Bundles
from pith_pipeline.publish.context import Paper
from pith_pipeline.publish.reading import pointer_sort_key


class Versions:
    """Pointer updates, supersession and the completion of a killed record, for one run."""

    def __init__(self, signer: Signer, signer_id: str, clock: Clock, bundles: Bundles) -> None:
        self.signer = signer
        self.signer_id = signer_id
        self.clock = clock
        self.bundles = bundles
        self.reader = bundles.reader
        self.writer = bundles.writer

    def reconcile(self, paper: Paper, arxiv_id: str) -> int:
        """Make every published version of a paper point to its successor.

        Order: the pointer's (version, created_at, pith_number). Each record but the
        newest must carry a `correction` naming the record after it. Checked on every
        touch of the paper, new or unchanged, so supersession repairs itself whatever
        order versions were built in (v2 before v1) and wherever a run died. Returns
        the number of corrections written.
        """
        records = sorted(self.reader.pointer(paper, arxiv_id)["records"], key=pointer_sort_key)
        written = 0
        for older, newer in itertools.pairwise(records):
            old = PithNumber.parse(older["pith_number"])
            events = self.reader.subject_events(paper, old.body)
            if not any(e.get("event_type") == "record_created" for e in events):
                raise IntegrityError(
                    f"{pointer_key(arxiv_id)} lists {older['pith_number']}, whose events are missing; "
                    "run `verify` on the store",
                    key=event_prefix(old.body),
                )
            if any(
                e.get("event_type") == "correction"
                and isinstance(e.get("payload"), dict)
                and e["payload"].get("pith_number") == newer["pith_number"]
                for e in events
            ):
                # stored, but a kill may have come before its bundle was rewritten
                self.bundles.ensure(paper, older["pith_number"], events)
                continue
            version = f"{arxiv_id}v{newer['version']}"
            self.write_correction(paper, old, newer["pith_number"], version, self.clock())
            written += 1
        return written

    def write_correction(
        self, paper: Paper, old: PithNumber, new_subject: str, arxiv_version: str, now: datetime
    ) -> None:
        """Tell the superseded record's readers where the newer version lives."""
        corr = correction_event(
            old_subject=str(old),
            new_subject=new_subject,
            arxiv_version=arxiv_version,
            signer=self.signer,
            signer_id=self.signer_id,
            now=now,
            canon=self.writer.codec.canon,
        )
        self.writer.put_event(
            paper, event_key(old.body, corr["content_sha256"]), self.writer.codec.compact(corr)
        )
        self.bundles.write(paper, str(old), self.reader.subject_events(paper, old.body))

    def complete_snapshot(
        self, paper: Paper, ident: Identity, existing: list[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        """Write the `graph_snapshot` a run killed between a record's two events left out.

        Only for a `record_created` signed by this run's key: the snapshot is then the
        same event the killed run would have written (see `snapshot_for`).
        """
        if any(e.get("event_type") == "graph_snapshot" for e in existing):
            return existing
        mine = [
            e
            for e in existing
            if e.get("event_type") == "record_created"
            and isinstance(e.get("signature"), dict)
            and e["signature"].get("key_id") == self.signer.key_id
        ]
        if not mine:
            return existing
        ev = snapshot_for(ident, mine[0], self.signer, self.signer_id, canon=self.writer.codec.canon)
        self.writer.put_event(
            paper, event_key(ident.body, ev["content_sha256"]), self.writer.codec.compact(ev)
        )
        return self.reader.subject_events(paper, ident.body)

    def previous(self, paper: Paper, ident: Identity) -> dict[str, Any] | None:
        """The newest known record of this paper at or below the incoming version."""
        pointer = self.reader.pointer(paper, ident.record.id)
        older = [
            r
            for r in pointer["records"]
            if r["pith_number"] != ident.subject and r["version"] <= ident.record.version
        ]
        if not older:
            return None
        best: dict[str, Any] = max(older, key=pointer_sort_key)
        return best

    def update_pointer(self, paper: Paper, ident: Identity, events: list[dict[str, Any]]) -> None:
        """Add the record to its paper's pointer (written only when it gains it)."""
        pointer = self.reader.pointer(paper, ident.record.id)
        if any(r["pith_number"] == ident.subject for r in pointer["records"]):
            return
        refuse_lost_versions(ident, pointer, events)
        created = min(
            (e for e in events if e.get("event_type") == "record_created"),
            key=lambda e: (e["created_at"], e["event_id"]),
        )
        pointer["records"].append(
            {
                "version": ident.record.version,
                "pith_number": ident.subject,
                "record_created": created["event_id"],
                "created_at": created["created_at"],
                "canonical_sha256": ident.canonical_sha256,
            }
        )
        pointer["records"].sort(key=pointer_sort_key)
        pointer["latest"] = pointer["records"][-1]["pith_number"]
        # it gains a record, so its bytes change: written without reading them again
        data = self.writer.codec.pretty(pointer) + b"\n"
        self.writer.put(paper, pointer_key(ident.record.id), data, changed=True)


def refuse_lost_versions(ident: Identity, pointer: dict[str, Any], events: list[dict[str, Any]]) -> None:
    """Stop before adding a record to a pointer that lacks a version its events name.

    Why: a pointer is written after its record's events, and a version's events name
    its neighbours (its `record_created` supersedes the older record, a `correction`
    names the newer one), so a pointer lacking one of them lost it (deleted).
    Rewritten with this record alone, it would drop the other versions silently;
    `rebuild` re-derives it whole from the events.
    """
    created = {r["record_created"] for r in pointer["records"]}
    numbers = {r["pith_number"] for r in pointer["records"]} | {ident.subject}
    for e in events:
        if e.get("subject_pith_number") != ident.subject:
            continue
        named: list[str] = []
        if e.get("event_type") == "record_created":
            named = [s for s in e.get("supersedes") or [] if isinstance(s, str) and s not in created]
        elif e.get("event_type") == "correction" and isinstance(e.get("payload"), dict):
            newer = e["payload"].get("pith_number")
            if isinstance(newer, str) and newer not in numbers:
                named = [newer]
        if named:
            raise IntegrityError(
                f"does not list {named[0]}, which {ident.subject}'s events name (another "
                "version of the paper, lost from the pointer?); not rewritten without it; "
                "`rebuild` re-derives it from the events",
                key=pointer_key(ident.record.id),
            )
