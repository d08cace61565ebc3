"""Checking that the log holds exactly the event store's events, each once, every
entry matching the signed tree (`log verify`, `verify STORE`)."""

from __future__ import annotations

from collections.abc import Callable

from pith_pipeline.errors import IntegrityError
from pith_pipeline.storage.base import Store
from pith_pipeline.tlog.checkpoints import (
    current_checkpoint,
    has_had_log,
    lost_log_problem,
    newest_recorded,
    rebuild_command,
    recorded_unverified,
)
from pith_pipeline.tlog.entry import entry_event_hex, parse_committed
from pith_pipeline.tlog.log import CHECKPOINT, LOG_PREFIX, TileReader, iter_entries, store_fetch
from pith_pipeline.tlog.log_key import KEY_DOCUMENT, START_A_LOG, key_document, store_verifier
from pith_pipeline.tlog.note import Verifier
from pith_pipeline.tlog.stored_events import committed_problem, event_key_id, event_store_keys


def _unstarted_log(store: Store) -> str:
    """The problem of a store whose key document names a log that has no checkpoint
    and of which nothing recorded one: lost before any record, or never appended to."""
    member = key_document(store).get("log")
    vkey = member.get("vkey") if isinstance(member, dict) else "a log key"
    where = f"{store.url.rstrip('/')}/{LOG_PREFIX}{CHECKPOINT}"
    return (
        f"{where} is missing, but {store.url.rstrip('/')}/{KEY_DOCUMENT} names this store's log "
        f"({vkey}): the log is absent (a first run stopped before its append, or log/ was lost); "
        f"if log/ ever held a checkpoint restore it from a backup, else the next run with that "
        f"log key appends the store's events (or {rebuild_command(store)})"
    )


def check_log_matches_event_store(
    store: Store, verifier: Verifier | None = None, *, progress: Callable[[int], None] | None = None
) -> list[str]:
    """Problems (one line each) unless the log holds exactly the event store's events,
    each once, every entry matching the signed tree. [] means they agree; a store
    without a log gives one problem saying so."""
    where = f"{store.url.rstrip('/')}/{LOG_PREFIX.rstrip('/')}"
    if not store.exists(LOG_PREFIX + CHECKPOINT):
        if not has_had_log(store):
            return [f"{where}: no transparency log; {START_A_LOG}"]
        lost = lost_log_problem(store, None, recorded_unverified(store))
        if lost is None and next(iter(event_store_keys(store)), None) is None:
            return []  # no event, no checkpoint: nothing the log could lack
        return [lost or _unstarted_log(store)]
    try:
        verifier = verifier or store_verifier(store)
        cp = current_checkpoint(store, verifier)
        assert cp is not None
        lost = lost_log_problem(store, cp, newest_recorded(store, verifier, manifests=True))
        if lost is not None:
            return [lost]
        reader = TileReader(store_fetch(store), cp.size, where)
        if reader.root() != cp.root:
            return [f"{where}: the tiles do not hash to the checkpoint's root"]
        in_log: dict[str, int] = {}
        problems: list[str] = []
        for idx, entry in iter_entries(reader):
            hex_id = entry_event_hex(entry)
            if hex_id is None:
                problems.append(f"{where}: entry {idx} is not an event")
                continue
            c = parse_committed(entry)
            if c is not None and (bad := committed_problem(c, store.get)) is not None:
                problems.append(f"{where}: entry {idx} (event sha256:{hex_id}): {bad}")
            if hex_id in in_log:
                problems.append(f"{where}: event {hex_id} is logged twice (entries {in_log[hex_id]}, {idx})")
            in_log.setdefault(hex_id, idx)
            if progress is not None:
                progress(1)
    except IntegrityError as exc:
        return [str(exc)]
    stored = {event_key_id(k) or "": k for k in event_store_keys(store)}
    for stored_id, key in sorted(stored.items(), key=lambda kv: kv[1]):
        if stored_id not in in_log:
            problems.append(f"{store.url}/{key}: event is not in the log")
    for hex_id, idx in sorted(in_log.items(), key=lambda kv: kv[1]):
        if hex_id not in stored:
            problems.append(f"{where}: entry {idx} (event sha256:{hex_id}) is not in the event store")
    return problems
