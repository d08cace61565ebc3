"""Publishing on every core: records routed to worker processes by arXiv id.

Building and signing a bundle is CPU work and a local store's writes are per-record
I/O, so one process keeps one core busy. `ParallelPublisher` keeps the parent's
`Publisher` as the run's single summary and quarantine, and hands records to worker
processes that each open their own store and signer (signers are never pickled:
each worker opens one from the run's signer spec).

Why routing by id: the pointer `arxiv/<id>.json`, supersedes and corrections are
read-modify-write per paper, so every version and duplicate of one paper goes to the
same worker, in input order (one single-process executor per worker keeps FIFO
order). Different papers share no object except the key document, which the parent
publishes before any worker starts, and the quarantine file, which only the parent
writes (in input order). So with a fixed clock (`SOURCE_DATE_EPOCH`) the store's
bytes equal the one-process path's.

Small runs do not pay for process start-up: workers start only once more than one
chunk of records has arrived; fewer are published in this process exactly as before.

Each worker gets its own copy of the clock: `system_clock` (and any fixed clock) gives
the same bytes as one process; a clock that moves on every reading (tests' StepClock)
gives valid but different timestamps; a clock that does not pickle keeps the run in one
process, as does a store that workers cannot reopen (local directories and `s3://` URLs
they can). A `certified:` run's short-lived key is made once, by the parent, and handed
to each worker it spawns (`CertifiedHandoff`), so the whole run signs with the one key
its certificate names.

This module is the parent's side; what runs inside a worker process is
`parallel_worker`.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import pickle
import threading
import zlib
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_COMPLETED, FIRST_EXCEPTION, Future, wait
from concurrent.futures.process import ProcessPoolExecutor
from types import TracebackType
from typing import TYPE_CHECKING, Any

from pith_pipeline._internal.quarantine_spool import AddReject
from pith_pipeline.core.arxiv_record import ArxivRecord
from pith_pipeline.core.timeutil import Clock
from pith_pipeline.errors import InputError
from pith_pipeline.items import Item, Rejected
from pith_pipeline.loader import Loader, UntilDamaged
from pith_pipeline.parallel_worker import (
    PARENT_CHECK_SECONDS,
    ChunkResult,
    StoreSpec,
    WorkerError,
    WorkerSpec,
    init_worker,
    publish_chunk,
    started,
)
from pith_pipeline.publish import Publisher, RunSummary
from pith_pipeline.signing.certified import CertifiedSigner
from pith_pipeline.storage.base import Store
from pith_pipeline.storage.local import LocalStore

if TYPE_CHECKING:
    from pith_pipeline.index.sink import RowSink

log = logging.getLogger(__name__)

DEFAULT_CHUNK = 500  # records per message to a worker: amortises pickling, bounds memory
IN_FLIGHT = 3  # chunks queued per worker before the parent waits (backpressure)


def usable_cores() -> int:
    """Cores this process may run on (the CLI's default number of workers)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def worker_for(arxiv_id: str, workers: int) -> int:
    """A stable worker index for a paper (Python's `hash()` is salted per process)."""
    return zlib.crc32(arxiv_id.encode("utf-8")) % workers


def store_spec(store: Store) -> StoreSpec | None:
    """What a worker needs to open the same store, or None for stores it cannot reopen."""

    if isinstance(store, LocalStore):
        return ("local", str(store.root), store.fsync)
    if store.url.startswith("s3://"):
        return ("url", store.url, True)
    return None


def sequential_reason(
    store: Store, signer_spec: str | None, clock: Clock, *, certified: bool = False
) -> str | None:
    """Why this run cannot use worker processes, or None when it can.

    `certified`: the run's signer is a `CertifiedSigner`, whose key the workers get
    handed over (they must sign with the one key the run's certificate names).
    """
    if signer_spec is None:
        return "the signer was given without a spec workers could open it from"
    if signer_spec.partition(":")[0] == "certified" and not certified:
        # each process would make its own in-memory key, none of them in the key document
        return "a certified: signer's per-run key can only be handed over from its signer"
    if store_spec(store) is None:
        return f"the store {store.url} cannot be reopened by worker processes"
    try:
        pickle.dumps(clock)
    except Exception:  # any failure to pickle means: no workers
        return "the clock cannot be sent to worker processes"
    return None


def _result(future: Future[ChunkResult]) -> ChunkResult:
    """The chunk's result; a worker's own error is raised as itself."""
    from concurrent.futures.process import BrokenProcessPool

    try:
        return future.result()
    except BrokenProcessPool:
        raise WorkerError(
            "a worker process died before finishing its records (killed, out "
            "of memory, or started from a script without an "
            '`if __name__ == "__main__":` guard); what it finished is '
            "published, run again to complete the rest"
        ) from None


# -- the parent side ---------------------------------------------------------------
class ParallelPublisher:
    """`Publisher.publish` with worker processes; same contract, same bytes.

    One single-process executor per worker keeps each worker's chunks in order; at
    most `in_flight` chunks wait per worker, so memory is bounded whatever the input.
    Workers live until `close()`, across `publish` calls (one per harvested page).
    """

    def __init__(
        self,
        publisher: Publisher,
        *,
        workers: int,
        signer_spec: str | None,
        chunk_size: int = DEFAULT_CHUNK,
        in_flight: int = IN_FLIGHT,
        rows: RowSink | None = None,
    ) -> None:
        """`rows`: where every process puts the index rows of the bundles it writes, so
        the run's index update need not read them back (`finish_run(..., rows=rows)`)."""
        if workers < 1:
            raise InputError(f"--workers must be at least 1, not {workers}")
        if chunk_size < 1:
            raise InputError(f"the worker chunk size must be at least 1, not {chunk_size}")
        self.publisher = publisher
        self.chunk_size = chunk_size
        self.in_flight = max(1, in_flight)
        self.workers = workers

        certified = isinstance(publisher.signer, CertifiedSigner)
        reason = (
            None
            if workers == 1
            else sequential_reason(publisher.store, signer_spec, publisher.clock, certified=certified)
        )
        if reason is not None:
            log.warning("publishing in one process (%d workers asked for): %s", workers, reason)
            self.workers = 1
        handoff = None
        if self.workers > 1 and isinstance(publisher.signer, CertifiedSigner):
            handoff = publisher.signer.handoff(url=publisher.site.key_url)
        self._spec = WorkerSpec(
            store_spec(publisher.store) or ("url", "", True),
            signer_spec or "",
            publisher.config,
            publisher.clock,
            publisher.summary.run_id,
            handoff,
            publisher.shards,
            publisher.io_concurrency,
            None if rows is None else str(rows.directory),
        )
        if rows is not None:
            publisher.on_bundle = rows.add_bundle
        self._pools: list[ProcessPoolExecutor] | None = None
        self._queues: list[deque[Future[ChunkResult]]] = []
        self._buffers: list[list[tuple[int, ArxivRecord]]] = []
        self._progress: Callable[[int], Any] | None = None
        # where merged chunks' rejects go: the parent's quarantine spool (`publish`)
        self._add_reject: AddReject = publisher.quarantine.batch()
        self._seq = 0  # input sequence number across the run: orders the quarantine
        self.chunks_dispatched = 0
        self.worker_pids: set[int] = set()
        self._relay_stop = threading.Event()

    @property
    def started(self) -> bool:
        return self._pools is not None

    # -- lifecycle ----------------------------------------------------------------
    def _start(self) -> None:
        import multiprocessing

        ctx = multiprocessing.get_context("spawn")  # no fork: threads, clients, sockets
        from_main_thread = threading.current_thread() is threading.main_thread()
        valid_until = getattr(self.publisher.lease, "valid_until", None)
        until = None
        if valid_until is not None:  # the workers' view of the lease (`SharedLease`)
            until = ctx.Value("d", valid_until(), lock=False)
            self._relay_lease(until, valid_until)
        # the pages' log is decided now, at the first chunk: the run's log key
        # (`Publisher.log_key`) is given after this executor is made, before publishing
        spec = dataclasses.replace(self._spec, page_log=self.publisher.writer.page_log_prefix())
        self._pools = [
            ProcessPoolExecutor(
                max_workers=1,
                mp_context=ctx,
                initializer=init_worker,
                # workers end when this process is gone, and stop once its lease runs out;
                # the kernel's parent-death signal only when started from the main thread
                # (it fires when the starting thread ends, see `die_with_parent`)
                initargs=(spec, os.getpid(), until, from_main_thread),
            )
            for _ in range(self.workers)
        ]
        self._queues = [deque() for _ in range(self.workers)]
        self._buffers = [[] for _ in range(self.workers)]
        for pool in self._pools:
            # a pool starts its process on its first task, which came only once that
            # worker's first chunk had filled: the process imports and opens its store
            # and signer (a third of a second) while this one reads the records meant
            # for it; started now, that overlaps with the reading
            pool.submit(started)

    def _relay_lease(self, until: Any, valid_until: Callable[[], float]) -> None:
        """Keep the workers' copy of the lease's time current while the run lasts (a
        thread: the parent may wait on a slow worker for longer than a renewal)."""
        stop = self._relay_stop = threading.Event()

        def relay() -> None:
            while True:
                until.value = valid_until()
                if stop.wait(PARENT_CHECK_SECONDS):
                    return

        threading.Thread(target=relay, name="pith-lease-relay", daemon=True).start()

    def close(self) -> None:
        """Stop the workers (after their current chunk); safe to call twice."""
        pools, self._pools = self._pools, None
        for pool in pools or ():
            pool.shutdown(wait=True, cancel_futures=True)
        self._relay_stop.set()
        self._queues, self._buffers = [], []

    def __enter__(self) -> ParallelPublisher:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # -- the run ----------------------------------------------------------------
    def publish(
        self, items: Iterable[Item], *, progress: Callable[[int], None] | None = None, flush: bool = True
    ) -> RunSummary:
        """Build, sign and publish every record; quarantine every reject (input order).

        `flush`: store the quarantine at the end (False: the caller publishes more
        items in this run and calls `Publisher.flush_quarantine` once, at its end)."""
        pub = self.publisher
        if self.workers == 1:
            return pub.publish(items, progress=progress, flush=flush)
        pub.publish_key_document()  # before any worker reads the store's key document
        self._progress = progress
        # rejects go to the parent's spill file as they come; it keeps input order
        add = self._add_reject = pub.quarantine.batch()
        pending: list[tuple[int, ArxivRecord]] = []
        source = UntilDamaged(items)  # a damaged input ends the loop; raised after it
        try:
            for item in source:
                seq = self._seq
                self._seq += 1
                if isinstance(item, Rejected):  # counted here, in input order
                    Loader(pub, io_concurrency=1).run([(seq, item)], progress=progress, into=add)
                elif self._pools is not None:
                    self._route(seq, item)
                else:
                    pending.append((seq, item))
                    if len(pending) > self.chunk_size:  # a big run: worth the start-up
                        self._start()
                        for s, rec in pending:
                            self._route(s, rec)
                        pending = []
            if pending:  # a small run: in this process, as ever
                Loader(pub).run(pending, progress=progress, into=add)
            if self._pools is not None:
                self._drain()
        except BaseException:
            self.close()
            raise
        if flush or source.damage is not None:
            pub.flush_quarantine()
        if source.damage is not None:  # what came before it is published and quarantined
            raise source.damage
        return pub.summary

    def _route(self, seq: int, rec: ArxivRecord) -> None:
        pub = self.publisher
        if pub.lease is not None:  # the workers write under the parent's lease
            pub.lease.check()
        w = worker_for(rec.id, self.workers)
        buf = self._buffers[w]
        buf.append((seq, rec))
        if len(buf) >= self.chunk_size:
            self._submit(w)

    def _submit(self, w: int) -> None:
        assert self._pools is not None
        queue = self._queues[w]
        while len(queue) >= self.in_flight:  # backpressure: this worker is behind
            wait([f for q in self._queues for f in q], return_when=FIRST_COMPLETED)
            self._collect_done()
        chunk, self._buffers[w] = self._buffers[w], []
        queue.append(self._pools[w].submit(publish_chunk, chunk))
        self.chunks_dispatched += 1
        self._collect_done()

    def _collect_done(self) -> None:
        """Fold in every finished chunk; raise the first worker error met."""
        for queue in self._queues:
            while queue and queue[0].done():
                self._merge(_result(queue.popleft()))

    def _drain(self) -> None:
        for w, buf in enumerate(self._buffers):
            if buf:
                self._submit(w)
        outstanding = [f for q in self._queues for f in q]
        wait(outstanding, return_when=FIRST_EXCEPTION)
        for f in outstanding:  # a failure anywhere stops the run before more merging
            if f.done() and f.exception() is not None:
                _result(f)
        for queue in self._queues:
            while queue:
                self._merge(_result(queue.popleft()))

    def _merge(self, res: ChunkResult) -> None:
        self.worker_pids.add(res.pid)
        self.publisher.summary.add(res.summary)
        for seq, entry in res.rejects:
            self._add_reject(seq, entry)
        if self._progress:
            self._progress(res.records)
