"""Options shared by several commands, each with its environment variable."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from pith_pipeline.pipeline import DEFAULT_BASE_URL, BuildConfig

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
