"""The pipeline's side of the log: which events go in, in which order, and checks.

- An entry is the RFC 8785 canonical JSON of a stored event, signature included,
  so the log alone is enough to recompute every `event_id` and check every
  signature. Re-signed copies (`<sha256>.sig-<key>.json`, after a key rotation) are
  the same event and are not logged again.
- A run appends the events it published, ordered by (`created_at`, `event_id`), at
  its end (`log_run`, called where the run manifest is written), under the store's
  `log` writer lease.
- Before that it compares the number of events in the event store with the log:
  when a run died after publishing events but before appending them, the next run
  finds the difference and appends the missing events too (`sync_log`).
- `log/index/<first 2 hex of event id>` maps event ids to leaf indexes. It is a
  lookup aid a static log needs (a client holding a bundle knows its event ids, not
  their positions); it is unsigned, a hint only: an event counts as logged only
  when the entry at that index is inside the signed tree (an inclusion proof) and
  hashes to the event (`_Hints`), so a wrong or stale line (one a killed append
  left past the checkpoint) can only make a check fail, never pass. A whole-store
  comparison (`log sync`, a dead run's marker) reads the entries themselves and
  writes every lookup object that differs from them again (a lost one too).
- `runs/log-checkpoint` (`LOG_WITNESS`) is a copy of the newest checkpoint the log
  signed, written after each append, outside `log/`: with the run manifests (each
  records its checkpoint) it lets runs, `log sync` and `verify STORE` notice a lost
  or rolled-back log, and the writer never appends onto a tree that does not
  extend it (that would sign a fork).
"""

from __future__ import annotations

import base64
import hashlib
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn, Protocol

from pith_pipeline._internal.disk_backed import SpillList
from pith_pipeline.config import env_name, from_env
from pith_pipeline.core.canonical_json import dumps, dumps_pretty, dumps_trusted, loads
from pith_pipeline.core.events import content_sha256
from pith_pipeline.core.keys import PublicKey, verify_signature
from pith_pipeline.core.layout import EVENT_OBJECT, EVENTS, PUBLIC_KEY_FILE, RUNS, is_run_manifest
from pith_pipeline.errors import IntegrityError, KeyFileError, TerminalError
from pith_pipeline.storage.base import Store, barrier, iter_unsorted
from pith_pipeline.tlog import merkle
from pith_pipeline.tlog.entry import Committed, entry_event_hex, log_entry, parse_committed
from pith_pipeline.tlog.log import (
    CHECKPOINT,
    LOG_PREFIX,
    AppendResult,
    Fetch,
    ForkError,
    LogSigner,
    TileReader,
    append_entries,
    read_checkpoint,
    refuse_fork,
    store_fetch,
)
from pith_pipeline.tlog.note import Checkpoint, Verifier, open_checkpoint
from pith_pipeline.tlog.pending import judge, settle
from pith_pipeline.tlog.tiles import TILE_WIDTH

LOG_LEASE = "log"  # storage.lease.LOG_LEASE
LOG_SIGNER_ENV = env_name("log_signer")
LOG_ORIGIN_ENV = env_name("log_origin")
KEY_DOCUMENT = PUBLIC_KEY_FILE
INDEX_DIR = "index/"
# 256 lookup objects: a run rewrites at most 256 of them, whatever its size; each is
# about 570 KB (uncompressed) at 2,000,000 entries
INDEX_HEX = 2
APPENDED = "appended.json"
#: the newest checkpoint the log signed, kept outside log/ (see the module docstring)
LOG_WITNESS = RUNS + "log-checkpoint"


class LogNotConfiguredError(TerminalError):
    """The store keeps a log but this run was given no log key."""


def event_key_id(key: str) -> str | None:
    """The event id (hex) of an event store key, None for anything else (re-signed copies).

    The key's whole form, by the layout's one rule (`fullmatch`, ASCII classes): keys
    can be planted by anyone who can write the store, and a copy of an event under a
    look-alike name (a trailing newline, a subject that is no Pith number's body) must
    not become a second log entry."""
    m = EVENT_OBJECT.fullmatch(key)
    return m.group(2) if m and m.group(3) is None else None


