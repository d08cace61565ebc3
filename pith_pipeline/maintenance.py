"""Maintenance of a published store: compact and vacuum indexes, rebuild, verify what changed.

The bodies of the `pith_maintenance` DAG's tasks; plain Python, testable without Airflow.
"""

from __future__ import annotations

import itertools
import logging
import random
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pith_pipeline.clock import system_clock
from pith_pipeline.core.canonical_json import dumps_compact, loads, loads_stored
from pith_pipeline.core.layout import (
    BUNDLES,
    EVENTS,
    RUNS,
    SUBJECTS,
    VERIFY_WATERMARK,
    event_prefix,
    is_derived,
    is_run_manifest,
    pointer_id,
    subject_of,
)
from pith_pipeline.core.pith_record import BODY
from pith_pipeline.core.timeutil import iso_seconds
from pith_pipeline.errors import IncompleteRunError, IntegrityError, VerificationError
from pith_pipeline.runs.steps import run_signer, run_store
from pith_pipeline.storage.lease import writer_lease

if TYPE_CHECKING:
    from pith_pipeline.audit import Finding  # lazy: 45 ms at import (python -X importtime)
    from pith_pipeline.config import Settings
    from pith_pipeline.storage.base import Store

log = logging.getLogger(__name__)


def compact_indexes(
    settings: Settings, *, store: Store | None = None, retention_hours: float | None = None
) -> dict[str, Any]:
    """Compact each index table; vacuum files no version younger than `retention_hours` needs."""
    # lazy: the index (deltalake, pyarrow) adds 240 ms to importing this module (python -X importtime)
    from pith_pipeline.index import DEFAULT_RETENTION_HOURS, compact
    from pith_pipeline.runs.steps import run_store  # lazy: 14 ms at import (python -X importtime)

    store = store or run_store(settings)
    hours = DEFAULT_RETENTION_HOURS if retention_hours is None else retention_hours
    with writer_lease(
        store, command="airflow compact", papers=False, index=True, wait=settings.lease_wait_seconds
    ):
        store.sweep_temporary(published=True)  # a killed writer's leftovers, wherever they are
        update = compact(store, retention_hours=hours)
    return {
        "versions": dict(update.versions),
        "files_compacted": update.files_compacted,
        "rows": dict(update.rows),
        "deleted": len(update.deleted),
    }


def rebuild_from_events(
    settings: Settings, *, bundles: bool, indexes: bool, store: Store | None = None
) -> dict[str, Any]:
    """Re-derive bundles from the event store (when `bundles`: a `Run` ending in
    `REINDEX`, as `pith-pipeline rebuild`), then the indexes."""
    # lazy: the index 240 ms, the publisher 80 ms at import (python -X importtime)
    from pith_pipeline.index import reindex

    # lazy: pith_pipeline.publish, 230 ms at import
    from pith_pipeline.publish import rebuild

    # lazy: pith_pipeline.index, pyarrow, 136 ms at import
    from pith_pipeline.runs.run import REINDEX, Run

    store = store or run_store(settings)
    out: dict[str, Any] = {"bundles_rebuilt": 0, "reindexed": False}
    failures: list[str] = []
    update = None
    if bundles:
        with Run.open(
            settings,
            command="airflow rebuild",
            store=store,
            signer=run_signer(settings),
            lease_wait=settings.lease_wait_seconds,
            notice=log.warning,
            ending=REINDEX,  # the indexes, under the leases the bundles were rebuilt under
            workers=1,
        ) as run:
            out["bundles_rebuilt"] = sum(
                1 for _ in rebuild(run.store, run.signer, publisher=run.publisher, failures=failures)
            )
        update = run.result
    elif indexes:
        with writer_lease(
            store, command="airflow rebuild", papers=False, index=True, wait=settings.lease_wait_seconds
        ):
            update = reindex(store)
    if update is not None:
        out.update(reindexed=True, versions=dict(update.versions), rows=dict(update.rows))
    if failures:
        for problem in failures:
            log.error("not rebuilt: %s", problem)
        raise IncompleteRunError(f"{len(failures)} papers not rebuilt: stored events failed their checks")
    return out


