"""Writing a paper's objects: each write fenced by the run's lease and entered in the
ledger of the paper that made it (`Paper.summary.written`).

Three kinds of write, one rule each:
- write-once (`put_once`: events, certificates): never replaces what is stored;
- derived (`put`: bundles, states, pointers, pages): replaced only when the bytes
  change, and atomically;
- the `.well-known` copy of a bundle (`put_copy`): one object with two names where
  the store can.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable
from typing import Any

from pith_pipeline.core.layout import EVENTS, bundle_paths, page_key
from pith_pipeline.errors import IntegrityError, WriteConflictError
from pith_pipeline.pages.render import record_page
from pith_pipeline.pages.site import PAGE_CONTENT_TYPE, log_prefix, page_problem, run_log_prefix
from pith_pipeline.publish.context import Codec, Paper
from pith_pipeline.publish.summary import LeaseCheck, RunSummary
from pith_pipeline.storage.base import Store, put_copy
from pith_pipeline.tlog.pending import PendingMark

#: `on_bundle(key, bundle, sha256, rows)`: told of each bundle written
OnBundle = Callable[[str, dict[str, Any], str, Any], None]

#: checked index rows kept for bundles not yet written (papers that failed after the
#: check leave theirs behind: past this many, they are dropped)
MAX_CHECKED_ROWS = 4096


class Writer:
    """Every write of a run goes through one `Writer`.

    `lease`: checked before every write (`fence`). `summary`: the run's summary (its
    id names the log's pending marker, which it keeps). `on_bundle`: as for
    `Publisher`. `page_log`: what the run's pages name as the store's log, as another
    publisher of the run decided it; None: decided here, on first use.
    """

    def __init__(
        self,
        store: Store,
        codec: Codec,
        summary: RunSummary,
        *,
        lease: LeaseCheck | None = None,
        on_bundle: OnBundle | None = None,
        page_log: tuple[str | None] | None = None,
        log_signer_spec: str | None = None,
    ) -> None:
        self.store = store
        self.log_signer_spec = log_signer_spec
        self.codec = codec
        self.summary = summary
        self.lease = lease
        self.on_bundle = on_bundle
        #: the key document's `log` member for this run's log key (`tlog.run_log`)
        self.log_key: dict[str, Any] | None = None
        self._pending = PendingMark(store)
        self._checked_rows: dict[int, tuple[dict[str, Any], Any]] = {}
        self._last_written: tuple[bytes | None, str] = (None, "")
        self._page_log = page_log
        self._page_lock = threading.Lock()

    def fence(self) -> None:
        """Check the lease before each write, not only before each paper.

        Why: a run suspended past its lease's TTL (a paused VM, SIGSTOP) resumes in the
        middle of a paper; checked once per paper, it would go on to write that paper's
        `record_created` beside the one the writer that took the lease over had
        written. The check is a clock reading, so the window left is one write.
        """
        if self.lease is not None:
            self.lease.check()

    def record(self, paper: Paper, key: str, data: bytes) -> None:
        """Enter a write in the paper's ledger (key -> sha256 of its bytes)."""
        paper.summary.written[key] = self.sha256(data)

    def sha256(self, data: bytes) -> str:
        """Hex SHA-256 of `data`, once per bytes object: a bundle is written to pith/ and
        .well-known/ and handed to `on_bundle` as one object. (One slot, replaced, not
        shared state: another thread at worst recomputes.)"""
        last = self._last_written
        if data is not last[0]:
            last = self._last_written = (data, hashlib.sha256(data).hexdigest())
        return last[1]

    def put(
        self, paper: Paper, key: str, data: bytes, *, changed: bool = False, content_type: str | None = None
    ) -> None:
        """Replace a derived object only when its bytes change. `changed`: the caller
        knows they do (a new paper's bundle, a pointer that gains a record), so the
        stored bytes are not read first."""
        self.fence()
        if not changed and self.store.get(key) == data:
            return
        if content_type is None:
            self.store.put(key, data)
        else:
            self.store.put(key, data, content_type=content_type)
        self.record(paper, key, data)

    def put_copy(self, paper: Paper, key: str, data: bytes, *, of: str) -> None:
        """The `.well-known` copy of the bundle just written under `of`: one object
        with two names where the store can (`storage.base.put_copy`)."""
        self.fence()
        put_copy(self.store, key, data, of=of)
        self.record(paper, key, data)

    def put_once(self, paper: Paper, key: str, data: bytes) -> None:
        """Write-once: nothing is written when an object is stored under `key`
        (`WriteConflictError` when its bytes differ). Before the run's first event,
        the log's pending marker names the run (`tlog.pending`), so the log learns of
        a run that dies before appending."""
        self.fence()
        if key.startswith(EVENTS):
            marker = self._pending.ensure(self.summary.run_id)
            if marker is not None:
                self.summary.log_pending.append(marker)
        if self.store.put_once(key, data):
            self.record(paper, key, data)

    def put_event(self, paper: Paper, key: str, data: bytes) -> None:
        """Write-once; a different object already at an event's content-hash name
        can only be a damaged or forged one: name it, never overwrite it. The paper
        forgets the subject's events it read (they change)."""
        if paper.events is not None:
            paper.events.pop(key.split("/")[1], None)
        try:
            self.put_once(paper, key, data)
        except WriteConflictError:
            raise IntegrityError(
                "a different object is stored under this event's content hash", key=key
            ) from None

    # -- record pages (`pith_pipeline.pages`) ---------------------------------
    def _run_log_prefix(self) -> str | None:
        # the log key the run was given (`log_signer_spec`: a `Run`'s log key, or
        # `rebuild`'s); None: the store's own log, if it keeps one
        return run_log_prefix(self.store, self.log_signer_spec)

    def page_log_prefix(self) -> tuple[str | None]:
        """The log prefix this run's pages name, in a one-tuple (`None` inside: the
        store keeps no log): the run's log when it names a log key (`log_key`,
        `log_signer_spec`), else the store's own; asked of the store once per run."""
        if self._page_log is None:
            with self._page_lock:  # papers in flight ask at once: the store is asked once
                if self._page_log is None and self.log_key is not None:
                    self._page_log = (log_prefix(),)  # the run keeps a log (its key is named)
                elif self._page_log is None:
                    self._page_log = (self._run_log_prefix(),)
        return self._page_log

    def put_page(self, paper: Paper, body: str, bundle: dict[str, Any], *, changed: bool = False) -> None:
        """Write the record page of `bundle`, as `verify STORE` expects it after this run."""
        page = record_page(bundle, log_prefix=self.page_log_prefix()[0])
        self.put(paper, page_key(body), page, changed=changed, content_type=PAGE_CONTENT_TYPE)

    def ensure_page(self, paper: Paper, body: str, bundle: dict[str, Any]) -> bool:
        """Write the page of a published bundle when the stored page is missing or is
        not what the bundle renders to (`pages.site.page_problem`); True when written."""
        if page_problem(self.store.get(page_key(body)), bundle, self.page_log_prefix()[0]) is None:
            return False
        self.put_page(paper, body, bundle, changed=True)
        return True

    # -- bundles ------------------------------------------------------------
    def remember_checked_rows(self, bundle: dict[str, Any], rows: Any) -> None:
        """Keep a bundle's checked index rows for `on_bundle`, so they are made once."""
        if self.on_bundle is not None:
            if len(self._checked_rows) > MAX_CHECKED_ROWS:
                self._checked_rows.clear()
            self._checked_rows[id(bundle)] = (bundle, rows)

    def bundle_objects(self, paper: Paper, body: str, bundle: dict[str, Any]) -> None:
        """Write a bundle, its state, its `.well-known` copy and its page, each only
        where its bytes change."""
        bkey, skey, wkey = bundle_paths(body)
        data = self.codec.compact(bundle)
        self.put(paper, bkey, data)
        self.put(paper, skey, self.codec.compact(bundle["state"]))
        if self.store.get(wkey) != data:
            self.put_copy(paper, wkey, data, of=bkey)
        self.put_page(paper, body, bundle)
        self.bundle_written(bkey, bundle, data)

    def bundle_written(self, key: str, bundle: dict[str, Any], data: bytes) -> None:
        """Tell `on_bundle` of a bundle written, with its checked rows when kept."""
        if self.on_bundle is not None:
            checked = self._checked_rows.pop(id(bundle), None)
            rows = checked[1] if checked is not None and checked[0] is bundle else None
            self.on_bundle(key, bundle, self.sha256(data), rows)
