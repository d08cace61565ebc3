"""Options shared by several commands, each with its environment variable."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from pith_pipeline.errors import IncompleteRunError
from pith_pipeline.pipeline import DEFAULT_BASE_URL, BuildConfig, RunSummary

F = TypeVar("F", bound=Callable[..., Any])


def _set_log_signer(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    """The log key reaches the end of the run (`tlog.pipeline.log_run`) as PITH_LOG_SIGNER."""
    if value:
        import os

        os.environ["PITH_LOG_SIGNER"] = value


def site_options(fn: F) -> F:
    """--base-url, --registry-name, --signer-id, --log-signer."""
    fn = click.option(
        "--log-signer",
        envvar="PITH_LOG_SIGNER",
        metavar="SPEC",
        expose_value=False,
        callback=_set_log_signer,
        help="Key of the store's transparency log (as --signer; env PITH_LOG_SIGNER): every "
        "event a run publishes is appended to log/. Required once a store has a log.",
    )(fn)
    fn = click.option(
        "--signer-id",
        envvar="PITH_SIGNER_ID",
        default="pith-pipeline",
        show_default=True,
        help="Name of this registry in event signer blocks.",
    )(fn)
    fn = click.option(
        "--registry-name",
        envvar="PITH_REGISTRY_NAME",
        default="Pith Pipeline",
        show_default=True,
        help="Human name used in mirror hints.",
    )(fn)
    fn = click.option(
        "--base-url",
        envvar="PITH_BASE_URL",
        default=DEFAULT_BASE_URL,
        show_default=True,
        help="Public URL the store is served at (links, mirror hints, key URL).",
    )(fn)
    return fn


def build_config(base_url: str, registry_name: str, signer_id: str) -> BuildConfig:
    return BuildConfig(base_url=base_url, registry_name=registry_name, signer_id=signer_id)


SIGNER_HELP = (
    "Signing key: file:PATH (or a bare path to pith-private-key.json), kms:KEY_ID_OR_ALIAS "
    "(Ed25519 key in AWS KMS; options ?key_id=NAME&region=R&concurrency=N&max_rps=N), "
    "kms-envelope:PATH|s3://BUCKET/KEY (seed encrypted under a symmetric KMS key), "
    "certified:ROOT_SPEC (per-run in-memory key certified by the root key; for backfills). "
    "--key is the older name of this option."
)


def signer_option(*, required: bool = True, dest: str = "signer_spec") -> Callable[[F], F]:
    """--signer SPEC (alias --key), from PITH_SIGNER or PITH_KEY; open with open_signer."""
    return click.option(
        "--signer",
        "--key",
        dest,
        required=required,
        metavar="SPEC",
        envvar=["PITH_SIGNER", "PITH_KEY"],
        help=SIGNER_HELP,
    )


WORKERS_HELP = (
    "Worker processes that build, sign and write records (each paper's versions stay in "
    "one worker, so the output is the same as with one process). Default: the usable "
    "cores. Runs of up to one chunk of records ({chunk}) stay in one process; 1 disables "
    "workers."
)


def workers_option(fn: F) -> F:
    """--workers N (env PITH_WORKERS), plus the hidden --worker-chunk (env PITH_WORKER_CHUNK)."""
    from pith_pipeline.parallel import DEFAULT_CHUNK, usable_cores

    fn = click.option(
        "--worker-chunk",
        "worker_chunk",
        envvar="PITH_WORKER_CHUNK",
        type=click.IntRange(min=1),
        default=DEFAULT_CHUNK,
        hidden=True,
        help="Records per message to a worker (tests and tuning).",
    )(fn)
    fn = click.option(
        "--workers",
        envvar="PITH_WORKERS",
        type=click.IntRange(min=1),
        default=usable_cores,
        show_default="usable cores",
        metavar="N",
        help=WORKERS_HELP.format(chunk=DEFAULT_CHUNK) + " (env PITH_WORKERS)",
    )(fn)
    return fn


IO_CONCURRENCY_HELP = (
    "Papers published at once, each its own requests to the store in their usual order "
    "(events, then bundle and state, then the arXiv pointer). Default: 32 on S3, where "
    "each request waits on the network, 1 for a directory. Per worker process. "
    "(env PITH_IO_CONCURRENCY)"
)


def io_concurrency_option(fn: F) -> F:
    """--io-concurrency N (env PITH_IO_CONCURRENCY); None: the store's default."""
    from pith_pipeline.loader import MAX_IO_CONCURRENCY

    return click.option(
        "--io-concurrency",
        "io_concurrency",
        envvar="PITH_IO_CONCURRENCY",
        type=click.IntRange(min=1, max=MAX_IO_CONCURRENCY),
        default=None,
        show_default="32 on S3, 1 locally",
        metavar="N",
        help=IO_CONCURRENCY_HELP,
    )(fn)


LEASE_WAIT_HELP = (
    "Seconds to wait for another writer of the same papers (or index) to finish before "
    "giving up; 0 fails at once, naming the writer. (env PITH_LEASE_WAIT)"
)


def wait_option(fn: F) -> F:
    """--wait SECONDS (env PITH_LEASE_WAIT): how long to wait for a busy writer lease."""
    return click.option(
        "--wait",
        "lease_wait",
        envvar="PITH_LEASE_WAIT",
        type=click.FloatRange(min=0),
        default=0.0,
        show_default=True,
        metavar="SECONDS",
        help=LEASE_WAIT_HELP,
    )(fn)


def shards_option(fn: F) -> F:
    """--shards SPEC: publish only these shards of papers (several machines in parallel)."""
    return click.option(
        "--shards",
        "shards_spec",
        envvar="PITH_SHARDS",
        default=None,
        metavar="SPEC",
        help="Publish only the papers of these shards (0-15, e.g. 0-7 or 1,3,5; a paper's "
        "shard is crc32 of its arXiv id mod 16), so several machines can publish one "
        "input at once, each its own shards. Default: all. (env PITH_SHARDS)",
    )(fn)


#: A run that has published waits at least this long for the index lease: giving up
#: after publishing would leave its papers unindexed until the next run.
INDEX_LEASE_MIN_WAIT = 600.0


def run_index_lease(store: Any, command: str, run_id: str, lease_wait: float) -> Any:
    """The `index` lease a publishing command holds while it updates the index."""
    from pith_pipeline.storage.lease import writer_lease

    return writer_lease(
        store,
        command=f"{command} index",
        run_id=run_id,
        papers=False,
        index=True,
        wait=max(lease_wait, INDEX_LEASE_MIN_WAIT),
        on_wait=lease_notice,
    )


def lease_notice(message: str) -> None:
    """Printed once when a command starts waiting for another writer."""
    click.echo(message, err=True)


def fail_if_incomplete(summary: RunSummary, store_url: str) -> None:
    """End non-zero (exit 3) when papers were left unpublished by a failed check.

    Why after the run manifest: everything else the run did is published and recorded,
    so the operator repairs the named objects and reruns, losing nothing.
    """
    if not summary.failed:
        return
    for problem in summary.problems:
        click.echo(f"not published: {problem}", err=True)
    more = summary.failed - len(summary.problems)
    if more > 0:
        click.echo(f"... and {more} more", err=True)
    raise IncompleteRunError(
        f"{summary.failed} papers were not published because stored objects failed their checks "
        f"(listed above); inspect them with: pith-pipeline verify {store_url}"
    )
