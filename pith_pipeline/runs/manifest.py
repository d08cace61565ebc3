"""The end of a run: indexes, then the run manifest (`runs/<run_id>/manifest.json`).

Publishing order, end to end: events (write-once) -> bundle and state -> arXiv
pointer (all per record, in `pipeline.Publisher`) -> indexes -> run manifest. The
run manifest is written last, so its presence says the run completed; a run that
died earlier leaves none, and the next run over the same window completes it.
"""

from __future__ import annotations

import heapq
import tempfile
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from pith_pipeline._internal.disk_backed import Ledger, iter_sorted, sorted_unique
from pith_pipeline.clock import system_clock
from pith_pipeline.core.canonical_json import dumps_compact, dumps_pretty, loads_stored
from pith_pipeline.core.layout import RUN_MANIFEST_FORMAT, RUNS, quarantine_key, run_manifest_key
from pith_pipeline.core.timeutil import Clock, iso_seconds
from pith_pipeline.errors import WriteConflictError
from pith_pipeline.index.outcome import IndexUpdate, Progress
from pith_pipeline.index.sink import RowSink
from pith_pipeline.index.update import update_indexes
from pith_pipeline.pages.site import publish_home_page
from pith_pipeline.publish import RunSummary
from pith_pipeline.storage.base import Store, barrier, put_once_file
from pith_pipeline.tlog.log import LogSigner
from pith_pipeline.tlog.pipeline import log_run, log_signer_for

if TYPE_CHECKING:
    from pith_pipeline.tlog.append import LogRun


def reproducible_run_id(store: Store, clock: Clock, *inputs: bytes) -> str:
    """A run id that two identical builds share (for `SOURCE_DATE_EPOCH` builds).

    Made from the clock, the inputs and how many runs the store has finished, so a
    re-run into the same store still gets a new id (run manifests are write-once).
    """
    import hashlib

    done = sum(1 for k in store.list(RUNS) if k.endswith("/manifest.json"))
    digest = hashlib.sha256(b"\0".join([*inputs, str(done).encode()])).hexdigest()
    return f"{clock():%Y%m%dT%H%M%SZ}-{digest[:6]}"


def touched_subjects(summary: RunSummary) -> Iterator[str]:
    """Every record ID whose bundle this run wrote or found already published, sorted.

    Streamed (a backfill touches millions): the run's lists and ledger may live on disk.
    """

    def all_ids() -> Iterator[str]:
        for items in (summary.seen, summary.pith_numbers):
            for s in items:
                yield s.rsplit(":", 1)[-1]
        for key in summary.written:
            parts = key.split("/")
            if len(parts) == 3 and parts[0] == "pith" and parts[2] == "bundle.json":
                yield parts[1]

    return sorted_unique(all_ids())


def _sorted_objects(written: Mapping[str, str], later: Mapping[str, str]) -> Iterator[tuple[str, str]]:
    """(key, sha256) of the run's ledger and of `later` (which wins a shared key), in key
    order, streamed: a spilled ledger sorts in its own SQLite file (BINARY collation:
    UTF-8 byte order, which is code point order, as `sorted`), never copied or loaded.
    """
    first = written.sorted_items() if isinstance(written, Ledger) else iter(sorted(written.items()))
    merged = heapq.merge(((k, 0, v) for k, v in first), ((k, 1, v) for k, v in sorted(later.items())))
    pending: tuple[str, str] | None = None
    for k, _rank, v in merged:
        if pending is not None and pending[0] != k:
            yield pending
        pending = (k, v)  # of equal keys the later mapping's comes last, and wins
    if pending is not None:
        yield pending


def _pretty_items(items: Iterable[bytes]) -> Iterator[bytes]:
    """A list at the top level of `dumps_pretty`'s output, item by item (2-space indent)."""
    sep = b"\n"
    yield b"["
    for item in items:
        yield sep + item
        sep = b",\n"
    yield b"]" if sep == b"\n" else b"\n  ]"


