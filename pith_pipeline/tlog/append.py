"""Appending stored events to the log: in (created_at, event_id) order, each once,
under the store's `log` writer lease, and what an append did (`LogRun`).

- An append reads which of its events the log holds (`tlog.lookup`), orders the
  rest, and streams them into the tiles (`tlog.log.append_entries`); the lookup
  objects are written before the checkpoint moves.
- After the checkpoint moves, the witness (`tlog.checkpoints.LOG_WITNESS`) and the
  unsigned `log/appended.json` are written: the checkpoint is durable first.
- Every append first checks that the current tree extends the newest checkpoint the
  store recorded (`kept_checkpoint`), so it never signs a fork.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from pith_pipeline._internal.disk_backed import SpillList
from pith_pipeline.clock import system_clock
from pith_pipeline.core.canonical_json import dumps_pretty, loads
from pith_pipeline.core.timeutil import iso_seconds
from pith_pipeline.errors import IntegrityError
from pith_pipeline.storage.base import Store, barrier
from pith_pipeline.storage.lease import writer_lease
from pith_pipeline.tlog.checkpoints import LOG_WITNESS, current_checkpoint, kept_checkpoint
from pith_pipeline.tlog.log import LOG_PREFIX, AppendResult, LogSigner, append_entries
from pith_pipeline.tlog.log_key import publish_log_key
from pith_pipeline.tlog.lookup import (
    Hints,
    IdFilter,
    entry_ids,
    logged_ids,
    not_in_entries,
    not_logged,
    write_index,
)
from pith_pipeline.tlog.note import Checkpoint
from pith_pipeline.tlog.stored_events import event_entry, event_key_id, logged_form

APPENDED = "appended.json"


@dataclass(slots=True)
class LogRun:
    """What a run did to the log."""

    result: AppendResult | None
    problems: list[str] = field(default_factory=list)

    def manifest_entry(self) -> dict[str, Any] | None:
        """For the run manifest: the checkpoint the run produced (or found)."""
        if self.result is None:
            return None
        r = self.result
        return {
            "origin": _origin_of(r.checkpoint),
            "size": r.size,
            "root_hash_b64": r.root_b64,
            "appended": r.appended,
            "first_index": r.old_size,
            **({"problems": self.problems[:100]} if self.problems else {}),
        }


def _origin_of(checkpoint: bytes) -> str:
    """The origin line of a signed checkpoint ("" for none)."""
    return checkpoint.split(b"\n", 1)[0].decode() if checkpoint else ""


def order_events(store: Store, keys: Iterable[str], problems: list[str]) -> Iterator[str]:
    """Event keys sorted by (created_at, event_id), each once; unreadable ones named
    in `problems` and left out (a damaged event is never logged)."""
    rows = SpillList()
    for key in keys:
        data = store.get(key)
        if data is None:
            problems.append(f"{store.url}/{key}: listed but gone; not logged")
            continue
        try:  # only what orders it; the full check comes when it is appended
            ev = loads(data)
            created, hex_id = ev["created_at"], str(ev["event_id"]).removeprefix("sha256:")
            if not isinstance(created, str) or hex_id != event_key_id(key):
                raise ValueError("its event_id is not its name")
        except (ValueError, TypeError, KeyError) as exc:
            problems.append(f"{store.url}/{key}: not logged: {exc}")
            continue
        rows.append(f"{created}\x00{hex_id}\x00{key}")
    last = None
    for row in rows.iter_sorted(unique=True):
        _created, hex_id, key = row.split("\x00")
        if hex_id != last:
            yield key
        last = hex_id


def _append_keys(
    store: Store,
    log: LogSigner,
    ordered: Iterable[str],
    problems: list[str],
    written: Mapping[str, str] | None = None,
    extends: Checkpoint | None = None,
) -> AppendResult:
    new_ids = SpillList()

    def entries() -> Iterator[bytes]:
        for key in ordered:
            data = store.get(key)
            if data is None:
                problems.append(f"{store.url}/{key}: gone before it was logged")
                continue
            try:
                known = written.get(key) if written is not None else None
                entry, hex_id, _ = event_entry(data, f"{store.url}/{key}", known)
                entry = logged_form(entry, hex_id, key, store.url)
            except IntegrityError as exc:
                problems.append(str(exc))
                continue
            new_ids.append(hex_id)
            yield entry

    return _append_ordered(store, log, entries(), new_ids, extends)


def _append_ordered(
    store: Store,
    log: LogSigner,
    entries: Iterable[bytes],
    new_ids: SpillList,
    extends: Checkpoint | None = None,
) -> AppendResult:
    """Append `entries` (in order); `new_ids` fills with their event ids as they are
    consumed, and the lookup objects are written from it before the checkpoint moves."""

    def before_checkpoint(old_size: int, _size: int) -> None:
        write_index(store, new_ids, old_size)

    result = append_entries(store, log, entries, before_checkpoint=before_checkpoint, extends=extends)
    if result.appended:
        # the checkpoint is durable before the witness that claims it: a witness that
        # outlived its checkpoint in a power loss would read as a rolled-back log
        barrier(store)
        store.put(LOG_WITNESS, result.checkpoint, content_type="text/plain; charset=utf-8")
        store.put(LOG_PREFIX + APPENDED, dumps_pretty(_appended_doc(result)) + b"\n")
    return result


def _appended_doc(result: AppendResult) -> dict[str, Any]:
    return {
        "size": result.size,
        "root_hash_b64": result.root_b64,
        "appended_at": iso_seconds(system_clock()),
        "note": "unsigned; when the writer says it appended. The checkpoint is what counts.",
    }


class EntrySource(Protocol):
    """Log entries a run made while it wrote its events (`index.RowSink` is one)."""

    def log_ids(self) -> Iterable[str]:
        """Event ids (hex) of the entries, in any order."""
        ...

    def log_entries(self) -> Iterable[tuple[str, str, bytes]]:
        """(event id hex, event key, canonical entry) in (created_at, event id) order."""
        ...


#: How long a run waits for the log lease at its end: its events are published by
#: then, and giving up leaves them unlogged until a later run (its pending marker).
RUN_LOG_LEASE_WAIT = 600.0

_logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class LogLease:
    """Who takes the store's `log` lease, and how long they wait for it.

    Taken like every writer lease (`storage.lease.writer_lease`): its holder names
    the command and run (so a writer kept waiting is told who holds it), a writer
    that waits says so once (`on_wait`, else a warning in the log), and one that
    gives up raises `LeaseBusyError` (exit 75). `log sync` and `log rebuild` wait
    `--wait SECONDS` (`PITH_LEASE_WAIT`), 0 by default as every command; a run
    appending its events waits `RUN_LOG_LEASE_WAIT`.
    """

    command: str = "log append"
    run_id: str = ""
    wait: float = RUN_LOG_LEASE_WAIT
    on_wait: Callable[[str], None] | None = None

    def take(self, store: Store) -> Any:
        return writer_lease(
            store,
            command=self.command,
            run_id=self.run_id,
            papers=False,
            log=True,
            wait=self.wait,
            on_wait=self.on_wait or _logger.warning,
        )


def append_from(
    store: Store,
    log: LogSigner,
    source: EntrySource,
    *,
    lease: LogLease = LogLease(),
    ids: IdFilter | None = None,
) -> LogRun:
    """Append the entries `source` holds that the log lacks, in its order, without
    reading the events back from the store (a run's own events: `sync_log`).
    `ids`: `IdFilter(source.log_ids())` when the caller made it already."""
    publish_log_key(store, log)
    wanted = ids if ids is not None else IdFilter(source.log_ids())
    with lease.take(store) as held:
        store = held.guard(store)  # every write below checks the lease first
        cp = current_checkpoint(store, log.verifier)
        kept = kept_checkpoint(store, log.verifier, cp)
        logged = logged_ids(store, wanted, Hints(store, cp))
        new_ids = SpillList()

        def entries() -> Iterator[bytes]:
            for hex_id, key, entry in source.log_entries():  # each id once
                if hex_id not in logged:
                    new_ids.append(hex_id)
                    yield logged_form(entry, hex_id, key, store.url)

        result = _append_ordered(store, log, entries(), new_ids, kept)
    return LogRun(result, [])


def append_events(
    store: Store,
    log: LogSigner,
    event_keys: Iterable[str],
    *,
    lease: LogLease = LogLease(),
    everything: bool = False,
    rebuild: bool = False,
) -> LogRun:
    """Append the stored events at `event_keys` that the log does not hold yet, in
    (created_at, event_id) order; returns the result and any events left out.

    `event_keys` may be the run's ledger (key -> SHA-256 of the bytes it wrote): events
    whose stored bytes still match are appended without re-checking (`event_entry`).

    Holds the store's `log` writer lease from reading the log to moving its
    checkpoint, so two runs never both append the same missing event.

    `everything`: `event_keys` is the whole event store; which events are logged is
    read from the log's entries (not the lookup), and every lookup object that
    differs from them is written again. `rebuild`: the caller (`rebuild_log`) has
    checked that the tree it starts extends every recorded checkpoint.
    """
    problems: list[str] = []
    publish_log_key(store, log)
    wanted = SpillList(k for k in event_keys if event_key_id(k))
    with lease.take(store) as held:
        store = held.guard(store)  # every write below checks the lease first
        cp = current_checkpoint(store, log.verifier)
        kept = None if rebuild else kept_checkpoint(store, log.verifier, cp)
        if everything and cp is not None and cp.size:
            missing = not_in_entries(store, wanted, entry_ids(store, cp))
        else:
            missing = not_logged(store, wanted, Hints(store, cp))
        written = event_keys if isinstance(event_keys, Mapping) else None
        result = _append_keys(store, log, order_events(store, missing, problems), problems, written, kept)
    return LogRun(result, problems)
