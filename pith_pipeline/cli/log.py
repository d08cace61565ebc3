"""`pith-pipeline log ...`: the transparency log's status, proofs, monitor, upkeep."""

from __future__ import annotations

import base64
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from pith_pipeline.cli.options import (
    command_settings,
    envvar,
    existing_store,
    lease_notice,
    signer_setting,
    store_option,
    wait_option,
)
from pith_pipeline.core.canonical_json import dumps_pretty, loads
from pith_pipeline.errors import IntegrityError
from pith_pipeline.pages.site import refresh_pages
from pith_pipeline.tlog import merkle
from pith_pipeline.tlog.client import LogLocation, bundle_event_ids, prove_event
from pith_pipeline.tlog.log import LOG_PREFIX, TileReader
from pith_pipeline.tlog.monitor import LogProblem, monitor
from pith_pipeline.tlog.note import Verifier, open_checkpoint
from pith_pipeline.tlog.pipeline import (
    APPENDED,
    LogLease,
    LogRun,
    check_log_matches_event_store,
    event_store_keys,
    has_had_log,
    open_log_signer,
    rebuild_log,
    sync_log,
)
from pith_pipeline.tlog.run_log import log_key_for_command

if TYPE_CHECKING:
    from pith_pipeline.storage.base import Store

LOCATION_HELP = "The log: its URL (https://HOST/log) or a store (directory, s3://bucket/prefix)."
VKEY_HELP = (
    "The log's verifier key to pin (name+id+key, as `log status` prints it; env PITH_LOG_VKEY). "
    "Default: the key the registry's pith-signing-key.json names."
)


F = TypeVar("F", bound=Callable[..., Any])


def register(group: click.Group) -> None:
    group.add_command(log)


@click.group()
def log() -> None:
    """The transparency log of every published event (C2SP tlog-tiles under log/).

    \b
      pith-pipeline log status ./pith-store
      pith-pipeline log prove sha256:<event id> --log https://pith.example.org/log
      pith-pipeline log consistency old-checkpoint.txt --log ./pith-store
      pith-pipeline log monitor https://pith.example.org/log --state monitor.json
    """


def _vkey_option(fn: F) -> F:
    return click.option("--vkey", envvar=envvar("log_vkey"), default=None, metavar="VKEY", help=VKEY_HELP)(fn)


@log.command("status")
@click.argument("location", envvar=envvar("store"))
@_vkey_option
def status(location: str, vkey: str | None) -> None:
    """Size, root hash and age of the log's current checkpoint, whose signature is
    verified first (with --vkey, else the log key the registry's key document names).

    The age is the writer's own note of when it last appended (log/appended.json):
    a checkpoint carries no time, so the age is the one line the signature does not
    cover, and it says so."""

    loc = LogLocation.open(location)
    verifier = loc.verifier(vkey)
    cp, _raw = loc.checkpoint(verifier)
    click.echo(f"log:        {loc.where}")
    click.echo(f"origin:     {cp.origin}")
    click.echo(f"size:       {cp.size}")
    click.echo(f"root:       {cp.root_b64}")
    click.echo(f"vkey:       {verifier.vkey}")
    # open_checkpoint refused a checkpoint whose signature does not verify with it
    click.echo(f"checkpoint: signed by {verifier.name} (signature verified with the vkey above)")
    meta = loc.fetch(APPENDED)
    age = "unknown"
    if meta is not None:
        try:
            doc = loads(meta)
            if doc.get("size") == cp.size:
                at = datetime.fromisoformat(str(doc["appended_at"]).replace("Z", "+00:00"))
                secs = int((datetime.now(tz=UTC) - at).total_seconds())
                age = (
                    f"{secs // 3600}h{secs % 3600 // 60:02d}m (appended {doc['appended_at']}, "
                    f"as the writer noted in {LOG_PREFIX}{APPENDED}: not covered by the signature)"
                )
        except (ValueError, KeyError, TypeError, AttributeError):
            pass
    click.echo(f"age:        {age}")
    if loc.pending_runs is not None:
        runs = loc.pending_runs()
        if not runs:
            click.echo("pending:    none")
        else:
            named = ", ".join(runs[:5]) + (", ..." if len(runs) > 5 else "")
            click.echo(
                f"pending:    {len(runs)} run{'s' if len(runs) != 1 else ''} ({named}) may have events "
                "the log lacks (the next run appends them; `log sync` does it now)"
            )


