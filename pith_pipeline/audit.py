"""Audit a store: every event object, bundle, state, well-known copy, page and pointer.

The event store (`events/<ID>/<content_sha256>.json`) is the source of truth:
bundles, states and arXiv pointers are derived from it. A tampered or deleted event
must therefore be found before anything derived is trusted or re-derived, so this
module serves two callers:

- the publisher (`build`, `ingest`, `rebuild`), through `subject_events`: a
  subject's stored events, each checked (`core.verify.check_stored_event`), and
  the problems by object; a subject with problems is not published from;
- `verify STORE` and `status --deep`, through `audit_store`: one `Finding` per
  damaged object, named by its path, the walk going on through the rest.

Every read is capped (`storage.base.get_capped`): a huge hostile object is a
finding, not an out-of-memory.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pith_pipeline.core.canonical_json import dumps_compact, loads
from pith_pipeline.core.keys import PublicKey
from pith_pipeline.core.layout import PUBLIC_KEY_FILE, bundle_paths, event_prefix, page_key, pointer_key
from pith_pipeline.core.pith_record import PithNumber
from pith_pipeline.core.verify import (
    EVENT_OBJECT,
    FAIL,
    KeyRing,
    Report,
    check_stored_event,
    verify_bundle,
)
from pith_pipeline.errors import CanonicalJSONError, IntegrityError
from pith_pipeline.storage.base import Store, get_capped

__all__ = [
    "MAX_BUNDLE_BYTES",
    "MAX_EVENT_BYTES",
    "MAX_SMALL_BYTES",
    "Finding",
    "KeyRing",
    "SubjectEvents",
    "audit_store",
    "audit_subjects",
    "keyring_of_store",
    "reordered_events",
    "subject_events",
]

#: Largest event object read (a record_created carries the whole canonical record).
MAX_EVENT_BYTES = 8 << 20
#: Largest bundle or state read (a record, its events and the merged state).
MAX_BUNDLE_BYTES = 64 << 20
#: Largest key document or arXiv pointer read.
MAX_SMALL_BYTES = 4 << 20

_BODY = re.compile(r"[A-Z2-7]{26}")
_T = TypeVar("_T")
_R = TypeVar("_R")


@dataclass(frozen=True, slots=True)
class Finding:
    """One damaged or inconsistent object: its store key and why, one line.

    `check`: set when the finding is a failed check of `verify_bundle` (the
    bundle's report, given to `on_report`, says the same at more length).
    """

    key: str
    reason: str
    check: str | None = None

    def line(self, store_url: str = "") -> str:
        where = f"{store_url.rstrip('/')}/{self.key}" if store_url else self.key
        return f"{where}: {self.reason}"

    def to_json(self) -> dict[str, str | None]:
        return {"key": self.key, "reason": self.reason, "check": self.check}


@dataclass(slots=True)
class SubjectEvents:
    """A subject's stored events after their checks.

    `events`: the objects that passed (in store order; several copies of one id
    when an event was re-signed). `problems`: `(object key, reason)` of every
    object that did not. `ids`: the event ids any stored object claims, passed or
    not, so a caller can tell a damaged event from a missing one.
    """

    body: str
    events: list[dict[str, Any]] = field(default_factory=list)
    problems: list[tuple[str, str]] = field(default_factory=list)
    #: every object key read, and the key of each of `events`
    keys: list[str] = field(default_factory=list)
    event_keys: list[str] = field(default_factory=list)
    ids: set[str] = field(default_factory=set)

    @property
    def ok(self) -> bool:
        return not self.problems

    def describe(self) -> str:
        """One line: the count, or the first damaged object and how many more."""
        if self.ok:
            return f"{event_prefix(self.body)}: {len(self.events)} stored events verified"
        key, reason = self.problems[0]
        more = len(self.problems) - 1
        return f"{key}: {reason}" + (f" (and {more} more damaged event objects)" if more else "")

    def error(self) -> IntegrityError:
        """The IntegrityError a publisher raises to stop this subject (first object named)."""
        key, reason = self.problems[0]
        more = len(self.problems) - 1
        tail = f" (and {more} more damaged event objects)" if more else ""
        return IntegrityError(f"stored event {reason}{tail}; run `verify` on the store", key=key)

    def raise_for_problems(self) -> None:
        if self.problems:
            raise self.error()

    def equivocation(self) -> str | None:
        """One line naming this subject's self-equivocation, or None.

        Every verified stored event is signed by a key of the registry's own key
        document, so two distinct `record_created` ids for one subject (or two events
        of one signer continuing the same `prev_event`) are the registry equivocating
        with itself: a writer suspended past its lease's TTL could write its own
        `record_created` beside the next writer's. The merge handles it (the first
        applies, the state lists the `conflicting_record`), but it is ours and
        permanent (events are write-once), so the audit reports it and the publisher
        names it (docs/pages/guarantees.md).
        """
        by_id: dict[str, str] = {}
        for key, ev in zip(self.event_keys, self.events, strict=True):
            by_id.setdefault(ev["event_id"], key)
        created = sorted({e["event_id"] for e in self.events if e["event_type"] == "record_created"})
        forks: dict[tuple[str, str], set[str]] = {}
        for e in self.events:
            signer, prev = e.get("signer"), e.get("prev_event")
            if isinstance(prev, str) and isinstance(signer, dict):
                forks.setdefault((str(signer.get("signer_id")), prev), set()).add(e["event_id"])
        groups = [("record_created events for one record", created)] if len(created) > 1 else []
        for (_signer, prev), ids in sorted(forks.items()):
            if len(ids) > 1:
                groups.append((f"events continuing {prev}", sorted(ids)))
        if not groups:
            return None
        return "self-equivocation: " + "; ".join(
            f"{len(ids)} {what}, signed by the registry's own keys: " + ", ".join(by_id[i] for i in ids)
            for what, ids in groups
        )


def _read_events(
    store: Store, body: str, keys: Iterable[str], keyring: KeyRing, max_bytes: int
) -> SubjectEvents:
    out = SubjectEvents(body)
    for key in keys:
        out.keys.append(key)
        # the id its name claims, and below the one its content claims: a damaged
        # object is reported once, as itself, not again as a missing event
        named = EVENT_OBJECT.fullmatch(key)
        if named is not None:
            out.ids.add("sha256:" + named.group(2))
        try:
            data = get_capped(store, key, max_bytes)
        except IntegrityError as exc:
            out.problems.append((key, exc.message))
            continue
        if data is None:
            continue  # deleted between listing and reading
        event, problem = check_stored_event(key, data, keyring)
        if event is not None and isinstance(event.get("event_id"), str):
            out.ids.add(event["event_id"])
        if problem is not None:
            out.problems.append((key, problem))
        elif event is not None:
            out.events.append(event)
            out.event_keys.append(key)
    return out


def subject_events(
    store: Store, body: str, keyring: KeyRing, *, max_bytes: int = MAX_EVENT_BYTES
) -> SubjectEvents:
    """Every stored event of the subject `body`, each checked against `keyring`.

    Store errors propagate (they stop a run); damaged objects are `problems`.
    """
    return _read_events(store, body, store.list(event_prefix(body)), keyring, max_bytes)


def reordered_events(evs: SubjectEvents, listed: Any, bkey: str) -> Iterator[tuple[str, str]]:
    """`(object key, reason)` of each stored event whose bundle copy (in `listed`, the
    bundle's `events`) has its content in another key order.

    Why: the publisher writes an event's object and its bundle copy from one value,
    so one of them was re-serialised; compact bytes with the keys reordered pass the
    per-object checks (hash and signature cover content). `verify STORE` and the
    publisher (which then stops the paper) share this check.
    """
    if not isinstance(listed, list):
        return
    copies: dict[str, list[dict[str, Any]]] = {}
    for ev in listed:
        if isinstance(ev, dict) and isinstance(ev.get("event_id"), str):
            copies.setdefault(ev["event_id"], []).append(ev)
    for key, ev in zip(evs.event_keys, evs.events, strict=True):
        same = [c for c in copies.get(ev["event_id"], []) if c == ev]
        if same and not any(_compact(c) == _compact(ev) for c in same):
            yield key, f"re-serialised: its keys are in another order than its copy in {bkey}"


def keyring_of_store(store: Store) -> tuple[KeyRing, list[Finding]]:
    """The keys the store's key document lists, and findings about that document."""
    from pith_pipeline.core.keys import read_key_document

    try:
        raw = get_capped(store, PUBLIC_KEY_FILE, MAX_SMALL_BYTES)
    except IntegrityError as exc:
        return KeyRing([]), [Finding(PUBLIC_KEY_FILE, exc.message)]
    if raw is None:
        return KeyRing([]), [Finding(PUBLIC_KEY_FILE, "missing: no event signature can be checked")]
    try:
        return KeyRing(read_key_document(raw, PUBLIC_KEY_FILE)), []
    except IntegrityError as exc:  # the parse reason; a finding, not a stop
        return KeyRing([]), [Finding(PUBLIC_KEY_FILE, exc.message)]


def _body_of(key: str, prefix: str) -> str | None:
    rest = key[len(prefix) :]
    body = rest.split("/", 1)[0]
    return body if _BODY.fullmatch(body) else None


def _grouped(keys: Iterable[str], prefix: str) -> Iterator[tuple[str | None, str]]:
    for key in keys:
        yield _body_of(key, prefix), key


def _bodies(store: Store) -> tuple[dict[str, list[str]], list[Finding]]:
    """Body -> its event object keys, for every body with events, a bundle or a state."""
    found: dict[str, list[str]] = {}
    stray: list[Finding] = []
    for body, key in _grouped(store.list("events/"), "events/"):
        if body is None:
            stray.append(Finding(key, "not an event object name (events/<ID>/<content sha256>.json)"))
            continue
        found.setdefault(body, []).append(key)
    for prefix in ("pith/", ".well-known/pith/"):
        for body, _key in _grouped(store.list(prefix), prefix):
            if body is not None:
                found.setdefault(body, [])
    return found, stray


def _compact(value: Any) -> bytes | None:
    """The bytes the publisher writes for `value` (None when it cannot be written)."""
    try:
        return dumps_compact(value)
    except CanonicalJSONError:
        return None


class _Auditor:
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
        evs = _read_events(self.store, body, event_keys, self.keyring, MAX_EVENT_BYTES)
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
            bundle = loads(raw)
        except ValueError as exc:
            yield Finding(bkey, f"unreadable bundle ({str(exc)[:160]})")
            return
        report = verify_bundle(bundle, pinned_fingerprint=self.pinned, source=bkey, trusted_keys=self.trusted)
        if on_report is not None:
            on_report(report)
        for c in report.checks:
            if c.status == FAIL:
                yield Finding(bkey, f"FAIL {c.name}: {c.detail}", check=c.name)
        if report.ok and _compact(bundle) != raw:  # the signature covers content, not bytes
            yield Finding(bkey, "re-serialised: not the compact JSON the publisher writes")
        if not isinstance(bundle, dict):
            return
        subject = bundle.get("pith_number")
        if not isinstance(subject, str) or not subject.endswith(f":{body}"):
            yield Finding(bkey, f"is the bundle of {str(subject)[:80]!r}, not of {body}")
        yield from self._events_listed(body, bkey, bundle, evs)
        yield from self._copies(bkey, raw, skey, wkey, bundle)
        yield from self._page(body, bundle)
        self._note_source(bundle)

    def _page(self, body: str, bundle: dict[str, Any]) -> Iterator[Finding]:
        """The record's page is what its bundle renders to (`pages.site.page_problem`,
        the rule the publisher and `rebuild` write it by)."""
        from pith_pipeline.pages.site import page_problem

        key = page_key(body)
        raw, bad = self.read(key, MAX_BUNDLE_BYTES)
        if bad:
            yield bad
            return
        problem = page_problem(raw, bundle, self.log_prefix)
        if problem is not None:
            yield Finding(key, problem)

    def _events_listed(
        self, body: str, bkey: str, bundle: dict[str, Any], evs: SubjectEvents
    ) -> Iterator[Finding]:
        """The bundle lists exactly the events stored for its subject."""
        listed = bundle.get("events")
        if not isinstance(listed, list):
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
            state = loads(state_raw)
        except ValueError as exc:
            yield Finding(skey, f"unreadable state ({str(exc)[:160]})")
            return
        if state != bundle.get("state"):
            yield Finding(skey, f"differs from the state in {bkey}")
        elif _compact(state) != state_raw:
            yield Finding(skey, "re-serialised: not the compact JSON the publisher writes")

    def _note_source(self, bundle: dict[str, Any]) -> None:
        src = bundle.get("source")
        subject = bundle.get("pith_number")
        if isinstance(src, dict) and src.get("kind") == "arxiv" and isinstance(subject, str):
            arxiv_id = src.get("id")
            if isinstance(arxiv_id, str):
                self.by_arxiv.setdefault(arxiv_id, set()).add(subject)
                self.source_of[subject] = (arxiv_id, src.get("version"))

    def pointers(self) -> Iterator[Finding]:
        """Each arXiv pointer is well formed, names bundles that exist with their
        stored record_created, and every bundled arXiv version is in its pointer."""
        seen: set[str] = set()
        keys = (k for k in self.store.list("arxiv/") if k.endswith(".json"))
        reads = _in_order(lambda k: (k, *self.read(k, MAX_SMALL_BYTES)), keys, self.concurrency)
        for key, raw, bad in reads:
            arxiv_id = key[len("arxiv/") : -len(".json")]
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
            _in_order(lambda aid: (aid, self.read(pointer_key(aid), MAX_SMALL_BYTES)), ids, self.concurrency)
        )
        extra: set[str] = set()
        for raw, _bad in reads.values():
            extra.update(_listed_bodies(raw))
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
        try:
            pointer = loads(raw)
            records = pointer["records"]
            if pointer.get("arxiv_id") != arxiv_id:
                raise ValueError(f"arxiv_id is {pointer.get('arxiv_id')!r}")
            if not isinstance(records, list) or not records:
                raise ValueError("records must be a non-empty list")
            for r in records:
                if not (
                    isinstance(r, dict)
                    and type(r.get("version")) is int
                    and isinstance(r.get("pith_number"), str)
                    and isinstance(r.get("record_created"), str)
                    and isinstance(r.get("created_at"), str)
                ):
                    raise ValueError("records must be version entries")
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            yield Finding(key, f"unreadable arXiv pointer ({str(exc)[:160]})")
            return
        order = sorted(records, key=lambda r: (r["version"], r["created_at"], r["pith_number"]))
        if pointer.get("latest") != order[-1]["pith_number"]:
            yield Finding(key, f"latest is {pointer.get('latest')!r}, not the newest record")
        listed = {r["pith_number"] for r in records}
        for subject in sorted(self.by_arxiv.get(arxiv_id, set()) - listed):
            yield Finding(key, f"does not list {subject}, whose bundle is a version of {arxiv_id}")
        for r in records:
            try:
                body = PithNumber.parse(r["pith_number"]).body
            except ValueError:
                yield Finding(key, f"lists {r['pith_number'][:80]!r}, not a Pith number")
                continue
            # a genuine record of another paper (or version) is no record of this one
            source = self.source_of.get(r["pith_number"])
            if source is not None and source != (arxiv_id, r["version"]):
                yield Finding(
                    key,
                    f"lists {r['pith_number']} as version {r['version']} of {arxiv_id}, "
                    f"but its bundle is version {source[1]} of {source[0]}",
                )
                continue
            if r["record_created"] not in self.created.get(body, set()):
                yield Finding(
                    key,
                    f"lists {r['pith_number']} with record_created {r['record_created']}, "
                    f"not a verified event in events/{body}/",
                )


