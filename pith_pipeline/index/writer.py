"""Writing the Parquet indexes: incremental updates, compaction and full reindex.

Every change follows one pattern, so readers never see half of it:

1. write new Parquet files under names nobody reads yet
   (`index/<table>/<col>=<value>/part-g<generation>-<stamp>-<random>.parquet`);
2. swap `index/_manifest.json` in one compare-and-swap (see `manifest`);
3. only files that a manifest retired at least a grace period ago are deleted.

An update adds one small file per touched partition; a partition holding more than
`max_parts` files is compacted in the same commit, and `compact` folds every
partition into one deduplicated, sorted file. Rows carry `index_seq` (the
generation that wrote them) so that, between compactions, readers keep the newest
row per key (see `schema`).
"""

from __future__ import annotations

import hashlib
import io
import re
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from itertools import chain, islice
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from pith_pipeline.core.canonical_json import loads
from pith_pipeline.core.timeutil import Clock, iso_seconds, system_clock
from pith_pipeline.errors import StorageError
from pith_pipeline.index import manifest as mf
from pith_pipeline.index.rows import Rows, rows_from_bundle
from pith_pipeline.index.schema import SEQ, TABLES, TableSpec
from pith_pipeline.spill import sorted_unique
from pith_pipeline.storage.base import Store

Progress = Callable[[int], None]
DEFAULT_MAX_PARTS = 8
DEFAULT_GRACE_SECONDS = 3600
REINDEX_CHUNK = 10_000  # bundles per chunk of a full reindex (memory bound)
UPDATE_BATCH = 10_000  # subjects per batch of an index update
COMPACT_ROWS = 40_000  # rows one compaction step of an update reads at most (memory bound)
_STAMP = re.compile(r"part-g\d+-(\d{8}T\d{6}Z)-[0-9a-f]+\.parquet$")


@dataclass(slots=True)
class IndexUpdate:
    """What an index change did: generation committed, rows and files written."""

    generation: int
    subjects_checked: int = 0
    subjects_changed: int = 0
    rows: dict[str, int] = field(default_factory=dict)
    compacted_partitions: int = 0
    written: dict[str, str] = field(default_factory=dict)  # key -> sha256
    deleted: list[str] = field(default_factory=list)

    def line(self) -> str:
        rows = ", ".join(f"{k} {v}" for k, v in self.rows.items()) or "no new rows"
        return (
            f"index generation {self.generation}: {self.subjects_changed} of "
            f"{self.subjects_checked} records changed ({rows}); "
            f"{self.compacted_partitions} partitions compacted"
        )


# -- bundles in -----------------------------------------------------------------


def bundle_key(subject: str) -> str:
    return f"pith/{subject.rsplit(':', 1)[-1]}/bundle.json"


def _read_bundle(store: Store, key: str) -> Rows:
    data = store.get(key)
    if data is None:
        raise StorageError(
            f"{store.url}/{key} is missing; it was expected to be published "
            "(re-run the window, or `pith-pipeline rebuild`)"
        )
    try:
        bundle = loads(data)
    except ValueError as exc:
        raise StorageError(f"{store.url}/{key} is not valid JSON: {exc}") from None
    return rows_from_bundle(bundle, bundle_key=key, bundle_sha256=hashlib.sha256(data).hexdigest())


def read_bundles(
    store: Store, keys: Iterable[str], *, workers: int = 16, progress: Progress | None = None
) -> Iterator[tuple[str, Rows]]:
    """Index rows per bundle key; reads run in parallel (object stores are latency-bound)."""
    keys = list(keys)
    if not keys:
        return
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(keys)))) as pool:
        for key, rows in zip(keys, pool.map(lambda k: _read_bundle(store, k), keys), strict=True):
            if progress:
                progress(1)
            yield key, rows


# -- Parquet files ------------------------------------------------------------------


def to_table(spec: TableSpec, rows: list[dict[str, Any]], seq: int) -> pa.Table:
    return pa.Table.from_pylist([{**r, SEQ: seq} for r in rows], schema=spec.schema)


def dedupe_sorted(spec: TableSpec, table: pa.Table) -> pa.Table:
    """One row per key (the winner), in file sort order."""
    import duckdb

    # one thread and a memory cap: a compaction step's peak stays near its input size
    con = duckdb.connect(config={"threads": 1, "memory_limit": "256MB"})
    try:
        con.register("t", table)
        key = ", ".join(spec.key)
        order = ", ".join(spec.sort)
        out = con.sql(
            f"SELECT * FROM t QUALIFY row_number() OVER (PARTITION BY {key} "
            f"ORDER BY {spec.winner}) = 1 ORDER BY {order}"
        ).to_arrow_table()
    finally:
        con.close()
    return out.select(spec.schema.names).cast(spec.schema)


