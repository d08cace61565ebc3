"""Options shared by several commands, each with its environment variable."""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Callable
from typing import Any, TypeVar, cast

import click

from pith_pipeline import config
from pith_pipeline.config import LeaseConfigError, wait_seconds
from pith_pipeline.core.keys import Signer
from pith_pipeline.errors import IncompleteRunError
from pith_pipeline.parallel import DEFAULT_CHUNK, usable_cores
from pith_pipeline.publish import BuildConfig, RunSummary
from pith_pipeline.signing.factory import open_signer
from pith_pipeline.storage.base import Store
from pith_pipeline.storage.concurrency import MAX_IO_CONCURRENCY
from pith_pipeline.storage.factory import open_existing_store, open_store
from pith_pipeline.storage.lease import writer_lease

F = TypeVar("F", bound=Callable[..., Any])

#: The store every command reads or writes when neither --store nor PITH_STORE is given:
#: the one `ingest --sample` makes, so a newcomer's next command finds it.
DEFAULT_STORE = config.DEFAULT_STORE

STORE_HELP = "The store: a directory or s3://bucket/prefix (endpoint: AWS_ENDPOINT_URL). (env PITH_STORE)"


class FiniteFloat(click.FloatRange):
    """A float option that is a real number of seconds or hours: `nan`, `inf` and
    `-inf` (and `1e999`, which is inf) are usage errors, exit 2.

    Why a type of its own: click's `float` and `FloatRange` take them (nan fails no
    comparison, so no range refuses it), and each then did something no one asked for:
    `--retention nan` vacuumed, `--retention inf` ended in an OverflowError, `--wait
    nan` never waited, `--min-interval nan` passed the arXiv politeness check. Options
    read from the environment are converted by the same type, so the rule holds there too.
    """

    name = "finite float"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        try:
            number = float(value)
        except (TypeError, ValueError):
            return super().convert(value, param, ctx)  # click's own message for "soon"
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return super().convert(number, param, ctx)


def store_option(help: str = STORE_HELP) -> Callable[[F], F]:
    """--store (env PITH_STORE, default ./pith-store): the same default on every command."""
    return click.option(
        "--store",
        envvar=envvar("store"),
        default=DEFAULT_STORE,
        show_default=True,
        metavar="STORE",
        help=help,
    )


def envvar(name: str) -> str | list[str]:
    """The environment variable(s) of setting `name`, from the table (`config.SETTINGS`)."""
    s = config.setting(name)
    return list(s.envs) if s.aliases else s.env


#: Where a command's `Settings` is kept in its click context (`command_settings`).
SETTINGS_KEY = "pith_pipeline.settings"

#: Command parameters that are settings under another name (their option's `dest`).
_SETTING_OF_PARAM = {"key_path": "signer", "signer_spec": "signer", "shards_spec": "shards"}


def _with_settings(fn: F) -> F:
    """Resolve the command's `Settings` once, from its options (click has read the
    flags and their variables) and the table, before the command runs: kept in the
    click context for `command_settings`, and passed as `settings=` to a command
    that takes it.

    Code below the command is given the `Settings` (or values from it): nothing
    there reads the environment or the command's flags itself.
    """
    takes_settings = "settings" in inspect.signature(fn).parameters

    @functools.wraps(fn)
    def run(*args: Any, log_signer: str | None = None, no_log: bool = False, **kwargs: Any) -> Any:
        flags: dict[str, Any] = {  # setting name -> what click read (None: not given)
            _SETTING_OF_PARAM.get(k, k): v
            for k, v in kwargs.items()
            if _SETTING_OF_PARAM.get(k, k) in config.BY_NAME
        }
        flags.update(log_signer=log_signer, keep_log=False if no_log else None)
        settings = config.load_settings(**flags)
        click.get_current_context().meta[SETTINGS_KEY] = settings
        if takes_settings:
            kwargs["settings"] = settings
        return fn(*args, **kwargs)

    return cast(F, run)