def audit_store(
    store: Store,
    *,
    keyring: KeyRing | None = None,
    pinned: str | None = None,
    trusted: list[PublicKey] | None = None,
    on_report: Callable[[Report], None] | None = None,
    progress: Callable[[int], None] | None = None,
    concurrency: int | None = None,
) -> Iterator[Finding]:
    """Every problem in `store`, one `Finding` per object, in key order.

    Checks: the key document; every event object (`check_stored_event`); every
    bundle (`verify_bundle`, reported to `on_report`) and that it lists exactly
    its subject's stored events; its state.json and .well-known copy; every arXiv
    pointer. `keyring`: whose event signatures count (default: the store's key
    document, or `trusted` when given). Nothing here stops at a bad object.
    `concurrency`: subjects audited at once (default: 32 on S3, 1 locally); the
    findings and reports come in the same order whatever it is.
    """
    doc_ring, doc_findings = keyring_of_store(store)
    if keyring is None:
        keyring = KeyRing(trusted) if trusted is not None else doc_ring
    bodies, stray = _bodies(store)
    if bodies:
        yield from doc_findings
    yield from stray
    from pith_pipeline.storage.concurrency import default_io_concurrency, reserve_connections

    n = concurrency if concurrency is not None else default_io_concurrency(store)
    if n > 1:
        reserve_connections(store, n)
    auditor = _Auditor(
        store, keyring, pinned=pinned, trusted=trusted, concurrency=n, log_prefix=_log_prefix(store, bodies)
    )
    yield from _assets(store, bodies)
    order = sorted(bodies)
    for findings, reports in _in_order(lambda b: auditor.audit_body(b, bodies[b]), order, n):
        for report in reports:
            if on_report is not None:
                on_report(report)
        yield from findings
        if progress is not None:
            progress(1)
    yield from auditor.pointers()


