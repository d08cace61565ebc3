"""One publishing run, opened and closed in one place: `Run`.

    with Run.open(settings, command="build", notes={"input": "records.jsonl"}) as run:
        run.publish(items)
    run.summary, run.manifest_key

A run owns, in this order: the store and the signer, the run's log key, the
`Publisher`, the writer lease on its shards, the row sink, the executor (threads, or
worker processes through `ParallelPublisher`), then at its end what its `Ending`
does. They are closed in reverse. There is one way to end:

- success: the paper lease is released and the run's `Ending` finishes it. The
  default, `INDEX_AND_MANIFEST` (build, ingest, backfill windows): the index update
  under the index lease, then the run manifest (`manifest_key`), which appends the
  run's events to the store's transparency log. The others: `LOG_ONLY` (receipts
  reissue: the new events into the log, nothing indexed), `REINDEX` (rebuild: the
  index lease is held from the start, and every index is rebuilt from the bundles),
  and an Airflow build chunk's own (`runs.steps.StagedChunk`: the chunk's counts
  staged for the window's later tasks);
- failure or interruption (an exception, KeyboardInterrupt included): every part
  is closed in reverse, the leases are released, the ending does nothing (no index,
  no manifest); the exception goes on to the caller. What the run published stays
  published and the next run's index update heals it (`RunSummary.seen`).

Every setting comes from the `Settings` given to `open` (the store's fsync and lease
TTL, the log key and origin, shards, workers): nothing below reads the environment.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager, ExitStack, contextmanager
from typing import Any, Protocol

from pith_pipeline import config
from pith_pipeline.clock import system_clock
from pith_pipeline.core.keys import Signer
from pith_pipeline.core.timeutil import Clock
from pith_pipeline.errors import InputError
from pith_pipeline.index.sink import RowSink
from pith_pipeline.parallel import ParallelPublisher, usable_cores
from pith_pipeline.publish import BuildConfig, Publisher, RunSummary
from pith_pipeline.runs.ending import Ending
from pith_pipeline.runs.manifest import finish_run
from pith_pipeline.signing.factory import open_signer
from pith_pipeline.storage.base import Store
from pith_pipeline.storage.factory import open_store
from pith_pipeline.storage.lease import parse_shards, writer_lease
from pith_pipeline.tlog.log_key import log_signer_for
from pith_pipeline.tlog.pipeline import log_run
from pith_pipeline.tlog.run_log import RunLog, run_log_of

Progress = Callable[[int], None]


class ProgressBar(Protocol):
    """What the index update reports to (a tqdm bar is one)."""

    def update(self, n: int) -> Any: ...


#: the least a run waits for the index lease: a run that gave up on it after
#: publishing would leave its papers unindexed until the next run
INDEX_LEASE_MIN_WAIT = 600.0


def _quiet(_: str) -> None:
    """The default notice: a library caller is told nothing on stderr."""


class IndexAndManifest(Ending):
    """The index update for what the run wrote, under the index lease, then the run
    manifest (`finish_run`), which first appends the run's events to the log."""

    def finish(self, run: Run) -> None:
        run.end_with_index_and_manifest()


class LogOnly(Ending):
    """The run's new events into the store's transparency log, if it keeps one
    (`receipts reissue`: a re-signed event changes no index row)."""

    indexes_rows = False

    def finish(self, run: Run) -> None:
        log = log_signer_for(run.log.spec, run.store, run.settings.log_origin)
        summary = run.publisher.summary
        run.result = log_run(
            run.store, summary.written, log, pending=summary.log_pending, run_id=summary.run_id
        )


class Reindex(Ending):
    """Every index table rebuilt from the bundles (`index.reindex`), still under the
    leases taken at the start (`rebuild`)."""

    holds_index = True
    indexes_rows = False  # every index is rebuilt from the bundles
    appends_log = False  # a rebuild makes no event: no log key is needed

    def finish(self, run: Run) -> None:
        # lazy: pith_pipeline.index, pyarrow, 92 ms at import
        from pith_pipeline.index import reindex

        with run.index_progress() as bar:
            run.result = reindex(run.store, progress=_reporter(bar))


INDEX_AND_MANIFEST = IndexAndManifest()
LOG_ONLY = LogOnly()
REINDEX = Reindex()


