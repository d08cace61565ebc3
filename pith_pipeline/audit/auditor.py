"""The store audit's checks of one subject (its events, bundle, state, copies and
page) and of the arXiv pointers, one `Finding` per damaged object."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from pith_pipeline.audit.events import SubjectEvents, read_events, reordered_events
from pith_pipeline.audit.findings import (
    MAX_BUNDLE_BYTES,
    MAX_EVENT_BYTES,
    MAX_SMALL_BYTES,
    Finding,
    in_order,
    publisher_bytes,
)
from pith_pipeline.core.arxiv_pointer import ArxivPointer, arxiv_id_of_pointer, listed_bodies
from pith_pipeline.core.documents import Bundle, State
from pith_pipeline.core.keys import PublicKey
from pith_pipeline.core.layout import POINTERS, bundle_paths, event_prefix, page_key, pointer_key
from pith_pipeline.core.stored_events import KeyRing
from pith_pipeline.core.verify import FAIL, Report, verify_bundle
from pith_pipeline.errors import IntegrityError
from pith_pipeline.pages.site import page_problem
from pith_pipeline.storage.base import Store, get_capped


class Auditor:
    """Audits the subjects and pointers of one store, with one key ring."""

    def __init__(
        self,
        store: Store,
        keyring: KeyRing,
        *,
        pinned: str | None,
        trusted: list[PublicKey] | None,
        concurrency: int = 1,
        log_prefix: str | None = None,
    ) -> None:
        self.store = store
        #: what the store's record pages name as its log (`pages.site.store_log_prefix`)
        self.log_prefix = log_prefix
        self.keyring = keyring
        self.pinned = pinned
        self.trusted = trusted
        self.concurrency = concurrency
        #: arXiv id -> pith numbers the bundles say are versions of it
        self.by_arxiv: dict[str, set[str]] = {}
        #: pith number -> (arXiv id, version) its bundle's source says
        self.source_of: dict[str, tuple[str, Any]] = {}
        #: body -> ids of its verified record_created events and of its damaged objects
        self.created: dict[str, set[str]] = {}

    def read(self, key: str, limit: int) -> tuple[bytes | None, Finding | None]:
        try:
            return get_capped(self.store, key, limit), None
        except IntegrityError as exc:
            return None, Finding(key, exc.message)

    def audit_body(self, body: str, event_keys: list[str]) -> tuple[list[Finding], list[Report]]:
        """One subject's findings, and its bundle's report (to give `on_report` in order).

        A unit a thread can run: it touches only this subject's objects; the shared
        maps it fills (`created`, `by_arxiv`) are only read by `pointers`, after all."""
        reports: list[Report] = []
        return list(self.body(body, event_keys, reports.append)), reports

    def body(
        self, body: str, event_keys: list[str], on_report: Callable[[Report], None] | None = None
    ) -> Iterator[Finding]:
        evs = read_events(self.store, body, event_keys, self.keyring, MAX_EVENT_BYTES)
        for key, reason in evs.problems:
            yield Finding(key, reason)
        equivocation = evs.equivocation()
        if equivocation is not None:
            yield Finding(event_prefix(body), equivocation)
        # ids a pointer may name: verified creations, and damaged objects (already reported)
        self.created[body] = {e["event_id"] for e in evs.events if e["event_type"] == "record_created"} | (
            evs.ids - {e["event_id"] for e in evs.events}
        )
        bkey, skey, wkey = bundle_paths(body)
        raw, bad = self.read(bkey, MAX_BUNDLE_BYTES)
        if bad:
            yield bad
            return
        if raw is None:
            if evs.keys:
                yield Finding(bkey, f"missing, but events/{body}/ holds {len(evs.keys)} event objects")
            for other in (skey, wkey, page_key(body)):
                if self.store.exists(other):
                    yield Finding(other, f"present without {bkey}")
            return
        try:
            parsed = Bundle.parse(raw, bkey)
        except IntegrityError as exc:
            yield Finding(bkey, exc.message)
            return
        bundle = parsed.doc
        report = verify_bundle(bundle, pinned_fingerprint=self.pinned, source=bkey, trusted_keys=self.trusted)
        if on_report is not None:
            on_report(report)
        for c in report.checks:
            if c.status == FAIL:
                yield Finding(bkey, f"FAIL {c.name}: {c.detail}", check=c.name)
        if report.ok and publisher_bytes(bundle) != raw:  # the signature covers content, not bytes
            yield Finding(bkey, "re-serialised: not the compact JSON the publisher writes")
        subject = parsed.pith_number
        if subject is None or not subject.endswith(f":{body}"):
            yield Finding(bkey, f"is the bundle of {str(bundle.get('pith_number'))[:80]!r}, not of {body}")
        yield from self._events_listed(body, bkey, parsed, evs)
        yield from self._copies(bkey, raw, skey, wkey, bundle)
        yield from self._page(body, bundle)
        source = parsed.arxiv_source
        if source is not None and subject is not None:
            self.by_arxiv.setdefault(source[0], set()).add(subject)
            self.source_of[subject] = source

    def _page(self, body: str, bundle: dict[str, Any]) -> Iterator[Finding]:
        """The record's page is what its bundle renders to (`pages.site.page_problem`,
        the rule the publisher and `rebuild` write it by)."""
        key = page_key(body)
        raw, bad = self.read(key, MAX_BUNDLE_BYTES)
        if bad:
            yield bad
            return
        problem = page_problem(raw, bundle, self.log_prefix)
        if problem is not None:
            yield Finding(key, problem)

    def _events_listed(self, body: str, bkey: str, bundle: Bundle, evs: SubjectEvents) -> Iterator[Finding]:
        """The bundle lists exactly the events stored for its subject."""
        listed = bundle.events
        if listed is None:
            return  # verify_bundle failed it already
        in_bundle: dict[str, list[dict[str, Any]]] = {}
        for ev in listed:
            if isinstance(ev, dict) and isinstance(ev.get("event_id"), str):
                in_bundle.setdefault(ev["event_id"], []).append(ev)
        stored: dict[str, list[dict[str, Any]]] = {}
        where: dict[str, str] = {}
        for key, ev in zip(evs.event_keys, evs.events, strict=True):
            stored.setdefault(ev["event_id"], []).append(ev)
            where.setdefault(ev["event_id"], key)
        for eid in sorted(set(in_bundle) - evs.ids):
            yield Finding(bkey, f"lists event {eid}, which is not in events/{body}/ (deleted?)")
        for eid in sorted(set(stored) - set(in_bundle)):
            yield Finding(where[eid], f"stored, but {bkey} does not list it")
        for eid in sorted(set(stored) & set(in_bundle)):
            for ev in in_bundle[eid]:
                if not any(ev == s for s in stored[eid]):
                    yield Finding(bkey, f"its copy of event {eid} differs from every stored copy")
        for key, reason in reordered_events(evs, listed, bkey):
            yield Finding(key, reason)

    def _copies(
        self, bkey: str, raw: bytes, skey: str, wkey: str, bundle: dict[str, Any]
    ) -> Iterator[Finding]:
        """state.json is the bundle's state; the well-known bundle is the same bytes."""
        well, bad = self.read(wkey, MAX_BUNDLE_BYTES)
        if bad:
            yield bad
        elif well is None:
            yield Finding(wkey, f"missing (the copy of {bkey})")
        elif well != raw:
            yield Finding(wkey, f"differs from {bkey}")
        state_raw, bad = self.read(skey, MAX_BUNDLE_BYTES)
        if bad:
            yield bad
            return
        if state_raw is None:
            yield Finding(skey, f"missing (the state of {bkey})")
            return
        try:
            state = State.parse(state_raw, skey).doc
        except IntegrityError as exc:
            yield Finding(skey, exc.message)
            return
        if state != bundle.get("state"):
            yield Finding(skey, f"differs from the state in {bkey}")
        elif publisher_bytes(state) != state_raw:
            yield Finding(skey, "re-serialised: not the compact JSON the publisher writes")

    def pointers(self) -> Iterator[Finding]:
        """Each arXiv pointer is well formed, names bundles that exist with their
        stored record_created, and every bundled arXiv version is in its pointer."""
        seen: set[str] = set()
        keys = (k for k in self.store.list(POINTERS) if k.endswith(".json"))
        reads = in_order(lambda k: (k, *self.read(k, MAX_SMALL_BYTES)), keys, self.concurrency)
        for key, raw, bad in reads:
            arxiv_id = arxiv_id_of_pointer(key) or key[len(POINTERS) : -len(".json")]
            seen.add(arxiv_id)
            if bad:
                yield bad
                continue
            if raw is None:
                continue
            yield from self._pointer(key, arxiv_id, raw)
        for arxiv_id in sorted(self.by_arxiv):
            if arxiv_id not in seen:
                yield from self._missing_pointer(arxiv_id)

    def _missing_pointer(self, arxiv_id: str) -> Iterator[Finding]:
        subjects = self.by_arxiv.get(arxiv_id)
        if subjects:
            yield Finding(pointer_key(arxiv_id), f"missing, but bundles exist for {min(subjects)}")

    def pointers_of(self, arxiv_ids: Iterable[str]) -> Iterator[Finding]:
        """`pointers` for the arXiv ids `arxiv_ids` only (each pointer read once).

        Before checking, the subjects each pointer lists that were not audited yet are
        (their findings come first), so the pointer is held to every version's bundle."""
        ids = sorted(set(arxiv_ids))
        reads = dict(
            in_order(lambda aid: (aid, self.read(pointer_key(aid), MAX_SMALL_BYTES)), ids, self.concurrency)
        )
        extra: set[str] = set()
        for raw, _bad in reads.values():
            extra.update(listed_bodies(raw))
        for body in sorted(extra - set(self.created)):
            yield from self.body(body, list(self.store.list(event_prefix(body))))
        for aid in ids:
            raw, bad = reads[aid]
            if bad:
                yield bad
            elif raw is None:
                yield from self._missing_pointer(aid)
            else:
                yield from self._pointer(pointer_key(aid), aid, raw)

    def _pointer(self, key: str, arxiv_id: str, raw: bytes) -> Iterator[Finding]:
        """The pointer keeps its rule (`ArxivPointer.parse`), lists every bundled
        version of its paper, and each record it lists is that version of this paper
        with a verified stored `record_created`."""
        try:
            pointer = ArxivPointer.parse(raw, key)
        except IntegrityError as exc:
            yield Finding(key, exc.message)
            return
        for subject in sorted(self.by_arxiv.get(arxiv_id, set()) - {r.pith_number for r in pointer.records}):
            yield Finding(key, f"does not list {subject}, whose bundle is a version of {arxiv_id}")
        for r in pointer.records:
            # a genuine record of another paper (or version) is no record of this one
            source = self.source_of.get(r.pith_number)
            if source is not None and source != (arxiv_id, r.version):
                yield Finding(
                    key,
                    f"lists {r.pith_number} as version {r.version} of {arxiv_id}, "
                    f"but its bundle is version {source[1]} of {source[0]}",
                )
            elif r.record_created not in self.created.get(r.body, set()):
                yield Finding(
                    key,
                    f"lists {r.pith_number} with record_created {r.record_created}, "
                    f"not a verified event in events/{r.body}/",
                )
