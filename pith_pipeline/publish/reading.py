"""Reading a paper's stored state: its checked events, its arXiv pointer, and what is
known to be absent.

A stored event is the source of truth for bundles, and a pointer's records become
signed data (the `supersedes` of a new version, the `correction` of an older one), so
nothing is read here without the checks that let it be used.
"""

from __future__ import annotations

import logging
from typing import Any

from pith_pipeline.audit import SubjectEvents, subject_events
from pith_pipeline.core.canonical_json import loads
from pith_pipeline.core.layout import event_prefix, pointer_key
from pith_pipeline.core.pith_record import PithNumber
from pith_pipeline.errors import IntegrityError
from pith_pipeline.publish.context import Paper
from pith_pipeline.publish.keys import KeyBook
from pith_pipeline.publish.known import KnownAbsent, published_prefixes
from pith_pipeline.storage.base import Store

_logger = logging.getLogger(__name__)


def pointer_sort_key(entry: dict[str, Any]) -> tuple[Any, Any, Any]:
    """A pointer's records in order: (version, created_at, pith_number)."""
    return (entry["version"], entry["created_at"], entry["pith_number"])


class StoredState:
    """Checked reads of a store, for the papers of one run."""

    def __init__(self, store: Store, keys: KeyBook, known: KnownAbsent) -> None:
        self.store = store
        self.keys = keys
        self.known = known
        #: subjects whose self-equivocation this run has named (`checked_events`)
        self._equivocations_named: set[str] = set()

    def subject_events(self, paper: Paper, body: str) -> list[dict[str, Any]]:
        """Every stored event of a subject, each checked before it is used.

        A stored event that does not parse, is not named by its content hash, does not
        recompute, or is not signed by a key of the store's key document stops this
        subject (`IntegrityError` naming the object) instead of being merged, re-signed
        and spread by a rebuild. The checks are the store audit's
        (`pith_pipeline.audit`), so `verify STORE` and the publisher agree on what is
        damaged.
        """
        if self.known.take(event_prefix(body)):
            return []
        return list(self.checked_events(paper, body).events)

    def checked_events(self, paper: Paper, body: str) -> SubjectEvents:
        """A subject's stored events with their object keys, checked (`subject_events`);
        read once per paper where the paper caches them."""
        cache = paper.events
        if cache is not None and body in cache:
            return cache[body]
        got = subject_events(self.store, body, self.keys.keyring())
        got.raise_for_problems()
        equivocation = got.equivocation()
        if equivocation is not None and body not in self._equivocations_named:
            # write-once events cannot be undone: publish them as stored (the state
            # lists the equivocation), and name it once per run (guarantees.md)
            self._equivocations_named.add(body)
            _logger.warning(
                "%s: %s (published as stored; `verify STORE` reports it)", event_prefix(body), equivocation
            )
        if cache is not None:
            cache[body] = got
        return got

    def pointer(self, paper: Paper, arxiv_id: str) -> dict[str, Any]:
        """The paper's arXiv pointer, checked; read once per paper where the paper
        caches it (and keeps it as it is written: the paper is one thread's, under the
        run's lease)."""
        cache = paper.pointers
        if cache is not None and arxiv_id in cache:
            return cache[arxiv_id]
        pointer = self.read_pointer(paper, arxiv_id)
        if cache is not None:
            cache[arxiv_id] = pointer
        return pointer

    def read_pointer(self, paper: Paper, arxiv_id: str) -> dict[str, Any]:
        """The stored pointer (an empty one when there is none), or `IntegrityError`."""
        key = pointer_key(arxiv_id)
        raw = None if self.known.take(key) else self.store.get(key)
        if not raw:
            return {"arxiv_id": arxiv_id, "records": []}
        try:
            pointer = loads(raw)
            records = pointer["records"]
            if not isinstance(records, list) or not all(
                isinstance(r, dict)
                and type(r.get("version")) is int
                and isinstance(r.get("pith_number"), str)
                and isinstance(r.get("record_created"), str)
                and isinstance(r.get("created_at"), str)
                for r in records
            ):
                raise ValueError("records must be a list of version entries")
            if pointer.get("arxiv_id") != arxiv_id:
                raise ValueError(f"arxiv_id is {str(pointer.get('arxiv_id'))[:80]!r}")
        except (ValueError, KeyError, TypeError) as exc:
            raise IntegrityError(f"unreadable arXiv pointer ({exc}); run `rebuild`", key=key) from None
        for r in records:
            self.check_pointer_record(paper, key, arxiv_id, r)
        result: dict[str, Any] = pointer
        return result

    def check_pointer_record(self, paper: Paper, key: str, arxiv_id: str, entry: dict[str, Any]) -> None:
        """A pointer's record is trusted only as far as its stored events say.

        Why: the pointer is not signed, and what it lists becomes signed data. An
        entry must name a verified `record_created` of its Pith number whose record is
        that version of this arXiv id; a genuine record of another paper is refused.
        """
        try:
            body = PithNumber.parse(entry["pith_number"]).body
        except ValueError:
            raise IntegrityError(f"lists {entry['pith_number'][:80]!r}, not a Pith number", key=key) from None
        for ev in self.subject_events(paper, body):
            if ev.get("event_id") != entry["record_created"] or ev.get("event_type") != "record_created":
                continue
            payload = ev.get("payload")
            record = payload.get("canonical_record") if isinstance(payload, dict) else None
            source = record.get("source") if isinstance(record, dict) else None
            if ev.get("subject_pith_number") == entry["pith_number"] and source == {
                "kind": "arxiv",
                "id": arxiv_id,
                "version": entry["version"],
            }:
                return
            raise IntegrityError(
                f"lists {entry['pith_number']} as version {entry['version']} of {arxiv_id}, but its "
                f"record_created is of {source!r}; run `verify` on the store",
                key=key,
            )
        raise IntegrityError(
            f"lists {entry['pith_number']} with record_created {entry['record_created']}, which is "
            f"not a stored event of it; run `verify` on the store",
            key=key,
        )

    def refuse_orphan(self, body: str) -> None:
        """Stop a paper with no stored event whose bundle, state or `.well-known` copy
        is published.

        Why: events are written before their bundle, so such a paper lost its events;
        treated as new, it would get a fresh `record_created`, and its bundle, which
        lists the lost events, would be replaced without a word. A paper is new only
        when neither its events nor its published objects exist. The list-ahead cache
        lists `pith/` and `.well-known/pith/` as it lists `events/`, so a new paper
        costs no request of its own here.
        """
        for prefix in published_prefixes(body):
            if self.known.take(prefix):
                continue
            key = next(iter(self.store.list(prefix)), None)
            if key is not None:
                raise IntegrityError(
                    f"published, but {event_prefix(body)} holds no event (deleted?); not replaced "
                    "by a new record; run `verify` on the store",
                    key=key,
                )
