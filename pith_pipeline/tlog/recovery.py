"""Recovering a store whose log is missing or rolled back, without signing a fork
(`log rebuild`; also how a store made without a log starts one).

The only trees this signs extend every checkpoint the store recorded
(`tlog.checkpoints`): a lost log is rebuilt only when the event store's entries, in
the log's order, give the recorded root; a rolled-back one only gets its newer
signed checkpoint back when its tiles still hold that tree.
"""

from __future__ import annotations

from pith_pipeline.errors import IntegrityError
from pith_pipeline.storage.base import Store
from pith_pipeline.tlog import merkle
from pith_pipeline.tlog.append import LogLease, LogRun, append_events, order_events
from pith_pipeline.tlog.checkpoints import Recorded, current_checkpoint, lost_log_problem, newest_recorded
from pith_pipeline.tlog.log import CHECKPOINT, LOG_PREFIX, AppendResult, LogSigner, TileReader, store_fetch
from pith_pipeline.tlog.note import Checkpoint
from pith_pipeline.tlog.pending import judge, settle
from pith_pipeline.tlog.stored_events import event_entry, event_store_keys, logged_form

#: who takes the log lease for `log rebuild` when the caller names no one
REBUILD_LEASE = LogLease("log rebuild")


def rebuild_log(store: Store, log: LogSigner, *, lease: LogLease = REBUILD_LEASE) -> LogRun:
    """The recovery of a store whose log is missing or rolled back; never signs a fork.

    - No log and no recorded checkpoint: create the log from the event store.
    - No log, but the store recorded a checkpoint (the log was lost): the entries the
      event store gives, in the log's order, are hashed first; only when their first
      `size` leaves give the recorded root (the same tree) is anything written.
    - A checkpoint older than the signed one the store kept (`LOG_WITNESS`; a log
      rolled back) whose tiles still hold the newer tree: that signed checkpoint is
      put back (nothing new is signed).
    - Anything else is refused: an existing log is never rewritten (history is what
      the log exists to expose); restore log/ from a backup.
    """
    with lease.take(store) as held:
        cp = current_checkpoint(store, log.verifier)
        rec = newest_recorded(store, log.verifier, manifests=True)
        if cp is not None:
            problem = lost_log_problem(store, cp, rec)
            if problem is None or rec is None or rec.signed is None or cp.size >= rec.checkpoint.size:
                raise IntegrityError(
                    problem or "a log exists; it is never rewritten (use `log sync` to append what it lacks)",
                    key=LOG_PREFIX + CHECKPOINT,
                )
            return _restore_witness(held.guard(store), cp, rec)  # its write checks the lease
    stale = judge(store, "", ()).stale  # before the event store is listed
    if rec is not None:
        _refuse_rebuilt_fork(store, rec)
    run = append_events(store, log, event_store_keys(store), lease=lease, rebuild=True)
    settle(store, stale)
    return run


def _restore_witness(store: Store, cp: Checkpoint, rec: Recorded) -> LogRun:
    """Put the newer signed checkpoint back when the stored tiles hash to it."""
    where = f"{store.url.rstrip('/')}/{LOG_PREFIX.rstrip('/')}"
    assert rec.signed is not None
    try:
        intact = TileReader(store_fetch(store), rec.checkpoint.size, where).root() == rec.checkpoint.root
    except IntegrityError:
        intact = False
    if not intact:
        raise IntegrityError(
            f"{where}/{CHECKPOINT} was rolled back (size {cp.size}; {rec.where} has size "
            f"{rec.checkpoint.size}) and the tiles no longer hold the newer tree: restore log/ "
            "from a backup (signing a new tree here would be a fork)"
        )
    tagged = store.get_tagged(LOG_PREFIX + CHECKPOINT)
    if not store.put_if_match(
        LOG_PREFIX + CHECKPOINT,
        rec.signed,
        tagged[1] if tagged else None,
        content_type="text/plain; charset=utf-8",
    ):
        raise IntegrityError(f"{where}/{CHECKPOINT} changed meanwhile (another writer); run again")
    r = rec.checkpoint
    return LogRun(AppendResult(cp.size, r.size, r.root, rec.signed, 1, 0.0))


def _refuse_rebuilt_fork(store: Store, rec: Recorded) -> None:
    """IntegrityError unless the event store's entries, in the order an append gives
    them, start with exactly the tree `rec` records (hashed here; nothing written)."""
    problems: list[str] = []
    need = rec.checkpoint.size
    count = 0
    stack: list[tuple[int, bytes]] = []  # (leaves, hash) of perfect subtrees, left to right
    for key in order_events(store, event_store_keys(store), problems):
        if count >= need:
            break
        data = store.get(key)
        if data is None:
            continue
        try:
            entry, hex_id, _ = event_entry(data, f"{store.url}/{key}")
            entry = logged_form(entry, hex_id, key, store.url)
        except IntegrityError:
            continue
        count += 1
        node = (1, merkle.leaf_hash(entry))
        while stack and stack[-1][0] == node[0]:
            left = stack.pop()
            node = (left[0] * 2, merkle.node_hash(left[1], node[1]))
        stack.append(node)
    root = merkle.EMPTY_ROOT
    if stack:
        root = stack[-1][1]
        for _n, h in reversed(stack[:-1]):
            root = merkle.node_hash(h, root)
    if count < need or root != rec.checkpoint.root:
        raise IntegrityError(
            f"{store.url}: rebuilding the log from the event store would sign a fork: its first "
            f"{need} entries do not give the tree {rec.where} records (size {need}); restore log/ "
            "from a backup"
        )
