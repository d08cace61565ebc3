"""The end of a run: indexes, then the run manifest.

Publishing order, end to end: events (write-once) -> bundle and state -> arXiv
pointer (all per record, in `pipeline.Publisher`) -> indexes -> run manifest. The
run manifest is written last, so its presence says the run completed; a run that
died earlier leaves none, and the next run over the same window completes it.
"""

from __future__ import annotations

import io
import uuid
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from pith_pipeline.core.canonical_json import dumps_compact, dumps_pretty, loads
from pith_pipeline.core.timeutil import Clock, iso_seconds, system_clock
from pith_pipeline.errors import WriteConflictError
from pith_pipeline.index.writer import IndexUpdate, Progress, update_indexes
from pith_pipeline.pipeline import RunSummary
from pith_pipeline.storage.base import Store

RUN_MANIFEST_FORMAT = "pith-run-manifest-v1"


def run_manifest_key(run_id: str) -> str:
    return f"runs/{run_id}/manifest.json"


def reproducible_run_id(store: Store, clock: Clock, *inputs: bytes) -> str:
    """A run id that two identical builds share (for `SOURCE_DATE_EPOCH` builds).

    Made from the clock, the inputs and how many runs the store has finished, so a
    re-run into the same store still gets a new id (run manifests are write-once).
    """
    import hashlib

    done = sum(1 for k in store.list("runs/") if k.endswith("/manifest.json"))
    digest = hashlib.sha256(b"\0".join([*inputs, str(done).encode()])).hexdigest()
    return f"{clock():%Y%m%dT%H%M%SZ}-{digest[:6]}"


def touched_subjects(summary: RunSummary) -> list[str]:
    """Every record ID whose bundle this run wrote or found already published."""
    subjects = {s.rsplit(":", 1)[-1] for s in (*summary.seen, *summary.pith_numbers)}
    for key in summary.written:
        parts = key.split("/")
        if len(parts) == 3 and parts[0] == "pith" and parts[2] == "bundle.json":
            subjects.add(parts[1])
    return sorted(subjects)


def _sorted_objects(*ledgers: Mapping[str, str]) -> Iterator[tuple[str, str]]:
    """(key, sha256) of every ledger, later ones winning, in key order.

    Sorted in a temporary SQLite file (BINARY collation: UTF-8 byte order, which is
    code point order, as `sorted`), so a run of millions of objects is never held
    in memory as Python objects.
    """
    import sqlite3

    db = sqlite3.connect("")  # "": a private on-disk temporary database
    try:
        db.execute("CREATE TABLE o (k TEXT PRIMARY KEY, v TEXT NOT NULL)")
        for ledger in ledgers:
            db.executemany("INSERT INTO o VALUES (?, ?) ON CONFLICT(k) DO UPDATE SET "
                           "v = excluded.v", ledger.items())
        for k, v in db.execute("SELECT k, v FROM o ORDER BY k"):
            yield str(k), str(v)
    finally:
        db.close()


def _encode(doc: dict[str, Any], objects: Iterable[tuple[str, str]]) -> bytes:
    """`dumps_pretty(doc)` with `doc["objects"]` filled from `objects`, byte for byte,
    without building millions of dicts first."""
    sentinel = f"objects-{uuid.uuid4().hex}"
    head = dumps_pretty({**doc, "objects": sentinel})
    marker = b'"objects": ' + dumps_compact(sentinel)
    at = head.index(marker)
    out = io.BytesIO()
    out.write(head[:at])
    out.write(b'"objects": [')
    sep = b"\n"
    for k, v in objects:
        out.write(sep + b'    {\n      "key": ' + dumps_compact(k) + b',\n      "sha256": '
                  + dumps_compact(v) + b"\n    }")
        sep = b",\n"
    out.write(b"]" if sep == b"\n" else b"\n  ]")
    out.write(head[at + len(marker):])
    out.write(b"\n")
    return out.getvalue()


def write_manifest(store: Store, summary: RunSummary, *,
                   window: Mapping[str, Any] | None = None, index: IndexUpdate | None = None,
                   clock: Clock = system_clock) -> str:
    """Write `runs/<run_id>/manifest.json` (write-once); returns its key.

    Lists the window, the counts and every object the run wrote (published files,
    index files and the index manifest) with its sha256. Writing it again for the
    same run (same window and counts) keeps the first manifest; a different window
    or counts under the same run id is a `WriteConflictError`.
    """
    doc: dict[str, Any] = {
        "format": RUN_MANIFEST_FORMAT,
        "run_id": summary.run_id,
        "window": dict(window) if window else None,
        "counts": summary.counts(),
        "pith_numbers": sorted(summary.pith_numbers),
        "objects": [],  # streamed in by `_encode`
        "index": None if index is None else {
            "generation": index.generation, "rows": index.rows,
            "subjects_checked": index.subjects_checked,
            "subjects_changed": index.subjects_changed},
        "quarantine": f"quarantine/{summary.run_id}.jsonl" if summary.quarantined else None,
        "finished_at": iso_seconds(clock()),
    }
    key = run_manifest_key(summary.run_id)
    data = _encode(doc, _sorted_objects(summary.written, index.written if index else {}))
    existing = store.get(key)
    if existing is not None:
        old = loads(existing)
        same = ("run_id", "window", "counts", "pith_numbers")
        if isinstance(old, dict) and all(old.get(k) == doc[k] for k in same):
            return key  # this run already finished; its first manifest stands
        raise WriteConflictError(f"{store.url}/{key} already records a different run with this "
                                 "run id; run manifests are never overwritten")
    store.put_once(key, data)
    return key


def finish_run(store: Store, summary: RunSummary, window: Mapping[str, Any] | None = None, *,
               clock: Clock = system_clock, progress: Progress | None = None) -> str:
    """Finish a publishing run: update the Parquet indexes, then write the run manifest.

    Call it once after `Publisher.publish(...)` returned (CLI `build`/`ingest`, or an
    Airflow task holding the same `RunSummary`):

        summary = Publisher(store, signer, config).publish(items)
        manifest_key = finish_run(store, summary, {"from": "2019-09-01", "until": "2019-09-30"})

    `window` is free-form JSON describing what the run covered (dates, input file,
    set). Safe to call again after a failure: index updates are idempotent and the
    run manifest is write-once. Returns the run manifest's key.
    """
    update = update_indexes(store, touched_subjects(summary), run_id=summary.run_id,
                            clock=clock, progress=progress)
    return write_manifest(store, summary, window=window, index=update, clock=clock)
