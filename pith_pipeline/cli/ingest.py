"""`pith-pipeline ingest`: harvest arXiv metadata, build, sign and publish bundles."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from tqdm import tqdm

from pith_pipeline import config
from pith_pipeline.cli.ingest_choices import check_politeness, chosen_source, signer_of
from pith_pipeline.cli.options import (
    FiniteFloat,
    command_settings,
    fail_if_incomplete,
    io_concurrency_option,
    lease_notice,
    shards_option,
    signer_option,
    site_options,
    store_option,
    store_to_write,
    wait_option,
    workers_option,
)
from pith_pipeline.core.keys import Signer
from pith_pipeline.runs.windows import until_notice, window_from_options, windows_of_days
from pith_pipeline.sources.politeness import ARXIV_MIN_INTERVAL, Politeness
from pith_pipeline.window import Window

if TYPE_CHECKING:  # the harvesting clients (HTTP libraries): imported when `ingest` runs
    from pith_pipeline.ingest import Ingest, IngestReport
    from pith_pipeline.sources.oai import HarvestedPage

# the same names sources.oai and sources.arxiv_api give them, without importing those
# modules' HTTP clients into every command (and every `build` worker process)
DEFAULT_OAI_URL = config.DEFAULT_OAI_URL
OAI_URL_ENV = config.env_name("oai_url")
DEFAULT_API_URL = config.DEFAULT_API_URL
API_URL_ENV = config.env_name("arxiv_api_url")

DEFAULT_STORE = config.DEFAULT_STORE


def register(group: click.Group) -> None:
    """Add this module's commands to the `pith-pipeline` group."""
    group.add_command(ingest)


def _print_report(report: IngestReport, store_url: str) -> None:
    click.echo(f"run {report.summary.run_id}: {report.line()}")
    if report.summary.quarantined:
        click.echo(
            f"quarantined records: {store_url}/quarantine/{report.summary.run_id}.jsonl "
            "(each line has the reason and the raw input)",
            err=True,
        )
    if report.harvest.malformed_keys:
        click.echo("malformed responses kept: " + ", ".join(report.harvest.malformed_keys), err=True)
    for warning in report.harvest.warnings:
        click.echo(f"warning: {warning['message']}", err=True)
    if report.harvest.windows_already_complete and not report.summary.fetched:
        click.echo(
            "every window asked for is already harvested in this store; "
            "--refresh harvests again, --replay rebuilds from the stored pages",
            err=True,
        )