def event_entry(data: bytes, where: str, written_sha256: str | None = None) -> tuple[bytes, str, str]:
    """(entry, event id hex, created_at) of a stored event; IntegrityError naming
    `where` when it does not parse or its id is not its content's hash.

    `written_sha256`: the SHA-256 of the bytes this run wrote under the key (its
    ledger). When the stored bytes still have it, they are the event the run built
    (its values the builder's: no floats, nothing canonical JSON refuses), so the
    entry and the id's hash are serialised without re-checking every value (that
    check was most of an append's CPU); the id must still recompute. Anything else
    (an event of another run, bytes changed since) is checked in full.
    """
    if written_sha256 is not None and hashlib.sha256(data).hexdigest() == written_sha256:
        try:
            ev = loads(data)
            created, digest = ev.get("created_at"), content_sha256(ev, trusted=True)
            # the id recomputes from the fast serialisation: had it differed from the
            # canonical one anywhere in the content, the hash would not match
            if (
                isinstance(created, str)
                and ev.get("content_sha256") == digest
                and ev.get("event_id") == "sha256:" + digest
            ):
                return dumps_trusted(ev), digest, created
        except (ValueError, TypeError, AttributeError):
            pass  # not what the builder makes: the full check names it
    try:
        ev = loads(data)
        if not isinstance(ev, dict):
            raise ValueError("not a JSON object")
        digest = content_sha256(ev)
        if ev.get("content_sha256") != digest or ev.get("event_id") != "sha256:" + digest:
            raise ValueError("its event_id is not the hash of its content")
        created = ev.get("created_at")
        if not isinstance(created, str):
            raise ValueError("created_at missing")
        return dumps(ev), digest, created
    except (ValueError, TypeError) as exc:
        raise IntegrityError(f"not logged: {exc}", key=where) from None


def logged_form(canonical: bytes, hex_id: str, key: str, where: str) -> bytes:
    """The log entry of an event (`entry.log_entry`: inline, or hash-committed when
    larger than a bundle entry holds); IntegrityError naming the event otherwise."""
    try:
        return log_entry(canonical, hex_id, key)
    except ValueError as exc:
        raise IntegrityError(
            f"not logged: {_event_name(canonical, hex_id)}: {exc}", key=f"{where}/{key}"
        ) from None


def _event_name(canonical: bytes, hex_id: str) -> str:
    """`<kind> event sha256:<id> of <pith number>` for an error message (what the
    event says of itself, as far as it parses)."""
    try:
        ev = loads(canonical)
        kind = str(ev.get("event_type") or "an")
        subject = str(ev.get("subject_pith_number") or "")
    except (ValueError, TypeError, AttributeError):
        kind, subject = "an", ""
    return f"{kind} event sha256:{hex_id}" + (f" of {subject}" if subject else "")


def committed_problem(c: Committed, get: Callable[[str], bytes | None]) -> str | None:
    """Why the event stored at a committed entry's key is not the one it commits to
    (None when it is: same canonical length and SHA-256, and its id recomputes)."""
    data = get(c.event_key)
    if data is None:
        return f"commits to {c.event_key}, which is missing"
    try:
        canonical, hex_id, _ = event_entry(data, c.event_key)
    except IntegrityError as exc:
        return f"commits to {c.event_key}: {exc}"
    if hex_id != c.event_hex or not c.matches(canonical):
        return f"commits to other bytes than the event at {c.event_key}"
    return None


