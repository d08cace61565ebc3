"""The one publish loop: every path that publishes records goes through `Loader`.

`build`, `ingest` and `backfill` in one process (`Publisher.publish`), each worker
process's chunk (`parallel_worker.publish_chunk`), a parallel run's records kept in the
parent (`ParallelPublisher`) and each Airflow build task (`airflow_tasks.build_chunk`)
hand their items to a `Loader`. What happens to one record stays
`Publisher.publish_item`; the loader decides how many records are in flight and
adds up what each did (`RunSummary.add`).

Why several records in flight: a store far away (S3: tens of milliseconds per
request) leaves one process idle most of the time when it waits on one request at a
time. With `io_concurrency` N > 1 up to N papers are published at once by a bounded
pool of threads (boto3 releases the GIL while it waits on the network, and the
signing and JSON work in between is short), each paper's requests in their usual
order: its events, then its bundle and state, then its arXiv pointer. Every version
and duplicate of one arXiv id is published by one thread after the other, in input
order, because the pointer, supersedes and corrections are read-modify-write per
paper; different papers share no object (the key document is published before the
loop, the quarantine after it). At most `backlog` records wait beyond those in
flight, and `learn_batch` more are read ahead (back-pressure), so memory stays
bounded whatever the input.

Why read ahead: a paper the store has never seen needs no request before its
writes, and one listing page tells that for a whole batch of papers
(`Publisher.learn_new`); so a new paper costs its six writes and a share of a LIST.

With N = 1 (the default for a local directory) nothing changes: records are
published one after another in this thread, and a fixed clock gives the same bytes.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections import deque
from collections.abc import Callable, Container, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Generic, Protocol, Self, TypeVar

from pith_pipeline._internal.quarantine_spool import AddReject, QuarantineSpool
from pith_pipeline.errors import DamagedInputError
from pith_pipeline.items import Item, Rejected
from pith_pipeline.storage.concurrency import check_io_concurrency, reserve_connections

if TYPE_CHECKING:
    from pith_pipeline.storage.base import Store

log = logging.getLogger(__name__)

#: records waiting beyond those in flight, per unit of concurrency (back-pressure)
BACKLOG_PER_SLOT = 4

#: records read ahead to learn, with a few LISTs, which papers are new (`learn_new`)
LEARN_BATCH = 256
#: raw input of rejects read ahead at most (one more reject may pass it)
READ_AHEAD_BYTES = 4 << 20

#: (input sequence number, quarantine entry)
Reject = tuple[int, dict[str, Any]]
T = TypeVar("T")


class Tally(Protocol):
    """A run's counts as the loop sees them (`publish.RunSummary`): each paper a
    thread publishes is counted on its own and added to the run's by the loop."""

    def add(self, other: Self, /) -> object: ...


S = TypeVar("S", bound=Tally)
S_co = TypeVar("S_co", bound=Tally, covariant=True)
#: what a thread hands back per record: (sequence number, quarantine entry, the
#: record's counts, its error); counts None: not published (the loop was stopping)
Done = tuple[int, "dict[str, Any] | None", S | None, BaseException | None]


class Publishing(Protocol[S_co]):
    """What the loop asks of the publisher it drives (`publish.Publisher`).

    The contract: `publish_item` and `publish_counted` decide what happens to one
    record, and may run on several threads at once for different papers (never two
    of one paper at once); `learn_new` and `forget_learned` bracket a batch read
    ahead; `summary` is the run's counts, touched only by the calling thread. The
    loop depends on this much and not on the publisher's module, which uses it.
    """

    @property
    def store(self) -> Store: ...
    @property
    def io_concurrency(self) -> int: ...
    @property
    def quarantine(self) -> QuarantineSpool: ...
    @property
    def summary(self) -> S_co: ...
    def publish_key_document(self) -> None: ...
    def flush_quarantine(self) -> None: ...
    def learn_new(self, records: Iterable[Item], *, busy: Container[str] = ()) -> int: ...
    def forget_learned(self) -> None: ...
    def publish_item(self, item: Item) -> dict[str, Any] | None: ...
    def publish_counted(self, item: Item) -> tuple[dict[str, Any] | None, S_co]: ...


def _paper(item: Item) -> str | None:
    """The arXiv id whose records must go one after another (None: no paper)."""
    return None if isinstance(item, Rejected) else item.id