def _encode(out: IO[bytes], doc: dict[str, Any], lists: Mapping[str, Iterable[bytes]]) -> None:
    """Write `dumps_pretty(doc) + b"\\n"` with each `doc[name]` for `name` in `lists`
    filled from already-indented items, byte for byte, without building the lists.

    A run manifest of a backfill lists millions of objects: it is streamed into `out`.
    """
    sentinels = {name: f"{name}-{uuid.uuid4().hex}" for name in lists}
    head = dumps_pretty({**doc, **sentinels})
    pos = 0
    marks = sorted(
        (head.index(b'"' + name.encode() + b'": ' + dumps_compact(sentinel)), name)
        for name, sentinel in sentinels.items()
    )
    for at, name in marks:
        out.write(head[pos:at] + b'"' + name.encode() + b'": ')
        for chunk in _pretty_items(lists[name]):
            out.write(chunk)
        pos = at + len(b'"' + name.encode() + b'": ' + dumps_compact(sentinels[name]))
    out.write(head[pos:])
    out.write(b"\n")


def _object_items(objects: Iterable[tuple[str, str]]) -> Iterator[bytes]:
    for k, v in objects:
        yield (
            b'    {\n      "key": '
            + dumps_compact(k)
            + b',\n      "sha256": '
            + dumps_compact(v)
            + b"\n    }"
        )


def _string_items(values: Iterable[str]) -> Iterator[bytes]:
    for v in values:
        yield b"    " + dumps_compact(v)


def write_manifest(
    store: Store,
    summary: RunSummary,
    *,
    window: Mapping[str, Any] | None = None,
    index: IndexUpdate | None = None,
    clock: Clock = system_clock,
    log_entries: RowSink | None = None,
    extra_counts: Mapping[str, int] | None = None,
    warnings: Sequence[Mapping[str, Any]] = (),
    outside_window: Sequence[Mapping[str, Any]] | None = None,
    log_signer: str | None = None,
    log_origin: str | None = None,
) -> str:
    """Write `runs/<run_id>/manifest.json` (write-once); returns its key.

    `extra_counts` join the publisher's counts (a harvest's `outside_window`);
    `warnings`: what the run found doubtful without failing, each with a stable `code`
    (`outside-window`, `empty-weekday`), always listed (empty when none);
    `outside_window`: the records a server listed outside the window asked for
    (a harvest's first `OUTSIDE_WINDOW_LISTED`), listed when given.

    First the run's events go into the transparency log, if the store keeps one:
    `log_signer` is the run's log key spec (`tlog.run_log.prepare_run_log`'s
    `RunLog.spec`; None: no log) and `log_origin` the log's origin (the `log_origin`
    setting; None: the key document's); `log_entries`: the entries the run's
    publishers made as they wrote, so the events are not read back.

    Lists the window, the counts, the index tables' Delta versions the run produced
    (`index.commits`: per table, every version this run committed; `index.versions`:
    the newest of them) and every object the run published with its sha256. Writing it again for the
    same run (same window and counts) keeps the first manifest; a different window
    or counts under the same run id is a `WriteConflictError`. The document is
    written to a temporary file and stored from there, so its size (about 1 KB per
    paper) never has to fit in memory.
    """
    logged = _log_events(store, summary, log_entries, log_signer_for(log_signer, store, log_origin))
    doc: dict[str, Any] = {
        "format": RUN_MANIFEST_FORMAT,
        "run_id": summary.run_id,
        "window": dict(window) if window else None,
        "counts": {**summary.counts(), **(extra_counts or {})},
        "warnings": [dict(w) for w in warnings],
        "pith_numbers": [],  # streamed in by `_encode`
        "objects": [],  # streamed in by `_encode`
        "index": None if index is None else _index_entry(index),
        "quarantine": quarantine_key(summary.run_id) if summary.quarantined else None,
        "finished_at": iso_seconds(clock()),
    }
    if outside_window is not None:
        doc["outside_window"] = [dict(o) for o in outside_window]
    if logged is not None and logged.result is not None:
        doc["log"] = logged.manifest_entry()  # the checkpoint this run produced
    key = run_manifest_key(summary.run_id)
    if _already_written(store, key, doc, summary):
        return key  # this run already finished; its first manifest stands

    # the store's home page: its figures as this run leaves them, and when it changed
    publish_home_page(store, doc["finished_at"], changed=len(summary.written) > 0)
    _store_manifest(store, key, doc, summary)
    return key


