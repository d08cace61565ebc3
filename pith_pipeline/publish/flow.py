"""One record through its paper: what is published is repaired, what is new is built,
and either way the paper's arXiv pointer and supersession follow.

Why its own part: this is the order of a paper's steps, the one sequence that keeps
a killed run repairable (events, then bundle, then pointer, then corrections), and
the one place a paper's outcome is counted (`built`, `unchanged`, `superseded`). The
parts it drives each do one step; the `Publisher` decides which records reach it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pith_pipeline.core.arxiv_record import ArxivRecord
from pith_pipeline.core.builder import Identity
from pith_pipeline.publish.build import BuildParts, RecordBuilder, events_then_bundle
from pith_pipeline.publish.bundles import Bundles
from pith_pipeline.publish.context import Paper
from pith_pipeline.publish.known import KnownAbsent
from pith_pipeline.publish.reading import StoredState
from pith_pipeline.publish.supersession import Versions


def is_published(events: list[dict[str, Any]]) -> bool:
    """A subject is published once a `record_created` of it is stored."""
    return any(e.get("event_type") == "record_created" for e in events)


@dataclass(frozen=True, slots=True)
class PaperFlow:
    """Publishes one record in the context of its paper (`Paper`: where it is counted,
    what it read), through the run's parts.

    `builder`: how a paper with no stored event is built (`build.ONE_PASS`, or the
    reference); a paper with stored events but no `record_created` is always built
    events first (`build.events_then_bundle`), its bundle merged with what is stored.
    """

    known: KnownAbsent
    reader: StoredState
    bundles: Bundles
    versions: Versions
    parts: BuildParts
    builder: RecordBuilder

    def publish(self, paper: Paper, rec: ArxivRecord) -> Identity:
        """Publish `rec`: repaired where a killed run left it (`repair`), else built
        (`build`); an `IntegrityError` names a stored object that failed its checks."""
        ident = self.known.identity(rec, self.parts.canon)
        existing = self.reader.subject_events(paper, ident.body)
        if is_published(existing):
            self.repair(paper, ident, existing)
        else:
            self.build(paper, ident, existing)
        return ident

    def repair(self, paper: Paper, ident: Identity, existing: list[dict[str, Any]]) -> None:
        """A published record: finish what a killed run left out (its snapshot, its
        bundle and copies, its pointer), then its versions' corrections."""
        existing = self.versions.complete_snapshot(paper, ident, existing)
        self.bundles.ensure(paper, ident.subject, existing)
        self.versions.update_pointer(paper, ident, existing)
        # counted (and indexed) once its own objects are sound: a paper stopped on one
        # of them is counted failed only, and its bundle is not read for the index
        summary = paper.summary
        summary.unchanged += 1
        summary.seen.append(ident.subject)
        summary.superseded += self.versions.reconcile(paper, ident.record.id)

    def build(self, paper: Paper, ident: Identity, existing: list[dict[str, Any]]) -> None:
        """A new record: refused when its paper lost its events (`refuse_orphan`), else
        built on the newest older version, added to the pointer, and reconciled."""
        if not existing:
            self.reader.refuse_orphan(ident.body)
        now = self.parts.clock()
        previous = self.versions.previous(paper, ident)
        supersedes = [previous["record_created"]] if previous else []
        if not existing:  # the common case
            built = self.builder(self.parts, paper, ident, now, supersedes)
        else:
            built = events_then_bundle(self.parts, paper, ident, now, supersedes, existing)
        summary = paper.summary
        summary.built += 1
        summary.pith_numbers.append(ident.subject)
        summary.seen.append(ident.subject)
        self.versions.update_pointer(paper, ident, existing + built)
        summary.superseded += self.versions.reconcile(paper, ident.record.id)
