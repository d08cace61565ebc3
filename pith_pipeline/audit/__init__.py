"""Audit a store: every event object, bundle, state, well-known copy, page and pointer.

The event store (`events/<ID>/<content_sha256>.json`) is the source of truth:
bundles, states and arXiv pointers are derived from it. A tampered or deleted event
must therefore be found before anything derived is trusted or re-derived, so this
module serves two callers:

- the publisher (`build`, `ingest`, `rebuild`), through `subject_events`: a
  subject's stored events, each checked (`core.stored_events.check_stored_event`), and
  the problems by object; a subject with problems is not published from;
- `verify STORE` and `status --deep`, through `audit_store`: one `Finding` per
  damaged object, named by its path, the walk going on through the rest.

Every read is capped (`storage.base.get_capped`): a huge hostile object is a
finding, not an out-of-memory.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator

from pith_pipeline.audit.auditor import Auditor
from pith_pipeline.audit.events import SubjectEvents, keyring_of_store, reordered_events, subject_events
from pith_pipeline.audit.findings import (
    MAX_BUNDLE_BYTES,
    MAX_EVENT_BYTES,
    MAX_SMALL_BYTES,
    Finding,
    in_order,
)
from pith_pipeline.core.keys import PublicKey
from pith_pipeline.core.layout import event_prefix
from pith_pipeline.core.stored_events import KeyRing
from pith_pipeline.core.verify import Report
from pith_pipeline.errors import IntegrityError
from pith_pipeline.pages.site import asset_files, store_log_prefix
from pith_pipeline.storage.base import Store, get_capped
from pith_pipeline.storage.concurrency import default_io_concurrency, reserve_connections

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

_BODY = re.compile(r"[A-Z2-7]{26}")


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
    n = concurrency if concurrency is not None else default_io_concurrency(store)
    if n > 1:
        reserve_connections(store, n)
    auditor = Auditor(
        store, keyring, pinned=pinned, trusted=trusted, concurrency=n, log_prefix=_log_prefix(store, bodies)
    )
    yield from _assets(store, bodies)
    order = sorted(bodies)
    for findings, reports in in_order(lambda b: auditor.audit_body(b, bodies[b]), order, n):
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
    n = concurrency if concurrency is not None else default_io_concurrency(store)
    if n > 1:
        reserve_connections(store, n)
    auditor = Auditor(
        store, keyring, pinned=None, trusted=trusted, concurrency=n, log_prefix=_log_prefix(store, order)
    )
    yield from _assets(store, order)
    audited = in_order(lambda b: auditor.audit_body(b, list(store.list(event_prefix(b)))), order, n)
    for findings, _reports in audited:
        yield from findings
    yield from auditor.pointers_of({*arxiv_ids, *auditor.by_arxiv})


def _log_prefix(store: Store, bodies: Iterable[str]) -> str | None:
    """The log the store's pages must name (asked only of a store with records)."""
    return store_log_prefix(store) if any(True for _ in bodies) else None


def _assets(store: Store, bodies: Iterable[str]) -> Iterator[Finding]:
    """Each asset the pages load (`assets/<file>`) holds this version's bytes: a page
    whose script is missing or changed checks nothing, or checks something else."""
    if not any(True for _ in bodies):
        return
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
