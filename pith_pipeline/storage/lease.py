"""Writer leases: which process may publish which papers of a store, right now.

Why: two runs that publish the same papers at once corrupt a store. Each reads a
paper's events and pointer, decides, and writes; interleaved, they give a paper two
`record_created` events or lose the `correction` that links an old version to its
successor. `airflow backfill create` runs windows concurrently, and the daily and
backfill DAGs can reach the same day, so this is the normal case, not a corner.

A lease is a small JSON object under `leases/`, created with the store's write-once
primitive (S3 `If-None-Match: *`, locally an atomic hard link). It names its owner
(host, process, run, command) and an expiry that a background thread renews with a
compare-and-swap (`If-Match` on S3); an expired lease may be taken over the same way,
so a writer killed with SIGKILL blocks the store for at most one TTL.

Why shards rather than one lease for the store: one lease would cap an archive
backfill at one publishing machine. Papers are split into `SHARDS` by a stable hash
of the arXiv id (every object a paper touches — its events, bundles, its versions'
corrections and its `arxiv/<id>.json` pointer — lives in one shard), and a writer
holds the leases of the shards it publishes. A command over the whole store takes
all of them, always in the same order, so two writers can never deadlock. Index
maintenance (`compact`, `reindex`, a run's index update) also holds `index`.

What a lease cannot do: fence a writer that stops for longer than the TTL (a
suspended VM) in the instant between its lease check and the write that follows.
Writers check their lease before every write (worker processes against their
parent's expiry, `parallel_worker.SharedLease`; the log append through `LeasedStore`; the
index's Delta commits through `check_writes`) and stop once it is lost; worker
processes exit when their parent dies; and every write is either write-once or
re-derivable, and supersession repairs itself, so even then nothing published is lost.
Renewal starts with the first lease held (a writer waiting for a busy shard keeps the
ones it holds), and a renewal that fails is recorded for `check`, never lost with its
thread.
"""

from __future__ import annotations

import logging
import math
import re
import secrets
import threading
import time
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from pith_pipeline.core.canonical_json import dumps_pretty, loads
from pith_pipeline.core.layout import LEASES, lease_key
from pith_pipeline.errors import LeaseConfigError, StorageError, TransientError, WriteConflictError
from pith_pipeline.storage.base import DEFAULT_LEASE_TTL, Store, StoreWrapper, barrier

# runs/, tlog/ and cli/ import these two from here
from pith_pipeline.storage.lease_holders import default_owner as default_owner
from pith_pipeline.storage.lease_holders import (
    describe_owner,
    holder_is_dead,
    iso,
    one_line,
    parse_iso,
)
from pith_pipeline.storage.lease_holders import live_run_ids as live_run_ids

log = logging.getLogger(__name__)

#: Papers are split into this many shards by a stable hash of the arXiv id. Fixed for
#: every store: two writers must agree on which papers a shard holds.
SHARDS = 16
LEASE_PREFIX = LEASES
INDEX_LEASE = "index"
#: The transparency log's lease: held from reading the log to moving its checkpoint.
LOG_LEASE = "log"
#: Seconds a lease lasts without renewal; renewed every quarter of it. The holder
#: of an expired lease may have been suspended rather than killed: keep the TTL well
#: above the longest pause a writer can take. A lease takes its store's `lease_ttl`
#: (`open_store(..., lease_ttl=)`, from the `lease_ttl` setting, PITH_LEASE_TTL).
DEFAULT_TTL = DEFAULT_LEASE_TTL

#: Longest lease TTL accepted (a day): a lease is renewed while its writer runs, and a
#: dead writer's lease blocks every other writer until it expires.
MAX_TTL = 86400.0


def shard_of(arxiv_id: str) -> int:
    """The shard of a paper: all its versions, corrections and its pointer live there."""
    return zlib.crc32(arxiv_id.encode("utf-8")) % SHARDS


def shard_lease(shard: int) -> str:
    return f"shard-{shard:02d}"


ALL_SHARDS: frozenset[int] = frozenset(range(SHARDS))


def shard_leases(shards: Iterable[int] | None = None) -> list[str]:
    """Lease names for `shards` (all when None), in the one global order."""
    return [shard_lease(s) for s in sorted(ALL_SHARDS if shards is None else set(shards))]


