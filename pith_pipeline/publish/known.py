"""What a run knows is absent without asking the store: the list-ahead cache.

Why: on S3 a new paper would otherwise cost a LIST of `events/<ID>/` and a GET of its
arXiv pointer before its writes. One listing page (up to 1000 keys after a given key)
answers for every paper of a batch whose key sorts before the page's last key, so a
batch of new papers costs a few LISTs, and never more than one per paper
(`absent_keys`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Container, Iterable, Sequence

from pith_pipeline.core.arxiv_record import ArxivRecord
from pith_pipeline.core.builder import Identity
from pith_pipeline.core.canonical_json import FAST, CanonicalJSON
from pith_pipeline.core.layout import BUNDLES, WELL_KNOWN, bundle_paths, event_prefix, pointer_key
from pith_pipeline.items import Item, Rejected
from pith_pipeline.storage.base import Store
from pith_pipeline.storage.lease import shard_of

#: keys per listing page (S3's most)
LIST_PAGE = 1000

Lister = Callable[[str, str, int], Sequence[str]]


def published_prefixes(body: str) -> tuple[str, str]:
    """`pith/<ID>/` (its bundle and state) and `.well-known/pith/<ID>/` (the copy)."""
    bkey, _skey, wkey = bundle_paths(body)
    return bkey.rsplit("/", 1)[0] + "/", wkey.rsplit("/", 1)[0] + "/"


class KnownAbsent:
    """Keys found to hold no object, each believed once, and the identities computed
    on the way. Thread-safe: papers in flight use it up at once.

    What is learned is "no object under this key": it stays true until this run
    writes there, and every writer of an event or pointer reads it first (and so
    uses it up, `take`).
    """

    def __init__(self, store: Store, shards: frozenset[int] | None) -> None:
        self.store = store
        self.shards = shards
        self._lock = threading.Lock()
        self._absent: set[str] = set()
        self._idents: dict[tuple[str, int], Identity] = {}

    def learn(self, records: Iterable[Item], *, busy: Container[str] = ()) -> int:
        """Learn which of these papers the store has never seen; returns the LIST
        requests it took (0 on a store without `list_after`: papers ask one by one).
        `busy`: arXiv ids with a record still being published; their keys are not
        learned, as that record may be about to write them."""
        lister: Lister | None = getattr(self.store, "list_after", None)
        if lister is None:
            return 0
        idents: dict[tuple[str, int], Identity] = {}
        for rec in records:
            if isinstance(rec, Rejected) or rec.id in busy:
                continue
            if self.shards is not None and shard_of(rec.id) not in self.shards:
                continue
            try:
                idents[(rec.id, rec.version)] = Identity.of(rec)
            except Exception:  # a record that cannot be built: publish_item quarantines it
                continue
        pointers = sorted({pointer_key(i.record.id) for i in idents.values()})
        bodies = sorted({event_prefix(i.body) for i in idents.values()})
        absent_pointers, n1 = absent_keys(lister, "arxiv/", pointers)
        absent_bodies, n2 = absent_keys(lister, "events/", bodies)
        with self._lock:
            self._idents = idents
            self._absent.update(absent_pointers)
            self._absent.update(absent_bodies)
        n = n1 + n2
        for where in range(2):  # pith/<ID>/, then .well-known/pith/<ID>/ (`refuse_orphan`)
            prefixes = sorted({published_prefixes(i.body)[where] for i in idents.values()})
            if not prefixes:
                continue
            absent, pages = absent_keys(lister, (BUNDLES, WELL_KNOWN)[where], prefixes)
            with self._lock:
                self._absent.update(absent)
            n += pages
        return n

    def forget(self) -> None:
        """Drop what `learn` learned (a loop's end: another may write meanwhile)."""
        with self._lock:
            self._absent.clear()
            self._idents = {}

    def take(self, key: str) -> bool:
        """True once if `learn` found nothing under `key` (used up by the reader)."""
        if not self._absent:
            return False
        with self._lock:
            if key in self._absent:
                self._absent.discard(key)
                return True
        return False

    def identity(self, rec: ArxivRecord, canon: CanonicalJSON = FAST) -> Identity:
        """The record's identity, as `learn` computed it for this very record (with
        `FAST`; another `canon` computes its own)."""
        if canon is not FAST:
            return Identity.of(rec, canon=canon)
        known = self._idents.get((rec.id, rec.version))
        return known if known is not None and known.record is rec else Identity.of(rec)


def absent_keys(lister: Lister, prefix: str, names: Sequence[str]) -> tuple[set[str], int]:
    """Which of the sorted `names` (keys, or key prefixes ending in `/`, all under
    `prefix`) have no object, by listing pages of keys; and how many pages it took.

    Each page starts just before the first undecided name, so it decides at least
    that one (at most one request per name); it decides every later name that sorts
    before its last key, or all of them when it is the listing's last page.
    """
    absent: set[str] = set()
    requests = 0
    i = 0
    while i < len(names):
        first = i
        page = lister(prefix, names[i][:-1], LIST_PAGE)
        requests += 1
        end = len(page) < LIST_PAGE
        last = page[-1] if page else ""
        k = 0
        while i < len(names):
            name = names[i]
            while k < len(page) and page[k] < name:
                k += 1
            if k < len(page) and page[k].startswith(name):
                i += 1  # there
            elif end or (last > name and not last.startswith(name)):
                absent.add(name)
                i += 1
            else:
                break  # past this page: the next one starts here
        if i == first:  # a page of stray keys just below the name: leave the rest unknown
            break
    return absent, requests
