"""`rebuild`: re-derive every bundle, state, page and arXiv pointer of a store from
its event store, the source of truth, leaving alone what already says the same.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from pith_pipeline.clock import system_clock
from pith_pipeline.core.arxiv_pointer import listed_bodies
from pith_pipeline.core.keys import Signer
from pith_pipeline.core.layout import BUNDLES, WELL_KNOWN, page_key, pointer_key
from pith_pipeline.core.pith_record import PithNumber
from pith_pipeline.core.timeutil import Clock, iso_seconds
from pith_pipeline.errors import IntegrityError
from pith_pipeline.pages.site import publish_home_page
from pith_pipeline.publish.context import Paper
from pith_pipeline.publish.publisher import Publisher
from pith_pipeline.publish.reading import pointer_sort_key
from pith_pipeline.publish.summary import BuildConfig, LeaseCheck
from pith_pipeline.storage.base import Store

#: a subject's id in store keys (`pith/<ID>/`); other names there are `verify`'s to report
BODY = re.compile(r"[A-Z2-7]{26}")
#: a record's page (`layout.page_key`)
PAGE = re.compile(re.escape(page_key("@")).replace("@", "[A-Z2-7]{26}"))


def rebuild(
    store: Store,
    signer: Signer,
    config: BuildConfig | None = None,
    *,
    clock: Clock = system_clock,
    lease: LeaseCheck | None = None,
    log_signer_spec: str | None = None,
    failures: list[str] | None = None,
    unchanged: list[str] | None = None,
    pointers: list[str] | None = None,
    pages: list[str] | None = None,
    publisher: Publisher | None = None,
) -> Iterator[str]:
    """Re-derive every bundle, state and arXiv pointer from the event store; yields
    the subjects rebuilt (and adds the pointers rewritten to `pointers`).

    Every record's page is written again where it is missing or is not what its
    bundle renders to (added to `pages`), and so are the pages' assets and, at the
    end, the store's home page.

    Idempotent: a subject whose published bundle already says what its events say
    (apart from `built_at` and the signature; signed by `signer`) is left alone and
    added to `unchanged`; a pointer holding the bytes its records' events give is not
    written. A subject whose stored events fail their checks is not rebuilt (its
    published bundle stays as it was) and is named in `failures`; the caller ends
    non-zero. `log_signer_spec`: as for `Publisher`. `publisher`: the one a `Run`
    opened (its store, signer, config and lease), used in place of a new one.
    """
    pub = publisher or Publisher(
        store, signer, config, clock=clock, lease=lease, log_signer_spec=log_signer_spec
    )
    lease = pub.lease
    pub.publish_assets()
    # a published paper without events is named too (`refuse_orphan`), not skipped
    bodies = {k.split("/")[1] for k in store.list("events/")}
    for prefix in (BUNDLES, WELL_KNOWN):  # pith/<ID>/..., .well-known/pith/<ID>/...
        cut = len(prefix)
        bodies.update(b for b in (k[cut:].split("/", 1)[0] for k in store.list(prefix)) if BODY.fullmatch(b))
    #: arXiv id -> its pointer's records, from verified record_created events
    records: dict[str, list[dict[str, Any]]] = {}
    failed: set[str] = set()
    for body in sorted(bodies):
        if lease is not None:
            lease.check()
        paper = Paper(pub.summary, events={})  # its events are read once, for its bundle and checks
        try:
            events = pub.reader.subject_events(paper, body)
            if not events:
                pub.reader.refuse_orphan(body)
            for arxiv_id, entry in pointer_entries(events):
                records.setdefault(arxiv_id, []).append(entry)
            subjects = {e.get("subject_pith_number") for e in events}
            for subject in sorted(s for s in subjects if isinstance(s, str)):
                own = [e for e in events if e.get("subject_pith_number") == subject]
                if pub.bundles.rebuild(paper, subject, own):
                    yield subject
                elif unchanged is not None:
                    unchanged.append(subject)
        except IntegrityError as exc:
            if failures is None:
                raise
            failures.append(str(exc))
            failed.add(body)
    for problem in rederive_pointers(pub, records, bodies, failed, pointers):
        if failures is None:
            raise problem
        failures.append(str(problem))
    if pages is not None:
        pages.extend(k for k in pub.summary.written if PAGE.fullmatch(k))
    pub.writer.fence()
    publish_home_page(store, iso_seconds(clock()), changed=len(pub.summary.written) > 0)


def pointer_entries(events: list[dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(arXiv id, pointer record) of each subject among a body's checked events: the
    entry `Versions.update_pointer` writes, from the subject's first record_created."""
    first: dict[str, dict[str, Any]] = {}
    for e in events:
        if e.get("event_type") != "record_created":
            continue
        have = first.get(e["subject_pith_number"])
        if have is None or (e["created_at"], e["event_id"]) < (have["created_at"], have["event_id"]):
            first[e["subject_pith_number"]] = e
    for subject, e in sorted(first.items()):
        payload = e.get("payload")
        record = payload.get("canonical_record") if isinstance(payload, dict) else None
        source = record.get("source") if isinstance(record, dict) else None
        if not isinstance(source, dict) or source.get("kind") != "arxiv":
            continue
        arxiv_id, version = source.get("id"), source.get("version")
        if not isinstance(arxiv_id, str) or type(version) is not int:
            continue
        yield (
            arxiv_id,
            {
                "version": version,
                "pith_number": subject,
                "record_created": e["event_id"],
                "created_at": e["created_at"],
                "canonical_sha256": payload["canonical_sha256"],  # type: ignore[index]
            },
        )


