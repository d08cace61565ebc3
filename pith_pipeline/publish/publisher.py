"""`Publisher`: the coordinator of a run's publishing, one instance per run.

It wires the run's parts once and decides what happens to each input item
(`publish_item`): a reject is quarantined (`rejects`), a record of another writer's
shard is skipped, and a record is published in an explicit context of its own
(`context.Paper`) by the per-paper flow (`flow`). The parts do the work: the key
document (`keys`), what is known absent (`known`), checked reads (`reading`), fenced
writes (`writing`), bundles and their repair (`bundles`), versions and supersession
(`supersession`), new records (`build`).
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable
from datetime import date
from typing import Any

from pith_pipeline._internal.quarantine_spool import QuarantineSpool
from pith_pipeline.clock import system_clock
from pith_pipeline.core.arxiv_record import ArxivRecord
from pith_pipeline.core.builder import Identity
from pith_pipeline.core.keys import PublicKey, Signer
from pith_pipeline.core.timeutil import Clock
from pith_pipeline.errors import IntegrityError, is_record_problem
from pith_pipeline.items import Item, Rejected
from pith_pipeline.loader import Loader
from pith_pipeline.pages.site import publish_assets
from pith_pipeline.publish.build import ONE_PASS, BuildParts, RecordBuilder
from pith_pipeline.publish.bundles import Bundles
from pith_pipeline.publish.context import CANONICAL, Codec, Paper
from pith_pipeline.publish.flow import PaperFlow
from pith_pipeline.publish.keys import KeyBook
from pith_pipeline.publish.known import KnownAbsent
from pith_pipeline.publish.reading import StoredState
from pith_pipeline.publish.rejects import RunQuarantine, build_failure, quarantine_entry, utc_today
from pith_pipeline.publish.summary import BuildConfig, LeaseCheck, RunSummary, new_run_id
from pith_pipeline.publish.supersession import Versions
from pith_pipeline.publish.writing import OnBundle, Writer
from pith_pipeline.storage.base import Store
from pith_pipeline.storage.concurrency import check_io_concurrency, default_io_concurrency
from pith_pipeline.storage.lease import shard_of


class Publisher:
    """Publishes records into a store with one signer; one instance per run.

    `lease`: the run's writer lease, checked before every paper and every write.
    `shards`: publish only papers of these shards (others are counted as skipped).
    `rotating`: the signer may be a key the store does not list yet (`keys rotate`,
    `receipts reissue`). `today`: the real date, for refusing records dated after
    tomorrow (not the build clock, which SOURCE_DATE_EPOCH pins). `io_concurrency`:
    papers published at once by `publish`; None: the store's default.
    `on_bundle(key, bundle, sha256, rows)`: told of each bundle written (its index
    rows where they were checked before publishing, else None). `page_log`: what the
    run's pages name as the store's log, as another publisher of the run decided it.
    `log_signer_spec`: the log key the run ends with, refused now if it lies inside
    the store. `builder`: how a new record is built (`build.ONE_PASS`; tests and
    benchmarks give `build.REFERENCE` to compare); `codec`: the serializer of what is
    written (`context.CANONICAL`).
    """

    def __init__(
        self,
        store: Store,
        signer: Signer,
        config: BuildConfig | None = None,
        *,
        clock: Clock = system_clock,
        run_id: str | None = None,
        lease: LeaseCheck | None = None,
        shards: frozenset[int] | None = None,
        rotating: bool = False,
        today: Callable[[], date] | None = None,
        io_concurrency: int | None = None,
        on_bundle: OnBundle | None = None,
        page_log: tuple[str | None] | None = None,
        log_signer_spec: str | None = None,
        builder: RecordBuilder = ONE_PASS,
        codec: Codec = CANONICAL,
    ) -> None:
        self.store, self.signer, self.clock, self.shards = store, signer, clock, shards
        self.config = config or BuildConfig()
        self.site = self.config.site
        self.today = today or utc_today
        n = io_concurrency if io_concurrency is not None else default_io_concurrency(store)
        self.io_concurrency = check_io_concurrency(n)
        summary = RunSummary(run_id or new_run_id(clock()))
        self.writer = Writer(
            store, codec, summary, lease=lease, on_bundle=on_bundle, page_log=page_log,
            log_signer_spec=log_signer_spec,
        )  # fmt: skip
        self.rejects = RunQuarantine(self.writer)
        self.keybook = KeyBook(
            store, signer, self.site, clock, rotating=rotating, log_signer_spec=log_signer_spec
        )
        self.known = KnownAbsent(store, shards)
        self.reader = StoredState(store, self.keybook, self.known)
        self.bundles = Bundles(signer, self.site, clock, self.keybook, self.reader, self.writer)
        versions = Versions(signer, self.config.signer_id, clock, self.bundles)
        parts = BuildParts(signer, self.config, self.site, clock, self.keybook, self.writer, self.bundles)
        self.flow = PaperFlow(self.known, self.reader, self.bundles, versions, parts, builder)

    # -- the run's state, kept by its parts -----------------------------------
    @property
    def summary(self) -> RunSummary:
        """The run's summary (a worker process replaces it per chunk)."""
        return self.writer.summary

    @summary.setter
    def summary(self, value: RunSummary) -> None:
        self.writer.summary = value

    @property
    def lease(self) -> LeaseCheck | None:
        """The run's writer lease (may be attached once taken, before publishing)."""
        return self.writer.lease

    @lease.setter
    def lease(self, value: LeaseCheck | None) -> None:
        self.writer.lease = value

    @property
    def on_bundle(self) -> OnBundle | None:
        """Told of each bundle written (may be attached before publishing)."""
        return self.writer.on_bundle

    @on_bundle.setter
    def on_bundle(self, value: OnBundle | None) -> None:
        self.writer.on_bundle = value

    @property
    def log_key(self) -> dict[str, Any] | None:
        """The key document's `log` member for this run's log key (`tlog.run_log`):
        named before the first event, so a store knows it keeps a log even when its
        first run dies before appending."""
        return self.writer.log_key

    @log_key.setter
    def log_key(self, value: dict[str, Any] | None) -> None:
        self.writer.log_key = value

    @property
    def quarantine(self) -> QuarantineSpool:
        """The run's rejects so far, spilled to disk (`flush_quarantine` stores them)."""
        return self.rejects.spool

    @property
    def keys(self) -> dict[str, PublicKey]:
        """Every key the run knows, by id (`keys rotate` marks some rotated)."""
        return self.keybook.keys

    @property
    def primary_key_id(self) -> str:
        """The key that heads the key document (a certified signer's root)."""
        return self.keybook.primary_key_id

    def run_paper(self) -> Paper:
        """The context of a store-wide write (counted in the run's summary, no cache)."""
        return Paper(self.summary)

    # -- store-wide objects (every run; re-issue and rebuild) ------------------
    def publish_key_document(self) -> None:
        """Publish the key document (compare-and-swap, `KeyBook.publish`) and the pages'
        assets: the store-wide objects a run writes before its papers."""
        self.keybook.publish(self.writer, self.run_paper(), self.log_key)
        self.publish_assets()

    def publish_assets(self) -> None:
        """The pages' stylesheet and scripts (`assets/<file>`), where their bytes differ
        from the package's (`pages.site.publish_assets`)."""
        self.writer.fence()
        paper = self.run_paper()
        publish_assets(self.store, lambda key, data: self.writer.record(paper, key, data))

    # -- the run's items ----------------------------------------------------
    def learn_new(self, records: Iterable[Item], *, busy: Container[str] = ()) -> int:
        """Learn which of these papers the store has never seen (`KnownAbsent.learn`);
        returns the LIST requests it took."""
        return self.known.learn(records, busy=busy)

    def forget_learned(self) -> None:
        """Drop what `learn_new` learned (a loop's end: another may write meanwhile)."""
        self.known.forget()

    def publish_item(self, item: Item, summary: RunSummary | None = None) -> dict[str, Any] | None:
        """Publish one input item, counted in `summary` (else the run's): the one place
        every loop (one process, worker processes, Airflow tasks) decides what
        happens to a record.

        Returns the quarantine entry of a record that could not be built (the caller
        keeps entries in input order); a paper whose stored objects fail their checks
        is counted as failed and named; store, signer and lease errors stop the run.
        """
        summary = summary or self.summary
        summary.fetched += 1
        if isinstance(item, Rejected):
            return quarantine_entry(item, summary)
        if self.shards is not None and shard_of(item.id) not in self.shards:
            summary.skipped += 1
            return None
        if self.lease is not None:
            self.lease.check()
        try:
            item.check_dates(today=self.today())
            self.flow.publish(Paper.caching(summary), item)
        except IntegrityError as exc:
            summary.fail(f"{item.id}v{item.version}: {exc}")
        except Exception as exc:
            if not is_record_problem(exc):
                raise
            return quarantine_entry(build_failure(item, exc), summary)
        return None

    def publish_counted(self, item: Item) -> tuple[dict[str, Any] | None, RunSummary]:
        """`publish_item`, counted in a summary of its own that the caller adds to the
        run's: what a `Loader` thread runs, so that threads never update one summary."""
        part = RunSummary.part(self.summary.run_id)
        return self.publish_item(item, part), part

    def publish_record(self, rec: ArxivRecord) -> Identity:
        """Publish one record as it is (no date or shard check, errors raised), counted
        in the run's summary: the build path as `benchmarks/build_bench.py` measures it."""
        return self.flow.publish(Paper.caching(self.summary), rec)

    def publish(
        self, items: Iterable[Item], *, progress: Callable[[int], None] | None = None, flush: bool = True
    ) -> RunSummary:
        """Build, sign and publish every record; quarantine every reject (the `Loader`).

        `flush`: store the quarantine at the end (False: the caller publishes more
        items in this run and calls `flush_quarantine` once, at its end)."""
        return Loader(self).publish(items, progress=progress, flush=flush)

    def flush_quarantine(self) -> None:
        """Store the run's quarantine, `quarantine/<run_id>.jsonl` (`RunQuarantine.store`):
        call it at the end of the run; again with no new reject, it does nothing."""
        self.rejects.store(self.summary)