@click.command()
@click.option(
    "--from",
    "from_",
    metavar="DATE",
    help="First day (YYYY-MM-DD, inclusive) of the records' datestamp (last change; "
    "for --snapshot its update_date).",
)
@click.option(
    "--until",
    metavar="DATE",
    help="Day after the last one (YYYY-MM-DD, exclusive), as everywhere; inclusive before 2026-12.",
)
@click.option("--through", metavar="DATE", help="Last day (YYYY-MM-DD, inclusive), instead of --until.")
@click.option("--set", "set_spec", metavar="SET", help="OAI set, e.g. cs, math, physics:hep-th.")
@click.option(
    "--window-days",
    type=int,
    default=None,
    metavar="N",
    help="Split --from..--until into windows of N days, each checkpointed.",
)
@click.option(
    "--ids",
    metavar="ID,ID,...",
    help="arXiv ids (with or without version), checked via the search API, fetched with OAI GetRecord.",
)
@click.option(
    "--query",
    metavar="QUERY",
    help='Search API query, e.g. "cat:cs.LG AND submittedDate:[202401010000 TO '
    '202401022359]"; matches are fetched with OAI GetRecord.',
)
@click.option("--max-results", type=int, default=1000, show_default=True, help="Cap on --query matches.")
@click.option(
    "--snapshot",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    metavar="FILE",
    help="arXiv's bulk metadata snapshot (.json, .jsonl, .json.gz), streamed.",
)
@click.option(
    "--category",
    "categories",
    multiple=True,
    metavar="CAT",
    help="With --snapshot: keep records in this category or archive (repeatable).",
)
@click.option(
    "--replay",
    is_flag=True,
    help="Rebuild from raw pages stored by earlier harvests (no network); with "
    "--from/--until/--set only that window, with --sample the sample.",
)
@click.option("--sample", is_flag=True, help="Harvest the bundled sample of real arXiv metadata (offline).")
@click.option(
    "--incremental",
    is_flag=True,
    help="OAI window from the last complete window's last day (that day again) to today; for daily runs.",
)
@click.option(
    "--refresh", is_flag=True, help="Harvest a window again even when its checkpoint says it is complete."
)
@click.option(
    "--oai-url",
    envvar=OAI_URL_ENV,
    default=DEFAULT_OAI_URL,
    show_default=True,
    help=f"OAI-PMH base URL (env {OAI_URL_ENV}).",
)
@click.option(
    "--api-url",
    envvar=API_URL_ENV,
    default=DEFAULT_API_URL,
    show_default=True,
    help=f"arXiv search API URL (env {API_URL_ENV}).",
)
@click.option(
    "--min-interval",
    type=FiniteFloat(min=0),
    default=ARXIV_MIN_INTERVAL,
    show_default=True,
    metavar="SECONDS",
    help="Seconds between requests; arXiv hosts refuse less than 3.",
)
@store_option("Where to publish: a directory or s3://bucket/prefix (env PITH_STORE).")
@signer_option(required=False)
@workers_option
@io_concurrency_option
@shards_option
@wait_option
@site_options
def ingest(**options: Any) -> None:
    """Harvest arXiv metadata, then build, sign and publish one bundle per paper version.

    \b
    Sources (pick one):
      --sample                         the bundled sample of real arXiv records (offline)
      --from DATE --until DATE [--set S]
                                       OAI-PMH ListRecords in arXivRaw: what changed in
                                       [--from, --until) (--through DATE: the last day)
      --ids 1909.11150,hep-lat/0305021 single papers (search API, then OAI GetRecord)
      --query "cat:cs.LG AND submittedDate:[202401010000 TO 202401012359]"
      --snapshot FILE [--category C] [--from D --until D]
                                       arXiv's bulk snapshot, streamed, filtered by update_date
      --incremental [--set S]          from the last harvested day to today (daily runs)
      --replay [--from D --until D]    rebuild from stored raw pages, no network
    \b
    Examples:
      pith-pipeline ingest --sample
      pith-pipeline ingest --from 2024-01-01 --until 2024-01-02 --store out/ --key k.json
      pith-pipeline ingest --from 2007-01-01 --through 2007-12-31 --window-days 7 --set cs
      pith-pipeline ingest --snapshot arxiv-metadata-oai-snapshot.json.gz --category cs.LG
    \b
    Requests to arXiv are spaced by at least 3 s, one at a time, with Retry-After and
    backoff honoured. Every response is stored gzip under raw/ in the store before it is
    parsed; an interrupted window resumes from raw/.../checkpoint.json. Without --key or
    --signer a local key is generated in ./pith-keys on first use (local stores only).
    Records are published by --workers processes (one per core by default), each paper
    always by the same one; a run of up to 500 records stays in one process.
    Writers of the same papers take turns (a lease per shard of papers; --wait,
    --shards as for `build`); papers whose stored events fail their checks are not
    published, are named, and the run exits 3.
    """
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    opts = IngestOptions(**options)
    window, chosen = _checked_source(opts)
    signer, signer_spec = signer_of(opts.signer_spec, opts.store, opts.base_url)
    _ingest(store_to_write(opts.store), signer, signer_spec, opts, window=window, chosen=chosen)


@dataclasses.dataclass(frozen=True, slots=True)
class IngestOptions:
    """`ingest`'s command-line options, one field per option, as click hands them over."""

    from_: str | None
    until: str | None
    through: str | None
    set_spec: str | None
    window_days: int | None
    ids: str | None
    query: str | None
    max_results: int
    snapshot: Path | None
    categories: tuple[str, ...]
    replay: bool
    sample: bool
    incremental: bool
    refresh: bool
    oai_url: str
    api_url: str
    min_interval: float
    store: str
    signer_spec: str | None
    workers: int
    worker_chunk: int
    io_concurrency: int | None
    shards_spec: str | None
    lease_wait: float
    base_url: str
    registry_name: str
    signer_id: str

    @property
    def window_given(self) -> bool:
        """Dates or a set were given (they choose OAI-PMH unless another source is named)."""
        return any(v is not None for v in (self.from_, self.until, self.through, self.set_spec))


def _checked_source(opts: IngestOptions) -> tuple[Window, list[str]]:
    """The run's window and the one source the options choose (a usage error for none
    or several), after checking that the servers asked keep arXiv's politeness."""
    if opts.incremental and (opts.from_ or opts.until or opts.through):
        raise click.UsageError("--incremental chooses --from/--until itself")
    window = window_from_options(opts.from_, opts.until, through=opts.through, set_spec=opts.set_spec)
    notice = until_notice(opts.until, window)
    if notice:
        click.echo(notice, err=True)
    chosen = chosen_source(
        window_given=opts.window_given,
        sample=opts.sample,
        ids=opts.ids,
        query=opts.query,
        snapshot=opts.snapshot,
        categories=opts.categories,
        incremental=opts.incremental,
        replay=opts.replay,
    )
    online = not opts.replay
    asks_oai = online and bool(
        opts.ids or opts.query or opts.incremental or (opts.window_given and not opts.snapshot)
    )
    asks_api = online and bool(opts.ids or opts.query)
    check_politeness(
        opts.min_interval,
        oai_url=opts.oai_url if asks_oai else None,
        api_url=opts.api_url if asks_api else None,
    )
    return window, chosen