def published_bundle_keys(store: Store) -> list[str]:
    return [k for k in store.list(BUNDLES) if k.endswith("/bundle.json") and k.count("/") == 2]


#: The check's watermark: the run manifests already checked (written with the store's
#: compare-and-swap, as the other small mutable documents are).
WATERMARK_KEY = VERIFY_WATERMARK
WATERMARK_FORMAT = "pith-maintenance-verify-v1"
#: Problems named one per line in the error; the count is always exact.
MAX_LISTED = 50
#: Where published papers live (an event, bundle, state or copy names its record ID).
_SUBJECT_PREFIXES = SUBJECTS


def _watermark(store: Store) -> tuple[set[str], str | None]:
    """The run manifests the last clean check covered, and the watermark's tag."""

    got = store.get_tagged(WATERMARK_KEY)
    if got is None:
        return set(), None
    data, tag = got
    doc = loads_stored(data, WATERMARK_KEY)
    runs = doc.get("checked_runs") if isinstance(doc, dict) else None
    if not isinstance(runs, list) or doc.get("format") != WATERMARK_FORMAT:
        raise IntegrityError(
            f"not a {WATERMARK_FORMAT} document; delete it to check every run again", key=WATERMARK_KEY
        )
    return {str(r) for r in runs}, tag


@dataclass
class Scope:
    """What run manifests say their runs touched: record IDs, arXiv ids, and the
    record IDs they published events of (`events` names the manifest that says so)."""

    bodies: set[str] = field(default_factory=set)
    arxiv_ids: set[str] = field(default_factory=set)
    events: dict[str, str] = field(default_factory=dict)

    def add_pith_number(self, pith_number: str) -> None:
        self.bodies.add(pith_number.rsplit(":", 1)[-1])

    def add_object(self, key: str, manifest: str) -> None:
        arxiv_id = pointer_id(key)
        if arxiv_id is not None:
            self.arxiv_ids.add(arxiv_id)
        subject = subject_of(key)
        if subject is not None:
            prefix, body = subject
            self.bodies.add(body)
            if prefix == EVENTS:
                self.events.setdefault(body, manifest)


def manifest_scope(manifest: Any, key: str, scope: Scope | None = None) -> Scope:
    """What the run manifest `manifest` (stored at `key`) says its run touched: its
    Pith numbers, and every object it published (events, bundles, copies, pointers),
    added to `scope`."""
    scope = scope if scope is not None else Scope()
    if isinstance(manifest, dict):
        for pn in manifest.get("pith_numbers") or []:
            if isinstance(pn, str):
                scope.add_pith_number(pn)
        for obj in manifest.get("objects") or []:
            obj_key = obj.get("key") if isinstance(obj, dict) else None
            if isinstance(obj_key, str):
                scope.add_object(obj_key, key)
    return scope


#: A run manifest larger than this is scanned line by line, not parsed whole (a
#: backfill's lists about 1 KB per paper: millions of papers do not fit in memory).
MANIFEST_PARSE_BYTES = 64 << 20
_OBJECT_KEY_LINE = '      "key": '
_PITH_NUMBER_LINE = re.compile(r'    "(pith:[0-9]{4}:[A-Z2-7]{26})",?')


def _stored_manifest_scope(store: Store, key: str, scope: Scope) -> Scope:
    """`manifest_scope` of the run manifest `key`, streamed to a temporary file first.

    A large one is scanned line by line: run manifests are written as `dumps_pretty`
    writes them (`runs.manifest._encode`, byte for byte), so each object's key is on a
    line of its own at a fixed indent, and so is each Pith number."""
    import tempfile

    with tempfile.TemporaryFile(prefix="pith-manifest-") as fh:
        if not store.read_into(key, fh):
            return scope  # deleted since listed: nothing it touched can be named from it
        size = fh.tell()
        fh.seek(0)
        if size <= MANIFEST_PARSE_BYTES:
            return manifest_scope(loads_stored(fh.read(), key), key, scope)
        for raw in fh:
            line = raw.decode("utf-8").rstrip("\n")
            if line.startswith(_OBJECT_KEY_LINE):
                obj_key = loads(line[len(_OBJECT_KEY_LINE) :].rstrip(",").encode())
                if isinstance(obj_key, str):
                    scope.add_object(obj_key, key)
            elif (m := _PITH_NUMBER_LINE.fullmatch(line)) is not None:
                scope.add_pith_number(m.group(1))
        return scope