def entry_problem(
    entry: bytes, keys: Mapping[str, PublicKey], get: Callable[[str], bytes | None] | None = None
) -> str | None:
    """Why a log entry is not a valid, signed, canonical event (None when it is).

    A hash-committed entry (`tlog.entry`) is checked against the event stored at its
    key, read with `get` (a store-relative reader; without one it cannot be checked),
    and that event is then checked as an inline entry would be."""
    c = parse_committed(entry)
    if c is not None:
        if get is None:
            return f"a committed entry for {c.event_key}, and no event store to check it against"
        bad = committed_problem(c, get)
        if bad is not None:
            return bad
        data = get(c.event_key)
        assert data is not None
        return entry_problem(dumps(loads(data)), keys)
    try:
        ev = loads(entry)
        if not isinstance(ev, dict):
            return "not a JSON object"
        if dumps(ev) != entry:
            return "not canonical JSON (RFC 8785)"
        digest = content_sha256(ev)
    except (ValueError, TypeError) as exc:
        return f"unreadable ({type(exc).__name__})"
    if ev.get("content_sha256") != digest:
        return "content_sha256 is not the hash of its content"
    if ev.get("event_id") != "sha256:" + digest:
        return "event_id is not sha256:<content_sha256>"
    sig = ev.get("signature")
    if not isinstance(sig, dict):
        return "unsigned"
    key = keys.get(str(sig.get("key_id")))
    if key is None:
        return f"signed by {sig.get('key_id')!r}, a key the registry's key document does not list"
    if not verify_signature(key.public_key, digest, str(sig.get("signature_b64"))):
        return f"signature by {key.key_id} does not verify"
    return None


# -- the log key ---------------------------------------------------------


def default_origin(key_document_url: str) -> str:
    """`<host>/log` from the key document's URL (`https://host/pith-signing-key.json`)."""
    base = key_document_url.split("://", 1)[-1].rsplit("/", 1)[0] if key_document_url else ""
    if not base:
        raise LogNotConfiguredError(
            f"cannot name the log: set {LOG_ORIGIN_ENV} (e.g. pith.example.org/log) or --base-url"
        )
    return f"{base.rstrip('/')}/log"


def key_document(store: Store) -> dict[str, Any]:
    """The store's key document as a dict ({} when it is missing or not an object)."""
    raw = store.get(KEY_DOCUMENT)
    doc = loads(raw) if raw else {}
    return doc if isinstance(doc, dict) else {}


def open_log_signer(spec: str, store: Store, origin: str | None = None, *, key_url: str = "") -> LogSigner:
    """The log's signer from a signer spec; the origin from, in order: `origin`,
    `PITH_LOG_ORIGIN`, the one the store's key document already names, its URL, and
    `key_url` (where the key document will be served: a new store has none yet).

    A log key file inside a local store is refused here, the one place every command
    opens a log key: like the signing key, it would be served with the bundles."""
    from pith_pipeline.signing import guard
    from pith_pipeline.signing.factory import open_signer

    guard.refuse_key_spec_inside_store(spec, store)  # before anything else is asked of the store
    doc = key_document(store)
    listed = doc.get("log") if isinstance(doc.get("log"), dict) else None
    origin = (
        origin
        or from_env("log_origin")
        or (str(listed["origin"]) if listed and listed.get("origin") else None)
        or default_origin(str(doc.get("url", "")) or key_url)
    )
    signer = open_signer(spec)
    guard.refuse_key_inside_store(signer, store)
    return LogSigner.from_signer(signer, origin)


def log_from_env(store: Store) -> LogSigner | None:
    spec = from_env("log_signer")
    return open_log_signer(spec, store) if spec else None


def log_key_member(log: LogSigner) -> dict[str, Any]:
    return {
        "origin": log.origin,
        "vkey": log.verifier.vkey,
        "algorithm": "ed25519",
        "public_key_b64": base64.b64encode(log.public_key).decode(),
        "notes": (
            "Key of this registry's transparency log (C2SP tlog-tiles under log/). "
            "Pin the vkey; verify checkpoints with any signed-note client."
        ),
    }


