"""Build and publish: records in, events, bundles and states out, through a `Store`.

The event store (`events/<ID>/<content_sha256>.json`) is the source of truth and is
write-once; bundles, states and pointers are derived from it and replaced
atomically. Publishing order per record never exposes a half-written state:
events first, then bundle and state, then the arXiv pointer.
"""

from __future__ import annotations

import contextvars
import itertools
import logging
import re
import secrets
import threading
from collections.abc import Callable, Container, Iterable, Iterator, MutableMapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from pith_pipeline import config
from pith_pipeline._internal.disk_backed import Ledger, SpillList
from pith_pipeline._internal.quarantine_spool import QuarantineSpool
from pith_pipeline.clock import system_clock
from pith_pipeline.core.arxiv_record import ArxivRecord
from pith_pipeline.core.builder import (
    FreshBuilder,
    Identity,
    aliases_from_events,
    build_record_events,
    correction_event,
    sign_bundle,
    snapshot_for,
)
from pith_pipeline.core.bundle import PUBLIC_KEY_FILE, Site, bundle_sha256
from pith_pipeline.core.canonical_json import dumps_compact, dumps_pretty, loads
from pith_pipeline.core.events import BUILDER_VERSION
from pith_pipeline.core.keys import PublicKey, Signer, verify_signature
from pith_pipeline.core.layout import (
    BUNDLES,
    EVENTS,
    WELL_KNOWN,
    bundle_paths,
    certificate_key,
    event_key,
    event_prefix,
    page_key,
    pointer_key,
    quarantine_key,
)
from pith_pipeline.core.pith_record import PithNumber
from pith_pipeline.core.timeutil import Clock, iso_micros, iso_seconds
from pith_pipeline.core.verify import KeyRing
from pith_pipeline.errors import (
    CanonicalJSONError,
    InputError,
    IntegrityError,
    SigningError,
    WriteConflictError,
    is_record_problem,
)
from pith_pipeline.items import Item, Rejected
from pith_pipeline.storage.base import Store, barrier, put_copy
from pith_pipeline.storage.lease import shard_of
from pith_pipeline.tlog.pending import PendingMark

if TYPE_CHECKING:
    from pith_pipeline.audit import SubjectEvents


class LeaseCheck(Protocol):
    """What a publisher needs of a writer lease: to stop once it is lost."""

    def check(self) -> None: ...


DEFAULT_BASE_URL = config.DEFAULT_BASE_URL  # the settings table is the one place for defaults
#: Failed papers named in a run's summary and manifest (the count is always exact).
MAX_PROBLEMS = 1000


_logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class BuildConfig:
    """Registry identity; every field has a default that works for a local store."""

    base_url: str = DEFAULT_BASE_URL
    registry_name: str = config.DEFAULT_REGISTRY_NAME
    signer_id: str = config.DEFAULT_SIGNER_ID
    builder_version: str = BUILDER_VERSION

    @property
    def site(self) -> Site:
        return Site(base_url=self.base_url, registry_name=self.registry_name, signer_id=self.signer_id)

    @classmethod
    def of(cls, settings: config.Settings) -> BuildConfig:
        """The registry identity of a task's (or `pith-pipeline backfill`'s) settings."""
        return cls(
            base_url=settings.base_url, registry_name=settings.registry_name, signer_id=settings.signer_id
        )


@dataclass(slots=True)
class RunSummary:
    """Counts a run reports at its end, and every object it wrote with its sha256."""

    run_id: str
    fetched: int = 0
    built: int = 0
    unchanged: int = 0
    superseded: int = 0
    quarantined: int = 0
    #: papers not published because a stored object of theirs failed its checks
    failed: int = 0
    #: records of shards this run does not own (`--shards`), left to their writer
    skipped: int = 0
    #: one line per failed paper, naming the object (the first MAX_PROBLEMS of them)
    problems: list[str] = field(default_factory=list)
    written: MutableMapping[str, str] = field(default_factory=lambda: Ledger())
    # one entry per paper each: past 100,000 they move to disk (`spill`), so a run's
    # memory does not grow with the number of papers
    pith_numbers: SpillList | list[str] = field(default_factory=SpillList)
    # every subject this run published or found already published (built + unchanged):
    # the index update re-checks them, so a run that died before indexing is healed
    seen: SpillList | list[str] = field(default_factory=SpillList)
    #: the transparency log's pending markers (`tlog.pending`) this run's publishers
    #: wrote; its ledger covers their events, so the run settles them once it logs
    log_pending: list[str] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        out = {
            "fetched": self.fetched,
            "built": self.built,
            "unchanged": self.unchanged,
            "superseded": self.superseded,
            "quarantined": self.quarantined,
        }
        if self.failed:
            out["failed"] = self.failed
        if self.skipped:
            out["skipped"] = self.skipped
        return out

    def line(self) -> str:
        return ", ".join(f"{k} {v}" for k, v in self.counts().items())

    def fail(self, problem: str) -> None:
        """A paper that was not published because a stored object failed its checks."""
        self.failed += 1
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append(problem)

    #: the counters `add` sums (every one `counts` reports, plus `failed` and `skipped`)
    COUNTERS: ClassVar[tuple[str, ...]] = (
        "fetched",
        "built",
        "unchanged",
        "superseded",
        "quarantined",
        "failed",
        "skipped",
    )

    def add(self, other: RunSummary) -> RunSummary:
        """Fold another summary of the same run into this one, and return this one.

        Why one method: a run's parts (a thread's paper, a worker's chunk, an Airflow
        task's staged chunk, a backfill's window) are each counted as a `RunSummary`
        and added up here, so a new counter is added in one place, not in four. The
        named problems stay capped at `MAX_PROBLEMS` while `failed` stays exact.
        """
        for name in self.COUNTERS:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        room = max(0, MAX_PROBLEMS - len(self.problems))
        self.problems.extend(other.problems[:room])
        for key, sha in other.written.items():
            self.written[key] = sha
        self.pith_numbers.extend(other.pith_numbers)
        self.seen.extend(other.seen)
        self.log_pending.extend(other.log_pending)
        return self

    @classmethod
    def part(cls, run_id: str, **counts: int) -> RunSummary:
        """A summary held in plain lists and a dict (a thread's or a worker's share of
        a run: small, picklable, and never spilled to a temporary database)."""
        part = cls(run_id, written={}, pith_numbers=[], seen=[])
        for name, n in counts.items():
            if name not in cls.COUNTERS:
                raise TypeError(f"RunSummary has no counter {name!r}")
            setattr(part, name, n)
        return part

    def to_header(self) -> dict[str, Any]:
        """This summary as the JSON fields of a staged chunk's header.

        Why here: the header is the summary's only serialised form (an Airflow build
        task writes it, the index and manifest tasks read it back with `from_header`),
        so the two directions live beside the fields they cover. Lists are sorted, so
        the same chunk gives the same header on every retry.
        """
        identities = sorted(self.seen)
        return {
            "counts": {"records": len(identities), **self.counts()},
            "identities": identities,
            "built": sorted(self.pith_numbers),
            "problems": list(self.problems),
            "written": dict(sorted(self.written.items())),
            # the run logs these events at its end and settles the markers (`tlog.pending`)
            "log_pending": list(self.log_pending),
        }

    @classmethod
    def from_header(cls, run_id: str, header: dict[str, Any]) -> RunSummary:
        """The part of run `run_id` that a staged header (`to_header`) records.

        A record outside the chunk's shards is counted as fetched by the task that
        owns it, so `skipped` records are not counted as fetched here.
        """
        c = header["counts"]
        part = cls.part(
            run_id,
            fetched=c["fetched"] - c.get("skipped", 0),
            built=c["built"],
            unchanged=c["unchanged"],
            superseded=c["superseded"],
            quarantined=c["quarantined"],
            failed=c.get("failed", 0),
        )
        part.problems.extend(str(p) for p in header.get("problems", []))
        part.pith_numbers.extend(header["built"])
        part.seen.extend(header["identities"])
        part.written.update(header.get("written", {}))
        part.log_pending.extend(header.get("log_pending", []))
        return part