def audit_subjects(
    store: Store,
    bodies: Iterable[str],
    arxiv_ids: Iterable[str] = (),
    *,
    trusted: list[PublicKey] | None = None,
    concurrency: int | None = None,
) -> Iterator[Finding]:
    """The findings `audit_store` gives for the subjects `bodies` and the arXiv
    pointers `arxiv_ids`, reading only their objects (and the key document).

    The same checks, by the same code, as `audit_store`: a caller that knows which
    papers changed (the maintenance check, from the run manifests) checks those in
    time proportional to them. Also checked: the pointer of each arXiv id the
    subjects' bundles name, and every subject those pointers list. Not checked:
    subjects not named (a stray object elsewhere is `audit_store`'s to find).
    """
    order = sorted({b for b in bodies if _BODY.fullmatch(b)})
    arxiv_ids = set(arxiv_ids)
    if not order and not arxiv_ids:
        return  # nothing named: not even the key document is needed
    doc_ring, doc_findings = keyring_of_store(store)
    keyring = KeyRing(trusted) if trusted is not None else doc_ring
    yield from doc_findings
    from pith_pipeline.storage.concurrency import default_io_concurrency, reserve_connections

    n = concurrency if concurrency is not None else default_io_concurrency(store)
    if n > 1:
        reserve_connections(store, n)
    auditor = _Auditor(
        store, keyring, pinned=None, trusted=trusted, concurrency=n, log_prefix=_log_prefix(store, order)
    )
    yield from _assets(store, order)
    audited = _in_order(lambda b: auditor.audit_body(b, list(store.list(event_prefix(b)))), order, n)
    for findings, _reports in audited:
        yield from findings
    yield from auditor.pointers_of({*arxiv_ids, *auditor.by_arxiv})


