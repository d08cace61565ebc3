"""A reader's side: open a log by URL or store, find an event, prove it.

Why by event id: a bundle holder knows its events' ids, not their positions in the
log; the lookup (`log/index/`) gives the position and the inclusion proof, checked
against the signed checkpoint, decides. Nothing unsigned is believed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pith_pipeline.core.canonical_json import loads
from pith_pipeline.errors import IntegrityError
from pith_pipeline.storage.factory import open_existing_store, open_store
from pith_pipeline.tlog import merkle
from pith_pipeline.tlog.entry import entry_event_hex
from pith_pipeline.tlog.log import CHECKPOINT, LOG_PREFIX, Fetch, TileReader, http_fetch, store_fetch
from pith_pipeline.tlog.note import Checkpoint, Verifier, open_checkpoint
from pith_pipeline.tlog.pending import PENDING, run_of
from pith_pipeline.tlog.pipeline import (
    KEY_DOCUMENT,
    LOG_WITNESS,
    check_log_matches_event_store,
    has_had_log,
    lookup,
    verifier_from_key_doc,
)


@dataclass(slots=True)
class LogLocation:
    """Where a log is read from: `fetch` under its prefix, and its registry's key document."""

    fetch: Fetch
    where: str
    key_doc: Callable[[], bytes | None]
    #: the run ids of the store's pending markers (`tlog.pending`); None over HTTP
    pending_runs: Callable[[], list[str]] | None = None
    #: an object of the registry beside the log, by its store key (`events/...`): what
    #: a hash-committed entry names; None when absent
    objects: Callable[[str], bytes | None] | None = None

    @classmethod
    def open(cls, location: str) -> LogLocation:
        """`https://host/log` (the log prefix; the key document is beside it, at
        `https://host/pith-signing-key.json`) or a store (directory, s3://)."""
        if location.startswith(("http://", "https://")):
            base = location.rstrip("/")
            parent = base.rsplit("/", 1)[0]
            beside = http_fetch(parent)
            return cls(http_fetch(base), base, lambda: beside(KEY_DOCUMENT), objects=beside)
        store = open_existing_store(location)  # a log to read: a missing store is an error
        return cls(
            store_fetch(store),
            f"{store.url.rstrip('/')}/{LOG_PREFIX.rstrip('/')}",
            lambda: store.get(KEY_DOCUMENT),
            lambda: sorted({run_of(k) for k in store.list(PENDING)}),
            store.get,
        )

    def verifier(self, vkey: str | None = None) -> Verifier:
        """The pinned key `vkey` (the `log_vkey` setting: --vkey, `PITH_LOG_VKEY`), else
        the one the registry names."""
        if vkey:
            try:
                return Verifier.parse(vkey)
            except ValueError as exc:
                raise IntegrityError(f"log verifier key: {exc}") from None
        return verifier_from_key_doc(self.key_doc(), f"{self.where}/../{KEY_DOCUMENT}")

    def checkpoint(self, verifier: Verifier) -> tuple[Checkpoint, bytes]:
        raw = self.fetch(CHECKPOINT)
        if raw is None:
            raise IntegrityError(f"{self.where}/{CHECKPOINT} is missing: no log here")
        try:
            return open_checkpoint(raw, verifier), raw
        except ValueError as exc:
            raise IntegrityError(f"{self.where}/{CHECKPOINT}: {exc}") from None


def _b64(h: bytes) -> str:
    import base64

    return base64.b64encode(h).decode()


def prove_event(loc: LogLocation, reader: TileReader, cp: Checkpoint, event_id: str) -> dict[str, Any]:
    """An inclusion proof for one event id (`sha256:<hex>` or hex), checked here
    before it is returned; IntegrityError naming the event when it is not logged."""
    hex_id = event_id.removeprefix("sha256:")
    idx = lookup(loc.fetch, hex_id, cp.size)
    if idx is None:
        raise IntegrityError(f"event sha256:{hex_id} is not in the log {loc.where} (size {cp.size})")
    entry = reader.entries(idx // 256)[idx % 256]
    logged = entry_event_hex(entry)
    logged_id = None if logged is None else "sha256:" + logged
    if logged_id != "sha256:" + hex_id:
        raise IntegrityError(f"event sha256:{hex_id}: log entry {idx} is another event ({logged_id})")
    leaf = merkle.leaf_hash(entry)
    proof = reader.inclusion_proof(idx)
    if not merkle.verify_inclusion(idx, cp.size, leaf, proof, cp.root):
        raise IntegrityError(f"event sha256:{hex_id}: the inclusion proof for entry {idx} does not check")
    return {
        "event_id": "sha256:" + hex_id,
        "leaf_index": idx,
        "leaf_hash_b64": _b64(leaf),
        "tree_size": cp.size,
        "root_hash_b64": cp.root_b64,
        "proof_b64": [_b64(h) for h in proof],
    }


def bundle_event_ids(path: Path) -> tuple[str, list[str]]:
    """(pith number, event ids) of a bundle file."""
    try:
        bundle = loads(path.read_bytes())
        ids = [str(e["event_id"]) for e in bundle["events"]]
        return str(bundle.get("pith_number", "")), ids
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise IntegrityError(f"{path}: unreadable bundle ({type(exc).__name__})") from None


def verify_with_log(
    paths: Iterable[str], files: Iterable[Path], log: str | None, vkey: str | None = None
) -> list[str]:
    """`verify ... --log URL|STORE`: one line per problem, [] when all is logged.

    `vkey`: the log's verifier key to pin (the `log_vkey` setting), else the one the
    registry's key document names.

    Every event of every bundle in `files` must be in the log given (`log`). Every
    store among `paths` that keeps a log, or kept one (`has_had_log`: a lost `log/` is
    named, not taken for a store without a log), must hold exactly its event store's
    events in it (checked even without `--log`).
    """
    problems: list[str] = []
    for p in paths:
        if p.startswith("s3://"):  # a bucket that keeps (or kept) a log: the same check
            st = open_store(p)
            if has_had_log(st):
                problems += [f"log: {x}" for x in check_log_matches_event_store(st)]
        elif Path(p).is_dir() and (
            Path(p, LOG_PREFIX, CHECKPOINT).is_file()
            or Path(p, KEY_DOCUMENT).is_file()
            or Path(p, LOG_WITNESS).is_file()
        ):
            # lazy: storage.local adds 14 ms to `log status URL`, which reads no directory
            from pith_pipeline.storage.local import LocalStore

            st = LocalStore(p)
            if has_had_log(st):  # a lost log/ is a problem, not a store without a log
                problems += [f"log: {x}" for x in check_log_matches_event_store(st)]
    if log is None:
        return problems
    try:
        loc = LogLocation.open(log)
        cp, _raw = loc.checkpoint(loc.verifier(vkey))
    except IntegrityError as exc:
        return [*problems, f"log: {exc}"]
    reader = TileReader(loc.fetch, cp.size, loc.where)
    for f in files:
        try:
            subject, ids = bundle_event_ids(f)
            for event_id in ids:
                try:
                    prove_event(loc, reader, cp, event_id)
                except IntegrityError as exc:
                    problems.append(f"log: {f} ({subject}): {exc}")
        except IntegrityError as exc:
            problems.append(f"log: {exc}")
    return problems
