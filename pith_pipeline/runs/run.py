"""One publishing run, opened and closed in one place: `Run`.

    with Run.open(settings, command="build", notes={"input": "records.jsonl"}) as run:
        run.publish(items)
    run.summary, run.manifest_key

A run owns, in this order: the store and the signer, the `Publisher`, the run's
log key, the writer lease on its shards, the row sink, the executor (threads, or
worker processes through `ParallelPublisher`), then at its end the index lease,
the index update and the run manifest (`finish_run`). They are closed in reverse.
There is one way to end:

- success: the paper lease is released, the index is updated under the index
  lease and the manifest is written (`manifest_key`);
- failure or interruption (an exception, KeyboardInterrupt included): every part
  is closed in reverse, the leases are released, nothing is indexed and no manifest
  is written; the exception goes on to the caller. What the run published stays
  published and the next run's index update heals it (`RunSummary.seen`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager, ExitStack, contextmanager
from typing import Any, Protocol

from pith_pipeline import config
from pith_pipeline.core.keys import Signer
from pith_pipeline.errors import InputError
from pith_pipeline.index.sink import RowSink
from pith_pipeline.parallel import ParallelPublisher, usable_cores
from pith_pipeline.publish import BuildConfig, Publisher, RunSummary
from pith_pipeline.runs.manifest import finish_run
from pith_pipeline.signing.factory import open_signer
from pith_pipeline.storage.base import Store
from pith_pipeline.storage.factory import open_store
from pith_pipeline.storage.lease import parse_shards, writer_lease
from pith_pipeline.tlog.run_log import prepare_run_log

Progress = Callable[[int], None]


class ProgressBar(Protocol):
    """What the index update reports to (a tqdm bar is one)."""

    def update(self, n: int) -> Any: ...


#: the least a run waits for the index lease: a run that gave up on it after
#: publishing would leave its papers unindexed until the next run
INDEX_LEASE_MIN_WAIT = 600.0


def _quiet(_: str) -> None:
    """The default notice: a library caller is told nothing on stderr."""


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
        rows: RowSink,
        workers: int,
        notes: Mapping[str, Any],
        notice: Callable[[str], None],
    ) -> None:
        self.settings = settings
        self.command = command
        self.store = store
        self.signer = signer
        self.publisher = publisher
        self.rows = rows
        self.workers = workers
        self.notes = dict(notes)
        self.notice = notice
        self.summary: RunSummary = publisher.summary
        #: the run manifest's key, set when the run ends in success
        self.manifest_key: str | None = None
        #: what `finish_run` records beside the counts (`record`)
        self.manifest_extra: dict[str, Any] = {}

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
    ) -> Iterator[Run]:
        """Open every part of a run from `settings`, yield it, and end it (module docstring).

        `store`/`signer`: already open ones (a test's, or a command's that checked them
        first); otherwise `settings.store` and `settings.signer` are opened. `notice`:
        where one-line notes go (a lease being waited for, the log key made); the CLI
        passes stderr. `index_progress`: a context manager factory yielding a progress
        callback for the index update (the CLI's progress bar).
        """
        store = store if store is not None else open_store(settings.store, **settings.store_options)
        if signer is None:
            if not settings.signer:
                raise InputError("no signing key: set --signer (env PITH_SIGNER) or pass signer=")
            signer = open_signer(settings.signer)
        shards = parse_shards(settings.shards) if settings.shards else None
        wait = (settings.lease_wait or 0.0) if lease_wait is None else lease_wait
        publisher = Publisher(
            store,
            signer,
            BuildConfig.of(settings),
            run_id=run_id or settings.run_id,
            shards=shards,
            io_concurrency=settings.io_concurrency,
        )
        run_log = prepare_run_log(  # before anything is published
            store,
            settings.signer,
            base_url=settings.base_url,
            explicit=settings.log_signer,
            keep=settings.keep_log,
            notice=notice,
            origin=settings.log_origin,
        )
        publisher.log_key = run_log.member
        publisher.writer.log_signer_spec = run_log.spec  # what the pages name as the log
        with ExitStack() as parts:
            rows = parts.enter_context(RowSink())  # rows: no bundle is read back
            parts.enter_context(config.given(log_signer=run_log.spec))
            run = cls(
                settings,
                command=command,
                store=store,
                signer=signer,
                publisher=publisher,
                rows=rows,
                workers=settings.workers or usable_cores(),
                notes=notes or {},
                notice=notice,
            )
            lease = writer_lease(
                store, command=command, run_id=run.run_id, shards=shards, wait=wait, on_wait=notice
            )
            publisher.lease = lease
            with lease:  # released before indexing: other writers of the papers go on
                yield run
            run._finish(wait, index_progress)

    def _finish(
        self, wait: float, index_progress: Callable[[], AbstractContextManager[ProgressBar | None]] | None
    ) -> None:
        """The end of a run that succeeded: its index update, under the index lease,
        then its manifest (`finish_run`)."""
        self.rows.flush()
        with (
            writer_lease(
                self.store,
                command=f"{self.command} index",
                run_id=self.run_id,
                papers=False,
                index=True,
                wait=max(wait, INDEX_LEASE_MIN_WAIT),
                on_wait=self.notice,
            ),
            index_progress() if index_progress else _no_progress() as bar,
        ):
            self.manifest_key = finish_run(
                self.store,
                self.summary,
                self.notes,
                clock=self.publisher.clock,
                progress=_reporter(bar),
                rows=self.rows,
                **self.manifest_extra,
            )

    def publish(self, records: Iterable[Any], *, progress: Progress | None = None) -> RunSummary:
        """Publish records (dicts of a JSON-lines file, or a source's items) with the
        run's executor: `workers` processes, each paper always by the same one."""
        with ParallelPublisher(
            self.publisher,
            workers=self.workers,
            signer_spec=self.settings.signer,
            chunk_size=self.settings.worker_chunk,
            rows=self.rows,
        ) as executor:
            self.summary = executor.publish(records, progress=progress)
        return self.summary


@contextmanager
def _no_progress() -> Iterator[ProgressBar | None]:
    yield None


def _reporter(bar: ProgressBar | None) -> Progress | None:
    if bar is None:
        return None

    def report(n: int) -> None:
        bar.update(n)

    return report
