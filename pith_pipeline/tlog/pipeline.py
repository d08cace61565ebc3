"""The pipeline's side of the log: a run's one call at its end (`log_run`), and
`log sync`'s whole-store comparison (`sync_log`).

- A run appends the events it published, ordered by (`created_at`, `event_id`), at
  its end (`log_run`, called where the run manifest is written), under the store's
  `log` writer lease (`tlog.append`).
- When a run died after publishing events but before appending them, its pending
  marker (`tlog.pending`) makes the next run compare the event store with the log
  and append the missing events too (`sync_log`).
- A run without the log key on a store that keeps a log is refused in one line
  naming what to do (`refuse_unlogged_run`).

The log key and origin are parameters: the edge resolves them from its settings
(`tlog.log_key.log_signer_for`); nothing here reads the environment.

The other names below are the log's interface for the modules outside `tlog` that
import them from this path (cli/log.py, cli/signing.py, runs/manifest.py,
pages/site.py, tlog/run_log.py, tlog/client.py); they live in the modules named.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path
from typing import NoReturn

from pith_pipeline.core.layout import EVENTS, RUNS, is_run_manifest
from pith_pipeline.errors import IntegrityError
from pith_pipeline.storage.base import Store, iter_unsorted
from pith_pipeline.tlog.append import (
    APPENDED,
    EntrySource,
    LogLease,
    LogRun,
    append_events,
    append_from,
)
from pith_pipeline.tlog.check import check_log_matches_event_store
from pith_pipeline.tlog.checkpoints import (
    LOG_WITNESS,
    current_checkpoint,
    has_had_log,
    kept_checkpoint,
    lost_log_problem,
    recorded_unverified,
)
from pith_pipeline.tlog.log import CHECKPOINT, LOG_PREFIX, AppendResult, LogSigner
from pith_pipeline.tlog.log_key import (
    KEY_DOCUMENT,
    LOG_SIGNER_ENV,
    LogNotConfiguredError,
    key_document,
    log_key_member,
    log_signer_for,
    open_log_signer,
    verifier_from_key_doc,
)
from pith_pipeline.tlog.lookup import IdFilter, lookup
from pith_pipeline.tlog.pending import judge, settle
from pith_pipeline.tlog.recovery import rebuild_log
from pith_pipeline.tlog.stored_events import event_key_id, event_store_keys

__all__ = [
    "APPENDED",
    "KEY_DOCUMENT",
    "LOG_SIGNER_ENV",
    "LOG_WITNESS",
    "LogLease",
    "LogNotConfiguredError",
    "LogRun",
    "append_events",
    "check_log_matches_event_store",
    "current_checkpoint",
    "event_store_keys",
    "has_had_log",
    "kept_checkpoint",
    "key_document",
    "log_key_member",
    "log_run",
    "log_signer_for",
    "lookup",
    "open_log_signer",
    "rebuild_log",
    "refuse_unlogged_run",
    "sync_log",
    "verifier_from_key_doc",
]

_logger = logging.getLogger(__name__)


def sync_log(
    store: Store,
    log: LogSigner,
    run_keys: Iterable[str] = (),
    *,
    lease: LogLease | None = None,
    entries: EntrySource | None = None,
    pending: Iterable[str] = (),
    run_id: str = "",
    everything: bool = False,
) -> LogRun:
    """Append this run's events (`entries` the run made as it wrote them, then any of
    `run_keys` they did not cover, read from the store; keys other than events are
    ignored), and every other event the event store holds and the log lacks.

    The whole event store is compared with the log only when another run may have
    left events unlogged: a pending marker (`tlog.pending`) of a run that is gone or
    that this run's ledger does not cover, or a log that was empty before this run
    on a store where earlier runs finished (the first run with a log key on a store
    with events: `_runs_finished_before`). Otherwise the run lists
    nothing: its cost does not grow with the store. `pending`: the markers of this
    run (`RunSummary.log_pending`), deleted once its events are in; `run_id`: this
    run's id (its own markers that `pending` lacks are killed attempts of it).
    `lease`: who takes the log lease (default: this run, `RUN_LOG_LEASE_WAIT`).
    `everything` (`log sync`): compare the whole event store with the log's entries,
    whatever the markers say, and write every lookup object that differs again.
    """
    lease = lease or LogLease(run_id=run_id)
    settled = judge(store, run_id, pending)  # before anything lists the event store
    if everything:
        run = append_events(store, log, event_store_keys(store), lease=lease, everything=True)
        settle(store, settled.covered + settled.stale)
        return run
    run = LogRun(None, [])
    if entries is not None:
        covered = IdFilter(entries.log_ids())
        run = _merged(run, append_from(store, log, entries, lease=lease, ids=covered))
        # the run's events its entries did not cover (their ids are not held as strings)
        run_keys = (k for k in run_keys if event_key_id(k) not in covered)
    run = _merged(run, append_events(store, log, run_keys, lease=lease))
    assert run.result is not None
    if settled.stale or (run.result.old_size == 0 and _runs_finished_before(store)):
        total = sum(1 for k in iter_unsorted(store, EVENTS) if event_key_id(k))  # streamed: no key held
        if run.result.size < total:
            whole = append_events(store, log, event_store_keys(store), lease=lease, everything=True)
            run = _merged(run, whole)
    settle(store, settled.covered + settled.stale)
    return run


def _runs_finished_before(store: Store) -> bool:
    """Whether any run finished in this store (its manifest is written after its log
    append, so this run's is not there yet). An empty log on a store where one did
    may lack their events (they ran without a log key); on a new store the log can
    lack none but this run's, and a run that died there left a marker."""
    return any(is_run_manifest(k) for k in iter_unsorted(store, RUNS))


def _merged(first: LogRun, then: LogRun) -> LogRun:
    """Two appends of one run as one: sizes from the first's start to the second's end."""
    a, b = first.result, then.result
    if a is None or (b is not None and not a.appended):
        result = b
    elif b is None or not b.appended:
        result = a
    else:
        result = AppendResult(
            a.old_size, b.size, b.root, b.checkpoint, a.written + b.written, a.seconds + b.seconds
        )
    return LogRun(result, first.problems + then.problems)


def log_run(
    store: Store,
    written: Iterable[str],
    log: LogSigner | None,
    *,
    entries: EntrySource | None = None,
    pending: Iterable[str] = (),
    run_id: str = "",
) -> LogRun | None:
    """The pipeline's one call at the end of a run (before its run manifest).

    `log`: the run's log signer (`log_key.log_signer_for` of its settings), None when
    the run was given no log key. Without one a store with no log stays without one
    (the run's pending markers are deleted: nothing is owed to a log); a store that
    has a log refuses to finish the run unlogged (the run's events stay published,
    its markers stay, and the next run with the key appends them).
    `pending`, `run_id`: see `sync_log`.
    """
    if log is None:
        if has_had_log(store):
            refuse_unlogged_run(store, published=True)
        settle(store, pending)
        return None
    run = sync_log(store, log, written, entries=entries, pending=pending, run_id=run_id)
    for p in run.problems[:20]:
        _logger.warning("not logged: %s", p)
    return run


def refuse_unlogged_run(store: Store, *, looked_at: Path | None = None, published: bool = False) -> NoReturn:
    """Raise, in one line, why a run without the log key cannot run on a store that
    keeps (or kept) a log: the log was lost or rolled back (naming the recovery), or
    the log key is not given. `looked_at`: where the run looked for the key by default
    (`tlog.run_log.default_log_key`); `published`: the run already published its
    events (the check at its end), else nothing was written (the check at its start).
    """
    if not store.exists(LOG_PREFIX + CHECKPOINT):
        problem = lost_log_problem(store, None, recorded_unverified(store))
        if problem is not None:
            raise IntegrityError(problem)
    doc_log = key_document(store).get("log")
    vkey = doc_log.get("vkey") if isinstance(doc_log, dict) else None
    signed = f", signed by {vkey}" if vkey else ""
    looked = ""
    if looked_at is not None:
        looked = (
            f"; it is not at {looked_at}, where runs look for it beside the registry key (after "
            "the registry key moved, move the log key there too: a log keeps its key)"
        )
    then = (
        "this run's events are published; the next run with the key appends them"
        if published
        else "nothing was published"
    )
    raise LogNotConfiguredError(
        f"{store.url} keeps a transparency log{signed}: give its key with --log-signer or "
        f"{LOG_SIGNER_ENV}{looked} ({then})"
    )