def publish_log_key(store: Store, log: LogSigner) -> None:
    """Name the log key in `pith-signing-key.json` (member `log`), by compare-and-swap;
    a different log key already named there is refused: a log keeps its key."""
    member = log_key_member(log)
    for _attempt in range(50):
        got = store.get_tagged(KEY_DOCUMENT)
        doc = loads(got[0]) if got else {}
        if not isinstance(doc, dict):
            raise IntegrityError("not a JSON object", key=KEY_DOCUMENT)
        have = doc.get("log")
        if isinstance(have, dict) and have.get("vkey") == member["vkey"]:
            return
        if isinstance(have, dict) and have.get("vkey"):
            raise KeyFileError(
                f"this store's log is signed by {have.get('vkey')}; the log key given "
                f"({member['vkey']}) is another one (a log keeps its key)"
            )
        doc["log"] = member
        if store.put_if_match(KEY_DOCUMENT, dumps_pretty(doc) + b"\n", got[1] if got else None):
            return
    raise IntegrityError("kept changing under concurrent writers; run again", key=KEY_DOCUMENT)


def store_verifier(store: Store) -> Verifier:
    """The log's verifier key as the store's key document names it."""
    return verifier_from_key_doc(store.get(KEY_DOCUMENT), f"{store.url}/{KEY_DOCUMENT}")


#: What to do about a store that keeps no transparency log (one line, every command).
START_A_LOG = (
    "start one with `pith-pipeline log rebuild --store S --log-signer K` (K: the log's own "
    "key; a file: key that is missing is made; runs find file:DIR/pith-log-private-key.json "
    "beside the registry key DIR/pith-private-key.json without being told; see "
    "docs/pages/transparency-log.md)"
)


def verifier_from_key_doc(raw: bytes | None, where: str) -> Verifier:
    """The log's verifier key the key document names; `IntegrityError` in one line.

    A key document without a `log` member is the common case of a store that keeps no
    log: said so, with how to start one (it was a raw `KeyError` text: `'log'`).
    """
    if raw is None:
        raise IntegrityError(f"{where}: missing: no key document here, so no log key (is this a Pith store?)")
    try:
        doc = loads(raw)
    except ValueError as exc:
        raise IntegrityError(f"{where}: {exc}") from None
    if isinstance(doc, dict) and "log" not in doc:
        raise IntegrityError(
            f"{where}: names no log key: this store keeps no transparency log; {START_A_LOG}"
        )
    member = doc.get("log") if isinstance(doc, dict) else None
    vkey = member.get("vkey") if isinstance(member, dict) else None
    if not isinstance(vkey, str):
        raise IntegrityError(f"{where}: it names no log key (member log.vkey)")
    try:
        return Verifier.parse(vkey)
    except (ValueError, TypeError, KeyError) as exc:
        raise IntegrityError(f"{where}: {exc}") from None


# -- the event id lookup -------------------------------------------------


def index_path(event_hex: str) -> str:
    return f"{INDEX_DIR}{event_hex[:INDEX_HEX]}"


def parse_index(data: bytes | None, size: int) -> dict[str, int]:
    """event id hex -> leaf index, for leaves inside a tree of `size` (lines past it
    are left by an append that did not finish, and do not count)."""
    out: dict[str, int] = {}
    for line in (data or b"").decode("ascii", "replace").splitlines():
        hex_id, _, idx = line.partition(" ")
        if idx.isdigit() and int(idx) < size:
            out[hex_id] = int(idx)
    return out


def lookup(fetch: Fetch, event_hex: str, size: int) -> int | None:
    return parse_index(fetch(index_path(event_hex)), size).get(event_hex)


# -- a lost or rolled-back log ---------------------------------------------


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


def _rebuild_command(store: Store) -> str:
    return f"`pith-pipeline log rebuild --store {store.url} --log-signer KEY`"