def read_file(store: Store, spec: TableSpec, entry: dict[str, Any]) -> pa.Table:
    """One listed index file, with its partition column restored."""
    data = store.get(entry["path"])
    if data is None:
        raise StorageError(
            f"{store.url}/{entry['path']} is listed in {mf.MANIFEST_KEY} but "
            "missing (was it deleted by hand? `pith-pipeline reindex` repairs)"
        )
    table = pq.read_table(pa.BufferReader(data), schema=spec.file_schema)
    part = pa.array([entry["partition"]] * table.num_rows, pa.string())
    table = table.append_column(spec.partition, part)
    return table.select(spec.schema.names)


def read_partition(store: Store, spec: TableSpec, entries: list[dict[str, Any]]) -> pa.Table:
    tables = [read_file(store, spec, e) for e in entries]
    return pa.concat_tables(tables) if tables else spec.schema.empty_table()


def _stamp(now: datetime) -> str:
    return now.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")


def write_file(
    store: Store,
    spec: TableSpec,
    partition: str,
    table: pa.Table,
    *,
    generation: int,
    now: datetime,
    run_id: str | None,
    compacted: bool,
) -> dict[str, Any]:
    """Write one (already deduplicated and sorted) partition file; its manifest entry."""
    buf = io.BytesIO()
    pq.write_table(
        table.drop_columns([spec.partition]).cast(spec.file_schema),
        buf,
        compression="zstd",
        row_group_size=spec.row_group_size,
        write_statistics=True,
    )
    data = buf.getvalue()
    sha = hashlib.sha256(data).hexdigest()
    # named by content: unique, and identical builds give identical trees
    path = (
        f"index/{spec.name}/{spec.partition}={partition}/"
        f"part-g{generation:08d}-{_stamp(now)}-{sha[:16]}.parquet"
    )
    store.put(path, data, content_type="application/vnd.apache.parquet")
    return {
        "path": path,
        "partition": partition,
        "rows": table.num_rows,
        "bytes": len(data),
        "sha256": sha,
        "generation": generation,
        "run_id": run_id,
        "compacted": compacted,
        "created_at": iso_seconds(now),
    }


def _split(spec: TableSpec, table: pa.Table) -> dict[str, pa.Table]:
    import pyarrow.compute as pc

    out = {}
    column = table.column(spec.partition)
    for value in sorted(pc.unique(column).to_pylist()):
        out[value] = table.filter(pc.equal(column, value))
    return out


# -- incremental update -----------------------------------------------------------


def _comparable(spec: TableSpec, table: pa.Table) -> dict[str, dict[str, Any]]:
    cols = [c for c in spec.schema.names if c != SEQ]
    return {r["pith_number"]: r for r in table.select(cols).to_pylist()}


def _changed_subjects(
    store: Store, manifest: mf.Manifest, per_bundle: list[tuple[str, Rows]]
) -> list[tuple[str, Rows]]:
    """Bundles whose `records` row differs from the index: the only ones to (re)write.

    A `records` row is written in the same commit as its events and aliases, so an
    unchanged records row means the subject is fully indexed.
    """
    spec = TABLES["records"]
    new = to_table(spec, [r for _, rows in per_bundle for r in rows.records], 0)
    months = set(new.column(spec.partition).to_pylist())
    parts = manifest.partitions(spec.name)
    entries = [e for m in sorted(months) for e in parts.get(m, [])]
    if not entries:
        return per_bundle
    current = _comparable(spec, dedupe_sorted(spec, read_partition(store, spec, entries)))
    fresh = _comparable(spec, new)
    return [
        (k, rows)
        for k, rows in per_bundle
        if any(current.get(r["pith_number"]) != fresh[r["pith_number"]] for r in rows.records)
    ]


