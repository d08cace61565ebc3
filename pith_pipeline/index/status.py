"""What is published in a store: its index tables, run manifests and quarantine.

The default reads only small objects (each table's Delta log, the `runs/` and
`quarantine/` listings, the last 64 KiB of each run manifest for the time it
finished, then the last run's manifest) plus the Parquet footers the row counts
need, so it is cheap on a large S3 store; `deep` also lists every bundle and event object and
reports bundles missing from the index.

A damaged index (an unreadable log or Parquet file) is one `StorageError` naming
the object and saying to run `reindex` (the CLI prints it on one line, exit code 1).
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from functools import partial
from typing import Any

from pith_pipeline.core.canonical_json import loads_stored
from pith_pipeline.core.layout import RUN_MANIFEST_FORMAT, RUNS, is_run_manifest
from pith_pipeline.errors import StorageError
from pith_pipeline.index.bundles import all_bundle_keys
from pith_pipeline.index.dataset import arrow_source
from pith_pipeline.index.delta import location
from pith_pipeline.index.query import connect, needs_views, read_error
from pith_pipeline.index.schema import TABLES
from pith_pipeline.index.tables import live_files, open_table, table_exists
from pith_pipeline.storage.base import Store, read_into


def _tables(store: Store) -> dict[str, Any]:
    loc = location(store)
    out: dict[str, Any] = {}
    for name, spec in TABLES.items():
        if not table_exists(loc, spec):
            out[name] = {"version": None, "rows": 0, "files": 0, "bytes": 0, "partitions": 0}
            continue
        dt = open_table(loc, spec)
        files = live_files(dt, spec)
        out[name] = {
            "version": dt.version(),
            "rows": sum(f["rows"] for f in files),
            "files": len(files),
            "bytes": sum(f["bytes"] for f in files),
            "partitions": len({f["partition"] for f in files}),
        }
    return out


class _RecordLines:
    """Counts the non-blank lines of what is written to it, one piece at a time."""

    def __init__(self) -> None:
        self.count = 0
        self._open = False  # the current line has something besides blanks

    def write(self, data: bytes) -> None:
        *done, rest = data.split(b"\n")
        for piece in done:
            if self._open or piece.strip():
                self.count += 1
            self._open = False
        self._open = self._open or bool(rest.strip())

    def end(self) -> None:
        """The end of a file: its last line may have no newline."""
        if self._open:
            self.count += 1
        self._open = False


#: bytes read from the end of a run manifest to find its `finished_at` (its last
#: top-level fields but the log entry: the objects it lists come first)
MANIFEST_TAIL = 64 * 1024
_FINISHED_AT = re.compile(rb'\n  "finished_at": ("(?:[^"\\\n]|\\.)*")')
_NEVER = datetime.min.replace(tzinfo=UTC)


def _when(value: object) -> datetime:
    """A manifest's `finished_at` as a time; a missing or unreadable one sorts first."""
    if not isinstance(value, str):
        return _NEVER
    try:
        at = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return _NEVER
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


def _tail(store: Store, key: str, size: int) -> bytes | None:
    """The last `size` bytes of an object, read by range where the store can (a local
    or S3 store, through its pyarrow filesystem); None where it cannot."""
    try:
        fs, root = arrow_source(store)
    except StorageError:
        return None
    try:
        with fs.open_input_file(f"{root}/{key}") as fh:
            total = fh.size()
            start = max(0, total - size)
            return bytes(fh.read_at(total - start, start))
    except (OSError, ValueError):
        return None  # read whole by the caller, whose errors name the object


def finished_at(store: Store, key: str) -> datetime:
    """When the run of manifest `key` finished (its `finished_at`).

    Read from the manifest's last bytes: a backfill's manifest lists millions of
    objects before it. A manifest whose end does not hold it is read whole.
    """
    tail = _tail(store, key, MANIFEST_TAIL)
    if tail is not None:
        found = _FINISHED_AT.findall(tail)
        if found:
            return _when(json.loads(found[-1]))
    data = store.get(key)
    doc = loads_stored(data, key) if data else None
    return _when(doc.get("finished_at") if isinstance(doc, dict) else None)