def _log_prefix(store: Store, bodies: Iterable[str]) -> str | None:
    """The log the store's pages must name (asked only of a store with records)."""
    from pith_pipeline.pages.site import store_log_prefix

    return store_log_prefix(store) if any(True for _ in bodies) else None


def _assets(store: Store, bodies: Iterable[str]) -> Iterator[Finding]:
    """Each asset the pages load (`assets/<file>`) holds this version's bytes: a page
    whose script is missing or changed checks nothing, or checks something else."""
    if not any(True for _ in bodies):
        return
    from pith_pipeline.pages.site import asset_files

    for key, data in asset_files():
        try:
            raw = get_capped(store, key, MAX_BUNDLE_BYTES)
        except IntegrityError as exc:
            yield Finding(key, exc.message)
            continue
        if raw is None:
            yield Finding(key, "missing (the record pages load it); `rebuild` writes it")
        elif raw != data:
            yield Finding(key, "differs from this version's; `rebuild` writes it again")


def _listed_bodies(raw: bytes | None) -> Iterator[str]:
    """The record IDs an arXiv pointer lists (nothing when it is unreadable: its
    check names it)."""
    try:
        records = loads(raw)["records"] if raw is not None else []
        for r in records:
            yield PithNumber.parse(r["pith_number"]).body
    except (ValueError, KeyError, TypeError, AttributeError):
        return


def _in_order(fn: Callable[[_T], _R], items: Iterable[_T], n: int) -> Iterator[_R]:
    """`fn` of each item, in the items' order; with `n` > 1, `n` at once in threads.

    Why: auditing a subject or reading a pointer is a few GETs, each waiting on the
    network; one at a time, `verify s3://...` of a store of 2,000 papers spent
    minutes waiting. At most `2 * n` items are in flight, so memory does not grow
    with the store, and the output is the same whatever `n` is."""
    if n <= 1:
        yield from map(fn, items)
        return
    with ThreadPoolExecutor(n, thread_name_prefix="pith-audit") as pool:
        pending: deque[Future[_R]] = deque()
        for item in items:
            pending.append(pool.submit(fn, item))
            if len(pending) >= 2 * n:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