class Run:
    """A publishing run's parts and its result (module docstring for the lifecycle).

    Made by `Run.open` only. `publish` may be called more than once; the index
    update and the manifest happen once, when the `with` block ends without error.
    """

    def __init__(
        self,
        settings: config.Settings,
        *,
        command: str,
        store: Store,
        signer: Signer,
        publisher: Publisher,
        log: RunLog,
        rows: RowSink,
        workers: int,
        notes: Mapping[str, Any],
        notice: Callable[[str], None],
        ending: Ending,
        index_progress: Callable[[], AbstractContextManager[ProgressBar | None]] | None,
    ) -> None:
        self.settings = settings
        self.command = command
        self.store = store
        self.signer = signer
        self.publisher = publisher
        #: the run's log key (`tlog.run_log.prepare_run_log`): its spec, None when the
        #: store keeps no log; the publisher's pages name it, its key document lists it
        self.log = log
        publisher.writer.log_signer_spec = log.spec
        publisher.log_key = log.member
        self.rows = rows
        self.workers = workers
        self.notes = dict(notes)
        self.notice = notice
        self.ending = ending
        self._index_progress = index_progress
        self.summary: RunSummary = publisher.summary
        #: the run manifest's key, set when an `INDEX_AND_MANIFEST` run ends in success
        self.manifest_key: str | None = None
        #: what another ending produced (the log run, the reindex, the staged chunk)
        self.result: Any = None
        #: what `finish_run` records beside the counts (`record`)
        self.manifest_extra: dict[str, Any] = {}
        self.wait = 0.0

    def record(self, notes: Mapping[str, Any] | None = None, **extra: Any) -> None:
        """What the run manifest records beside the counts: `notes` (its window: the
        input, the source and dates) and `finish_run`'s keywords (`extra_counts`,
        `warnings`, `outside_window`); recorded when the run ends in success."""
        if notes is not None:
            self.notes = dict(notes)
        self.manifest_extra.update(extra)

    @property
    def run_id(self) -> str:
        return self.summary.run_id

    @classmethod
    @contextmanager
    def open(
        cls,
        settings: config.Settings,
        *,
        command: str,
        store: Store | None = None,
        signer: Signer | None = None,
        run_id: str | None = None,
        notes: Mapping[str, Any] | None = None,
        lease_wait: float | None = None,
        notice: Callable[[str], None] = _quiet,
        index_progress: Callable[[], AbstractContextManager[ProgressBar | None]] | None = None,
        ending: Ending = INDEX_AND_MANIFEST,
        shards: frozenset[int] | None = None,
        workers: int | None = None,
        rotating: bool = False,
        io_concurrency: int | None = None,
        clock: Clock = system_clock,
    ) -> Iterator[Run]:
        """Open every part of a run from `settings`, yield it, and end it (module docstring).

        `store`/`signer`: open ones, else `settings.store` (with its `store_options`) and
        `settings.signer` are opened. `notice`: where one-line notes go (a lease waited
        for, a log key made). `index_progress`: a factory of the index update's bar.
        `ending`: what a successful run does at its end (`INDEX_AND_MANIFEST`,
        `LOG_ONLY`, `REINDEX`, or a caller's own `Ending`). `shards`, `workers`,
        `io_concurrency`: the settings' unless given (an Airflow chunk's shards; one
        process for a task). `rotating`: the run may bring a key the store does not list
        yet (`receipts reissue`). `clock`: what the run's documents are stamped with.
        """
        store = store if store is not None else open_store(settings.store, **settings.store_options)
        signer = signer if signer is not None else _signer(settings)
        if shards is None and settings.shards:
            shards = parse_shards(settings.shards)
        wait = (settings.lease_wait or 0.0) if lease_wait is None else lease_wait
        publisher = Publisher(
            store,
            signer,
            BuildConfig.of(settings),
            run_id=run_id or settings.run_id,
            shards=shards,
            io_concurrency=io_concurrency if io_concurrency is not None else settings.io_concurrency,
            rotating=rotating,
            clock=clock,
        )
        # after the publisher, whose key checks come first; before anything is published
        run_log = run_log_of(settings, store, notice=notice) if ending.appends_log else RunLog(None)
        with ExitStack() as parts:
            rows = parts.enter_context(RowSink())  # rows: no bundle is read back
            run = cls(
                settings,
                command=command,
                store=store,
                signer=signer,
                publisher=publisher,
                log=run_log,
                rows=rows,
                workers=workers or settings.workers or usable_cores(),
                notes=notes or {},
                notice=notice,
                ending=ending,
                index_progress=index_progress,
            )
            run.wait = wait
            lease = writer_lease(
                store,
                command=command,
                run_id=run.run_id,
                shards=shards,
                index=ending.holds_index,
                wait=wait,
                on_wait=notice,
            )
            publisher.lease = lease
            with lease:  # released before indexing (unless the ending holds the index)
                yield run
                if ending.holds_index:
                    ending.finish(run)
            if not ending.holds_index:
                ending.finish(run)

    def index_progress(self) -> AbstractContextManager[ProgressBar | None]:
        """The index update's progress bar (the one `open` was given), or none."""
        return self._index_progress() if self._index_progress else _no_progress()

    def end_with_index_and_manifest(self) -> None:
        """The end of a run that succeeded: its index update, under the index lease,
        then its manifest (`finish_run`, which appends the run's events to the log)."""
        self.rows.flush()
        with (
            writer_lease(
                self.store,
                command=f"{self.command} index",
                run_id=self.run_id,
                papers=False,
                index=True,
                wait=max(self.wait, INDEX_LEASE_MIN_WAIT),
                on_wait=self.notice,
            ),
            self.index_progress() as bar,
        ):
            self.manifest_key = finish_run(
                self.store,
                self.summary,
                self.notes,
                clock=self.publisher.clock,
                progress=_reporter(bar),
                rows=self.rows,
                log_signer=self.log.spec,
                log_origin=self.settings.log_origin,
                **self.manifest_extra,
            )

    def publish(
        self, records: Iterable[Any], *, progress: Progress | None = None, flush: bool = True
    ) -> RunSummary:
        """Publish records (dicts of a JSON-lines file, or a source's items) with the
        run's executor: `workers` processes, each paper always by the same one.
        `flush`: store the quarantine at the end (False: the ending stores it)."""
        with ParallelPublisher(
            self.publisher,
            workers=self.workers,
            signer_spec=self.settings.signer,
            chunk_size=self.settings.worker_chunk,
            rows=self.rows if self.ending.indexes_rows else None,
        ) as executor:
            self.summary = executor.publish(records, progress=progress, flush=flush)
        return self.summary


def _signer(settings: config.Settings) -> Signer:
    """The run's signer, from `settings.signer` (a certified key takes the settings' run
    id and validity); one line naming the setting when there is none."""
    if not settings.signer:
        raise InputError("no signing key: set --signer (env PITH_SIGNER) or pass signer=")
    return open_signer(settings.signer, settings=settings)


@contextmanager
def _no_progress() -> Iterator[ProgressBar | None]:
    yield None


def _reporter(bar: ProgressBar | None) -> Progress | None:
    if bar is None:
        return None

    def report(n: int) -> None:
        bar.update(n)

    return report