def rederive_pointers(
    pub: Publisher,
    records: dict[str, list[dict[str, Any]]],
    bodies: set[str],
    failed: set[str],
    rewritten: list[str] | None,
) -> Iterator[IntegrityError]:
    """Write every arXiv pointer its records' events give; yield the ones it must not.

    Why: a pointer is derived data like a bundle (the events say which records an
    arXiv id has), so `rebuild` repairs a deleted, re-serialised or tampered one.
    Left as it is, and named: a pointer listing a paper whose events failed their
    checks (already named), or one listing a record with no stored event at all
    (deleted with its bundle): re-derived without it, the loss would be silent.
    """
    store = pub.store
    stored: dict[str, str] = {}
    for key in store.list("arxiv/"):
        arxiv_id = key[len("arxiv/") : -len(".json")]
        if key.endswith(".json") and arxiv_id and pointer_key(arxiv_id) == key:
            stored[arxiv_id] = key
    for arxiv_id in sorted(set(records) | set(stored)):
        key = pointer_key(arxiv_id)
        try:
            raw = store.get(key) if arxiv_id in stored else None
        except IntegrityError as exc:
            yield exc
            continue
        listed = listed_bodies(raw)
        mine = {PithNumber.parse(r["pith_number"]).body for r in records.get(arxiv_id, [])}
        if listed & failed or any(b in failed for b in mine):
            continue  # its paper is named already; nothing derived from it is written
        lost = sorted(b for b in listed - mine if b not in bodies)
        if lost:
            yield IntegrityError(
                f"lists a record of {lost[0]}, which has no stored event (deleted?); not "
                "re-derived without it; run `verify` on the store",
                key=key,
            )
            continue
        entries = sorted(records.get(arxiv_id, []), key=pointer_sort_key)
        if not entries:
            yield IntegrityError(
                f"no stored record_created is of {arxiv_id}; left as it is; run `verify` on the store",
                key=key,
            )
            continue
        want = (
            pub.writer.codec.pretty(
                {"arxiv_id": arxiv_id, "records": entries, "latest": entries[-1]["pith_number"]}
            )
            + b"\n"
        )
        if raw != want:
            try:
                pub.writer.put(pub.run_paper(), key, want, changed=True)
            except IntegrityError as exc:  # its path is occupied by the wrong kind of thing
                yield exc
                continue
            if rewritten is not None:
                rewritten.append(key)