def drift_sample(store: Store, size: int, seed: str) -> list[str]:
    """Up to `size` record IDs drawn at random from the papers with events or a bundle.

    Drawn from the event store as well as the bundles, so a paper whose bundle was
    deleted can be drawn. On a store that can list from a key (S3), each draw is one
    short listing after a random record ID (IDs are hashes, so uniform), unless one
    listing of each prefix shows the store is small; elsewhere the store is listed
    whole. When the store holds at most `size` papers, all are drawn.
    """

    if size <= 0:
        return []
    rng = random.Random(seed)
    lister = store.list_after
    found: set[str] = set()
    small = True
    for prefix in _SUBJECT_PREFIXES[:2]:
        if lister is None:
            keys: Iterable[str] = store.list(prefix)
        else:
            keys = list(lister(prefix, prefix, _PAGE))
            small = small and len(keys) < _PAGE
        found.update(b for b in _listed(keys, prefix) if BODY.fullmatch(b))
    if lister is None or small:
        return sorted(rng.sample(sorted(found), min(size, len(found))))
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
    picked: set[str] = set()
    for draw in range(size * 2):  # some draws land on a paper already drawn
        if len(picked) >= size:
            break
        prefix = _SUBJECT_PREFIXES[draw % 2]
        start = prefix + "".join(rng.choice(alphabet) for _ in range(26))
        keys = list(lister(prefix, start, 32)) or list(lister(prefix, prefix, 32))  # wrap around
        bodies = [b for b in _listed(keys, prefix) if BODY.fullmatch(b)]
        if bodies:
            picked.add(bodies[0])
    return sorted(picked)


#: Keys one listing request returns (S3's most).
_PAGE = 1000


def _listed(keys: Iterable[str], prefix: str) -> Iterator[str]:
    for key in keys:
        if key.startswith(prefix):
            yield key[len(prefix) :].split("/", 1)[0]


def _is_derived(key: str) -> bool:
    """A finding `rebuild` can fix: a bundle, state, .well-known copy, page, page asset
    or arXiv pointer."""
    return is_derived(key)


def verify_changes(
    settings: Settings | None,
    *,
    sample_size: int,
    seed: str,
    store: Store | None = None,
    repair: bool = False,
) -> dict[str, Any]:
    """Check every paper the runs since the last clean check touched, and a sample.

    Reads the run manifests (`runs/<run_id>/manifest.json`) not listed in the
    watermark (`maintenance/verify-watermark.json`), and audits every paper they
    touched with `audit.audit_subjects` (the checks of `verify STORE`: events, bundle,
    state.json and the .well-known copy byte for byte, arXiv pointers), plus
    `sample_size` papers drawn at random from the whole store (`drift_sample`: damage
    done outside a run). Time is proportional to what changed, not to the store.

    On problems: with `repair`, re-derives bundles, states, copies and pointers from
    the event store (`rebuild_from_events`) and checks again; then raises
    `VerificationError` naming every remaining problem (the first `MAX_LISTED`, and
    the count) and the command that fixes them. The watermark is advanced only by a
    clean check, so a problem is reported by every check until it is fixed.
    """
    # lazy: the audit adds 45 ms, a run's steps 14 ms to importing this module (python -X importtime)
    from pith_pipeline.audit import audit_subjects

    if store is None:
        if settings is None:
            raise ValueError("verify_changes needs settings or a store")
        store = run_store(settings)
    checked, tag = _watermark(store)
    manifests = sorted(k for k in store.list(RUNS) if is_run_manifest(k))
    new = [k for k in manifests if k not in checked]
    scope = Scope()
    for key in new:
        _stored_manifest_scope(store, key, scope)
    bodies = scope.bodies
    sample = [b for b in drift_sample(store, sample_size, seed) if b not in bodies]

    def problems() -> _Problems:
        audit = audit_subjects(store, bodies | set(sample), scope.arxiv_ids)
        return _Problems.of(itertools.chain(audit, _vanished(store, scope)))

    found = problems()
    repaired: dict[str, Any] | None = None
    if found.count and repair:
        if settings is None:
            raise ValueError("repair needs settings (the signer)")
        log.warning("%d problems found; repairing with a rebuild from the event store", found.count)
        repaired = rebuild_from_events(settings, bundles=True, indexes=True, store=store)
        found = problems()
    if found.count:
        found.raise_for(store, papers=len(bodies) + len(sample))
    doc = {"format": WATERMARK_FORMAT, "checked_runs": manifests, "checked_at": iso_seconds(system_clock())}
    if not store.put_if_match(WATERMARK_KEY, dumps_compact(doc), tag):
        log.warning("%s changed during the check (another check?); left as it is", WATERMARK_KEY)
    out: dict[str, Any] = {
        "runs_checked": len(new),
        "papers_changed": len(bodies),
        "papers_sampled": len(sample),
        "failures": 0,
    }
    if repaired is not None:
        out["repaired"] = repaired
    return out