def _ingest(
    st: Any, signer: Signer, signer_spec: str, opts: IngestOptions, *, window: Window, chosen: list[str]
) -> None:
    """The run of `ingest`, once its signer and log key are chosen."""
    politeness = Politeness.of(command_settings(), min_interval=opts.min_interval)
    # lazy: runs.run and ingest (pyarrow, HTTP clients) add 195 ms and more to every
    # command's start (python -X importtime -m pith_pipeline --help)
    # lazy: httpx2, lxml, oaipmh_scythe, 211 ms at import
    from pith_pipeline.ingest import Ingest

    # lazy: pith_pipeline.index, pyarrow, 128 ms at import
    from pith_pipeline.runs.run import Run

    settings = dataclasses.replace(command_settings(), signer=signer_spec, shards=opts.shards_spec)
    with Run.open(
        settings,
        command="ingest",
        store=st,
        signer=signer,
        lease_wait=opts.lease_wait,
        notice=lease_notice,
        index_progress=lambda: tqdm(desc="index", unit="rec", disable=None),
    ) as run:
        with (
            tqdm(desc="ingest", unit="rec", disable=None) as bar,
            Ingest.of_run(run, progress=bar.update, on_page=_page_shower(bar)) as ing,
        ):
            report = _run(ing, opts, window=window, politeness=politeness)
        run.record(
            _manifest_window(chosen, window, opts.set_spec, replay=opts.replay), **report.manifest_notes()
        )
    manifest_key = run.manifest_key
    _print_report(report, st.url)
    click.echo(f"run manifest: {manifest_key}")
    if opts.sample:
        click.echo(f"published under {st.url}; check them with: pith-pipeline verify {opts.store}")
    fail_if_incomplete(report.summary, st.url)


def _page_shower(bar: Any) -> Callable[[HarvestedPage], None]:
    """Show the harvest's page number, and its total once the server names it, on `bar`."""

    def on_page(hp: HarvestedPage) -> None:
        if hp.complete_list_size and bar.total != hp.complete_list_size:
            bar.total = hp.complete_list_size
            bar.refresh()
        bar.set_postfix_str(f"page {hp.number}", refresh=False)

    return on_page


def _manifest_window(
    chosen: list[str], window: Window, set_spec: str | None, *, replay: bool
) -> dict[str, Any]:
    """What the run manifest records of an ingest's source and dates (until exclusive,
    as everywhere: docs/pages/date-ranges.md)."""
    return {
        "source": (chosen or ["--replay"])[0],
        "from": window.oai_from,
        "until": None if window.end is None else window.end.isoformat(),
        "set": set_spec,
        "replay": replay,
    }


def _run(run: Ingest, opts: IngestOptions, *, window: Window, politeness: Politeness) -> IngestReport:
    if opts.sample and opts.replay:
        # lazy: httpx2, lxml, 38 ms at import
        from pith_pipeline.sources.sample import SAMPLE_RAW_ROOT

        return run.replay(Window(), raw_root=SAMPLE_RAW_ROOT)
    if opts.sample:
        return run.sample()
    if opts.replay:
        windows: list[Any] = windows_of_days(window, opts.window_days) if opts.window_given else [None]
        return run.replay_windows(windows)
    if opts.snapshot is not None:
        return run.snapshot(
            opts.snapshot,
            categories=set(opts.categories) or None,
            from_=window.oai_from,
            until=None if window.end is None else window.end.isoformat(),
        )
    if opts.incremental:
        return run.incremental(set_spec=window.set_spec, oai_url=opts.oai_url, politeness=politeness)
    if opts.ids is not None:
        return run.lookup(
            ids=[i for i in opts.ids.split(",") if i.strip()],
            api_url=opts.api_url,
            oai_url=opts.oai_url,
            politeness=politeness,
        )
    if opts.query is not None:
        return run.lookup(
            query=opts.query,
            api_url=opts.api_url,
            oai_url=opts.oai_url,
            politeness=politeness,
            max_results=opts.max_results,
        )
    return run.windows(
        windows_of_days(window, opts.window_days),
        oai_url=opts.oai_url,
        politeness=politeness,
        refresh=opts.refresh,
    )
