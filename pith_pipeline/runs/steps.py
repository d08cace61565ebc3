"""The steps of one window, start to finish: build, publish, index, finish.

Plain Python, no Airflow: the Airflow tasks (`airflow_tasks.py`, via the DAGs) and
`pith-pipeline backfill` (`backfill.py`) both run a window through these, so the
backfill command needs nothing Airflow-shaped. Each step is a transaction for its
window, so a retry or a re-run gives the same result (see `airflow_tasks` for the
order and what each step writes).

Only the standard library, the error classes and this package's light modules at
import time (the DAG files import `airflow_tasks`, which imports this, while the
scheduler parses them); everything else is imported where used.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from pith_pipeline.config import Settings
from pith_pipeline.core.canonical_json import dumps_compact, loads_stored
from pith_pipeline.core.layout import quarantine_key, run_manifest_key
from pith_pipeline.errors import IncompleteRunError, InputError, StorageError
from pith_pipeline.errors import WriteConflictError as Conflict
from pith_pipeline.items import Rejected
from pith_pipeline.loader import Loader, numbered
from pith_pipeline.runs.chunks import iter_chunk_items
from pith_pipeline.runs.ending import Ending
from pith_pipeline.storage.base import Digest, put_file, read_into
from pith_pipeline.storage.factory import open_store
from pith_pipeline.storage.lease import parse_shards, writer_lease
from pith_pipeline.storage.staging import staged_key, staged_rejects_key

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from pith_pipeline.core.keys import Signer
    from pith_pipeline.storage.base import Store


def run_signer(settings: Settings) -> Signer:
    """The signer of a window's steps and of the maintenance tasks (`settings.signer`);
    `InputError` naming PITH_SIGNER when none is configured."""
    # lazy: nacl, 12 ms at import
    from pith_pipeline.signing.factory import open_signer

    if not settings.signer:
        raise InputError(
            "no signer configured: set PITH_SIGNER (file:PATH or "
            "kms-envelope:...) in the environment or as an Airflow Variable"
        )
    return open_signer(settings.signer, settings=settings)


def run_store(settings: Settings) -> Store:
    """The store of a window's steps, the harvest, backfill planning, maintenance and
    the report (`settings.store`). Every caller looks it up here when it runs, so a
    test that replaces it reaches them all."""

    return open_store(settings.store, **settings.store_options)


def _window_log_spec(settings: Settings, store: Store) -> str | None:
    """The log key the window's build chunks chose (`tlog.run_log.run_log_of`), found
    again by its last step, which appends; None when the store keeps no log."""
    # lazy: nacl, 96 ms at import
    from pith_pipeline.tlog.run_log import run_log_of

    return run_log_of(settings, store, generate=False).spec


def _publish_rank(key: str) -> int:
    """Events first, then bundles and states, then pointers: readers never see a
    pointer to a bundle that is not there, or a bundle whose events are missing."""
    if key.startswith("events/"):
        return 0
    if key.startswith(("pith/", ".well-known/")):
        return 1
    if key.startswith("arxiv/"):
        return 3
    return 2


def build_chunk(
    settings: Settings,
    run_id: str,
    chunk: Mapping[str, Any],
    *,
    signer: Signer | None = None,
    store: Store | None = None,
    io_concurrency: int | None = None,
) -> dict[str, Any]:
    """Build, sign and publish one chunk as a `Run`, holding the writer leases of its shards.

    Why publish here rather than stage for a later task: the decision "this paper is
    new" is only sound while nobody else can write the paper, so deciding and writing
    happen under one lease (a concurrent window of `backfill create` waits its turn).
    The run ends by staging (`StagedChunk`), not by indexing: the staged object holds
    only the chunk's counts and the objects it wrote; its quarantine entries, spooled
    to disk as they come, are an object of their own beside it (`staged_rejects_key`),
    so neither memory, the header nor the XCom grows with what a hostile chunk rejects
    (each reject keeps its raw input). `publish` streams them into the quarantine,
    `index` and `manifest` read the counts. Papers are published in this process by
    the `Loader`, `io_concurrency` at once (None: the store's default, 32 on S3).
    Returns `{"staged": key, "records": n, "built": n, ...}`.
    """
    # lazy: nacl, pith_pipeline.publish, 107 ms at import
    from pith_pipeline.runs.run import Run

    rejects = bool(chunk.get("rejects", True))
    with Run.open(
        settings,
        command=f"airflow build chunk {int(chunk['index'])}",
        store=store or run_store(settings),
        signer=signer or run_signer(settings),
        run_id=run_id,
        shards=parse_shards(str(chunk["shards"])) if chunk.get("shards") else None,
        workers=1,
        io_concurrency=io_concurrency,
        lease_wait=settings.lease_wait_seconds,
        notice=log.warning,
        ending=StagedChunk(int(chunk["index"])),
    ) as run:
        pub = run.publisher
        pub.publish_key_document()
        items = (
            item
            for item in iter_chunk_items(run.store, chunk)
            # a reject is quarantined by one task only (the others leave it out)
            if rejects or not isinstance(item, Rejected)
        )
        # not `run.publish`: a damaged chunk must leave no quarantine object behind
        # (the window's `publish` step stores the quarantine of all its chunks)
        Loader(pub).run(numbered(items), into=pub.quarantine.batch())
    return dict(run.result)


class StagedChunk(Ending):
    """How an Airflow build chunk's `Run` ends (`runs.run.Ending`): its rejects and
    its header (counts and the objects written, `RunSummary.to_header`) staged for
    the window's `publish`, `index` and `manifest` tasks; nothing indexed, no
    manifest. `holds_index`/`indexes_rows`: no index lease, no index rows kept."""

    holds_index = False
    indexes_rows = False

    def __init__(self, index: int) -> None:
        self.index = index

    def finish(self, run: Any) -> None:
        pub, store = run.publisher, run.store
        key = staged_key(run.run_id, self.index, secrets.token_hex(4))
        rejects_key = None
        if pub.quarantine:  # stored before the header that names it
            rejects_key = staged_rejects_key(key)
            with pub.quarantine.ordered_file() as path:
                put_file(store, rejects_key, path, content_type="application/x-ndjson")
            pub.quarantine.close()
        header: dict[str, Any] = {
            "chunk": self.index,
            "run_id": run.run_id,
            "rejects": rejects_key,
            **pub.summary.to_header(),
        }
        store.put(key, dumps_compact(header) + b"\n", content_type="application/x-ndjson")
        run.result = {"staged": key, "objects": len(header["written"]), **header["counts"]}


def _read_staged(store: Store, key: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:

    data = store.get(key)
    if data is None:
        raise StorageError(
            f"staged chunk {key} is missing from {store.url}; re-run the build task for this window"
        )
    lines = [loads_stored(line, key) for line in data.splitlines() if line.strip()]
    return lines[0], lines[1:]


def _write_rejects(store: Store, headers: Iterable[Mapping[str, Any]], out: Digest) -> None:
    """The quarantine lines of staged chunks (`headers`, in chunk order) to `out`, one
    piece at a time: each chunk's rejects object, or the entries a chunk staged by an
    older version kept in its header."""

    for header in headers:
        for entry in header.get("quarantine") or ():
            out.write(dumps_compact(entry) + b"\n")
        key = header.get("rejects")
        if isinstance(key, str) and not read_into(store, key, out):
            raise StorageError(
                f"staged quarantine {key} is missing from {store.url}; re-run the build task for this window"
            )


def publish_staged(
    settings: Settings, staged_keys: Iterable[str], *, store: Store | None = None
) -> dict[str, int]:
    """Copy staged objects into place; safe to repeat after any failure.

    Write-once objects (events) that are there already count as done; derived
    objects are replaced only when their bytes differ. The chunks' quarantine entries
    are copied into `quarantine/<run_id>.jsonl` through a temporary file, a piece at a
    time (`_write_rejects`). Returns counts.
    """
    import os
    import tempfile

    store = store or run_store(settings)
    objects: dict[str, dict[str, Any]] = {}
    rejects: dict[str, list[dict[str, Any]]] = {}
    for key in sorted(set(staged_keys)):
        header, staged = _read_staged(store, key)
        rejects.setdefault(header["run_id"], []).append(header)
        for obj in staged:
            objects.setdefault(obj["key"], obj)  # same key: same bytes (pointer key docs)
    written = skipped = 0
    from contextlib import nullcontext

    if objects:
        # paper objects of a chunk staged by an older version (today's build task
        # publishes them itself): written under the paper leases, like every paper write
        runs = ",".join(sorted(rejects))
        lease: Any = writer_lease(
            store,
            command="airflow publish",
            run_id=runs,
            wait=settings.lease_wait_seconds,
            on_wait=log.warning,
        )
    else:
        lease = nullcontext()
    with lease:
        for obj in sorted(objects.values(), key=lambda o: (_publish_rank(o["key"]), o["key"])):
            data = obj["data"].encode("utf-8")
            if obj["once"]:
                if store.put_once(obj["key"], data):
                    written += 1
                else:
                    skipped += 1
            elif store.get(obj["key"]) == data:
                skipped += 1
            else:
                store.put(obj["key"], data)
                written += 1
    quarantined = 0
    for run_id, headers in sorted(rejects.items()):
        with tempfile.TemporaryDirectory(prefix="pith-quarantine-") as tmp:
            path = os.path.join(tmp, "quarantine.jsonl")
            with open(path, "wb") as fh:
                body = Digest(fh)
                _write_rejects(store, headers, body)
            if not body.lines:
                continue
            quarantined += body.lines
            there = Digest()
            if not read_into(store, quarantine_key(run_id), there) or there.hexdigest() != body.hexdigest():
                put_file(store, quarantine_key(run_id), path, content_type="application/x-ndjson")
                written += 1
    return {"objects": len(objects), "written": written, "already_there": skipped, "quarantined": quarantined}


def window_summary(store: Store, run_id: str, staged_keys: Iterable[str]) -> Any:
    """The window's `RunSummary`, rebuilt from its staged chunks (same on every retry)."""
    # lazy: nacl, pith_pipeline.publish, 97 ms at import
    from pith_pipeline.publish import RunSummary

    summary = RunSummary(run_id)
    headers: list[dict[str, Any]] = []
    for key in sorted(set(staged_keys)):
        header, staged = _read_staged(store, key)
        part = RunSummary.from_header(run_id, header)
        for obj in staged:  # staged objects of a run started before the upgrade
            part.written[obj["key"]] = sha256_hex(obj["data"].encode("utf-8"))
        headers.append(header)
        summary.add(part)
    body = Digest()
    _write_rejects(store, headers, body)  # the bytes `publish_staged` stores, hashed as they come
    if body.lines:
        summary.written[quarantine_key(run_id)] = body.hexdigest()
    summary.pith_numbers.sort()
    summary.seen = sorted(set(summary.seen))
    return summary


def index_window(
    settings: Settings, run_id: str, staged_keys: Iterable[str], *, store: Store | None = None
) -> dict[str, Any]:
    """Update the Parquet indexes for every record of the window (idempotent)."""
    # lazy: nacl, pith_pipeline.index, pyarrow, 231 ms at import
    from pith_pipeline.index import update_indexes

    # lazy: nacl, pith_pipeline.index, pith_pipeline.publish, 244 ms at import
    from pith_pipeline.runs.manifest import touched_subjects

    store = store or run_store(settings)
    summary = window_summary(store, run_id, staged_keys)
    with writer_lease(
        store,
        command="airflow index",
        run_id=run_id,
        papers=False,
        index=True,
        wait=settings.lease_wait_seconds,
        on_wait=log.warning,
    ):
        update = update_indexes(store, touched_subjects(summary), run_id=run_id)
    return {
        "versions": dict(update.versions),
        "rows": dict(update.rows),
        "subjects_checked": update.subjects_checked,
        "subjects_changed": update.subjects_changed,
        "commits": dict(update.commits),
    }


def finish_window(
    settings: Settings,
    harvested: Mapping[str, Any],
    staged_keys: Iterable[str],
    indexed: Mapping[str, Any],
    published: Mapping[str, Any],
    *,
    store: Store | None = None,
) -> dict[str, Any]:
    """Write the window's run manifest, then remove its staging objects.

    The manifest `runs/<run_id>/manifest.json` is write-once. Re-running a complete
    window that published nothing new leaves it as it is; a re-run that did
    publish something (a repair) gets its own `runs/<run_id>-rerun-N/manifest.json`.
    """
    # lazy: nacl, pith_pipeline.index, pyarrow, 166 ms at import
    from pith_pipeline.index import IndexUpdate

    # lazy: nacl, pith_pipeline.index, pith_pipeline.publish, 239 ms at import
    from pith_pipeline.runs.manifest import write_manifest

    store = store or run_store(settings)
    staged_keys = sorted(set(staged_keys))
    run_id = str(harvested["run_id"])
    summary = window_summary(store, run_id, staged_keys)
    update = IndexUpdate(
        versions={str(k): int(v) for k, v in dict(indexed["versions"]).items()},
        subjects_checked=int(indexed["subjects_checked"]),
        subjects_changed=int(indexed["subjects_changed"]),
        rows=dict(indexed["rows"]),
        commits={str(k): [int(v) for v in vs] for k, vs in dict(indexed["commits"]).items()},
    )
    window = {
        **harvested["window"],
        "source": harvested["source"],
        "pages": list(harvested.get("pages", [])),
        **({"snapshot": harvested["snapshot"]} if "snapshot" in harvested else {}),
    }
    key = run_manifest_key(run_id)
    changed = int(published.get("written", 0)) or update.subjects_changed
    status = "written"
    notes: dict[str, Any] = {"warnings": list(harvested.get("warnings", []))}
    if "outside_window" in harvested:  # an OAI harvest (runs.harvest): records outside its window
        notes["extra_counts"] = {"outside_window": int(harvested["outside_window"])}
        notes["outside_window"] = list(harvested.get("outside_window_records", []))

    # the log append's key: the one the window's build chunks chose
    notes["log_signer"] = _window_log_spec(settings, store)
    notes["log_origin"] = settings.log_origin
    try:
        write_manifest(store, summary, window=window, index=update, **notes)
    except Conflict:
        if not changed:
            status = "unchanged"  # a complete window, run again: nothing new to record
        else:
            n = 2
            while store.exists(run_manifest_key(f"{run_id}-rerun-{n}")):
                n += 1
            summary.run_id = f"{run_id}-rerun-{n}"
            key = write_manifest(store, summary, window=window, index=update, **notes)
            status = "rerun"
    for staged in staged_keys:  # only ours: another run of the window may be building
        store.delete(staged_rejects_key(staged))
        store.delete(staged)
    if summary.failed:
        for problem in summary.problems:
            log.error("not published: %s", problem)
        raise IncompleteRunError(
            f"run {summary.run_id}: {summary.failed} papers were not published because stored objects "
            f"failed their checks (logged above; run manifest {key}); inspect them with "
            "`pith-pipeline verify STORE`"
        )
    return {"manifest": key, "status": status, **summary.counts()}


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
