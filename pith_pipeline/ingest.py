"""Ingest: harvest arXiv metadata, parse it, and publish it through a `Publisher`.

One `Ingest` per run wires a source (OAI-PMH windows, `GetRecord` look-ups found
through the search API, the bulk snapshot, stored raw pages, or the bundled sample)
to one `Publisher`. Pages are published one at a time and the harvester checkpoints
after each, so a run that dies keeps everything it finished. Deleted records are
counted and not built; bad records are quarantined by the publisher with their reason.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pith_pipeline.clock import system_clock
from pith_pipeline.core.arxiv_record import ArxivRecord
from pith_pipeline.core.keys import Signer
from pith_pipeline.core.limits import DEFAULT_LIMITS, InputLimits
from pith_pipeline.core.timeutil import Clock
from pith_pipeline.errors import DamagedInputError, InputError
from pith_pipeline.items import Rejected
from pith_pipeline.parallel import DEFAULT_CHUNK, ParallelPublisher
from pith_pipeline.publish import BuildConfig, LeaseCheck, Publisher, RunSummary
from pith_pipeline.runs.run import Run
from pith_pipeline.runs.windows import window_from_options
from pith_pipeline.sources.jsonl import iter_jsonl
from pith_pipeline.sources.oai import (
    DEFAULT_OAI_URL,
    OUTSIDE_WINDOW_LISTED,
    RAW_ROOT,
    HarvestedPage,
    Harvester,
    HarvestStats,
    OAIClient,
    OutsideWindow,
    public_url,
)
from pith_pipeline.sources.politeness import Gate, Politeness
from pith_pipeline.sources.sample import SAMPLE_RAW_ROOT, SAMPLE_URL, StaticRepository, sample_pages
from pith_pipeline.sources.snapshot_ranges import record_datestamp
from pith_pipeline.storage.base import Store
from pith_pipeline.window import Window, parse_day

if TYPE_CHECKING:
    from pith_pipeline.index.sink import RowSink

log = logging.getLogger(__name__)

ProgressHook = Callable[[int], Any]
PageHook = Callable[[HarvestedPage], Any]


@dataclass(slots=True)
class IngestReport:
    """The run's summary: the publisher's counts plus what the source reported."""

    summary: RunSummary
    harvest: HarvestStats = field(default_factory=HarvestStats)
    deleted: int = 0
    deleted_ids: list[str] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        out = dict(self.summary.counts())
        out["deleted"] = self.deleted
        if self.harvest.outside_window:
            out["outside_window"] = self.harvest.outside_window
        return out

    def manifest_notes(self) -> dict[str, Any]:
        """What the run manifest adds to the publisher's counts (`finish_run` keywords):
        the records listed outside their window, counted and named, and the warnings."""
        return {
            "extra_counts": {"outside_window": self.harvest.outside_window},
            "warnings": list(self.harvest.warnings),
            "outside_window": [o.to_json() for o in self.harvest.outside_listed],
        }

    def line(self) -> str:
        text = ", ".join(f"{k} {v}" for k, v in self.counts().items())
        h = self.harvest
        extra = []
        if h.pages:
            extra.append(f"{h.pages} pages ({h.pages_from_store} from the store)")
        if h.requests:
            extra.append(f"{h.requests} requests")
        if h.malformed_pages:
            extra.append(f"{h.malformed_pages} malformed pages kept")
        if h.refused_tokens:
            extra.append(f"{h.refused_tokens} refused tokens, {h.restarts} restarts")
        if h.windows_already_complete:
            extra.append(f"{h.windows_already_complete} windows already complete")
        return text + (f"; {'; '.join(extra)}" if extra else "")


class Ingest:
    """One ingestion run into one store with one signer."""

    def __init__(
        self,
        store: Store,
        signer: Signer,
        config: BuildConfig | None = None,
        *,
        clock: Clock = system_clock,
        progress: ProgressHook | None = None,
        on_page: PageHook | None = None,
        run_id: str | None = None,
        workers: int = 1,
        signer_spec: str | None = None,
        chunk_size: int = DEFAULT_CHUNK,
        lease: LeaseCheck | None = None,
        shards: frozenset[int] | None = None,
        limits: InputLimits = DEFAULT_LIMITS,
        io_concurrency: int | None = None,
        rows: RowSink | None = None,
        publisher: Publisher | None = None,
    ) -> None:
        """`workers` > 1 publishes in that many processes, each opening `signer_spec`
        (the spec `signer` came from); without a spec the run stays in one process.
        `lease`/`shards`: as for `Publisher` (the caller holds the lease).
        `limits`: HTTP response cap and deadline, snapshot line cap (docs/pages/input-limits.md).
        `io_concurrency`: papers published at once (`loader`); None: the store's default.
        `rows`: where the index rows of the bundles written go (`index.RowSink`), so the
        index update need not read them back. `publisher`: the one a `Run` opened
        (`Ingest.of_run`), used in place of a new one."""
        self.store = store
        self.limits = limits
        self.publisher = publisher or Publisher(
            store,
            signer,
            config,
            clock=clock,
            run_id=run_id,
            lease=lease,
            shards=shards,
            io_concurrency=io_concurrency,
        )
        if rows is not None:
            self.publisher.on_bundle = rows.add_bundle
        self.parallel = (
            ParallelPublisher(
                self.publisher, workers=workers, signer_spec=signer_spec, chunk_size=chunk_size, rows=rows
            )
            if workers != 1
            else None
        )
        self.clock = clock
        self.progress = progress
        self.on_page = on_page
        self.report = IngestReport(self.publisher.summary)

    @classmethod
    def of_run(
        cls,
        run: Run,
        *,
        progress: ProgressHook | None = None,
        on_page: PageHook | None = None,
        limits: InputLimits = DEFAULT_LIMITS,
    ) -> Ingest:
        """An ingest publishing through `run`'s publisher, row sink and executor: the
        run holds the leases, the log key, and indexes and records what this ingests."""
        return cls(
            run.store,
            run.signer,
            clock=run.publisher.clock,
            progress=progress,
            on_page=on_page,
            workers=run.workers,
            signer_spec=run.settings.signer,
            chunk_size=run.settings.worker_chunk,
            limits=limits,
            rows=run.rows,
            publisher=run.publisher,
        )

    @property
    def run_id(self) -> str:
        return self.publisher.summary.run_id

    def _harvester(self, client: OAIClient | None, raw_root: str = RAW_ROOT) -> Harvester:
        h = Harvester(self.store, client, raw_root=raw_root, clock=self.clock, limits=self.limits)
        h.stats = self.report.harvest  # one set of counts across the run
        return h

    def _publish_items(self, items: Iterable[Any]) -> None:
        # the quarantine is stored once, when the whole ingest is done (write-once)
        if self.parallel is not None:
            self.parallel.publish(items, progress=self.progress, flush=False)
        else:
            self.publisher.publish(items, progress=self.progress, flush=False)

    def close(self) -> None:
        """Stop the worker processes, if any started."""
        if self.parallel is not None:
            self.parallel.close()

    def __enter__(self) -> Ingest:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _consume(self, pages: Iterable[HarvestedPage]) -> IngestReport:
        """Publish page by page; the harvester checkpoints when asked for the next page."""
        self.publisher.publish_key_document()
        for hp in pages:
            if self.on_page:
                self.on_page(hp)
            for d in hp.page.deleted:
                self.report.deleted += 1
                self.report.deleted_ids.append(d.arxiv_id)
            if hp.page.items:
                self._publish_items(hp.page.items)
        return self.report

    # -- sources -------------------------------------------------------------
    def windows(
        self,
        windows: Sequence[Window],
        *,
        oai_url: str = DEFAULT_OAI_URL,
        politeness: Politeness | None = None,
        refresh: bool = False,
        gate: Gate | None = None,
        transport: Any = None,
        raw_root: str = RAW_ROOT,
    ) -> IngestReport:
        """Harvest `ListRecords` windows (resuming each from its checkpoint)."""
        gate = gate or Gate(politeness)
        with OAIClient(oai_url, gate=gate, transport=transport, limits=self.limits) as client:
            h = self._harvester(client, raw_root)
            for w in windows:
                self._consume(h.harvest(w, refresh=refresh))
        self.publisher.flush_quarantine()
        return self.report

    def incremental(
        self, *, today: date | None = None, set_spec: str | None = None, **kw: Any
    ) -> IngestReport:
        """From the last complete window's `until` (that day again: datestamps are days,
        and it may have been harvested before it ended) to today, UTC."""
        last = self._harvester(None).last_harvested_until(set_spec)
        if last is None:
            raise InputError(
                "--incremental needs an earlier complete window in "
                f"{self.store.url}; give --from for the first harvest"
            )
        today = today or datetime.now(tz=UTC).date()
        start = min(parse_day(last, "the last harvested day"), today)
        return self.windows([Window(start, today + timedelta(days=1), set_spec)], refresh=True, **kw)

    def records(
        self,
        ids: Sequence[str],
        *,
        oai_url: str = DEFAULT_OAI_URL,
        gate: Gate | None = None,
        transport: Any = None,
    ) -> IngestReport:
        """Fetch the full `arXivRaw` record of each id (`GetRecord`) and publish it."""
        gate = gate or Gate()
        with OAIClient(oai_url, gate=gate, transport=transport, limits=self.limits) as client:
            h = self._harvester(client)
            self._consume(h.get_records(ids, self.run_id))
        self.publisher.flush_quarantine()
        return self.report

    def lookup(
        self,
        *,
        ids: Sequence[str] | None = None,
        query: str | None = None,
        api_url: str,
        oai_url: str = DEFAULT_OAI_URL,
        politeness: Politeness | None = None,
        max_results: int | None = 1000,
        transport: Any = None,
    ) -> IngestReport:
        """Ids from the search API (checked `--ids`, or a `--query`), then `GetRecord`."""
        # lazy: arxiv, requests, 114 ms at import
        from pith_pipeline.sources.arxiv_api import ArxivAPI

        gate = Gate(politeness)  # one gate: the API and OAI are both arXiv
        api = ArxivAPI(gate, api_url, limits=self.limits)
        if query is not None:
            found = api.ids_for_query(query, max_results=max_results)
            missing: list[str] = []
            self._note_outside_query(api, query)
        else:
            found, missing = api.check_ids(list(ids or []))
        if missing:
            self._publish_items(
                Rejected(
                    f"arXiv API {api_url}",
                    "the arXiv API returned no entry for this id (withdrawn, mistyped or not yet announced)",
                    i,
                    i,
                    "id",
                )
                for i in missing
            )
        if not found:
            self.publisher.flush_quarantine()
            return self.report
        return self.records(found, oai_url=oai_url, gate=gate, transport=transport)

    def _note_outside_query(self, api: Any, query: str) -> None:
        """Count and name the query's matches submitted outside its `submittedDate`
        range (`ArxivAPI.outside`, already logged) as the harvest does for a window."""

        if not api.outside:
            return
        h = self.report.harvest
        h.outside_window += len(api.outside)
        room = max(OUTSIDE_WINDOW_LISTED - len(h.outside_listed), 0)
        h.outside_listed.extend(
            OutsideWindow(i, at, False, query, "search API") for i, at in api.outside[:room]
        )
        server = public_url(api.api_url)
        h.warnings.append(
            {
                "code": "outside-window",
                "window": query,
                "server": server,
                "request": {"search_query": query},
                "count": len(api.outside),
                "datestamps": sorted({at or "no date" for _i, at in api.outside}),
                "message": (
                    f"outside-window: {server} answered search_query={query} with {len(api.outside)} "
                    "papers submitted outside its submittedDate range; built, and counted as outside_window"
                ),
            }
        )

    def snapshot(
        self,
        path: str | Path,
        *,
        categories: set[str] | None = None,
        from_: str | None = None,
        until: str | None = None,
    ) -> IngestReport:
        """The bulk snapshot (JSON lines, `.json.gz` too), streamed and filtered.

        `[from_, until)` days on the record's datestamp (`update_date`, its last
        change), the same rule as OAI-PMH and `backfill --source snapshot`, so one
        range selects the same records from either source.
        """

        window = window_from_options(from_, until)
        items: Iterable[Any] = iter_jsonl(path, categories=categories, limits=self.limits)
        if window.start is not None or window.end is not None:
            items = (
                i for i in items if not isinstance(i, ArxivRecord) or window.contains(record_datestamp(i))
            )
        try:
            self._publish_items(items)
        except DamagedInputError:
            self.publisher.flush_quarantine()  # the rejects before the damage are kept
            raise
        self.publisher.flush_quarantine()
        return self.report

    def replay(self, window: Window | None = None, *, raw_root: str = RAW_ROOT) -> IngestReport:
        """Rebuild from stored raw pages, with no network."""
        return self.replay_windows([window], raw_root=raw_root)

    def replay_windows(self, windows: Sequence[Window | None], *, raw_root: str = RAW_ROOT) -> IngestReport:
        """`replay` of several windows in one run (one quarantine, stored at the end)."""
        h = self._harvester(None, raw_root)
        for window in windows:
            if not h.stored_pages(window):
                where = h.window_prefix(window) if window else f"{raw_root}/"
                raise InputError(f"no stored pages under {where} in {self.store.url} to replay")
            self._consume(h.replay(window))
        self.publisher.flush_quarantine()
        return self.report

    def sample(self) -> IngestReport:
        """The bundled sample, harvested from its local copy the same way as from arXiv."""

        window = Window()
        h = self._harvester(None, SAMPLE_RAW_ROOT)
        cp = h.load_checkpoint(window)
        if cp is not None and cp.complete:
            log.info(
                "the sample is already harvested into %s; rebuilding from its stored pages", self.store.url
            )
            return self.replay(window, raw_root=SAMPLE_RAW_ROOT)
        repo = StaticRepository(sample_pages(), SAMPLE_URL)
        local = Politeness(min_interval=0.0, backoff_initial=0.01, timeout=10.0)
        return self.windows(
            [window],
            oai_url=SAMPLE_URL,
            gate=Gate(local),
            transport=repo.transport(),
            raw_root=SAMPLE_RAW_ROOT,
        )