_SHARD_PART = re.compile(r"([0-9]{1,3})(?:-([0-9]{1,3}))?")


def parse_shards(text: str) -> frozenset[int]:
    """`0-7`, `3`, `0,2,5-6` -> shard numbers; errors name the option.

    Numbers are ASCII digits (`int()` alone also takes other scripts' digits, a sign
    and underscores); blanks are allowed around commas, nothing else."""
    out: set[int] = set()
    for part in text.split(","):
        found = _SHARD_PART.fullmatch(part.strip(" "))
        if found is None:
            raise LeaseConfigError(
                f"--shards {text!r}: expected shard numbers like 0-7 or 1,3,5 (0 to {SHARDS - 1})"
            )
        first = int(found[1])
        last = int(found[2]) if found[2] is not None else first
        if not (0 <= first <= last < SHARDS):
            raise LeaseConfigError(f"--shards {text!r}: shards are 0 to {SHARDS - 1}")
        out.update(range(first, last + 1))
    return frozenset(out)


class LeaseBusyError(TransientError):
    """Another writer holds a lease this command needs (a later retry can succeed).
    Exit status 75 (EX_TEMPFAIL): try again later, or with --wait."""

    exit_code = 75


class LeaseLostError(TransientError):
    """This writer's lease expired or was taken over: it must stop writing."""


@dataclass(slots=True)
class _Held:
    name: str
    key: str
    token: str
    tag: str
    expires_at: float


