"""The worker-process side of `parallel`: what one worker opens once and how it
publishes a chunk of records.

A worker is a spawned process (no fork: threads, clients and sockets do not survive
one). `init_worker` runs first in it and opens its own store, signer and `Publisher`
from a `WorkerSpec` (plain data, no secrets: signers are never pickled); each
`publish_chunk` then runs the `Loader` over its records exactly as one process does
and hands back a `ChunkResult` the parent merges. A worker ends when its parent is
gone (`die_with_parent`) and stops writing once the parent's lease runs out
(`SharedLease`).
"""

from __future__ import annotations

import os
import pickle
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pith_pipeline.core.arxiv_record import ArxivRecord
from pith_pipeline.core.timeutil import Clock
from pith_pipeline.errors import TransientError
from pith_pipeline.items import Item
from pith_pipeline.loader import Loader
from pith_pipeline.publish import BuildConfig, Publisher, RunSummary
from pith_pipeline.signing.factory import open_signer
from pith_pipeline.storage.base import Store, barrier
from pith_pipeline.storage.factory import open_store
from pith_pipeline.storage.lease import LeaseLostError
from pith_pipeline.storage.local import LocalStore

if TYPE_CHECKING:
    from pith_pipeline.signing.certified import CertifiedHandoff


# how a worker reopens the parent's store: ("local", root, fsync) or ("url", url, True)
StoreSpec = tuple[str, str, bool]


def _open_store(spec: StoreSpec) -> Store:
    kind, where, fsync = spec
    if kind == "local":
        return LocalStore(where, fsync=fsync)
    return open_store(where)


@dataclass(frozen=True, slots=True)
class WorkerSpec:
    """Everything a worker needs to publish exactly as the parent would (no secrets)."""

    store: StoreSpec
    signer_spec: str
    config: BuildConfig
    clock: Clock
    run_id: str
    # a certified run's key, handed to the workers so that the whole run signs with it
    certified: CertifiedHandoff | None = None
    # the shards the run publishes (None: all); the parent holds their leases
    shards: frozenset[int] | None = None
    # papers each worker publishes at once (its `Loader`)
    io_concurrency: int = 1
    # where the workers put the index rows of the bundles they write (`index.RowSink`)
    rows_dir: str | None = None
    # what the run's record pages name as the store's log, as the parent decided it
    # with the command's flags, which a spawned worker does not see
    page_log: tuple[str | None] | None = None


@dataclass(slots=True)
class ChunkResult:
    """What one chunk did, as plain data: the parent adds `summary` to the run's."""

    pid: int
    summary: RunSummary
    records: int = 0
    # (input sequence number, quarantine entry): the parent writes them in input order
    rejects: list[tuple[int, dict[str, Any]]] = field(default_factory=list)


_STATE: dict[str, Any] = {}

PARENT_CHECK_SECONDS = 0.25  # how often a worker looks for its parent; far below a lease's expiry
ORPHANED_EXIT = 70  # a worker's exit status when its parent is gone (nobody is left to read it)


def _exit_if_orphaned(parent_pid: int) -> None:
    """End this worker at once when the process that started it is gone.

    Why: a killed parent (`kill -9`, OOM killer) cannot stop its workers, and the pool's
    pipes never report it (each worker holds both ends of its queues), so workers would
    publish what was queued, without the parent's lease, then block forever. Exiting
    mid-record is safe: every object is written whole or not at all, as when the parent
    itself is killed. A dead parent's children are re-parented, so `getppid()` changes.
    """
    if os.getppid() != parent_pid:
        os._exit(ORPHANED_EXIT)


def _watch_parent(parent_pid: int) -> None:
    """A daemon thread that ends the worker within `PARENT_CHECK_SECONDS` of its parent's
    death, whatever the main thread is blocked on (a queue get, a pipe write, a store).

    Why polling, not only Linux's PR_SET_PDEATHSIG: that signal fires when the *thread*
    that started the worker ends, not the process, and the pool may be started from a
    thread that ends before the pool does (workers live across `publish` calls); so it
    is added only for pools started from the main thread (`die_with_parent`).
    """

    def watch() -> None:
        while True:
            _exit_if_orphaned(parent_pid)
            time.sleep(PARENT_CHECK_SECONDS)

    threading.Thread(target=watch, name="pith-parent-watch", daemon=True).start()


