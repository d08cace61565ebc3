"""`pith-pipeline backfill`: publish a past range without Airflow."""

from __future__ import annotations

import click

from pith_pipeline.backfill import run_backfill
from pith_pipeline.cli.options import envvar, io_concurrency_option, wait_option
from pith_pipeline.config import load_settings
from pith_pipeline.errors import InputError
from pith_pipeline.runs.windows import window_from_options


def register(group: click.Group) -> None:
    """Add this module's commands to the `pith-pipeline` group."""
    group.add_command(backfill)


@click.command()
@click.option(
    "--from", "start", required=True, metavar="YYYY-MM-DD", help="First OAI datestamp day (inclusive)."
)
@click.option("--until", metavar="YYYY-MM-DD", help="Day after the last one (exclusive).")
@click.option("--through", metavar="YYYY-MM-DD", help="Last day (inclusive), instead of --until.")
@click.option(
    "--source",
    type=click.Choice(["oai", "snapshot"]),
    default="oai",
    show_default=True,
    help="Harvest arXiv's OAI-PMH, or read a snapshot file.",
)
@click.option(
    "--snapshot",
    "snapshot_path",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="With --source snapshot: arXiv's metadata snapshot "
    "(.json/.jsonl, optionally .gz); records are selected by update_date.",
)
@click.option(
    "--store",
    envvar=envvar("store"),
    default=None,
    help="Where to publish: a directory or s3://bucket/prefix [env PITH_STORE; default ./pith-store].",
)
@click.option(
    "--signer",
    "--key",
    "signer",
    envvar=envvar("signer"),
    default=None,
    help="Signer spec: file:PATH or kms-envelope:... [env PITH_SIGNER].",
)
@click.option(
    "--oai-url",
    envvar=envvar("oai_url"),
    default=None,
    help="OAI-PMH endpoint [env PITH_OAI_URL; default arXiv's].",
)
@click.option(
    "--base-url",
    envvar=envvar("base_url"),
    default=None,
    help="Public URL the store is served at [env PITH_BASE_URL].",
)
@click.option(
    "--log-signer",
    "log_signer",
    envvar=envvar("log_signer"),
    default=None,
    metavar="SPEC",
    help="Key of the store's transparency log [env PITH_LOG_SIGNER; default: "
    "pith-log-private-key.json beside the signer's key file, made for a new store].",
)
@click.option(
    "--no-log",
    "no_log",
    is_flag=True,
    default=False,
    help="Keep no transparency log in a new store [env PITH_KEEP_LOG=0]; refused for a store that keeps one.",
)
@click.option(
    "--progress/--no-progress", default=None, help="Progress bar (default: when the output is a terminal)."
)
@io_concurrency_option
@wait_option
def backfill(
    start: str,
    until: str | None,
    through: str | None,
    source: str,
    snapshot_path: str | None,
    store: str | None,
    signer: str | None,
    oai_url: str | None,
    base_url: str | None,
    log_signer: str | None,
    no_log: bool,
    progress: bool | None,
    io_concurrency: int | None,
    lease_wait: float,
) -> None:
    """Publish every day of [--from, --until) not yet published; resumable.

    --until is exclusive, as on every command (docs/pages/date-ranges.md); --through
    names the last day instead.

    Writers of the same papers take turns (a lease per shard of papers, as for
    `build`): with another writer at work, backfill fails at once naming it (exit
    75), or waits up to --wait seconds, saying so.

    Each day is one window, exactly as the daily Airflow run would do it (run id
    `ingest-<day>`): harvest into raw/, build and sign, publish, update the indexes,
    write runs/<run_id>/manifest.json. Days with a run manifest are skipped, so
    after a kill the same command continues where it stopped.

    \b
    Examples:
      pith-pipeline backfill --from 2024-01-01 --until 2024-02-01 \\
          --store s3://my-bucket/pith --signer file:keys/pith-private-key.json
      pith-pipeline backfill --from 2007-01-01 --until 2026-01-01 --source snapshot \\
          --snapshot arxiv-metadata-oai-snapshot.json --store ./pith-store
    """

    if until is None and through is None:
        raise click.UsageError("give --until (the day after the last) or --through (the last day)")
    first, end = window_from_options(start, until, through=through).bounds("backfill")
    if source == "snapshot" and not snapshot_path:
        raise InputError("--source snapshot needs --snapshot FILE")
    settings = load_settings(
        store=store,
        signer=signer,
        oai_url=oai_url,
        base_url=base_url,
        lease_wait=repr(lease_wait),
        log_signer=log_signer,
        keep_log="0" if no_log else None,
    )
    result = run_backfill(
        settings,
        first.isoformat(),
        end.isoformat(),
        source,
        snapshot_path,
        progress=progress,
        io_concurrency=io_concurrency,
    )
    click.echo(f"backfill {first}..{end} ({source}): {result.line()}")