def last_finished(store: Store, manifests: list[str]) -> str:
    """The manifest of the run that finished last; runs that finished in the same
    second are ordered by their keys.

    Why by the recorded time: only `build`/`ingest` run ids start with their start
    time; a backfill's are its kind and window (`snapshot-2019-09-01--2019-10-01`,
    `ingest-2019-09-29-rerun-1`), which sort after every timestamped id whenever the
    backfill ran. Each manifest's time costs one small ranged read, several at once.
    """
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=min(16, len(manifests))) as pool:
        times = list(pool.map(partial(finished_at, store), manifests))
    return max(zip(times, manifests, strict=True))[1]


def status(store: Store, *, deep: bool = False) -> dict[str, Any]:
    import duckdb
    import pyarrow as pa

    tables = _tables(store)
    out: dict[str, Any] = {"store": store.url, "index": {"location": location(store).base, "tables": tables}}
    for views in (False, True):
        con = connect(store, views=views)
        try:
            for name in TABLES:
                row = con.sql(f"SELECT count(*) FROM {name}").fetchall()[0]
                tables[name]["rows"] = int(row[0]) if row else 0
            latest = con.sql("SELECT count(*) FROM records WHERE superseded_by IS NULL").fetchall()[0]
            indexed = {r[0] for r in con.sql("SELECT bundle_key FROM records").fetchall()} if deep else set()
            break
        except (duckdb.Error, OSError, pa.ArrowException) as exc:
            if not views and needs_views(exc):
                continue
            raise read_error(store, exc) from None
        finally:
            con.close()
    out["records"] = tables["records"]["rows"]
    out["latest_versions"] = int(latest[0]) if latest else 0
    out["events"] = tables["events"]["rows"]
    runs = [k for k in store.list(RUNS) if is_run_manifest(k)]
    out["runs"] = len(runs)
    out["last_run"] = None
    if runs:
        last = last_finished(store, runs)
        data = store.get(last)
        doc = loads_stored(data, last) if data else {}
        if isinstance(doc, dict) and doc.get("format") == RUN_MANIFEST_FORMAT:
            out["last_run"] = {
                "key": last,
                "run_id": doc.get("run_id"),
                "finished_at": doc.get("finished_at"),
                "window": doc.get("window"),
                "counts": doc.get("counts"),
                "objects": len(doc.get("objects") or []),
            }
    quarantine = [k for k in store.list("quarantine/") if k.endswith(".jsonl")]
    counter = _RecordLines()
    for key in quarantine:
        read_into(store, key, counter)  # a piece at a time: a quarantine can be large
        counter.end()
    out["quarantine"] = {"files": len(quarantine), "records": counter.count}
    if deep:
        bundles = all_bundle_keys(store)
        out["bundles"] = len(bundles)
        out["event_objects"] = sum(1 for k in store.list("events/") if k.endswith(".json"))
        out["bundles_not_indexed"] = sorted(set(bundles) - indexed)[:20]
        out["bundles_not_indexed_count"] = len(set(bundles) - indexed)
    return out


def format_status(st: dict[str, Any]) -> str:
    lines = [f"store: {st['store']}"]
    idx = st["index"]
    lines.append(f"index: Delta tables under {idx['location']}")
    for name, t in idx["tables"].items():
        version = "not created" if t["version"] is None else f"version {t['version']}"
        lines.append(
            f"  {name:8} {version:>14}  {t['rows']:>10} rows  {t['files']:>5} files  "
            f"{t['bytes']:>12} bytes  {t['partitions']:>4} partitions"
        )
    lines.append(
        f"records: {st['records']} ({st['latest_versions']} latest versions), events: {st['events']}"
    )
    if "bundles" in st:
        lines.append(
            f"objects: {st['bundles']} bundles, {st['event_objects']} events; "
            f"{st['bundles_not_indexed_count']} bundles not indexed"
        )
        lines += [f"  not indexed: {k}" for k in st["bundles_not_indexed"]]
    lines.append(f"runs: {st['runs']}")
    if st["last_run"]:
        lr = st["last_run"]
        counts = ", ".join(f"{k} {v}" for k, v in (lr["counts"] or {}).items())
        lines.append(
            f"last run: {lr['run_id']} finished {lr['finished_at']}; {counts}; "
            f"window {lr['window']}; {lr['objects']} objects written"
        )
    q = st["quarantine"]
    lines.append(f"quarantined: {q['records']} records in {q['files']} files (quarantine/)")
    return "\n".join(lines)