class Loader(Generic[S]):
    """Publishes items through one `Publisher`, up to `io_concurrency` papers at once."""

    def __init__(self, publisher: Publishing[S], *, io_concurrency: int | None = None) -> None:
        self.publisher = publisher
        n = io_concurrency if io_concurrency is not None else publisher.io_concurrency
        self.io_concurrency = check_io_concurrency(n)
        self.backlog = BACKLOG_PER_SLOT * self.io_concurrency
        self.learn_batch = LEARN_BATCH
        if self.io_concurrency > 1:  # + the calling thread's and the lease renewer's
            reserve_connections(publisher.store, self.io_concurrency + 2)

    def publish(
        self, items: Iterable[Item], *, progress: Callable[[int], None] | None = None, flush: bool = True
    ) -> S:
        """A whole run: the key document, every item, then the quarantine file
        (`flush` False: the caller stores it at the end of its run; it is stored at
        once when the input is damaged part way: see `UntilDamaged`)."""
        pub = self.publisher
        pub.publish_key_document()
        try:
            self.run(enumerate(items), progress=progress, into=pub.quarantine.batch())
        except DamagedInputError:
            pub.flush_quarantine()
            raise
        if flush:
            pub.flush_quarantine()
        return pub.summary

    def run(
        self,
        items: Iterable[tuple[int, Item]],
        *,
        progress: Callable[[int], None] | None = None,
        into: AddReject | None = None,
    ) -> list[Reject]:
        """Publish numbered items; returns their quarantine entries in input order.

        `into`: each entry is handed to it as it comes, maybe out of order (the run's
        `QuarantineSpool` orders them), and none is kept or returned, so memory stays
        bounded however many large rejects the input holds.

        Counts go to the publisher's summary. The first store, signer or lease error
        stops the loop: papers already in flight finish, no new one starts, and the
        error is raised (what was published stays published; a rerun completes it).
        """
        rejects: list[Reject] = []
        add: AddReject = into if into is not None else lambda seq, entry: rejects.append((seq, entry))
        source = UntilDamaged(items)
        try:
            if self.io_concurrency == 1:
                self._run_here(source, progress, add)
            else:
                _Concurrent(self, progress, add).run(source)
        finally:
            self.publisher.forget_learned()
        rejects.sort(key=lambda r: r[0])
        if source.damage is not None:  # what came before it is published; its rejects kept
            keep = self.publisher.quarantine.batch()
            for seq, entry in rejects:
                keep(seq, entry)
            raise source.damage
        return rejects

    def _run_here(
        self, items: Iterable[tuple[int, Item]], progress: Callable[[int], None] | None, add: AddReject
    ) -> None:
        pub = self.publisher
        for batch in batches(items, self.learn_batch):
            pub.learn_new(item for _seq, item in batch)
            for seq, item in batch:
                entry = pub.publish_item(item)
                if entry is not None:
                    add(seq, entry)
                if progress:
                    progress(1)