def lost_log_problem(store: Store, cp: Checkpoint | None, rec: Recorded | None) -> str | None:
    """One line when the store's log is missing, older than or inconsistent with the
    newest checkpoint the store recorded (`rec`); None when it extends it."""
    if rec is None:
        return None
    where = f"{store.url.rstrip('/')}/{LOG_PREFIX.rstrip('/')}"
    recovery = (
        f"appending would sign a fork; run {_rebuild_command(store)} (it signs only a tree "
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
    return checkpoint.split(b"\n", 1)[0].decode() if checkpoint else ""


# -- appending -----------------------------------------------------------


def _order(store: Store, keys: Iterable[str], problems: list[str]) -> Iterator[str]:
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

    def write_index(old_size: int, size: int) -> None:
        # grouped by lookup object: sort the new ids with their leaf indexes
        rows = SpillList(f"{h} {old_size + i}" for i, h in enumerate(new_ids))

        def batches() -> Iterator[list[str]]:
            batch: list[str] = []
            for row in rows.iter_sorted():
                if batch and batch[0][:INDEX_HEX] != row[:INDEX_HEX]:
                    yield batch
                    batch = []
                batch.append(row)
            if batch:
                yield batch

        limit = _index_concurrency(store)
        reserve = getattr(store, "reserve_connections", None)
        if limit > 1 and reserve is not None:
            reserve(limit + 2)  # S3: a connection each, without the pool's warnings
        _in_flight(lambda b: _write_index_object(store, b, old_size), batches(), limit)

    result = append_entries(store, log, entries, before_checkpoint=write_index, extends=extends)
    if result.appended:
        # the checkpoint is durable before the witness that claims it: a witness that
        # outlived its checkpoint in a power loss would read as a rolled-back log
        barrier(store)
        store.put(LOG_WITNESS, result.checkpoint, content_type="text/plain; charset=utf-8")
        store.put(LOG_PREFIX + APPENDED, dumps_pretty(_appended_doc(result)) + b"\n")
    return result


def _appended_doc(result: AppendResult) -> dict[str, Any]:
    from pith_pipeline.clock import system_clock
    from pith_pipeline.core.timeutil import iso_seconds

    return {
        "size": result.size,
        "root_hash_b64": result.root_b64,
        "appended_at": iso_seconds(system_clock()),
        "note": "unsigned; when the writer says it appended. The checkpoint is what counts.",
    }


#: lookup objects read and rewritten at once on S3, where each is a GET and a PUT
#: of its own (up to 256 per append): one at a time they were most of a small run's
#: time behind a distant region (docs/pages/performance.md)
INDEX_S3_CONCURRENCY = 32


def _index_concurrency(store: Store) -> int:
    """Lookup objects written at once: many on S3, one for a directory (its writes
    are local and its group commit is per process)."""
    return INDEX_S3_CONCURRENCY if store.url.startswith("s3://") else 1


def _in_flight(work: Callable[[list[str]], None], items: Iterable[list[str]], limit: int) -> None:
    """`work(item)` for every item, at most `limit` at once, each item taken from
    `items` only when a slot is free (so at most `limit` batches are held); the first
    error is raised once the ones in flight have finished, and no new one starts."""
    if limit <= 1:
        for item in items:
            work(item)
        return
    from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait

    with ThreadPoolExecutor(limit, thread_name_prefix="pith-log-index") as pool:
        running: set[Future[None]] = set()
        for item in items:
            if len(running) >= limit:
                done, running = wait(running, return_when=FIRST_COMPLETED)
                for f in done:
                    f.result()
            running.add(pool.submit(work, item))
        done, _ = wait(running)
        for f in done:
            f.result()


def _write_index_object(store: Store, rows: list[str], old_size: int) -> None:
    key = LOG_PREFIX + index_path(rows[0])
    kept = parse_index(store.get(key), old_size)
    for row in rows:
        hex_id, _, idx = row.partition(" ")
        kept[hex_id] = int(idx)
    body = "".join(f"{h} {i}\n" for h, i in sorted(kept.items()))
    store.put(key, body.encode("ascii"), content_type="text/plain; charset=utf-8")


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
        from pith_pipeline.storage.lease import writer_lease

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
        logged = _logged(store, wanted, _Hints(store, cp))
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
            missing = _not_in_entries(store, wanted, _entry_ids(store, cp))
        else:
            missing = _not_logged(store, wanted, _Hints(store, cp))
        written = event_keys if isinstance(event_keys, Mapping) else None
        result = _append_keys(store, log, _order(store, missing, problems), problems, written, kept)
    return LogRun(result, problems)


def current_checkpoint(store: Store, verifier: Verifier) -> Checkpoint | None:
    """The store's signed checkpoint, verified with `verifier` (None: the log has none)."""
    return read_checkpoint(store_fetch(store), verifier, f"{store.url}/{LOG_PREFIX.rstrip('/')}")


class IdFilter:
    """A set of event ids held as their first 64 bits, sorted (8 bytes an id, where a
    set of the hex strings takes about 120): a run of two million events asks "is this
    id one of them?" without holding two million strings.

    `in` has no false negatives; a false positive needs two of the ids to share their
    first 64 bits (about one in 10^7 for 2 M against 2 M), so callers use it where a
    positive is then confirmed on the full id (`_logged`), or only to skip re-reading
    an event the run's entries already appended (`sync_log`).
    """

    def __init__(self, hex_ids: Iterable[str]) -> None:
        from array import array

        prefixes = array("Q")
        shards: set[str] = set()
        for h in hex_ids:
            prefixes.append(int(h[:16], 16))
            shards.add(h[:INDEX_HEX])
        self._sorted = array("Q", sorted(prefixes))
        self.shards = frozenset(shards)

    def __len__(self) -> int:
        return len(self._sorted)

    def __contains__(self, hex_id: object) -> bool:
        from bisect import bisect_left

        if not isinstance(hex_id, str) or len(hex_id) < 16:
            return False
        p = int(hex_id[:16], 16)
        i = bisect_left(self._sorted, p)
        return i < len(self._sorted) and self._sorted[i] == p


class _Hints:
    """Lookup lines checked against the signed tree.

    A line `<id> <index>` counts only when the index is inside the checkpoint's tree,
    the entry there is proven included (an inclusion proof to the signed root), and
    that entry is the event (its content hashes to the id). Why: lines are written
    before the checkpoint moves, so an append killed in between leaves lines past
    the checkpoint in objects no later append rewrites; once the tree grows past
    their indexes they point at other events. Only lines that claim an event is
    logged are checked (a run's new events cost nothing); entry bundles are cached.
    """

    def __init__(self, store: Store, cp: Checkpoint | None) -> None:
        self.store = store
        self.cp = cp
        self.size = cp.size if cp else 0
        where = f"{store.url.rstrip('/')}/{LOG_PREFIX.rstrip('/')}"
        self._reader = TileReader(store_fetch(store), self.size, where)
        self._bundles: dict[int, list[bytes]] = {}
        self._entries: dict[str, int] | None = None

    def read(self, shard: str) -> dict[str, int]:
        """The lines of one lookup object inside the tree (still to be confirmed).

        A missing object is not taken for "none of these ids is logged": a lost one
        would make the run append its stored events again. The ids are then read from
        the tree's entries themselves (once per append; on a small log a shard no
        event falls in yet is missing too, and a small log is cheap to read)."""
        if self.size == 0:
            return {}
        data = self.store.get(LOG_PREFIX + INDEX_DIR + shard)
        if data is None:
            return {h: i for h, i in self._from_entries().items() if h[:INDEX_HEX] == shard}
        return parse_index(data, self.size)

    def _from_entries(self) -> dict[str, int]:
        if self._entries is None:
            self._entries = {}
            for idx, entry in iter_entries(self._reader):
                hex_id = entry_event_hex(entry)
                if hex_id is not None:
                    self._entries.setdefault(hex_id, idx)
        return self._entries

    def holds(self, hex_id: str, idx: int) -> bool:
        if self.cp is None or not 0 <= idx < self.size:
            return False
        b = idx // TILE_WIDTH
        bundle = self._bundles.get(b)
        if bundle is None:
            if len(self._bundles) >= 64:
                self._bundles.clear()
            bundle = self._bundles[b] = self._reader.entries(b)
        if idx % TILE_WIDTH >= len(bundle):
            return False
        entry = bundle[idx % TILE_WIDTH]
        proof = self._reader.inclusion_proof(idx)
        if not merkle.verify_inclusion(idx, self.size, merkle.leaf_hash(entry), proof, self.cp.root):
            return False
        c = parse_committed(entry)
        if c is not None:  # the stored event is the one committed to
            return c.event_hex == hex_id and committed_problem(c, self.store.get) is None
        try:
            ev = loads(entry)
            return isinstance(ev, dict) and content_sha256(ev) == hex_id == str(
                ev.get("event_id", "")
            ).removeprefix("sha256:")
        except (ValueError, TypeError):
            return False


def _logged(store: Store, wanted: IdFilter, hints: _Hints) -> set[str]:
    """Which of the `wanted` event ids are in the tree (exact: full ids whose lookup
    line the entry confirms; one lookup object at a time)."""
    out: set[str] = set()
    if hints.size == 0:
        return out  # an empty log holds none of them
    for shard in sorted(wanted.shards):
        known = hints.read(shard)
        out.update(h for h, i in known.items() if h in wanted and hints.holds(h, i))
    return out


def _entry_ids(store: Store, cp: Checkpoint) -> SpillList:
    """`<event id hex> <leaf index>` of every entry of the tree, sorted (the first
    index of an id logged twice), read from the entries themselves; every lookup
    object that differs from them is written again (a lost one, stale lines)."""
    where = f"{store.url.rstrip('/')}/{LOG_PREFIX.rstrip('/')}"
    reader = TileReader(store_fetch(store), cp.size, where)
    if reader.root() != cp.root:
        raise IntegrityError(f"{where}: the stored tiles do not hash to the checkpoint's root")
    rows = SpillList()
    for idx, entry in iter_entries(reader):
        hex_id = entry_event_hex(entry)
        if hex_id is None:
            continue  # not an event: nothing to look up
        rows.append(f"{hex_id} {idx:020d}")
    out = SpillList()
    batch: dict[str, int] = {}
    for row in rows.iter_sorted():
        hex_id, _, padded = row.partition(" ")
        if batch and next(iter(batch))[:INDEX_HEX] != hex_id[:INDEX_HEX]:
            _repair_index_object(store, batch, cp.size)
            batch = {}
        if hex_id not in batch:
            batch[hex_id] = int(padded)
            out.append(f"{hex_id} {int(padded)}")
    if batch:
        _repair_index_object(store, batch, cp.size)
    return out


def _repair_index_object(store: Store, lines: dict[str, int], size: int) -> None:
    key = LOG_PREFIX + index_path(next(iter(lines)))
    stored = store.get(key)
    if stored != _index_body(lines):
        store.put(key, _index_body(lines), content_type="text/plain; charset=utf-8")


def _index_body(lines: Mapping[str, int]) -> bytes:
    return "".join(f"{h} {i}\n" for h, i in sorted(lines.items())).encode("ascii")


def _not_in_entries(store: Store, keys: Iterable[str], logged: SpillList) -> Iterator[str]:
    """The keys among `keys` whose event ids are not among `logged` (sorted rows of
    `_entry_ids`): a merge of two sorted streams, nothing held but a row of each."""
    rows = SpillList(f"{h} {k}" for k in keys if (h := event_key_id(k)))
    have = iter(logged.iter_sorted())
    cur = next(have, None)
    for row in rows.iter_sorted(unique=True):
        hex_id, _, key = row.partition(" ")
        while cur is not None and cur.partition(" ")[0] < hex_id:
            cur = next(have, None)
        if cur is None or cur.partition(" ")[0] != hex_id:
            yield key


def _not_logged(store: Store, keys: Iterable[str], hints: _Hints) -> Iterator[str]:
    """The event keys among `keys` whose events the log does not hold (each once,
    except from an empty log, where all of `keys` are).

    Why sorted by lookup object: a whole-store comparison (`log sync`, a dead run's
    marker) may hold millions of keys, almost all logged; going through them in the
    order of their ids holds one lookup object's ids at a time (and reads each
    object once), where a set of every logged id would grow with the store.
    """
    if hints.size == 0:  # an empty log lacks every one of them (`_order` drops repeats)
        yield from keys
        return
    rows = SpillList(f"{h} {k}" for k in keys if (h := event_key_id(k)))
    shard, known = "", dict[str, int]()
    for row in rows.iter_sorted(unique=True):
        hex_id, _, key = row.partition(" ")
        if hex_id[:INDEX_HEX] != shard:
            shard = hex_id[:INDEX_HEX]
            known = hints.read(shard)
        idx = known.get(hex_id)
        if idx is None or not hints.holds(hex_id, idx):
            yield key


def event_store_keys(store: Store) -> Iterator[str]:
    return (k for k in store.list("events/") if event_key_id(k))


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
    log: LogSigner | None = None,
    *,
    entries: EntrySource | None = None,
    pending: Iterable[str] = (),
    run_id: str = "",
) -> LogRun | None:
    """The pipeline's one call at the end of a run (before its run manifest).

    `log` defaults to `PITH_LOG_SIGNER`. Without a log key a store with no log stays
    without one (the run's pending markers are deleted: nothing is owed to a log);
    a store that has a log refuses to finish the run unlogged (the run's events stay
    published, its markers stay, and the next run with the key appends them).
    `pending`, `run_id`: see `sync_log`.
    """
    log = log or log_from_env(store)
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
        problem = lost_log_problem(store, None, _recorded_unverified(store))
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