class SharedLease:
    """The parent's writer lease as its workers see it: the wall-clock time after which
    the run must not write (`WriterLease.valid_until`), in memory the parent keeps
    current while it renews.

    Why: workers write under the parent's lease but cannot hold it. Had they no check
    of their own, a run suspended past its TTL (a paused VM) would resume with every
    worker publishing its queued chunks beside the writer that took the lease over.
    The time is all they need: once it passes, they stop before their next write.
    """

    def __init__(self, until: Any, where: str) -> None:
        self._until = until  # a shared c_double (`multiprocessing.Value`)
        self._where = where

    def check(self) -> None:
        if time.time() > self._until.value:
            raise LeaseLostError(
                f"{self._where}: the run's writer lease ran out (lost, or not renewed in time); "
                "stopped writing (run again to finish)"
            )


PR_SET_PDEATHSIG = 1  # prctl(2) option: the signal sent when the parent thread ends


def _kernel_kills_on_parent_death() -> bool:
    """Ask Linux to SIGKILL this process when the thread that started it ends.

    Why besides the watchdog thread: that thread needs the GIL, and a worker can spend
    minutes in C code that holds it (parsing a huge record, signing), outliving a
    killed parent all that time. False where prctl is not there (not Linux).
    """
    import ctypes
    import signal
    import sys

    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def die_with_parent(parent_pid: int, deathsig: bool = False) -> None:
    """Make this worker end when the process `parent_pid` (its parent) is gone.

    Always a watchdog thread (`_watch_parent`). With `deathsig` also the kernel's
    parent-death signal, which fires when the *thread* that started the worker ends:
    the parent asks for it only when it starts its pools from its main thread, which
    ends only with the process (`ParallelPublisher._start`). Set before the first
    `getppid()` check, so a parent that died in between is still noticed.
    """
    if deathsig:
        _kernel_kills_on_parent_death()
    _exit_if_orphaned(parent_pid)  # the parent may have died before this ran
    _watch_parent(parent_pid)


def init_worker(
    spec: WorkerSpec, parent_pid: int | None = None, lease_until: Any = None, deathsig: bool = False
) -> None:
    """Open the worker's store, signer and publisher once, for all its chunks.

    An error here is kept and raised by the first chunk: an initializer's own
    exception would only break the pool, losing its type and message.
    """
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    if parent_pid is not None:
        _STATE["parent_pid"] = parent_pid
        die_with_parent(parent_pid, deathsig)
    try:
        store = _open_store(spec.store)
        signer = spec.certified.signer() if spec.certified is not None else open_signer(spec.signer_spec)
        _STATE["pub"] = Publisher(
            store,
            signer,
            spec.config,
            clock=spec.clock,
            run_id=spec.run_id,
            shards=spec.shards,
            io_concurrency=spec.io_concurrency,
            lease=None if lease_until is None else SharedLease(lease_until, store.url),
            page_log=spec.page_log,
        )
        if spec.rows_dir is not None:
            # lazy: pith_pipeline.index, pyarrow, 139 ms at import
            from pith_pipeline.index.sink import RowSink

            sink = _STATE["rows"] = RowSink(spec.rows_dir)
            _STATE["pub"].on_bundle = sink.add_bundle
    except BaseException as exc:  # re-raised by the first chunk
        _STATE["error"] = exc


def started() -> None:
    """The task that starts a worker process (its initializer runs first)."""


def _picklable(exc: BaseException) -> BaseException:
    """The error itself when it survives the trip to the parent, else a faithful stand-in."""
    try:
        back = pickle.loads(pickle.dumps(exc))
        if type(back) is type(exc) and str(back) == str(exc):
            return exc
    except Exception:  # fall through to the stand-in
        pass
    return WorkerError(f"{type(exc).__name__} in a worker process: {exc}")


def publish_chunk(chunk: list[tuple[int, ArxivRecord]]) -> ChunkResult:
    """Publish records through the `Loader`, as one process does."""
    try:
        if "error" in _STATE:
            raise _STATE["error"]
        pub: Publisher = _STATE["pub"]
        run_id = pub.summary.run_id
        pub.summary = RunSummary.part(run_id)  # per chunk: the worker's memory stays flat
        parent_pid = _STATE.get("parent_pid")

        def records() -> Iterator[tuple[int, Item]]:
            for seq, rec in chunk:
                if parent_pid is not None:  # no new paper once the run's owner is gone
                    _exit_if_orphaned(parent_pid)
                yield seq, rec

        rejects = Loader(pub).run(records())
        if "rows" in _STATE:  # the parent's index update reads them once the run ends
            _STATE["rows"].flush()
        barrier(pub.store)  # the chunk is durable before the parent counts it done
        return ChunkResult(os.getpid(), pub.summary, records=len(chunk), rejects=rejects)
    except BaseException as exc:
        raise _picklable(exc) from None


class WorkerError(TransientError):
    """An error in a worker process that could not be sent back as itself."""