def new_run_id(now: datetime) -> str:
    return f"{now:%Y%m%dT%H%M%SZ}-{secrets.token_hex(3)}"


class Publisher:
    """Publishes records into a store with one signer; one instance per run.

    `lease`: the run's writer lease, checked before every paper and every write, so a
    writer whose lease was lost stops before it writes again. `shards`: publish only papers of
    these shards (others are counted as skipped and left to their writer).
    `rotating`: the signer may be a key the store does not list yet (`keys rotate`,
    `receipts reissue`); otherwise such a signer is refused (`signing.guard`).
    """

    def __init__(
        self,
        store: Store,
        signer: Signer,
        config: BuildConfig | None = None,
        *,
        clock: Clock = system_clock,
        run_id: str | None = None,
        lease: LeaseCheck | None = None,
        shards: frozenset[int] | None = None,
        rotating: bool = False,
        today: Callable[[], date] | None = None,
        io_concurrency: int | None = None,
        on_bundle: Callable[[str, dict[str, Any], str, Any], None] | None = None,
        page_log: tuple[str | None] | None = None,
    ) -> None:
        """`today`: the real date, for refusing records dated after tomorrow; not the
        build clock, which SOURCE_DATE_EPOCH pins to what is written, not to when the
        run happens. `io_concurrency`: papers published at once by `publish` (the
        `Loader`); None: the store's default (`storage.concurrency.default_io_concurrency`).
        `on_bundle(key, bundle, sha256, rows)`: called after each bundle is written
        (`index.RowSink.add_bundle`: its index rows, so the index update need not read
        it back); `rows` are the bundle's index rows where they were made (checked)
        before publishing, else None. `page_log`: what the run's pages name as the
        store's log, as another publisher of the run decided it (`page_log_prefix`: a
        worker process is handed its parent's); None: decided here."""
        from pith_pipeline.storage.concurrency import check_io_concurrency, default_io_concurrency

        self.on_bundle = on_bundle
        self.store = store
        self.signer = signer
        self.config = config or BuildConfig()
        self.site = self.config.site
        self.clock = clock
        self.lease = lease
        self.shards = shards
        self.today = today or _utc_today
        self.io_concurrency = check_io_concurrency(
            io_concurrency if io_concurrency is not None else default_io_concurrency(store)
        )
        # a thread publishing one paper for the `Loader` counts it in a summary of its own
        self._local = threading.local()
        # keys `learn_new` found absent, and the identities it computed on the way
        self._known_lock = threading.Lock()
        self._absent: set[str] = set()
        self._idents: dict[tuple[str, int], Identity] = {}
        self.summary = RunSummary(run_id or new_run_id(clock()))
        # the run's rejects, spilled to disk as they come (`flush_quarantine` stores them)
        self.quarantine = QuarantineSpool()
        self._quarantine_stored = 0
        self.rotating = rotating
        self.keys = self._load_keys()
        self._ring: KeyRing | None = None
        #: subjects whose self-equivocation this run has named (`subject_events`)
        self._equivocations_named: set[str] = set()
        self._ring_marker: tuple[tuple[str, str | None], ...] = ()
        self._signer_checked = False
        self._fresh: dict[tuple[str, ...], FreshBuilder] = {}
        # the index rows checked before a fresh bundle was published, by id(bundle),
        # handed to `on_bundle` when it is written (not made twice)
        self._checked_rows: dict[int, tuple[dict[str, Any], Any]] = {}
        self._last_written: tuple[bytes | None, str] = (None, "")
        self._pending = PendingMark(store)
        #: the log prefix the run's record pages name (`pages.site.run_log_prefix`), once;
        #: decided in the context this publisher was made in, where the command's flags
        #: (`config.given`: `--log-signer`) are seen, not in a loader thread's
        self._page_log = page_log
        self._page_lock = threading.Lock()
        self._page_context = contextvars.copy_context()
        #: the key document's `log` member for this run's log key (`tlog.run_log`):
        #: named with the registry key before the first event, so a store knows it
        #: keeps a log even when its first run dies before appending
        self.log_key: dict[str, Any] | None = None

    @property
    def summary(self) -> RunSummary:
        """The run's summary; inside `publish_counted`, the one paper's."""
        part: RunSummary | None = getattr(self._local, "summary", None)
        return part if part is not None else self._summary

    @summary.setter
    def summary(self, value: RunSummary) -> None:
        self._summary = value

    # -- keys ---------------------------------------------------------------
    def _stored_keys(self, raw: bytes | None) -> dict[str, PublicKey]:
        """The keys the store's key document lists; a damaged document stops the run
        (it decides whose signatures count, so guessing would be unsafe)."""
        keys: dict[str, PublicKey] = {}
        if raw:
            from pith_pipeline.core.keys import read_key_document

            for pk in read_key_document(raw, f"{self.store.url}/{PUBLIC_KEY_FILE}"):
                keys[pk.key_id] = pk
        return keys

    def _load_keys(self) -> dict[str, PublicKey]:
        from pith_pipeline.signing import guard

        guard.refuse_key_inside_store(self.signer, self.store)
        guard.refuse_key_spec_inside_store(config.from_env("log_signer"), self.store)  # used at the end
        keys = self._stored_keys(self.store.get(PUBLIC_KEY_FILE))
        published = self.signer.published_keys(url=self.site.key_url)
        if not self.rotating:
            guard.refuse_unlisted_key(keys.values(), published, self.store.url)
        self.primary_key_id = published[0].key_id  # a certified key's root heads the document
        for current in published:
            if current.key_id in keys and keys[current.key_id].public_key != current.public_key:
                raise InputError(
                    f"key id {current.key_id!r} is already published with a "
                    f"different public key in {PUBLIC_KEY_FILE}; choose a new key id"
                )
            keys.setdefault(current.key_id, current)
        own = keys[self.signer.key_id]
        if own.certificate is None and own.rotates_at and own.rotates_at <= iso_micros(self.clock()):
            raise InputError(
                f"key {own.key_id!r} was rotated at {own.rotates_at} "
                f"({PUBLIC_KEY_FILE}); sign with the current key instead"
            )
        return keys

    def key_document(self) -> dict[str, Any]:
        """The current key (spec section 5) plus every key that signed something here."""
        current = self.keys[self.primary_key_id].to_json()
        return {**current, "keys": [k.to_json() for k in self.keys.values()]}

    def publish_key_document(self) -> None:
        """Publish the key document and the pages' assets: the store-wide objects a run
        writes before its papers (`_publish_key_document`, `publish_assets`)."""
        self._publish_key_document()
        self.publish_assets()

    def publish_assets(self) -> None:
        """The pages' stylesheet and scripts (`assets/<file>`), where their bytes differ
        from the package's (`pages.site.publish_assets`)."""
        from pith_pipeline.pages.site import publish_assets

        self._fence()
        publish_assets(self.store, self._record_write)

    def _publish_key_document(self) -> None:
        """Publish the key document, merged with what another writer published meanwhile.

        Writers of disjoint shards share this one object, so it is a compare-and-swap
        loop: keys another writer added are kept, never overwritten.
        """
        for k in self.keys.values():  # certificates of short-lived keys, beside the document
            if k.certificate is not None:
                self._put_once(certificate_key(k.key_id), dumps_pretty(k.certificate) + b"\n")
        for _attempt in range(50):
            got = self.store.get_tagged(PUBLIC_KEY_FILE)
            for kid, pk in self._stored_keys(got[0] if got else None).items():
                mine = self.keys.get(kid)
                if mine is None or (pk.rotates_at and not mine.rotates_at):
                    self.keys[kid] = pk  # added or rotated by another writer
            doc = self.key_document()
            stored = loads(got[0]) if got is not None else None
            if isinstance(stored, dict) and "log" in stored:  # the transparency log's key (tlog)
                doc["log"] = stored["log"]
            elif self.log_key is not None:
                doc["log"] = self.log_key
            data = dumps_pretty(doc) + b"\n"
            if got is not None and got[0] == data:
                return
            barrier(self.store)  # the certificates it lists are durable before it names them
            if self.store.put_if_match(PUBLIC_KEY_FILE, data, got[1] if got else None):
                self._record_write(PUBLIC_KEY_FILE, data)
                return
        raise IntegrityError("kept changing under concurrent writers; run again", key=PUBLIC_KEY_FILE)

    # -- what the run knows without asking the store ----------------------------
    def learn_new(self, records: Iterable[Item], *, busy: Container[str] = ()) -> int:
        """Learn which of these papers the store has never seen; returns the LIST
        requests it took (0 on a store without `list_after`: papers ask one by one).

        Why: on S3 a new paper would otherwise cost a LIST of `events/<ID>/` and a GET
        of its arXiv pointer before its writes. One listing page (up to 1000 keys
        after a given key) answers for every paper of the batch whose key sorts
        before the page's last key, so a batch of new papers costs a few LISTs, and
        never more than one per paper (`absent_keys`).

        What is learned is "no object under this key": it stays true until this run
        writes there, and every writer of an event or pointer reads it first (and so
        uses it up, `_known_absent`). `busy`: arXiv ids with a record still being
        published; their keys are not learned, as that record may be about to write
        them.
        """
        lister = getattr(self.store, "list_after", None)
        if lister is None:
            return 0
        idents: dict[tuple[str, int], Identity] = {}
        for rec in records:
            if isinstance(rec, Rejected) or rec.id in busy:
                continue
            if self.shards is not None and shard_of(rec.id) not in self.shards:
                continue
            try:
                idents[(rec.id, rec.version)] = Identity.of(rec)
            except Exception:  # a record that cannot be built: publish_item quarantines it
                continue
        pointers = sorted({pointer_key(i.record.id) for i in idents.values()})
        bodies = sorted({event_prefix(i.body) for i in idents.values()})
        absent_pointers, n1 = absent_keys(lister, "arxiv/", pointers)
        absent_bodies, n2 = absent_keys(lister, "events/", bodies)
        with self._known_lock:
            self._idents = idents
            self._absent.update(absent_pointers)
            self._absent.update(absent_bodies)
        n = n1 + n2
        for where in range(2):  # pith/<ID>/, then .well-known/pith/<ID>/ (`_refuse_orphan`)
            prefixes = sorted({_published_prefixes(i.body)[where] for i in idents.values()})
            if not prefixes:
                continue
            absent, pages = absent_keys(lister, (BUNDLES, WELL_KNOWN)[where], prefixes)
            with self._known_lock:
                self._absent.update(absent)
            n += pages
        return n

    def forget_learned(self) -> None:
        """Drop what `learn_new` learned (a loop's end: another may write meanwhile)."""
        with self._known_lock:
            self._absent.clear()
            self._idents = {}

    def _known_absent(self, key: str) -> bool:
        """True once if `learn_new` found nothing under `key` (used up by the reader)."""
        if not self._absent:
            return False
        with self._known_lock:
            if key in self._absent:
                self._absent.discard(key)
                return True
        return False

    def _identity(self, rec: ArxivRecord) -> Identity:
        known = self._idents.get((rec.id, rec.version))
        return known if known is not None and known.record is rec else Identity.of(rec)

    # -- writes ----------------------------------------------------------
    def _put(self, key: str, data: bytes, *, changed: bool = False, content_type: str | None = None) -> None:
        """Replace a derived object only when its bytes change. `changed`: the caller
        knows they do (a new paper's bundle, a pointer that gains a record), so the
        stored bytes are not read first."""
        self._fence()
        if not changed and self.store.get(key) == data:
            return
        if content_type is None:
            self.store.put(key, data)
        else:
            self.store.put(key, data, content_type=content_type)
        self._record_write(key, data)

    # -- record pages (`pith_pipeline.pages`) ---------------------------------
    def page_log_prefix(self) -> tuple[str | None]:
        """The log prefix this run's pages name, in a one-tuple (`None` inside: the
        store keeps no log): asked of the store once per run, with the settings of
        the command that made this publisher."""
        if self._page_log is None:
            from pith_pipeline.pages.site import log_prefix, run_log_prefix

            with self._page_lock:  # papers in flight ask at once: the store is asked once
                if self._page_log is None and self.log_key is not None:
                    self._page_log = (log_prefix(),)  # the run keeps a log (its key is named)
                elif self._page_log is None:
                    self._page_log = (
                        self._page_context.run(
                            lambda: run_log_prefix(self.store, config.from_env("log_signer"))
                        ),
                    )
        return self._page_log

    def _page_log_prefix(self) -> str | None:
        return self.page_log_prefix()[0]

    def _page(self, bundle: dict[str, Any]) -> bytes:
        """The record page of `bundle`, as `verify STORE` expects it after this run."""
        from pith_pipeline.pages.render import record_page

        return record_page(bundle, log_prefix=self._page_log_prefix())

    def _put_page(self, body: str, bundle: dict[str, Any], *, changed: bool = False) -> None:
        from pith_pipeline.pages.site import PAGE_CONTENT_TYPE

        self._put(page_key(body), self._page(bundle), changed=changed, content_type=PAGE_CONTENT_TYPE)

    def ensure_page(self, body: str, bundle: dict[str, Any]) -> bool:
        """Write the page of a published bundle when the stored page is missing or is
        not what the bundle renders to (`pages.site.page_problem`); True when written."""
        from pith_pipeline.pages.site import page_problem

        if page_problem(self.store.get(page_key(body)), bundle, self._page_log_prefix()) is None:
            return False
        self._put_page(body, bundle, changed=True)
        return True

    def _put_copy(self, key: str, data: bytes, *, of: str) -> None:
        """The `.well-known` copy of the bundle just written under `of`: one object
        with two names where the store can (`storage.base.put_copy`)."""
        self._fence()
        put_copy(self.store, key, data, of=of)
        self._record_write(key, data)

    def _put_once(self, key: str, data: bytes) -> None:
        self._fence()
        if key.startswith(EVENTS):
            # the log learns of a run that dies before appending (`tlog.pending`)
            marker = self._pending.ensure(self._summary.run_id)
            if marker is not None:
                self._summary.log_pending.append(marker)
        if self.store.put_once(key, data):
            self._record_write(key, data)

    def _fence(self) -> None:
        """Check the lease before each write, not only before each paper.

        Why: a run suspended past its lease's TTL (a paused VM, SIGSTOP) resumes in the
        middle of a paper; checked once per paper, it went on to write that paper's
        `record_created` beside the one the writer that took the lease over had
        written. The check is a clock reading, so the window left is one write.
        """
        if self.lease is not None:
            self.lease.check()

    def _record_write(self, key: str, data: bytes) -> None:
        self.summary.written[key] = self._sha256(data)

    # -- reads -----------------------------------------------------------
    def subject_events(self, body: str) -> list[dict[str, Any]]:
        """Every stored event of a subject, each checked before it is used.

        A stored event is the source of truth for bundles: one that does not parse,
        is not named by its content hash, does not recompute, or is not signed by a
        key of the store's key document stops this subject (`IntegrityError` naming
        the object) instead of being merged, re-signed and spread by a rebuild. The
        checks are the store audit's (`pith_pipeline.audit`), so `verify STORE` and
        the publisher agree on what is damaged.
        """
        if self._known_absent(event_prefix(body)):
            return []
        return list(self._checked_events(body).events)

    def _checked_events(self, body: str) -> SubjectEvents:
        """A subject's stored events with their object keys, checked (`subject_events`)."""
        from pith_pipeline.audit import subject_events

        # within one paper's publishing, a subject's events are read once (the paper
        # and its pointer's records); a write of one of its events forgets them
        cache: dict[str, SubjectEvents] | None = getattr(self._local, "events", None)
        if cache is not None and body in cache:
            return cache[body]
        got = subject_events(self.store, body, self._keyring())
        got.raise_for_problems()
        equivocation = got.equivocation()
        if equivocation is not None and body not in self._equivocations_named:
            # write-once events cannot be undone: publish them as stored (the state
            # lists the equivocation), and name it once per run (guarantees.md)
            self._equivocations_named.add(body)
            _logger.warning(
                "%s: %s (published as stored; `verify STORE` reports it)", event_prefix(body), equivocation
            )
        if cache is not None:
            cache[body] = got
        return got

    def _keyring(self) -> KeyRing:
        """The ring of the keys we know, rebuilt only when they change (it caches the
        certificate checks of short-lived keys)."""
        marker = tuple((k.key_id, k.rotates_at) for k in self.keys.values())
        if self._ring is None or self._ring_marker != marker:
            self._ring, self._ring_marker = KeyRing(self.keys.values()), marker
        return self._ring

    def _pointer(self, arxiv_id: str) -> dict[str, Any]:
        """The paper's arXiv pointer; read once per `publish_record` (which keeps it
        as it writes it: the paper is this thread's, under the run's lease)."""
        cache: dict[str, dict[str, Any]] | None = getattr(self._local, "pointers", None)
        if cache is not None and arxiv_id in cache:
            return cache[arxiv_id]
        pointer = self._read_pointer(arxiv_id)
        if cache is not None:
            cache[arxiv_id] = pointer
        return pointer

    def _read_pointer(self, arxiv_id: str) -> dict[str, Any]:
        key = pointer_key(arxiv_id)
        raw = None if self._known_absent(key) else self.store.get(key)
        if not raw:
            return {"arxiv_id": arxiv_id, "records": []}
        try:
            pointer = loads(raw)
            records = pointer["records"]
            if not isinstance(records, list) or not all(
                isinstance(r, dict)
                and type(r.get("version")) is int
                and isinstance(r.get("pith_number"), str)
                and isinstance(r.get("record_created"), str)
                and isinstance(r.get("created_at"), str)
                for r in records
            ):
                raise ValueError("records must be a list of version entries")
            if pointer.get("arxiv_id") != arxiv_id:
                raise ValueError(f"arxiv_id is {str(pointer.get('arxiv_id'))[:80]!r}")
        except (ValueError, KeyError, TypeError) as exc:
            raise IntegrityError(f"unreadable arXiv pointer ({exc}); run `rebuild`", key=key) from None
        for r in records:
            self._check_pointer_record(key, arxiv_id, r)
        result: dict[str, Any] = pointer
        return result

    def _check_pointer_record(self, key: str, arxiv_id: str, entry: dict[str, Any]) -> None:
        """A pointer's record is trusted only as far as its stored events say.

        Why: the pointer is not signed, and what it lists becomes signed data (the
        `supersedes` of a new version, a `correction` of an older one). An entry must
        name a verified `record_created` of its Pith number whose record is that
        version of this arXiv id; a genuine record of another paper is refused.
        """
        try:
            body = PithNumber.parse(entry["pith_number"]).body
        except ValueError:
            raise IntegrityError(f"lists {entry['pith_number'][:80]!r}, not a Pith number", key=key) from None
        for ev in self.subject_events(body):
            if ev.get("event_id") != entry["record_created"] or ev.get("event_type") != "record_created":
                continue
            payload = ev.get("payload")
            record = payload.get("canonical_record") if isinstance(payload, dict) else None
            source = record.get("source") if isinstance(record, dict) else None
            if ev.get("subject_pith_number") == entry["pith_number"] and source == {
                "kind": "arxiv",
                "id": arxiv_id,
                "version": entry["version"],
            }:
                return
            raise IntegrityError(
                f"lists {entry['pith_number']} as version {entry['version']} of {arxiv_id}, but its "
                f"record_created is of {source!r}; run `verify` on the store",
                key=key,
            )
        raise IntegrityError(
            f"lists {entry['pith_number']} with record_created {entry['record_created']}, which is "
            f"not a stored event of it; run `verify` on the store",
            key=key,
        )

    # -- the run -----------------------------------------------------------
    def reject(self, item: Rejected) -> None:
        self.quarantine.append(self.rejection(item))

    def rejection(self, item: Rejected) -> dict[str, Any]:
        """Count a reject and return its quarantine entry."""
        self.summary.quarantined += 1
        return {"run_id": self.summary.run_id, **item.to_json()}

    def publish_item(self, item: Item) -> dict[str, Any] | None:
        """Publish one input item: the one place every loop (one process, worker
        processes, Airflow tasks) decides what happens to a record.

        Returns the quarantine entry of a record that could not be built (the caller
        keeps entries in input order); a paper whose stored objects fail their checks
        is counted as failed and named; store, signer and lease errors stop the run.
        """
        self.summary.fetched += 1
        if isinstance(item, Rejected):
            return self.rejection(item)
        if self.shards is not None and shard_of(item.id) not in self.shards:
            self.summary.skipped += 1
            return None
        if self.lease is not None:
            self.lease.check()
        try:
            item.check_dates(today=self.today())
            self.publish_record(item)
        except IntegrityError as exc:
            self.summary.fail(f"{item.id}v{item.version}: {exc}")
        except Exception as exc:
            if not is_record_problem(exc):
                raise
            return self.rejection(_build_failure(item, exc))
        return None

    def publish_counted(self, item: Item) -> tuple[dict[str, Any] | None, RunSummary]:
        """`publish_item`, counted in a summary of its own that the caller adds to the
        run's: what a `Loader` thread runs, so that threads never update one summary."""
        part = self._local.summary = RunSummary.part(self._summary.run_id)
        try:
            return self.publish_item(item), part
        finally:
            self._local.summary = None

    def publish(
        self, items: Iterable[Item], *, progress: Callable[[int], None] | None = None, flush: bool = True
    ) -> RunSummary:
        """Build, sign and publish every record; quarantine every reject (the `Loader`).

        `flush`: store the quarantine at the end (False: the caller publishes more
        items in this run and calls `flush_quarantine` once, at its end)."""
        from pith_pipeline.loader import Loader

        return Loader(self).publish(items, progress=progress, flush=flush)

    def flush_quarantine(self) -> None:
        """Store the run's quarantine, `quarantine/<run_id>.jsonl`, streamed from the
        spill file (write-once: call it at the end of the run; again with no new
        reject, it does nothing).

        Why streamed: its entries keep their raw input, so a large hostile input makes
        a quarantine far larger than memory (`QuarantineSpool`)."""
        from pith_pipeline.storage.base import file_sha256, put_once_file

        if len(self.quarantine) == self._quarantine_stored:
            return
        key = quarantine_key(self.summary.run_id)
        with self.quarantine.ordered_file() as path:
            self._fence()
            if put_once_file(self.store, key, path, content_type="application/x-ndjson"):
                self.summary.written[key] = file_sha256(path)
        self._quarantine_stored = len(self.quarantine)

    def publish_record(self, rec: ArxivRecord) -> Identity:
        self._local.pointers = {}
        self._local.events = {}
        try:
            return self._publish_record(rec)
        finally:
            self._local.pointers = None
            self._local.events = None

    def _publish_record(self, rec: ArxivRecord) -> Identity:
        ident = self._identity(rec)
        existing = self.subject_events(ident.body)
        if any(e.get("event_type") == "record_created" for e in existing):
            existing = self._complete_snapshot(ident, existing)
            self._ensure_bundle(ident.subject, existing)
            self._update_pointer(ident, existing)
            # counted (and indexed) once its own objects are sound: a paper stopped on
            # one of them is counted failed only, and its bundle is not read for the index
            self.summary.unchanged += 1
            self.summary.seen.append(ident.subject)
            self.summary.superseded += self.reconcile(rec.id)
            return ident
        if not existing:
            self._refuse_orphan(ident.body)
        now = self.clock()
        pointer = self._pointer(rec.id)
        previous = self._previous(pointer, ident)
        supersedes = [previous["record_created"]] if previous else []
        if not existing and self.fresh_path:  # the common case: one pass does it all
            fresh = self._fresh_builder().build(ident, now, self.clock(), supersedes=supersedes)
            self._check_signer(fresh.events[0])
            # before anything of the record is published
            self._remember_checked_rows(fresh.bundle, _check_index_rows(fresh.bundle))
            for ev, data in zip(fresh.events, fresh.event_bytes, strict=True):
                self._put_event(event_key(ident.body, ev["content_sha256"]), data)
            # no stored event: whatever a bundle there holds, it is not these bytes
            bkey, skey, wkey = bundle_paths(ident.body)
            self._put(bkey, fresh.bundle_bytes, changed=True)
            self._put(skey, fresh.state_bytes, changed=True)
            self._put_copy(wkey, fresh.bundle_bytes, of=bkey)
            self._put_page(ident.body, fresh.bundle, changed=True)
            self._bundle_written(bkey, fresh.bundle, fresh.bundle_bytes)
            built_events = fresh.events
        else:
            built = build_record_events(
                ident,
                self.signer,
                self.config.signer_id,
                now,
                supersedes=supersedes,
                builder_version=self.config.builder_version,
            )
            self._check_signer(built.events[0])
            # built and its index rows checked before any of its events is published
            bundle = self.signed_bundle(
                ident.subject, existing + built.events, built.aliases, trusted=built.events
            )
            self._remember_checked_rows(bundle, _check_index_rows(bundle))
            for ev in built.events:
                self._put_event(event_key(ident.body, ev["content_sha256"]), dumps_compact(ev))
            self._write_bundle_objects(ident.body, bundle)
            built_events = built.events
        self.summary.built += 1
        self.summary.pith_numbers.append(ident.subject)
        self.summary.seen.append(ident.subject)
        self._update_pointer(ident, existing + built_events)
        self.summary.superseded += self.reconcile(rec.id)
        return ident

    def _remember_checked_rows(self, bundle: dict[str, Any], rows: Any) -> None:
        """Keep a bundle's checked index rows for the sink, so they are made once."""
        if self.on_bundle is not None:
            if len(self._checked_rows) > 4096:  # papers that failed after the check
                self._checked_rows.clear()
            self._checked_rows[id(bundle)] = (bundle, rows)

    def _refuse_orphan(self, body: str) -> None:
        """Stop a paper with no stored event whose bundle, state or `.well-known` copy
        is published.

        Why: events are written before their bundle, so such a paper lost its events;
        treated as new, it got a fresh `record_created` and its bundle, which lists
        the lost events, was replaced without a word. A paper is new only when neither
        its events nor its published objects exist. `learn_new` lists `pith/` and
        `.well-known/pith/` pages as it lists `events/`, so a new paper costs no
        request of its own here.
        """
        for prefix in _published_prefixes(body):
            if self._known_absent(prefix):
                continue
            key = next(iter(self.store.list(prefix)), None)
            if key is not None:
                raise IntegrityError(
                    f"published, but {event_prefix(body)} holds no event (deleted?); not replaced "
                    "by a new record; run `verify` on the store",
                    key=key,
                )

    def _complete_snapshot(self, ident: Identity, existing: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Write the `graph_snapshot` a run killed between a record's two events left out.

        Only for a `record_created` signed by this run's key: the snapshot is then the
        same event the killed run would have written (see `snapshot_for`).
        """
        if any(e.get("event_type") == "graph_snapshot" for e in existing):
            return existing
        mine = [
            e
            for e in existing
            if e.get("event_type") == "record_created"
            and isinstance(e.get("signature"), dict)
            and e["signature"].get("key_id") == self.signer.key_id
        ]
        if not mine:
            return existing
        ev = snapshot_for(ident, mine[0], self.signer, self.config.signer_id)
        self._put_event(event_key(ident.body, ev["content_sha256"]), dumps_compact(ev))
        return self.subject_events(ident.body)

    def _put_event(self, key: str, data: bytes) -> None:
        """Write-once; a different object already at an event's content-hash name
        can only be a damaged or forged one: name it, never overwrite it."""
        cache: dict[str, SubjectEvents] | None = getattr(self._local, "events", None)
        if cache is not None:
            cache.pop(key.split("/")[1], None)
        try:
            self._put_once(key, data)
        except WriteConflictError:
            raise IntegrityError(
                "a different object is stored under this event's content hash", key=key
            ) from None

    # False sends fresh records through the general path too (for equivalence tests)
    fresh_path: ClassVar[bool] = True

    def _fresh_builder(self) -> FreshBuilder:
        """One per run (per key set): the per-run parts of every bundle are made once."""
        keys = self._keys_for({self.signer.key_id})
        ids = tuple(k.key_id for k in keys)
        fb = self._fresh.get(ids)
        if fb is None:
            fb = self._fresh[ids] = FreshBuilder(
                self.signer,
                self.config.signer_id,
                self.site,
                keys,
                builder_version=self.config.builder_version,
            )
        return fb

    def _keys_for(self, key_ids: set[str]) -> list[PublicKey]:
        """The known keys a bundle lists: its signers', and the roots of certified ones."""
        key_ids = set(key_ids)
        for k in list(key_ids):  # a certified key travels with the root that vouches for it
            cert = self.keys[k].certificate if k in self.keys else None
            if cert is not None:
                key_ids.add(str(cert.get("issuer_key_id")))
        return [self.keys[k] for k in sorted(key_ids) if k in self.keys]

    def _write_correction(self, old: PithNumber, new_subject: str, arxiv_version: str, now: datetime) -> None:
        """Tell the superseded record's readers where the newer version lives."""
        corr = correction_event(
            old_subject=str(old),
            new_subject=new_subject,
            arxiv_version=arxiv_version,
            signer=self.signer,
            signer_id=self.config.signer_id,
            now=now,
        )
        self._put_event(event_key(old.body, corr["content_sha256"]), dumps_compact(corr))
        self.write_bundle(str(old), self.subject_events(old.body))

    def reconcile(self, arxiv_id: str) -> int:
        """Make every published version of a paper point to its successor.

        Order: the pointer's (version, created_at, pith_number). Each record but the
        newest must carry a `correction` naming the record after it. Checked on every
        touch of the paper, new or unchanged, so supersession repairs itself whatever
        order versions were built in (v2 before v1) and wherever a run died. Returns
        the number of corrections written.
        """
        records = sorted(
            self._pointer(arxiv_id)["records"],
            key=lambda r: (r["version"], r["created_at"], r["pith_number"]),
        )
        written = 0
        for older, newer in itertools.pairwise(records):
            old = PithNumber.parse(older["pith_number"])
            events = self.subject_events(old.body)
            if not any(e.get("event_type") == "record_created" for e in events):
                raise IntegrityError(
                    f"{pointer_key(arxiv_id)} lists {older['pith_number']}, whose events are missing; "
                    "run `verify` on the store",
                    key=event_prefix(old.body),
                )
            if any(
                e.get("event_type") == "correction"
                and isinstance(e.get("payload"), dict)
                and e["payload"].get("pith_number") == newer["pith_number"]
                for e in events
            ):
                # stored, but a kill may have come before its bundle was rewritten
                self._ensure_bundle(older["pith_number"], events)
                continue
            self._write_correction(old, newer["pith_number"], f"{arxiv_id}v{newer['version']}", self.clock())
            written += 1
        return written

    def _previous(self, pointer: dict[str, Any], ident: Identity) -> dict[str, Any] | None:
        """The newest known record of this paper at or below the incoming version."""
        older = [
            r
            for r in pointer["records"]
            if r["pith_number"] != ident.subject and r["version"] <= ident.record.version
        ]
        if not older:
            return None
        best: dict[str, Any] = max(older, key=lambda r: (r["version"], r["created_at"], r["pith_number"]))
        return best

    def _update_pointer(self, ident: Identity, events: list[dict[str, Any]]) -> None:
        pointer = self._pointer(ident.record.id)
        if any(r["pith_number"] == ident.subject for r in pointer["records"]):
            return
        self._refuse_lost_versions(ident, pointer, events)
        created = min(
            (e for e in events if e.get("event_type") == "record_created"),
            key=lambda e: (e["created_at"], e["event_id"]),
        )
        pointer["records"].append(
            {
                "version": ident.record.version,
                "pith_number": ident.subject,
                "record_created": created["event_id"],
                "created_at": created["created_at"],
                "canonical_sha256": ident.canonical_sha256,
            }
        )
        pointer["records"].sort(key=lambda r: (r["version"], r["created_at"], r["pith_number"]))
        pointer["latest"] = pointer["records"][-1]["pith_number"]
        # it gains a record, so its bytes change: written without reading them again
        self._put(pointer_key(ident.record.id), dumps_pretty(pointer) + b"\n", changed=True)

    def _refuse_lost_versions(
        self, ident: Identity, pointer: dict[str, Any], events: list[dict[str, Any]]
    ) -> None:
        """Stop before adding a record to a pointer that lacks a version its events name.

        Why: a pointer is written after its record's events, and a version's events
        name its neighbours (its `record_created` supersedes the older record, a
        `correction` names the newer one), so a pointer lacking one of them lost it
        (deleted). Rewritten with this record alone, it would drop the other versions
        silently; `rebuild` re-derives it whole from the events.
        """
        created = {r["record_created"] for r in pointer["records"]}
        numbers = {r["pith_number"] for r in pointer["records"]} | {ident.subject}
        for e in events:
            if e.get("subject_pith_number") != ident.subject:
                continue
            named: list[str] = []
            if e.get("event_type") == "record_created":
                named = [s for s in e.get("supersedes") or [] if isinstance(s, str) and s not in created]
            elif e.get("event_type") == "correction" and isinstance(e.get("payload"), dict):
                newer = e["payload"].get("pith_number")
                if isinstance(newer, str) and newer not in numbers:
                    named = [newer]
            if named:
                raise IntegrityError(
                    f"does not list {named[0]}, which {ident.subject}'s events name (another "
                    "version of the paper, lost from the pointer?); not rewritten without it; "
                    "`rebuild` re-derives it from the events",
                    key=pointer_key(ident.record.id),
                )

    def _check_signer(self, event: dict[str, Any]) -> None:
        """Verify the run's first fresh signature once: later ones are trusted (see `merge`)."""
        if self._signer_checked:
            return
        sig = event["signature"]
        if not verify_signature(self.signer.public_key, event["content_sha256"], sig["signature_b64"]):
            raise SigningError(
                f"signer {self.signer.key_id!r} made a signature that does not "
                "verify with its own public key; nothing was published"
            )
        self._signer_checked = True

    def _ensure_bundle(self, subject: str, events: list[dict[str, Any]]) -> None:
        """Finish what a killed run left out for an already-published subject.

        - no bundle (killed between events and bundle), or a bundle that does not list
          exactly the stored events (killed between a correction event and the rewrite
          of its bundle): build it from the checked events;
        - a bundle whose `state.json`, `.well-known` copy or page is missing or holds
          other bytes (killed between a bundle's rewrite and its copies): copy from the
          bundle, so its published bytes stay as they are, unless the bundle does not
          verify, in which case it is rebuilt from the events.
        """
        body = PithNumber.parse(subject).body
        bkey, skey, wkey = bundle_paths(body)
        data = self.store.get(bkey)
        bundle: Any = None
        if data is not None:
            try:
                bundle = loads(data)
            except ValueError:
                bundle = None
        self._refuse_reordered(body, bundle)
        listed = (
            {e.get("event_id") for e in bundle.get("events", []) if isinstance(e, dict)}
            if isinstance(bundle, dict) and isinstance(bundle.get("events"), list)
            else None
        )
        # a bundle re-serialised by someone else is rebuilt too (the signature covers
        # its content, not its bytes, so only the publisher's form is known good), and
        # so is one whose content was changed: its event copies are not the stored
        # events, or its signature no longer verifies (`verify STORE` fails it)
        if (
            listed is None
            or listed != {e["event_id"] for e in events}
            or dumps_compact(bundle) != data
            or not _copies_are_stored(bundle["events"], events)
            or not self._signed_by_known_key(bundle)
        ):
            self.write_bundle(subject, events)
            return
        assert data is not None
        state = bundle.get("state")
        state_data = dumps_compact(state) if isinstance(state, dict) else None
        # missing, or stale: killed between a bundle's rewrite and its copies
        missing = [k for k, want in ((skey, state_data), (wkey, data)) if self.store.get(k) != want]
        if not missing:
            self.ensure_page(body, bundle)  # a page lost or stale on its own
            return
        from pith_pipeline.core.verify import verify_bundle

        if state_data is None or not verify_bundle(bundle).ok:
            self.write_bundle(subject, events)
            return
        if skey in missing:
            self._put(skey, state_data, changed=True)
        if wkey in missing:
            self._put_copy(wkey, data, of=bkey)
        self.ensure_page(body, bundle)

    def write_bundle(
        self,
        subject: str,
        events: list[dict[str, Any]],
        aliases: list[dict[str, Any]] | None = None,
        *,
        trusted: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        """(Re)build a subject's bundle and state from its events.

        `trusted`: event objects this run just built and signed; merging skips
        re-hashing and re-verifying them (the bytes written are the same).
        """
        body = PithNumber.parse(subject).body
        self._refuse_dropping(body, events, self.store.get(bundle_paths(body)[0]))
        bundle = self.signed_bundle(subject, events, aliases, trusted=trusted)
        self._write_bundle_objects(body, bundle)
        return bundle

    def _refuse_dropping(self, body: str, events: list[dict[str, Any]], published: bytes | None) -> None:
        """Stop when the published bundle lists an event the store no longer holds.

        Why: events are write-once and written before their bundle, so a listed event
        that is not stored was deleted; a bundle re-derived without it would make the
        loss silent and signed. Only a bundle whose signature verifies with a key we
        know is believed (a forged list is no reason to stop; it is rebuilt).
        """
        if published is None:
            return
        try:
            old = loads(published)
        except ValueError:
            return  # not a bundle we signed: it is replaced from the verified events
        self._refuse_reordered(body, old)
        if not self._signed_by_known_key(old):
            return  # not a bundle we signed: it is replaced from the verified events
        try:
            listed = {e["event_id"] for e in old["events"]}
        except (KeyError, TypeError):
            return
        gone = sorted(listed - {e["event_id"] for e in events})
        if gone:
            more = f" (and {len(gone) - 1} more)" if len(gone) > 1 else ""
            raise IntegrityError(
                f"lists event {gone[0]}{more}, which is not in {event_prefix(body)} (deleted?); "
                "not re-derived without it; run `verify` on the store",
                key=bundle_paths(body)[0],
            )

    def _signed_by_known_key(self, bundle: Any) -> bool:
        """The bundle's signature verifies with a key the store lists, over its content
        as it is now (`bundle_sha256` recomputed): nothing in it was changed since."""
        try:
            sig = bundle["bundle_signature"]
            key = self.keys.get(sig["key_id"])
            digest = bundle_sha256(bundle)
            if key is None or sig.get("bundle_sha256") != digest:
                return False
            return bool(verify_signature(key.public_key, digest, sig["signature_b64"]))
        except (ValueError, KeyError, TypeError, AttributeError, CanonicalJSONError):
            return False

    def _refuse_reordered(self, body: str, bundle: Any) -> None:
        """Stop when a stored event and its copy in the published bundle hold the same
        content in another key order (`audit.reordered_events`, as `verify` finds it).

        Why: such an event passes every per-object check, and nothing would be
        re-signed (its content is the same), so the paper's writers ended clean while
        `verify STORE` reported the object.
        """
        if not isinstance(bundle, dict):
            return
        from pith_pipeline.audit import reordered_events

        bkey = bundle_paths(body)[0]
        for key, reason in reordered_events(self._checked_events(body), bundle.get("events"), bkey):
            raise IntegrityError(f"stored event {reason}; run `verify` on the store", key=key)

    def rebuild_bundle(self, subject: str, events: list[dict[str, Any]]) -> bool:
        """Rebuild a subject's bundle from its events unless the published one already
        says the same; True when it was written.

        Why: a rebuild re-signs, and a new signature carries a new `built_at`, so
        without this every `rebuild` would rewrite every bundle of an unchanged store.
        """
        body = PithNumber.parse(subject).body
        published = self.store.get(bundle_paths(body)[0])
        self._refuse_dropping(body, events, published)
        bundle = self.signed_bundle(subject, events)
        if _published_as(self.store, self.signer, body, bundle, published):
            assert published is not None
            self.ensure_page(body, loads(published))  # the page of the bundle as published
            return False
        self._write_bundle_objects(body, bundle)
        return True

    def signed_bundle(
        self,
        subject: str,
        events: list[dict[str, Any]],
        aliases: list[dict[str, Any]] | None = None,
        *,
        trusted: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        """A subject's bundle built and signed from its events (nothing written)."""
        pn = PithNumber.parse(subject)
        events = _dedupe_sorted(events)
        creations = [e for e in events if e.get("event_type") == "record_created"]
        if not creations:
            raise IntegrityError(f"no record_created event stored for {subject}", key=event_prefix(pn.body))
        first = min(creations, key=lambda e: (e["created_at"], e["event_id"]))
        if aliases is None:
            aliases = aliases_from_events(events, pn.body)
        key_ids = {self.signer.key_id}
        for e in events:
            key_ids.add(e["signer"]["key_id"])
            key_ids.add(e["signature"]["key_id"])
        keys = self._keys_for(key_ids)
        payload = first["payload"]
        bundle = sign_bundle(
            subject=subject,
            canonical=payload["canonical_record"],
            canonical_hex=payload["canonical_sha256"],
            events=events,
            aliases=aliases,
            public_keys=keys,
            site=self.site,
            signer=self.signer,
            now=self.clock(),
            trusted=trusted or (),
        )
        return bundle

    def _write_bundle_objects(self, body: str, bundle: dict[str, Any]) -> None:
        bkey, skey, wkey = bundle_paths(body)
        data = dumps_compact(bundle)
        self._put(bkey, data)
        self._put(skey, dumps_compact(bundle["state"]))
        if self.store.get(wkey) != data:
            self._put_copy(wkey, data, of=bkey)
        self._put_page(body, bundle)
        self._bundle_written(bkey, bundle, data)

    def _bundle_written(self, key: str, bundle: dict[str, Any], data: bytes) -> None:
        if self.on_bundle is not None:
            checked = self._checked_rows.pop(id(bundle), None)
            rows = checked[1] if checked is not None and checked[0] is bundle else None
            self.on_bundle(key, bundle, self._sha256(data), rows)

    def _sha256(self, data: bytes) -> str:
        """Hex SHA-256 of `data`, once per bytes object: a bundle is written to pith/ and
        .well-known/ and handed to `on_bundle` as one object. (One slot, replaced, not
        shared state: another thread at worst recomputes.)"""
        last = self._last_written
        if data is not last[0]:
            import hashlib

            last = self._last_written = (data, hashlib.sha256(data).hexdigest())
        return last[1]


#: What a rebuild of unchanged events changes anyway (the moment and its signature).
_REBUILD_VOLATILE = frozenset({"built_at", "bundle_signature"})


def _published_as(
    store: Store, signer: Signer, body: str, bundle: dict[str, Any], data: bytes | None
) -> bool:
    """The published bundle (`data`) is `bundle` apart from when it was built, it is
    signed by `signer` (the signature verifies), and its state and .well-known copies
    match it."""
    _, skey, wkey = bundle_paths(body)
    try:
        old = loads(data) if data is not None else None
    except ValueError:
        return False
    if not isinstance(old, dict) or not isinstance(old.get("bundle_signature"), dict):
        return False
    if {k: v for k, v in old.items() if k not in _REBUILD_VOLATILE} != {
        k: v for k, v in bundle.items() if k not in _REBUILD_VOLATILE
    }:
        return False
    sig = old["bundle_signature"]
    digest = bundle_sha256(old)
    if (
        sig.get("key_id") != signer.key_id
        or sig.get("bundle_sha256") != digest
        or not isinstance(sig.get("signature_b64"), str)
        or not verify_signature(signer.public_key, digest, sig["signature_b64"])
    ):
        return False
    if dumps_compact(old) != data:  # re-serialised by someone else
        return False
    return store.get(skey) == dumps_compact(old["state"]) and store.get(wkey) == data


def _copies_are_stored(copies: list[Any], events: list[dict[str, Any]]) -> bool:
    """Each event copy a bundle holds equals a stored copy of that event."""
    stored: dict[str, list[dict[str, Any]]] = {}
    for e in events:
        stored.setdefault(e["event_id"], []).append(e)
    return all(
        isinstance(c, dict) and any(c == e for e in stored.get(str(c.get("event_id")), [])) for c in copies
    )


def _published_prefixes(body: str) -> tuple[str, str]:
    """`pith/<ID>/` (its bundle and state) and `.well-known/pith/<ID>/` (the copy)."""
    bkey, _skey, wkey = bundle_paths(body)
    return bkey.rsplit("/", 1)[0] + "/", wkey.rsplit("/", 1)[0] + "/"


#: a subject's id in store keys (`pith/<ID>/`); other names there are `verify`'s to report
_BODY = re.compile(r"[A-Z2-7]{26}")
#: a record's page (`layout.page_key`)
_PAGE = re.compile(re.escape(page_key("@")).replace("@", "[A-Z2-7]{26}"))

#: keys per listing page (S3's most)
LIST_PAGE = 1000


def absent_keys(
    lister: Callable[[str, str, int], Sequence[str]], prefix: str, names: Sequence[str]
) -> tuple[set[str], int]:
    """Which of the sorted `names` (keys, or key prefixes ending in `/`, all under
    `prefix`) have no object, by listing pages of keys; and how many pages it took.

    Each page starts just before the first undecided name, so it decides at least
    that one (at most one request per name); it decides every later name that sorts
    before its last key, or all of them when it is the listing's last page.
    """
    absent: set[str] = set()
    requests = 0
    i = 0
    while i < len(names):
        first = i
        page = lister(prefix, names[i][:-1], LIST_PAGE)
        requests += 1
        end = len(page) < LIST_PAGE
        last = page[-1] if page else ""
        k = 0
        while i < len(names):
            name = names[i]
            while k < len(page) and page[k] < name:
                k += 1
            if k < len(page) and page[k].startswith(name):
                i += 1  # there
            elif end or (last > name and not last.startswith(name)):
                absent.add(name)
                i += 1
            else:
                break  # past this page: the next one starts here
        if i == first:  # a page of stray keys just below the name: leave the rest unknown
            break
    return absent, requests


def _check_index_rows(bundle: dict[str, Any]) -> Any:
    """The bundle's index rows fit the index tables' schemas, or `InputError` (the
    record is quarantined): found later, in the index update, such a row would fail
    every update and every `reindex` after it. pyarrow is imported on first use."""
    from pith_pipeline.index.rows import check_bundle

    return check_bundle(bundle)


def _utc_today() -> date:
    return datetime.now(tz=UTC).date()


def _build_failure(rec: ArxivRecord, exc: BaseException) -> Rejected:
    """The quarantine entry of a record that parsed but could not be built: with the
    input as read (bytes kept exactly, base64 when not UTF-8) and where it was read,
    like a parse failure; a re-serialisation only for a record made in code."""
    import json

    if isinstance(exc, InputError):
        reason, fld, where = exc.message, exc.field, exc.where or rec.source_where or ""
    else:
        reason, fld, where = (
            f"could not build the record: {type(exc).__name__}: {exc}",
            None,
            rec.source_where or "",
        )
    if isinstance(rec.source_raw, bytes):
        return Rejected.of_bytes(where, reason, rec.source_raw, rec.id, fld)
    if isinstance(rec.source_raw, str):
        return Rejected(where, reason, rec.source_raw, rec.id, fld)
    try:
        raw = json.dumps(rec.to_json(), ensure_ascii=False, sort_keys=True)
    except (TypeError, ValueError):
        raw = repr(rec)
    return Rejected(where, reason, raw, rec.id, fld)


def _dedupe_sorted(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One copy per event id, in merge order, so bundles list events deterministically.

    Of several copies of one id (an event re-signed after a key rotation), the most
    recently signed is kept, so a re-issued bundle carries the new key's signatures.
    """
    seen: dict[str, dict[str, Any]] = {}
    for e in events:
        have = seen.get(e["event_id"])
        if have is None or str(e["signature"].get("signed_at", "")) > str(
            have["signature"].get("signed_at", "")
        ):
            seen[e["event_id"]] = e
    return sorted(
        seen.values(),
        key=lambda e: (e["created_at"], 0 if e["event_type"] == "record_created" else 1, e["event_id"]),
    )


def rebuild(
    store: Store,
    signer: Signer,
    config: BuildConfig | None = None,
    *,
    clock: Clock = system_clock,
    lease: LeaseCheck | None = None,
    failures: list[str] | None = None,
    unchanged: list[str] | None = None,
    pointers: list[str] | None = None,
    pages: list[str] | None = None,
) -> Iterator[str]:
    """Re-derive every bundle, state and arXiv pointer from the event store; yields
    the subjects rebuilt (and adds the pointers rewritten to `pointers`).

    Every record's page is written again where it is missing or is not what its
    bundle renders to (added to `pages`), and so are the pages' assets and, at the
    end, the store's home page.

    Idempotent: a subject whose published bundle already says what its events say
    (apart from `built_at` and the signature; signed by `signer`) is left alone and
    added to `unchanged`; a pointer holding the bytes its records' events give is not
    written. A subject whose stored events fail their checks is not rebuilt (its
    published bundle stays as it was) and is named in `failures`; the caller ends
    non-zero.
    """
    pub = Publisher(store, signer, config, clock=clock, lease=lease)
    pub.publish_assets()
    # a published paper without events is named too (`_refuse_orphan`), not skipped
    bodies = {k.split("/")[1] for k in store.list("events/")}
    for prefix in (BUNDLES, WELL_KNOWN):  # pith/<ID>/..., .well-known/pith/<ID>/...
        cut = len(prefix)
        bodies.update(b for b in (k[cut:].split("/", 1)[0] for k in store.list(prefix)) if _BODY.fullmatch(b))
    #: arXiv id -> its pointer's records, from verified record_created events
    records: dict[str, list[dict[str, Any]]] = {}
    failed: set[str] = set()
    for body in sorted(bodies):
        if lease is not None:
            lease.check()
        pub._local.events = {}  # its events are read once, for its bundle and checks
        try:
            events = pub.subject_events(body)
            if not events:
                pub._refuse_orphan(body)
            for arxiv_id, entry in _pointer_entries(events):
                records.setdefault(arxiv_id, []).append(entry)
            subjects = {e.get("subject_pith_number") for e in events}
            for subject in sorted(s for s in subjects if isinstance(s, str)):
                own = [e for e in events if e.get("subject_pith_number") == subject]
                if pub.rebuild_bundle(subject, own):
                    yield subject
                elif unchanged is not None:
                    unchanged.append(subject)
        except IntegrityError as exc:
            if failures is None:
                raise
            failures.append(str(exc))
            failed.add(body)
        finally:
            pub._local.events = None
    for problem in _rederive_pointers(pub, records, bodies, failed, pointers):
        if failures is None:
            raise problem
        failures.append(str(problem))
    if pages is not None:
        pages.extend(k for k in pub.summary.written if _PAGE.fullmatch(k))
    from pith_pipeline.pages.site import publish_home_page

    pub._fence()
    publish_home_page(store, iso_seconds(clock()), changed=len(pub.summary.written) > 0)


def _pointer_entries(events: list[dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(arXiv id, pointer record) of each subject among a body's checked events: the
    entry `Publisher._update_pointer` writes, from the subject's first record_created."""
    first: dict[str, dict[str, Any]] = {}
    for e in events:
        if e.get("event_type") != "record_created":
            continue
        have = first.get(e["subject_pith_number"])
        if have is None or (e["created_at"], e["event_id"]) < (have["created_at"], have["event_id"]):
            first[e["subject_pith_number"]] = e
    for subject, e in sorted(first.items()):
        payload = e.get("payload")
        record = payload.get("canonical_record") if isinstance(payload, dict) else None
        source = record.get("source") if isinstance(record, dict) else None
        if not isinstance(source, dict) or source.get("kind") != "arxiv":
            continue
        arxiv_id, version = source.get("id"), source.get("version")
        if not isinstance(arxiv_id, str) or type(version) is not int:
            continue
        yield (
            arxiv_id,
            {
                "version": version,
                "pith_number": subject,
                "record_created": e["event_id"],
                "created_at": e["created_at"],
                "canonical_sha256": payload["canonical_sha256"],  # type: ignore[index]
            },
        )


def _rederive_pointers(
    pub: Publisher,
    records: dict[str, list[dict[str, Any]]],
    bodies: set[str],
    failed: set[str],
    rewritten: list[str] | None,
) -> Iterator[IntegrityError]:
    """Write every arXiv pointer its records' events give; yield the ones it must not.

    Why: a pointer is derived data like a bundle (the events say which records an
    arXiv id has), so `rebuild` repairs a deleted, re-serialised or tampered one.
    Left as it is, and named: a pointer listing a paper whose events failed their
    checks (already named), or one listing a record with no stored event at all
    (deleted with its bundle): re-derived without it, the loss would be silent.
    """
    store = pub.store
    stored: dict[str, str] = {}
    for key in store.list("arxiv/"):
        arxiv_id = key[len("arxiv/") : -len(".json")]
        if key.endswith(".json") and arxiv_id and pointer_key(arxiv_id) == key:
            stored[arxiv_id] = key
    for arxiv_id in sorted(set(records) | set(stored)):
        key = pointer_key(arxiv_id)
        try:
            raw = store.get(key) if arxiv_id in stored else None
        except IntegrityError as exc:
            yield exc
            continue
        listed = _listed_bodies(raw)
        mine = {PithNumber.parse(r["pith_number"]).body for r in records.get(arxiv_id, [])}
        if listed & failed or any(b in failed for b in mine):
            continue  # its paper is named already; nothing derived from it is written
        lost = sorted(b for b in listed - mine if b not in bodies)
        if lost:
            yield IntegrityError(
                f"lists a record of {lost[0]}, which has no stored event (deleted?); not "
                "re-derived without it; run `verify` on the store",
                key=key,
            )
            continue
        entries = sorted(
            records.get(arxiv_id, []), key=lambda r: (r["version"], r["created_at"], r["pith_number"])
        )
        if not entries:
            yield IntegrityError(
                f"no stored record_created is of {arxiv_id}; left as it is; run `verify` on the store",
                key=key,
            )
            continue
        want = (
            dumps_pretty({"arxiv_id": arxiv_id, "records": entries, "latest": entries[-1]["pith_number"]})
            + b"\n"
        )
        if raw != want:
            try:
                pub._put(key, want, changed=True)
            except IntegrityError as exc:  # its path is occupied by the wrong kind of thing
                yield exc
                continue
            if rewritten is not None:
                rewritten.append(key)


def _listed_bodies(raw: bytes | None) -> set[str]:
    """The subject ids a stored pointer's records name (as far as it parses)."""
    try:
        doc = loads(raw) if raw else None
    except ValueError:
        return set()
    found: set[str] = set()
    recs = doc.get("records") if isinstance(doc, dict) else None
    for r in recs if isinstance(recs, list) else []:
        pn = r.get("pith_number") if isinstance(r, dict) else None
        if isinstance(pn, str):
            try:
                found.add(PithNumber.parse(pn).body)
            except ValueError:
                continue
    return found