def _recorded_unverified(store: Store) -> Recorded | None:
    """`newest_recorded` for a run without the log key: checked with the key the key
    document names when it names one."""
    try:
        verifier = store_verifier(store)
    except IntegrityError:
        if store.exists(LOG_WITNESS):
            return Recorded(Checkpoint("", 0, merkle.EMPTY_ROOT), f"{store.url}/{LOG_WITNESS}")
        return None
    return newest_recorded(store, verifier, manifests=True)


def rebuild_log(store: Store, log: LogSigner, *, lease: LogLease = LogLease("log rebuild")) -> LogRun:
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
    for key in _order(store, event_store_keys(store), problems):
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


# -- checking ------------------------------------------------------------


def has_had_log(store: Store) -> bool:
    """Whether the store keeps, or has kept, a log: a checkpoint, a witness, or a key
    document naming a log key (what `verify STORE` must then check)."""
    if store.exists(LOG_PREFIX + CHECKPOINT) or store.exists(LOG_WITNESS):
        return True
    return bool(key_document(store).get("log"))


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
        f"log key appends the store's events (or {_rebuild_command(store)})"
    )


def iter_entries(reader: TileReader, start: int = 0) -> Iterator[tuple[int, bytes]]:
    """(leaf index, entry) from `start` to the tree's end, each bundle checked against
    the tree's hashes first, so an entry that does not match the tree is named."""
    for b in range(start // TILE_WIDTH, (reader.size + TILE_WIDTH - 1) // TILE_WIDTH):
        lo = b * TILE_WIDTH
        hi = min(lo + TILE_WIDTH, reader.size)
        bundle = reader.entries(b)
        if merkle.root_of([merkle.leaf_hash(e) for e in bundle]) != reader.mth(lo, hi):
            bad = next(
                (
                    lo + i
                    for i, e in enumerate(bundle)
                    if merkle.leaf_hash(e) != reader.hashes(0, lo + i, lo + i + 1)[0]
                ),
                lo,
            )
            raise IntegrityError(f"log entry {bad} does not match the tree the checkpoint signs")
        for i, e in enumerate(bundle):
            if lo + i >= start:
                yield lo + i, e


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
        lost = lost_log_problem(store, None, _recorded_unverified(store))
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