class _Concurrent(Generic[S]):
    """One concurrent loop: a thread pool, per-paper queues, and a results queue.

    Only the calling thread touches the run's summary and calls `progress`: each
    paper is counted in a summary of its own (`Publisher.publish_counted`) that the calling
    thread adds to the run's (`RunSummary.add`), so spilled ledgers and progress
    bars are only ever used from the thread that made them.
    """

    def __init__(self, loader: Loader[S], progress: Callable[[int], None] | None, add: AddReject) -> None:
        self.pub = loader.publisher
        self.n = loader.io_concurrency
        self.limit = self.n + loader.backlog
        self.learn_batch = loader.learn_batch
        self.progress = progress
        self.lock = threading.Lock()
        # papers with a thread on them -> their later records, waiting in input order
        self.busy: dict[str, deque[tuple[int, Item]]] = {}
        self.done: queue.SimpleQueue[Done[S]] = queue.SimpleQueue()
        self.outstanding = 0
        self.stop = False
        self.error: BaseException | None = None
        self.add = add  # quarantine entries, as they are folded in (any order)

    def run(self, items: Iterable[tuple[int, Item]]) -> None:
        pool = ThreadPoolExecutor(max_workers=self.n, thread_name_prefix="pith-load")
        try:
            for batch in batches(items, self.learn_batch):
                self._fold_ready()
                if self.error is not None:
                    break
                with self.lock:
                    busy = set(self.busy)
                self.pub.learn_new((item for _seq, item in batch), busy=busy)
                for seq, item in batch:
                    if not self._dispatch(pool, seq, item):
                        break
                if self.error is not None:
                    break
            while self.outstanding:
                self._fold(self.done.get())
        finally:
            self.stop = True
            pool.shutdown(wait=True, cancel_futures=True)
        if self.error is not None:
            raise self.error

    def _dispatch(self, pool: ThreadPoolExecutor, seq: int, item: Item) -> bool:
        """Hand one record to a thread (or to its paper's queue); False: stop reading."""
        while self.outstanding >= self.limit:  # back-pressure
            self._fold(self.done.get())
        self._fold_ready()
        if self.error is not None:
            return False
        paper = _paper(item)
        if paper is None:  # a reject: counted here, no request
            entry = self.pub.publish_item(item)
            if entry is not None:
                self.add(seq, entry)
            if self.progress:
                self.progress(1)
            return True
        self.outstanding += 1
        with self.lock:
            waiting = self.busy.get(paper)
            if waiting is not None:
                waiting.append((seq, item))
                return True
            self.busy[paper] = deque()
        pool.submit(self._work, paper, seq, item)
        return True

    def _work(self, paper: str, seq: int, item: Item) -> None:
        """Publish one paper's records, one after another, on this thread."""
        while True:
            if self.stop:
                self.done.put((seq, None, None, None))
            else:
                try:
                    entry, part = self.pub.publish_counted(item)
                    self.done.put((seq, entry, part, None))
                except BaseException as exc:  # handed to the calling thread, which raises it
                    self.stop = True
                    self.done.put((seq, None, None, exc))
            with self.lock:
                waiting = self.busy[paper]
                if not waiting:
                    del self.busy[paper]
                    return
                seq, item = waiting.popleft()

    def _fold_ready(self) -> None:
        while True:
            try:
                got = self.done.get_nowait()
            except queue.Empty:
                return
            self._fold(got)

    def _fold(self, got: Done[S]) -> None:
        seq, entry, part, exc = got
        self.outstanding -= 1
        if exc is not None:
            if self.error is None:
                self.error = exc
            return
        if part is not None:
            self.pub.summary.add(part)
            if self.progress:
                self.progress(1)
        if entry is not None:
            self.add(seq, entry)


class UntilDamaged(Iterator[T]):
    """An input's items up to where it turns out damaged; the damage is kept in `damage`.

    Why: a reader raises `DamagedInputError` (a truncated `.gz`, see `sources/jsonl.py`)
    in the middle of a batch (`batches` reads 256 ahead); raised through the loop, it
    would drop the records read before it, never published, and every reject, never
    quarantined. The loop ends at the damage as at the end of the input, publishes
    what it read, and the caller raises `damage` afterwards.
    """

    def __init__(self, items: Iterable[T]) -> None:
        self._items = iter(items)
        self.damage: DamagedInputError | None = None

    def __iter__(self) -> UntilDamaged[T]:
        return self

    def __next__(self) -> T:
        if self.damage is not None:
            raise StopIteration
        try:
            return next(self._items)
        except DamagedInputError as exc:
            self.damage = exc
            raise StopIteration from None


def batches(items: Iterable[tuple[int, Item]], size: int) -> Iterator[list[tuple[int, Item]]]:
    """Numbered items in lists of up to `size` (read ahead, so memory stays bounded).

    A list also ends once its rejects hold `READ_AHEAD_BYTES` of raw input: each
    keeps its whole input (megabytes when hostile), so `size` of them read ahead
    would hold gigabytes."""
    batch: list[tuple[int, Item]] = []
    raw = 0
    for pair in items:
        batch.append(pair)
        if isinstance(pair[1], Rejected):
            raw += len(pair[1].raw)
        if len(batch) >= size or raw >= READ_AHEAD_BYTES:
            yield batch
            batch = []
            raw = 0
    if batch:
        yield batch


def numbered(items: Iterable[Item], start: int = 0) -> Iterator[tuple[int, Item]]:
    """Items with their input sequence numbers (quarantine entries keep input order)."""
    return enumerate(items, start)