class WriterLease:
    """Holds named leases in a store for the duration of a `with` block.

    `wait`: seconds to wait for a busy lease (0 fails at once, naming the holder).
    `check()` raises `LeaseLostError` once any lease is lost or past its expiry.
    """

    def __init__(
        self,
        store: Store,
        names: Sequence[str],
        *,
        owner: dict[str, Any] | None = None,
        ttl: float | None = None,
        wait: float = 0.0,
        poll: float = 1.0,
        now: Callable[[], float] = time.time,
        on_wait: Callable[[str], None] | None = None,
    ) -> None:
        ttl = store.lease_ttl if ttl is None else ttl
        if not (math.isfinite(ttl) and 0 < ttl <= MAX_TTL):  # inf overflows the expiry
            raise LeaseConfigError(f"lease TTL {ttl!r}: must be positive, at most {MAX_TTL:.0f} seconds")
        if not (math.isfinite(wait) and wait >= 0):  # nan ends one wait loop at once, another never
            raise LeaseConfigError(f"lease wait {wait!r}: must be a finite number of seconds, at least 0")
        order = {n: i for i, n in enumerate(shard_leases())}
        # one global order (shards, then anything else) so two writers never deadlock
        self.names = sorted(set(names), key=lambda n: (order.get(n, len(order)), n))
        self.store = store
        self.owner = owner or default_owner()
        self.ttl = ttl
        self.wait = wait
        self.poll = poll
        self.now = now
        self.on_wait = on_wait
        self._held: list[_Held] = []
        self._lost: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"WriterLease({self.store.url!r}, {len(self.names)} leases, held={len(self._held)})"

    # -- documents ---------------------------------------------------------------
    def _doc(self, name: str, token: str, acquired: float, expires: float) -> bytes:
        doc = {
            "lease": name,
            "owner": self.owner,
            "token": token,
            "acquired_at": iso(acquired),
            "expires_at": iso(expires),
        }
        return dumps_pretty(doc) + b"\n"

    def _read(self, key: str) -> tuple[dict[str, Any] | None, str] | None:
        """The lease object and its tag; a document that does not parse is `None`."""
        got = self.store.get_tagged(key)
        if got is None:
            return None
        data, tag = got
        try:
            doc = loads(data)
        except ValueError:
            return None, tag
        return (doc if isinstance(doc, dict) else None), tag

    # -- acquire / release ---------------------------------------------------------
    def acquire(self) -> WriterLease:
        deadline = self.now() + max(0.0, self.wait)
        # renewal runs from the first lease held: leases are taken one at a time, and
        # those held must not expire while the writer waits (`--wait`) for a busy one
        self._thread = threading.Thread(target=self._renew_loop, name="pith-lease", daemon=True)
        self._thread.start()
        with _ACTIVE_LOCK:
            _ACTIVE.append(self)
        try:
            for name in self.names:
                held = self._acquire_one(name, deadline)
                with self._lock:
                    self._held.append(held)
        except BaseException:
            self.release()
            raise
        # the next writer removes what killed ones left in the store's `.tmp/` (a local
        # store; only files of writers that are gone: `LocalStore.sweep_temporary`)
        self.store.sweep_temporary()
        return self

    def _acquire_one(self, name: str, deadline: float) -> _Held:
        key = lease_key(name)
        token = secrets.token_hex(16)
        announced = False
        while True:
            start = self.now()
            data = self._doc(name, token, start, start + self.ttl)
            try:
                # written now, or found with our bytes (a write whose response was lost:
                # the document holds our token, so identical bytes are ours)
                self.store.put_once(key, data)
                got = self.store.get_tagged(key)
                if got is not None and got[0] == data:
                    return _Held(name, key, token, got[1], start + self.ttl)
            except WriteConflictError:
                pass  # someone holds it, or held it: look at the object
            current = self._read(key)
            if current is None:
                continue  # released in between: try again at once
            doc, tag = current
            expires = parse_iso(doc.get("expires_at")) if doc else None
            dead = doc is not None and holder_is_dead(doc)
            if doc is None or expires is None or expires < self.now() or dead:
                if doc is not None:
                    why = "the holder's process is gone" if dead else "expired"
                    log.warning("taking over lease %s of %s (%s)", key, describe_owner(doc), why)
                try:
                    if self.store.put_if_match(key, data, tag):
                        got = self.store.get_tagged(key)
                        if got is not None and got[0] == data:
                            return _Held(name, key, token, got[1], start + self.ttl)
                    continue  # another writer took it over first: look again
                except StorageError as exc:
                    if not exc.transient:
                        raise
                    # a transient failure (a suspended writer holds the local lock): wait
                    # like for a busy lease, up to --wait
                    if self.now() >= deadline:
                        raise LeaseBusyError(
                            f"{self.store.url}: cannot take over lease {key} ({exc}); "
                            "wait for it with --wait SECONDS, or try again later"
                        ) from None
                    time.sleep(min(self.poll, max(0.01, deadline - self.now())))
                    continue
            holder = describe_owner(doc)
            if self.now() >= deadline:
                raise LeaseBusyError(
                    f"{self.store.url} is being written by {holder} (lease {key}, held until "
                    f"{doc.get('expires_at')}); wait for it with --wait SECONDS, or try again later"
                )
            if not announced and self.on_wait is not None:
                self.on_wait(f"waiting for lease {key}, held by {holder}")
                announced = True
            time.sleep(min(self.poll, max(0.01, deadline - self.now())))

    def release(self) -> None:
        """Stop renewing and delete our leases (only those still ours)."""
        self._stop.set()
        with _ACTIVE_LOCK:
            if self in _ACTIVE:
                _ACTIVE.remove(self)
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=10)
        with self._lock:
            held, self._held = self._held, []
        if held:
            # what was written under the lease is durable before the next writer may
            # start on it; when it cannot be, the leases stay (they expire, or the next
            # writer sees this process gone) and the error stops the command
            barrier(self.store)
        for h in reversed(held):
            try:
                current = self.store.get_tagged(h.key)
                if current is not None and current[1] == h.tag:
                    self.store.delete(h.key)
            except StorageError as exc:  # it expires on its own
                log.warning("could not release lease %s: %s", h.key, exc)

    def __enter__(self) -> WriterLease:
        return self.acquire()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()

    # -- keeping it -------------------------------------------------------------
    def _renew_loop(self) -> None:
        interval = self.ttl / 4
        while not self._stop.wait(interval):
            try:
                self.renew()
            except BaseException as exc:  # recorded, never a traceback: `check` stops the run
                self._lose(f"lease could not be renewed ({one_line(exc)})")
                return

    def _lose(self, why: str) -> None:
        if self._lost is None:
            self._lost = why
            log.warning("%s: %s", self.store.url, why)

    def renew(self) -> None:
        """Extend every lease by one TTL; a lease someone else took is lost for good."""
        with self._lock:
            for h in self._held:
                if self._lost is not None:
                    return
                start = self.now()
                data = self._doc(h.name, h.token, start, start + self.ttl)
                try:
                    if not self.store.put_if_match(h.key, data, h.tag):
                        self._lost = f"lease {h.key} was taken over by another writer"
                        return
                    got = self.store.get_tagged(h.key)
                    if got is None or got[0] != data:
                        self._lost = f"lease {h.key} was taken over by another writer"
                        return
                    h.tag, h.expires_at = got[1], start + self.ttl
                except StorageError as exc:
                    if not exc.transient:
                        self._lose(f"lease {h.key} could not be renewed ({one_line(exc)})")
                        return
                    # a transient failure: keep trying until it expires (`check`)
                    log.warning("could not renew lease %s: %s", h.key, exc)
                except Exception as exc:  # anything else is a loss, recorded for `check`
                    self._lose(f"lease {h.key} could not be renewed ({one_line(exc)})")
                    return

    def valid_until(self) -> float:
        """The wall-clock time after which this writer must not write: its soonest
        expiry, less a margin for the write in flight; 0 once a lease is lost, and
        infinity while it holds none (before `acquire`, after `release`).

        Why a time and not only `check`: worker processes write under their parent's
        lease, and a time shared with them (`parallel`) is all they need to stop on
        their own when the whole run was suspended past its TTL."""
        if self._lost is not None:
            return 0.0
        held = self._held
        if not held:
            return float("inf")
        return min(h.expires_at for h in held) - min(10.0, self.ttl / 10)

    def check(self) -> None:
        """Raise `LeaseLostError` when this writer may no longer write."""
        if self._lost is None and self._held and self.now() > self.valid_until():
            soonest = min(h.expires_at for h in self._held)
            self._lost = f"lease expired at {iso(soonest)} without renewal"
        if self._lost is not None:
            raise LeaseLostError(f"{self.store.url}: {self._lost}; stopped writing (run again to finish)")

    @property
    def held(self) -> list[str]:
        return [h.name for h in self._held]

    def guard(self, store: Store) -> LeasedStore:
        """`store` with every write checking this lease first (`LeasedStore`)."""
        return LeasedStore(store, self.check)