@log.command("prove")
@click.argument("what")
@click.option("--log", "location", required=True, envvar=envvar("store"), help=LOCATION_HELP)
@_vkey_option
def prove(what: str, location: str, vkey: str | None) -> None:
    """An inclusion proof of an event (EVENT_ID) or of every event of a BUNDLE file,
    against the current checkpoint, as JSON. Exit 1 when an event is not in the log."""

    loc = LogLocation.open(location)
    cp, raw = loc.checkpoint(loc.verifier(vkey))
    ids = bundle_event_ids(Path(what))[1] if Path(what).is_file() else [what]
    reader = TileReader(loc.fetch, cp.size, loc.where)
    proofs, missing = [], []
    for event_id in ids:
        try:
            proofs.append(prove_event(loc, reader, cp, event_id))
        except IntegrityError as exc:
            missing.append(str(exc))
    out = {"checkpoint": raw.decode(), "proofs": proofs, "not_logged": missing}
    click.echo(dumps_pretty(out).decode())
    click.echo(f"{len(proofs)} proven, {len(missing)} not in the log (tile reads: {reader.reads})", err=True)
    sys.exit(1 if missing else 0)


@log.command("consistency")
@click.argument("old_checkpoint", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--log", "location", required=True, envvar=envvar("store"), help=LOCATION_HELP)
@_vkey_option
def consistency(old_checkpoint: Path, location: str, vkey: str | None) -> None:
    """Prove that today's tree extends an OLD_CHECKPOINT you kept (a signed checkpoint
    file). Exit 1 naming the problem when it does not (a fork or a shrink)."""

    loc = LogLocation.open(location)
    verifier = loc.verifier(vkey)
    try:
        old = open_checkpoint(old_checkpoint.read_bytes(), verifier)
    except ValueError as exc:
        raise IntegrityError(f"{old_checkpoint}: {exc}") from None
    cp, _raw = loc.checkpoint(verifier)
    if cp.origin != old.origin:
        raise IntegrityError(f"{old_checkpoint} is of log {old.origin!r}, not {cp.origin!r}")
    if cp.size < old.size:
        click.echo(f"error: shrunk: the log has {cp.size} entries, the old checkpoint {old.size}", err=True)
        sys.exit(1)
    reader = TileReader(loc.fetch, cp.size, loc.where)
    proof = reader.consistency_proof(old.size) if old.size else []
    ok = old.size == 0 or merkle.verify_consistency(old.size, cp.size, old.root, cp.root, proof)
    out = {
        "old_size": old.size,
        "old_root_b64": old.root_b64,
        "size": cp.size,
        "root_b64": cp.root_b64,
        "proof_b64": [base64.b64encode(h).decode() for h in proof],
        "consistent": ok,
    }
    click.echo(dumps_pretty(out).decode())
    if not ok:
        click.echo(f"error: forked: the tree of size {cp.size} does not extend the old one", err=True)
        sys.exit(1)


@log.command("monitor")
@click.argument("location")
@click.option(
    "--state",
    "state_path",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="File keeping the last checkpoint this monitor trusted (created on the first run).",
)
@_vkey_option
def monitor_cmd(location: str, state_path: Path, vkey: str | None) -> None:
    """Audit a log: check the new checkpoint extends the last one trusted, and re-verify
    every entry added since (canonical event, id = hash of content, signature by a key
    the registry publishes). Exit 1 naming the problem: forked, shrunk, bad entry."""
    from tqdm import tqdm

    loc = LogLocation.open(location)
    try:
        with tqdm(desc="entries", unit="entry", disable=None) as bar:
            report = monitor(
                loc.fetch,
                loc.where,
                state_path,
                key_doc=loc.key_doc,
                vkey=vkey,
                progress=bar.update,
                events=loc.objects,
            )
    except LogProblem as exc:
        click.echo(f"LOG PROBLEM {exc}", err=True)
        sys.exit(1)
    click.echo(
        f"{report.origin}: size {report.old_size} -> {report.size}, root {report.root_b64}; "
        f"{report.checked} new entries verified; state saved to {state_path}"
    )


def _log_signer_option(fn: F) -> F:
    return click.option(
        "--log-signer",
        "log_signer",
        envvar=envvar("log_signer"),
        metavar="SPEC",
        help="The log's own key (same forms as --signer: file:PATH, kms:..., kms-envelope:...). "
        "Default: pith-log-private-key.json beside the registry key's file (PITH_SIGNER's, "
        "else ./pith-keys/). Origin: env PITH_LOG_ORIGIN, else the one the key document "
        "names, else <host of --base-url>/log.",
    )(fn)


def _report(run: object) -> None:

    assert isinstance(run, LogRun)
    for p in run.problems:
        click.echo(f"not logged: {p}", err=True)
    r = run.result
    if r is not None:
        click.echo(f"log: {r.appended} entries appended; size {r.size}, root {r.root_b64}")
    if run.problems:
        sys.exit(1)


@log.command("sync")
@store_option("The store (directory or s3://...).")
@_log_signer_option
@wait_option
def sync(store: str, log_signer: str | None, lease_wait: float) -> None:
    """Append every event the event store holds and the log lacks (what a run that
    died before appending left out; runs do this themselves), judged from the log's
    entries, and write again every event-id lookup object that differs from them.

    Appends under the store's `log` lease: while another writer appends, it fails
    naming that writer (exit 75), or waits with --wait SECONDS."""

    st = existing_store(store)
    spec = log_key_for_command(
        st, log_signer, create=False, notice=lease_notice, registry_signer=signer_setting()
    )
    lease = LogLease("log sync", wait=lease_wait, on_wait=lease_notice)
    had = has_had_log(st)
    log = open_log_signer(spec, st, command_settings().log_origin)
    _report(sync_log(st, log, event_store_keys(st), lease=lease, everything=True))
    _pages_name_a_new_log(st, had)


@log.command("rebuild")
@store_option("The store (directory or s3://...).")
@_log_signer_option
@wait_option
def rebuild(store: str, log_signer: str | None, lease_wait: float) -> None:
    """Create the log from the event store, for a store that has none (this starts a
    log on a store made without one; a `file:` log key that does not exist yet is
    made, mode 0600), or recover a lost or rolled-back one without signing a fork.
    Refuses to rewrite an existing log. Holds the `log` lease as `log sync` does
    (--wait)."""

    st = existing_store(store)
    spec = log_key_for_command(
        st, log_signer, create=True, notice=lease_notice, registry_signer=signer_setting()
    )
    lease = LogLease("log rebuild", wait=lease_wait, on_wait=lease_notice)
    had = has_had_log(st)
    _report(rebuild_log(st, open_log_signer(spec, st, command_settings().log_origin), lease=lease))
    _pages_name_a_new_log(st, had)


def _pages_name_a_new_log(st: Store, had_log: bool) -> None:
    """A log just started on a store with record pages: the pages are written again
    to name it (`pages.site.refresh_pages`), so the store verifies right away."""

    if not had_log and has_had_log(st):
        click.echo(f"record pages: {refresh_pages(st)} written (they name the new log)")


@log.command("verify")
@click.argument("store", envvar=envvar("store"))
@_vkey_option
def verify_store(store: str, vkey: str | None) -> None:
    """Check the log holds exactly the event store's events, each once, and that
    every entry matches the signed tree (also part of `pith-pipeline verify STORE`)."""

    st = existing_store(store)
    problems = check_log_matches_event_store(st, Verifier.parse(vkey) if vkey else None)
    for p in problems:
        click.echo(f"FAIL {p}")
    click.echo("log matches the event store" if not problems else f"{len(problems)} problems")
    sys.exit(1 if problems else 0)