def _log_events(
    store: Store, summary: RunSummary, log_entries: RowSink | None, log: LogSigner | None
) -> LogRun | None:
    """The run's events into the store's transparency log, when it keeps one (see
    `write_manifest`); what the log run did, for the manifest's `log` entry."""
    return log_run(
        store, summary.written, log, entries=log_entries, pending=summary.log_pending, run_id=summary.run_id
    )


def _index_entry(index: IndexUpdate) -> dict[str, Any]:
    """The manifest's `index`: the Delta versions the run committed, table by table."""
    return {
        "format": "delta",
        "versions": dict(sorted(index.versions.items())),
        "commits": {k: sorted(v) for k, v in sorted(index.commits.items())},
        "rows": index.rows,
        "subjects_checked": index.subjects_checked,
        "subjects_changed": index.subjects_changed,
    }


def _already_written(store: Store, key: str, doc: Mapping[str, Any], summary: RunSummary) -> bool:
    """True when `key` holds this same run's manifest (same run id, window, counts and
    pith numbers); False when there is none. Another run's manifest under the key is a
    `WriteConflictError`: run manifests are never overwritten."""
    existing = store.get(key)
    if existing is None:
        return False
    old = loads_stored(existing, key)
    same = ("run_id", "window", "counts")
    if (
        isinstance(old, dict)
        and all(old.get(k) == doc[k] for k in same)
        and old.get("pith_numbers") == list(iter_sorted(summary.pith_numbers))
    ):
        return True
    raise WriteConflictError(
        f"{store.url}/{key} already records a different run with this "
        "run id; run manifests are never overwritten"
    )


def _store_manifest(store: Store, key: str, doc: dict[str, Any], summary: RunSummary) -> None:
    """Write the manifest once, through a temporary file (its lists streamed in), after
    every object it lists is durable, and make it durable before the run reports it."""
    with tempfile.TemporaryDirectory(prefix="pith-manifest-") as tmp:
        path = Path(tmp) / "manifest.json"
        with path.open("wb") as fh:
            _encode(
                fh,
                doc,
                {
                    "pith_numbers": _string_items(iter_sorted(summary.pith_numbers)),
                    "objects": _object_items(_sorted_objects(summary.written, {})),
                },
            )
        barrier(store)  # every object it lists is durable before the manifest claims it
        put_once_file(store, key, path)
    barrier(store)  # and the manifest itself before the run reports it


def finish_run(
    store: Store,
    summary: RunSummary,
    window: Mapping[str, Any] | None = None,
    *,
    clock: Clock = system_clock,
    progress: Progress | None = None,
    rows: RowSink | None = None,
    extra_counts: Mapping[str, int] | None = None,
    warnings: Sequence[Mapping[str, Any]] = (),
    outside_window: Sequence[Mapping[str, Any]] | None = None,
    log_signer: str | None = None,
    log_origin: str | None = None,
) -> str:
    """Finish a publishing run: update the index tables, then write the run manifest.

    Call it once after `Publisher.publish(...)` returned (CLI `build`/`ingest`, or an
    Airflow task holding the same `RunSummary`):

        summary = Publisher(store, signer, config).publish(items)
        manifest_key = finish_run(store, summary, {"from": "2019-09-01", "until": "2019-09-30"})

    `window` is free-form JSON describing what the run covered (dates, input file,
    set). Safe to call again after a failure: index updates are idempotent and the
    run manifest is write-once. Returns the run manifest's key.

    `rows`: the index rows of the bundles the run wrote (a `RowSink` its publishers
    fed through `Publisher(on_bundle=sink.add_bundle)`); those bundles are then not
    read back from the store. The sink's directory is not removed here.
    `extra_counts`, `warnings`, `outside_window`, `log_signer`, `log_origin`: as for
    `write_manifest`.
    """
    barrier(store)  # the published papers are durable before the index lists them
    update = update_indexes(
        store, touched_subjects(summary), rows=rows, run_id=summary.run_id, clock=clock, progress=progress
    )
    barrier(store)  # and the index tables' version notes before the log and manifest claim the run
    return write_manifest(
        store,
        summary,
        window=window,
        index=update,
        clock=clock,
        log_entries=rows,
        extra_counts=extra_counts,
        warnings=warnings,
        outside_window=outside_window,
        log_signer=log_signer,
        log_origin=log_origin,
    )