def _vanished(store: Store, scope: Scope) -> Iterator[Finding]:
    """A paper whose events a run manifest lists, with no event left at all.

    The audit cannot see it (nothing of it is left to check), but the manifest says
    it was published; events are write-once, so this is loss, not a change."""
    from pith_pipeline.audit import Finding  # lazy: 45 ms at import (python -X importtime)

    for body, manifest in sorted(scope.events.items()):
        if next(iter(store.list(event_prefix(body))), None) is None:
            yield Finding(event_prefix(body), f"missing: {manifest} lists its events, and none is left")


@dataclass
class _Problems:
    """The audit's findings, counted: every one, and the first `MAX_LISTED` as lines
    (a store damaged throughout is not held in memory to be reported)."""

    count: int = 0
    derived: int = 0
    shown: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, findings: Iterable[Finding]) -> _Problems:
        out = cls()
        for f in findings:
            out.count += 1
            out.derived += _is_derived(f.key)
            if len(out.shown) < MAX_LISTED:
                out.shown.append(f.line())
        return out

    def raise_for(self, store: Store, *, papers: int) -> None:
        """A `VerificationError` naming the problems, and the fix for the derived ones."""

        shown = "\n  ".join(self.shown)
        more = f"\n  ... and {self.count - len(self.shown)} more" if self.count > len(self.shown) else ""
        fix = []
        if self.derived:
            fix.append(
                f"{self.derived} of them are derived objects: `pith-pipeline rebuild --store {store.url} "
                "--signer <private key>` re-derives them from the event store "
                "(or trigger pith_maintenance with --conf '{\"repair\": true}')"
            )
        if self.derived < self.count:
            fix.append(
                f"{self.count - self.derived} are not derived (events, key document): rebuild cannot "
                f"fix them; `pith-pipeline verify {store.url}` explains each"
            )
        raise VerificationError(
            f"{self.count} problems in {papers} checked papers of {store.url}:\n  {shown}{more}\n"
            + "\n".join(fix)
        )


def verify_sample(settings: Settings, *, size: int, seed: str, store: Store | None = None) -> dict[str, Any]:
    """Audit `size` papers drawn at random (`drift_sample`) with the checks of
    `verify STORE`; raise naming every problem. No watermark is read or written."""
    # lazy: the audit adds 45 ms, a run's steps 14 ms to importing this module (python -X importtime)
    from pith_pipeline.audit import audit_subjects

    store = store or run_store(settings)
    sample = drift_sample(store, size, seed)
    found = _Problems.of(audit_subjects(store, sample))
    if found.count:
        found.raise_for(store, papers=len(sample))
    return {"checked": len(sample), "failures": 0}