def _write_rows(
    store: Store,
    manifest: mf.Manifest,
    rows: Rows,
    *,
    generation: int,
    now: datetime,
    run_id: str | None,
    max_parts: int,
    update: IndexUpdate,
) -> tuple[dict[str, list[dict[str, Any]]], set[str]]:
    """New files for `rows` (compacting crowded partitions); (added, removed) entries."""
    added: dict[str, list[dict[str, Any]]] = {}
    removed: set[str] = set()
    for name, spec in TABLES.items():
        table_rows = rows.table(name)
        if not table_rows:
            continue
        new = dedupe_sorted(spec, to_table(spec, table_rows, generation))
        update.rows[name] = update.rows.get(name, 0) + new.num_rows
        existing = manifest.partitions(name)
        for partition, part in _split(spec, new).items():
            old = existing.get(partition, [])
            compact = len(old) + 1 > max_parts
            if compact:
                part = dedupe_sorted(spec, pa.concat_tables([read_partition(store, spec, old), part]))
                removed.update(e["path"] for e in old)
                update.compacted_partitions += 1
            entry = write_file(
                store,
                spec,
                partition,
                part,
                generation=generation,
                now=now,
                run_id=run_id,
                compacted=compact or not old,
            )
            added.setdefault(name, []).append(entry)
            update.written[entry["path"]] = entry["sha256"]
    return added, removed


