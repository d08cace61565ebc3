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
from pith_pipeline.core.arxiv_pointer import ArxivPointer, PointerRecord, pointer_record_problem
from pith_pipeline.core.arxiv_pointer import pointer_sort_key as core_sort_key
from pith_pipeline.core.layout import event_prefix, pointer_key
from pith_pipeline.errors import IntegrityError
from pith_pipeline.publish.context import Paper
from pith_pipeline.publish.keys import KeyBook
from pith_pipeline.publish.known import KnownAbsent, published_prefixes
from pith_pipeline.storage.base import Store

_logger = logging.getLogger(__name__)


def pointer_sort_key(entry: dict[str, Any]) -> tuple[int, str, str]:
    """A pointer's record, as the publisher holds it (its JSON object), in the one
    order of a paper's versions (`core.arxiv_pointer.pointer_sort_key`)."""
    return core_sort_key(PointerRecord(**entry))


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
        """The stored pointer as its JSON object (an empty one when there is none), or
        `IntegrityError`: the document's one rule (`ArxivPointer.parse`, as the audit
        reads it), and each record backed by its stored events (`check_pointer_record`)."""
        key = pointer_key(arxiv_id)
        raw = None if self.known.take(key) else self.store.get(key)
        if not raw:
            return {"arxiv_id": arxiv_id, "records": []}
        try:
            pointer = ArxivPointer.parse(raw, key)
        except IntegrityError as exc:
            raise IntegrityError(f"{exc.message}; run `rebuild`", key=key) from None
        for record in pointer.records:
            self.check_pointer_record(paper, key, arxiv_id, record)
        return {
            "arxiv_id": arxiv_id,
            "records": [r.to_json() for r in pointer.records],
            "latest": pointer.latest,
        }

    def check_pointer_record(self, paper: Paper, key: str, arxiv_id: str, record: PointerRecord) -> None:
        """A pointer's record is trusted only as far as its stored events say
        (`pointer_record_problem`: the pointer is not signed, and what it lists
        becomes signed data)."""
        problem = pointer_record_problem(arxiv_id, record, self.subject_events(paper, record.body))
        if problem is not None:
            raise IntegrityError(f"{problem}; run `verify` on the store", key=key)

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