def command_settings() -> config.Settings:
    """The running command's `Settings` (resolved by `site_options`), else the table
    resolved now: flags given, environment, defaults."""
    ctx = click.get_current_context(silent=True)
    found = ctx.meta.get(SETTINGS_KEY) if ctx is not None else None
    return found if isinstance(found, config.Settings) else config.load_settings()


def store_to_write(location: str) -> Store:
    """The store a command publishes into (made on its first write), opened with the
    command's settings (`local_fsync`, `lease_ttl`)."""
    return open_store(location, **command_settings().store_options)


def command_signer(spec: str) -> Signer:
    """The signer `spec` names, opened with the command's settings (a `certified:`
    key's run id and validity)."""
    return open_signer(spec, settings=command_settings())


def existing_store(location: str) -> Store:
    """The store a command reads or maintains, which must be there
    (`open_existing_store`), opened with the command's settings."""
    return open_existing_store(location, **command_settings().store_options)


def signer_setting() -> str | None:
    """The registry key's spec (`--signer` / `PITH_SIGNER` / `PITH_KEY`) of the running
    command, for commands without a --signer option (where `log` looks for a log key)."""
    return command_settings().signer


def site_options(fn: F) -> F:
    """--base-url, --registry-name, --signer-id, --log-signer, --no-log."""
    fn = click.option(
        "--no-log",
        "no_log",
        is_flag=True,
        default=False,
        help="Keep no transparency log: a new store is made without one (no log key is "
        "made), and a store without one is not told how to start one; refused for a store "
        "that keeps a log. (env PITH_KEEP_LOG=0)",
    )(_with_settings(fn))
    fn = click.option(
        "--log-signer",
        "log_signer",
        envvar=envvar("log_signer"),
        metavar="SPEC",
        help="Key of the store's transparency log (as --signer; env PITH_LOG_SIGNER): every "
        "event a run publishes is appended to log/. Default: pith-log-private-key.json beside "
        "the registry key's file, made by a new store's first run.",
    )(fn)
    fn = click.option(
        "--signer-id",
        envvar=envvar("signer_id"),
        default=config.DEFAULT_SIGNER_ID,
        show_default=True,
        help="Name of this registry in event signer blocks.",
    )(fn)
    fn = click.option(
        "--registry-name",
        envvar=envvar("registry_name"),
        default=config.DEFAULT_REGISTRY_NAME,
        show_default=True,
        help="Human name used in mirror hints.",
    )(fn)
    fn = click.option(
        "--base-url",
        envvar=envvar("base_url"),
        default=config.DEFAULT_BASE_URL,
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
        envvar=envvar("signer"),
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
    fn = click.option(
        "--worker-chunk",
        "worker_chunk",
        envvar=envvar("worker_chunk"),
        type=click.IntRange(min=1),
        default=DEFAULT_CHUNK,
        hidden=True,
        help="Records per message to a worker (tests and tuning).",
    )(fn)
    fn = click.option(
        "--workers",
        envvar=envvar("workers"),
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
    return click.option(
        "--io-concurrency",
        "io_concurrency",
        envvar=envvar("io_concurrency"),
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


class WaitSeconds(click.ParamType[float, Any]):
    """Seconds to wait for a lease, by `storage.lease.wait_seconds` (the one rule: a
    finite number >= 0; click's FloatRange lets `nan` through). A bad value is a
    usage error naming the flag, or `PITH_LEASE_WAIT` when it came from there."""

    name = "seconds"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        from_env = (
            ctx is not None
            and param is not None
            and param.name is not None
            and ctx.get_parameter_source(param.name) == click.core.ParameterSource.ENVIRONMENT
        )
        where = config.env_name("lease_wait") if from_env else "--wait"
        try:
            return wait_seconds(value, where)
        except LeaseConfigError as exc:
            self.fail(str(exc), param, ctx)


def wait_option(fn: F) -> F:
    """--wait SECONDS (env PITH_LEASE_WAIT): how long to wait for a busy writer lease."""
    return click.option(
        "--wait",
        "lease_wait",
        envvar=envvar("lease_wait"),
        type=WaitSeconds(),
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
        envvar=envvar("shards"),
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