def _fold(
    store: Store,
    spec: TableSpec,
    partition: str,
    files: list[dict[str, Any]],
    *,
    max_files: int,
    compact_rows: int,
    generation: int,
    now: datetime,
    run_id: str | None,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """Merge a partition's smallest files, at most `compact_rows` rows at a time,
    until it has at most `max_files` files or no two files fit in one step.

    Memory is bounded by `compact_rows`, not by the partition. The rows keep their
    `index_seq`, so readers still pick the same winners whichever files they are in.
    Returns (the files after, the entries folded away, every file written).
    """
    replaced: list[dict[str, Any]] = []
    made: list[dict[str, Any]] = []
    while len(files) > max_files:
        group: list[dict[str, Any]] = []
        total = 0
        for e in sorted(files, key=lambda e: (e["rows"], e["path"])):
            if group and total + e["rows"] > compact_rows:
                break
            group.append(e)
            total += e["rows"]
        if len(group) < 2:
            break
        table = dedupe_sorted(spec, read_partition(store, spec, group))
        entry = write_file(
            store, spec, partition, table, generation=generation, now=now, run_id=run_id, compacted=True
        )
        del table
        paths = {e["path"] for e in group}
        files = [e for e in files if e["path"] not in paths] + [entry]
        replaced.extend(group)
        made.append(entry)
    return files, replaced, made


def _compact_crowded(
    store: Store,
    manifest: mf.Manifest,
    added: dict[str, list[dict[str, Any]]],
    *,
    generation: int,
    now: datetime,
    run_id: str | None,
    max_parts: int,
    compact_rows: int,
    update: IndexUpdate,
) -> tuple[set[str], set[str]]:
    """Fold files of partitions this update would leave with more than `max_parts`.

    Groups of the smallest files, at most `compact_rows` rows each, are merged until
    the partition is within `max_parts` or no two files fit in one group, so memory
    is bounded by `compact_rows`, not by the run or the partition. Returns (listed
    paths to retire, unlisted batch files now superseded).
    """
    removed: set[str] = set()
    superseded: set[str] = set()
    for name, spec in TABLES.items():
        existing = manifest.partitions(name)
        fresh: dict[str, list[dict[str, Any]]] = {}
        for entry in added.get(name, []):
            fresh.setdefault(entry["partition"], []).append(entry)
        kept: list[dict[str, Any]] = []
        for partition, entries in sorted(fresh.items()):
            old = existing.get(partition, [])
            old_paths = {e["path"] for e in old}
            files, replaced, made = _fold(
                store,
                spec,
                partition,
                [*old, *entries],
                max_files=max_parts,
                compact_rows=compact_rows,
                generation=generation,
                now=now,
                run_id=run_id,
            )
            for entry in made:
                update.written[entry["path"]] = entry["sha256"]
            for e in replaced:
                if e["path"] in old_paths:
                    removed.add(e["path"])
                else:
                    superseded.add(e["path"])
                    update.written.pop(e["path"], None)
            for e in files:
                if e in made:
                    update.written[e["path"]] = e["sha256"]
            update.compacted_partitions += bool(made)
            kept.extend(e for e in files if e["path"] not in old_paths or e["path"] in removed)
        if name in added:
            added[name] = kept
    # files are named by content: a fold can reproduce a batch file's (or a listed) path
    kept_paths = {e["path"] for es in added.values() for e in es}
    return removed - kept_paths, superseded - kept_paths - manifest.listed()


def update_indexes(
    store: Store,
    subjects: Iterable[str],
    *,
    run_id: str | None = None,
    clock: Clock = system_clock,
    max_parts: int = DEFAULT_MAX_PARTS,
    workers: int = 16,
    progress: Progress | None = None,
    batch_size: int = UPDATE_BATCH,
    compact_rows: int = COMPACT_ROWS,
) -> IndexUpdate:
    """Bring the indexes up to date for `subjects` (Pith numbers) from their bundles.

    Idempotent: subjects whose indexed row already matches their bundle are skipped,
    so re-running a window writes nothing, and a run that died before indexing is
    completed by the next run over the same records. Call it after the bundles are
    published; it commits all three tables in one manifest swap.

    Subjects are read and turned into rows `batch_size` at a time, each batch
    written as its own part files, so memory does not grow with the run; the files
    of all batches are listed by that one swap (readers never see part of a run).
    """
    if batch_size < 1:
        raise ValueError("batch_size must be at least 1")
    keys = sorted_unique(bundle_key(s) for s in subjects)  # streamed: millions in a backfill
    manifest = mf.load(store)
    update = IndexUpdate(generation=manifest.generation)
    first = next(keys, None)
    if first is None:
        return update
    keys = chain([first], keys)
    now = clock()
    generation = manifest.generation + 1
    added: dict[str, list[dict[str, Any]]] = {}
    while batch := list(islice(keys, batch_size)):
        update.subjects_checked += len(batch)
        per_bundle = list(read_bundles(store, batch, workers=workers, progress=progress))
        del batch
        changed = _changed_subjects(store, manifest, per_bundle)
        del per_bundle
        update.subjects_changed += len(changed)
        if not changed:
            continue
        rows = Rows()
        for _, r in changed:
            rows.extend(r)
        del changed
        # no compaction per batch: crowded partitions are folded once, below
        batch_added, _ = _write_rows(
            store,
            manifest,
            rows,
            generation=generation,
            now=now,
            run_id=run_id,
            max_parts=1 << 30,
            update=update,
        )
        del rows
        for name, entries in batch_added.items():
            added.setdefault(name, []).extend(entries)
    if not added:
        return update
    removed, superseded = _compact_crowded(
        store,
        manifest,
        added,
        generation=generation,
        now=now,
        run_id=run_id,
        max_parts=max_parts,
        compact_rows=compact_rows,
        update=update,
    )
    new, data = mf.commit(
        store, mf.Change(added=added, removed=removed, retired_at=iso_seconds(now)), base=manifest
    )
    update.generation = new.generation
    update.written[mf.MANIFEST_KEY] = hashlib.sha256(data).hexdigest()
    for path in sorted(superseded):  # never listed by any manifest: no reader can hold them
        store.delete(path)
    return update


# -- compaction -------------------------------------------------------------------


def _expired(entries: Iterable[dict[str, Any]], now: datetime, grace: float) -> list[str]:
    limit = now - timedelta(seconds=grace)
    out = []
    for r in entries:
        try:
            when = datetime.fromisoformat(str(r["retired_at"]).replace("Z", "+00:00"))
        except ValueError:
            continue
        if when <= limit:
            out.append(r["path"])
    return out


def collect_garbage(
    store: Store, *, clock: Clock = system_clock, grace_seconds: float = DEFAULT_GRACE_SECONDS
) -> list[str]:
    """Delete index files no manifest has listed for `grace_seconds`.

    Retired files wait out the grace period so a reader that read the previous
    manifest can finish; orphans (files of an update that died before its commit)
    are recognised by the time stamp in their name.
    """
    now = clock()
    current = mf.load(store)
    expired = set(_expired(current.retired, now, grace_seconds))
    deleted: list[str] = []
    if expired:
        mf.commit(
            store,
            mf.Change(added={}, removed=set(), retired_at=iso_seconds(now), drop_retired=frozenset(expired)),
            base=current,
        )
        for path in sorted(expired):
            store.delete(path)
            deleted.append(path)
        current = mf.load(store)
    keep = current.listed() | {r["path"] for r in current.retired}
    limit = now - timedelta(seconds=grace_seconds)
    for key in store.list("index/"):
        m = _STAMP.search(key)
        if key in keep or not m:
            continue
        written = datetime.strptime(m.group(1), "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
        if written <= limit:
            store.delete(key)
            deleted.append(key)
    return deleted


def compact(
    store: Store,
    *,
    clock: Clock = system_clock,
    grace_seconds: float = DEFAULT_GRACE_SECONDS,
    min_files: int = 2,
    compact_rows: int = COMPACT_ROWS,
    progress: Progress | None = None,
) -> IndexUpdate:
    """Fold each partition with `min_files` or more files into one deduplicated file.

    A partition larger than `compact_rows` rows is folded into as few files of at
    most that many rows as its files allow, so memory stays bounded on a store of
    any size (readers deduplicate across files by `index_seq`). The new files are
    committed in one manifest swap; the old ones are retired and deleted by
    `collect_garbage` once `grace_seconds` have passed (0 deletes now).
    """
    manifest = mf.load(store)
    now = clock()
    generation = manifest.generation + 1
    update = IndexUpdate(generation=manifest.generation)
    added: dict[str, list[dict[str, Any]]] = {}
    removed: set[str] = set()
    scratch: set[str] = set()  # written by one step, folded again by a later one
    for name, spec in TABLES.items():
        for partition, entries in sorted(manifest.partitions(name).items()):
            if len(entries) < min_files:
                continue
            old_paths = {e["path"] for e in entries}
            files, replaced, made = _fold(
                store,
                spec,
                partition,
                list(entries),
                max_files=1,
                compact_rows=compact_rows,
                generation=generation,
                now=now,
                run_id=None,
            )
            if progress:
                progress(1)
            if not made:
                continue
            final = [e for e in files if e in made]
            added.setdefault(name, []).extend(final)
            removed.update(e["path"] for e in replaced if e["path"] in old_paths)
            scratch.update(e["path"] for e in replaced if e["path"] not in old_paths)
            for entry in final:
                update.written[entry["path"]] = entry["sha256"]
                update.rows[name] = update.rows.get(name, 0) + entry["rows"]
            update.compacted_partitions += 1
    scratch -= {e["path"] for es in added.values() for e in es} | manifest.listed()
    for path in sorted(scratch):  # never listed by any manifest: no reader can hold them
        store.delete(path)
    if added:

        def still_there(current: mf.Manifest) -> None:
            if not removed <= current.listed():
                raise StorageError(
                    "another compaction replaced these index files meanwhile; "
                    "nothing was changed, run compact again",
                    transient=True,
                )

        new, data = mf.commit(
            store,
            mf.Change(added=added, removed=removed, retired_at=iso_seconds(now)),
            base=manifest,
            check=still_there,
        )
        update.generation = new.generation
        update.written[mf.MANIFEST_KEY] = hashlib.sha256(data).hexdigest()
    update.deleted = collect_garbage(store, clock=clock, grace_seconds=grace_seconds)
    return update


# -- full rebuild -----------------------------------------------------------------


def all_bundle_keys(store: Store) -> list[str]:
    return [k for k in store.list("pith/") if k.endswith("/bundle.json") and k.count("/") == 2]


def reindex(
    store: Store,
    *,
    clock: Clock = system_clock,
    workers: int = 16,
    grace_seconds: float = DEFAULT_GRACE_SECONDS,
    progress: Progress | None = None,
) -> IndexUpdate:
    """Rebuild every index from every bundle in the store, replacing the old index.

    Bundles are read in chunks (bounded memory); their files are committed together
    in one swap that retires every previously listed file, then compacted.
    """
    manifest = mf.load(store)
    keys = all_bundle_keys(store)
    now = clock()
    generation = manifest.generation + 1
    update = IndexUpdate(
        generation=manifest.generation, subjects_checked=len(keys), subjects_changed=len(keys)
    )
    added: dict[str, list[dict[str, Any]]] = {}
    empty = mf.Manifest()
    for start in range(0, len(keys), REINDEX_CHUNK):
        rows = Rows()
        for _, r in read_bundles(
            store, keys[start : start + REINDEX_CHUNK], workers=workers, progress=progress
        ):
            rows.extend(r)
        chunk_added, _ = _write_rows(
            store, empty, rows, generation=generation, now=now, run_id=None, max_parts=1 << 30, update=update
        )
        for name, entries in chunk_added.items():
            added.setdefault(name, []).extend(entries)
    new, data = mf.commit(
        store, mf.Change(added=added, removed=manifest.listed(), retired_at=iso_seconds(now))
    )
    update.generation = new.generation
    update.written[mf.MANIFEST_KEY] = hashlib.sha256(data).hexdigest()
    if any(len(v) > 1 for name in TABLES for v in new.partitions(name).values()):
        more = compact(store, clock=clock, grace_seconds=grace_seconds)
        update.generation = more.generation
        update.written.update(more.written)
        update.compacted_partitions += more.compacted_partitions
        update.deleted = more.deleted
    else:
        update.deleted = collect_garbage(store, clock=clock, grace_seconds=grace_seconds)
    return update