class LeasedStore(StoreWrapper):
    """A store whose every write first checks a writer's lease (`check` raises
    `LeaseLostError` once it is lost or expired); reads pass through.

    Why a wrapper: "writers check their lease before every write" must hold for code
    that only sees a store (the log append writes tiles, lookup objects and the
    checkpoint through it), so a writer that was suspended past its TTL and resumes
    stops before its next write instead of overwriting what another writer's
    checkpoint names.
    """

    def __init__(self, inner: Store, check: Callable[[], None]) -> None:
        super().__init__(inner)
        self.check = check

    def before_write(self, key: str) -> None:
        self.check()


#: Leases this process holds now (from `acquire` to `release`), for `check_writes`.
_ACTIVE: list[WriterLease] = []
_ACTIVE_LOCK = threading.Lock()


def check_writes(store: Store) -> None:
    """Check every lease this process holds on `store` (raises `LeaseLostError`).

    For writes that bypass the store object (the index's Delta commits, vacuums and
    version notes are made by deltalake from the store's location), so they too stop
    before their next write once the writer's lease is lost or expired; a writer with
    no lease on the store (a test, a read-only command) is not stopped."""
    urls = (store.url, store.unwrapped().url)
    with _ACTIVE_LOCK:
        mine = [held for held in _ACTIVE if held.store.url in urls]
    for held in mine:
        held.check()


def writer_lease(
    store: Store,
    *,
    command: str,
    run_id: str = "",
    shards: Iterable[int] | None = None,
    papers: bool = True,
    index: bool = False,
    log: bool = False,
    wait: float = 0.0,
    ttl: float | None = None,
    on_wait: Callable[[str], None] | None = None,
) -> WriterLease:
    """The lease a command takes before it writes: the shards it publishes (`papers`;
    all of them unless `shards` narrows it), for index maintenance `index`, and for
    appending to the transparency log `log`.

    One function so every command and task names its leases the same way, in the same
    order, with an owner that says which command and run holds them.
    """
    names = shard_leases(shards) if papers else []
    names += ([INDEX_LEASE] if index else []) + ([LOG_LEASE] if log else [])
    return WriterLease(
        store,
        names,
        owner=default_owner(run_id, command),
        ttl=ttl,
        wait=wait,
        on_wait=on_wait,
    )
