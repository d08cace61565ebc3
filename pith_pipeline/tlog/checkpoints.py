"""The log's checkpoints: the one it signs under `log/`, and the ones the store
recorded outside it, which every append must extend.

`runs/log-checkpoint` (`LOG_WITNESS`) is a copy of the newest checkpoint the log
signed, written after each append, outside `log/`: with the run manifests (each
records its checkpoint) it lets runs, `log sync` and `verify STORE` notice a lost or
rolled-back log, and the writer never appends onto a tree that does not extend it
(that would sign a fork).
"""

from __future__ import annotations

import base64
from dataclasses import dataclass

from pith_pipeline.core.canonical_json import loads
from pith_pipeline.core.layout import RUNS, is_run_manifest
from pith_pipeline.errors import IntegrityError
from pith_pipeline.storage.base import Store, iter_unsorted
from pith_pipeline.tlog import merkle
from pith_pipeline.tlog.log import (
    CHECKPOINT,
    LOG_PREFIX,
    ForkError,
    TileReader,
    read_checkpoint,
    refuse_fork,
    store_fetch,
)
from pith_pipeline.tlog.log_key import key_document, store_verifier
from pith_pipeline.tlog.note import Checkpoint, Verifier, open_checkpoint

#: the newest checkpoint the log signed, kept outside log/ (module docstring)
LOG_WITNESS = RUNS + "log-checkpoint"


def current_checkpoint(store: Store, verifier: Verifier) -> Checkpoint | None:
    """The store's signed checkpoint, verified with `verifier` (None: the log has none)."""
    return read_checkpoint(store_fetch(store), verifier, f"{store.url}/{LOG_PREFIX.rstrip('/')}")


@dataclass(frozen=True, slots=True)
class Recorded:
    """A checkpoint of this log recorded outside `log/`: `where` names the object;
    `signed` is the signed note (the witness), None for a run manifest's record."""

    checkpoint: Checkpoint
    where: str
    signed: bytes | None = None


def newest_recorded(store: Store, verifier: Verifier, *, manifests: bool) -> Recorded | None:
    """The largest checkpoint the store recorded: the witness (`LOG_WITNESS`), and
    with `manifests` every run manifest's `log` member too (one read per run, so only
    where the log is missing or a check reads the whole store anyway)."""
    best: Recorded | None = None
    raw = store.get(LOG_WITNESS)
    if raw is not None:
        try:
            best = Recorded(open_checkpoint(raw, verifier), f"{store.url}/{LOG_WITNESS}", raw)
        except ValueError as exc:
            raise IntegrityError(f"{store.url}/{LOG_WITNESS}: {exc}") from None
    if manifests:
        for key in iter_unsorted(store, RUNS):
            if not is_run_manifest(key):
                continue
            try:
                doc = loads(store.get(key) or b"null")
                logged = doc.get("log") if isinstance(doc, dict) else None
                if not isinstance(logged, dict):
                    continue
                size = int(logged["size"])
                root = base64.b64decode(str(logged["root_hash_b64"]), validate=True)
            except (ValueError, TypeError, KeyError):
                continue  # not a record of a checkpoint
            if size == 0:
                continue  # a run that appended to an empty log nothing: no checkpoint was signed
            if best is None or size > best.checkpoint.size:
                best = Recorded(Checkpoint(str(logged.get("origin", "")), size, root), f"{store.url}/{key}")
    return best


def rebuild_command(store: Store) -> str:
    """The command that recovers a lost or rolled-back log of `store`."""
    return f"`pith-pipeline log rebuild --store {store.url} --log-signer KEY`"


def lost_log_problem(store: Store, cp: Checkpoint | None, rec: Recorded | None) -> str | None:
    """One line when the store's log is missing, older than or inconsistent with the
    newest checkpoint the store recorded (`rec`); None when it extends it."""
    if rec is None:
        return None
    where = f"{store.url.rstrip('/')}/{LOG_PREFIX.rstrip('/')}"
    recovery = (
        f"appending would sign a fork; run {rebuild_command(store)} (it signs only a tree "
        "that extends the recorded checkpoint) or restore log/ from a backup"
    )
    if cp is None:
        return (
            f"{where}/{CHECKPOINT} is missing, but {rec.where} records a checkpoint of this log "
            f"(size {rec.checkpoint.size}): the log was lost; {recovery}"
        )
    try:
        refuse_fork(TileReader(store_fetch(store), cp.size, where), cp, rec.checkpoint, where)
    except ForkError as exc:
        return f"{exc} (recorded at {rec.where}); {recovery}"
    return None


def kept_checkpoint(store: Store, verifier: Verifier, cp: Checkpoint | None) -> Checkpoint | None:
    """The newest recorded checkpoint, which the next append must extend; IntegrityError
    (one line, naming the recovery) when the current log does not extend it."""
    rec = newest_recorded(store, verifier, manifests=cp is None)
    problem = lost_log_problem(store, cp, rec)
    if problem is not None:
        raise IntegrityError(problem)
    return rec.checkpoint if rec else None


def recorded_unverified(store: Store) -> Recorded | None:
    """`newest_recorded` for a run without the log key: checked with the key the key
    document names when it names one."""
    try:
        verifier = store_verifier(store)
    except IntegrityError:
        if store.exists(LOG_WITNESS):
            return Recorded(Checkpoint("", 0, merkle.EMPTY_ROOT), f"{store.url}/{LOG_WITNESS}")
        return None
    return newest_recorded(store, verifier, manifests=True)


def has_had_log(store: Store) -> bool:
    """Whether the store keeps, or has kept, a log: a checkpoint, a witness, or a key
    document naming a log key (what `verify STORE` must then check)."""
    if store.exists(LOG_PREFIX + CHECKPOINT) or store.exists(LOG_WITNESS):
        return True
    return bool(key_document(store).get("log"))
