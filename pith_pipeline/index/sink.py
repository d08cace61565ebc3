"""Index rows a run already has, kept on disk until the index update takes them.

Why: the bundles a run writes are in its hands when it writes them; reading each one
back from the store to make its index rows (what `update_indexes` does for subjects
it has no rows for) cost a 1 M-paper ingest 586 s on top of publishing. A `RowSink`
takes each bundle's rows as it is written (`Publisher(on_bundle=sink.add_bundle)`)
and spills them to Parquet files, one table at a time, so memory stays bounded by
`chunk_papers` however large the run.

Several processes may write into one sink directory (each opens its own
`RowSink(directory)`, file names never collide) and the process that finishes the
run opens the same directory and hands it to `finish_run(..., rows=sink)`.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa

from pith_pipeline._internal.disk_backed import sorted_unique
from pith_pipeline.core.canonical_json import dumps, dumps_trusted
from pith_pipeline.core.events import content_sha256
from pith_pipeline.core.layout import event_key
from pith_pipeline.errors import CanonicalJSONError
from pith_pipeline.index.rows import Rows, rows_from_bundle
from pith_pipeline.index.schema import TABLES

#: Log entries (the run's events, canonical bytes) spill here, next to the tables.
LOG_DIR = "log-entries"
#: rows per row group of an entries file: a merge holds one group per open file
#: (128 files open: peak RSS 263 MB at 128 rows a group, 435 MB at 256, same speed)
ENTRY_ROW_GROUP = 128
#: files merged at once; more are first merged in groups of this many (an external
#: merge sort), so memory stays bounded however many chunks the run's workers wrote.
#: 128: a 1 M-paper run's ~100 files in one pass (two at 32 took twice as long: the
#: first rewrites every entry), for about 1.3 MB a file open (benchmarks/log_merge_bench.py)
ENTRY_FAN_IN = 128
ENTRY_SCHEMA = pa.schema(
    [
        ("created_at", pa.string()),
        ("event_hex", pa.string()),
        ("event_key", pa.string()),
        ("entry", pa.binary()),
    ]
)
#: how entries files are written. No dictionary: every entry and id is unique, so a
#: dictionary page only held a second copy of the row group (reading a merge's open
#: files took 3.7 MB each, not 2.1); no statistics: nothing filters on them, and an
#: entry's min and max (2.5 KB each a row group) were 0.7 MB of footer a file held open
ENTRY_WRITE: dict[str, Any] = {"compression": "zstd", "use_dictionary": False, "write_statistics": False}
#: per table, the column naming the paper a row belongs to (`RowSink.groups` never
#: splits a paper over two commits): an arXiv id, or for events the record they are of
PAPER_COLUMN = {"records": "arxiv_id", "aliases": "arxiv_id", "events": "subject"}
CHUNK_PAPERS = 10_000  # papers' rows held in memory before they go to a Parquet file
ROW_GROUP = 4_096  # small row groups: reading one range of papers skips the others


class RowSink:
    """Index rows of the bundles a run wrote, spilled to `directory/<table>/*.parquet`.

    `directory` None: a private temporary directory, removed by `close()`. A given
    directory is never removed by the sink (its creator owns it).
    """

    def __init__(self, directory: Path | str | None = None, *, chunk_papers: int = CHUNK_PAPERS) -> None:
        self._own = directory is None
        self.directory = Path(tempfile.mkdtemp(prefix="pith-rows-")) if directory is None else Path(directory)
        for name in TABLES:
            (self.directory / name).mkdir(parents=True, exist_ok=True)
        self._chunk = max(1, chunk_papers)
        self._pending = Rows()
        self._entries: list[tuple[str, str, str, bytes]] = []
        (self.directory / LOG_DIR).mkdir(parents=True, exist_ok=True)
        self._tag = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
        self._n = 0
        # a publisher with --io-concurrency > 1 calls add_bundle from several threads
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"RowSink({str(self.directory)!r})"

    def __enter__(self) -> RowSink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- in ---------------------------------------------------------------------
    def add(self, rows: Rows) -> None:
        """Rows of one or more bundles (`rows_from_bundle`); spilled every `chunk_papers`."""
        with self._lock:
            self._pending.extend(rows)
            full = len(self._pending.records) >= self._chunk
        if full:
            self.flush()

    def add_bundle(
        self, bundle_key: str, bundle: dict[str, Any], sha256: str, rows: Rows | None = None
    ) -> None:
        """The `Publisher(on_bundle=...)` callback: the rows of a bundle just written.

        `rows`: the bundle's rows as `index.rows.check_bundle` made them before the
        bundle was published (they lack only its key and hash, set here); None: made
        from the bundle now.
        """
        if rows is None:
            rows = rows_from_bundle(bundle, bundle_key=bundle_key, bundle_sha256=sha256)
        else:
            for row in rows.records:
                row["bundle_key"] = bundle_key
                row["bundle_sha256"] = sha256
        entries = log_entries_of(bundle)
        with self._lock:
            self._entries.extend(entries)
        self.add(rows)

    def flush(self) -> None:
        """Write the rows held in memory (a worker calls it before its chunk ends)."""
        import pyarrow.parquet as pq

        with self._lock:
            pending, self._pending = self._pending, Rows()
            entries, self._entries = self._entries, []
            self._n += 1
            n = self._n
        if entries:
            self._write_entries(entries, n)
        if not pending.records and not pending.events and not pending.aliases:
            return
        # a bundle written twice in the run (a paper superseded by a newer version in
        # the same run): its last rows win, as reading the final bundle back would give
        pending.records = list({r["pith_number"]: r for r in pending.records}.values())
        for name, spec in TABLES.items():
            rows = pending.table(name)
            if not rows:
                continue
            table = pa.Table.from_pylist(rows, schema=spec.schema)
            # sorted on the paper column: `groups` reads a range of papers from few row groups
            table = table.sort_by([(PAPER_COLUMN[name], "ascending"), *((c, "ascending") for c in spec.key)])
            final = self.directory / name / f"{self._tag}-{n:06d}.parquet"
            part = final.with_suffix(".part")
            pq.write_table(table, part, row_group_size=ROW_GROUP, compression="zstd")
            part.replace(final)  # a reader never sees half a file

    def _write_entries(self, entries: list[tuple[str, str, str, bytes]], n: int) -> None:
        """One file of log entries, sorted by (created_at, event id): the log's order."""
        import pyarrow.parquet as pq

        entries.sort()
        table = _entries_table(entries)
        final = self.directory / LOG_DIR / f"{self._tag}-{n:06d}.parquet"
        part = final.with_suffix(".part")
        pq.write_table(table, part, row_group_size=ENTRY_ROW_GROUP, **ENTRY_WRITE)
        part.replace(final)

    # -- out --------------------------------------------------------------------
    def files(self, table: str) -> list[str]:
        """The Parquet files holding `table`'s rows (after `flush`)."""
        return sorted(str(p) for p in (self.directory / table).glob("*.parquet"))

    def dataset(self, table: str) -> Any:
        """A pyarrow dataset of `table`'s spilled rows (empty if none)."""
        import pyarrow.dataset as ds

        spec = TABLES[table]
        files = self.files(table)
        if not files:
            return ds.dataset(spec.schema.empty_table())
        return ds.dataset(files, schema=spec.schema, format="parquet")

    def rows_within(self, table: str, budget: int) -> int:
        """How many of `table`'s rows take about `budget` bytes uncompressed (at least 1),
        from the spilled files' Parquet metadata.

        Why: a `records` row (title, authors, hashes) is several times an `aliases`
        row, and a write holds a few copies of its rows, so a memory bound is a byte
        bound, not a row count.
        """
        import pyarrow.parquet as pq

        rows = size = 0
        for path in self.files(table):
            meta = pq.ParquetFile(path).metadata
            rows += meta.num_rows
            size += sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
        if not rows or not size:
            return max(1, budget)
        return max(1, budget * rows // size)

    def groups(self, table: str, max_rows: int) -> Iterator[pa.Table]:
        """All of `table`'s rows (of `records` rows of one paper, the last written), in
        tables of at most `max_rows` rows, each holding every row of the papers it
        holds (`PAPER_COLUMN`: all versions of an arXiv id, all events of a record).

        Why whole papers: each table is one Delta commit, and a paper split over two
        commits leaves a version between them with two latest records rows (or none),
        or an `arxiv:` alias not yet moved to the new version. Why bounded: a backfill's
        rows do not fit in memory at once. All of them fit in one table when they are
        at most `max_rows` (a run is then one commit per table); otherwise the papers
        are cut into ranges of the paper column (a paper larger than `max_rows` is a
        range alone). The spilled files are sorted on that column, so a range reads
        few row groups of each.
        """
        files = self.files(table)
        if not files:
            return
        column = PAPER_COLUMN[table]
        if sum(_file_rows(path) for path in files) <= max_rows:
            yield self._combine(table, list(self._parts(table, None)))
            return
        import pyarrow.dataset as ds

        for lo, hi in self._ranges(table, column, max_rows):
            where = (ds.field(column) >= lo) & (ds.field(column) <= hi)
            yield self._combine(table, list(self._parts(table, where)))
        nulls = list(self._parts(table, ds.field(column).is_null()))
        if nulls:
            yield self._combine(table, nulls)

    def _ranges(self, table: str, column: str, max_rows: int) -> list[tuple[str, str]]:
        """Inclusive ranges of `column`'s values, each covering at most `max_rows` rows
        (or one value's), in order. Counted from the spilled files: memory holds each
        distinct value once (one string per paper)."""
        import pyarrow.compute as pc

        counted = []
        for path in self.files(table):
            values = _read(path, table, None, [column]).column(0)
            counted.append(pc.value_counts(values).flatten())
        if not counted:
            return []
        both = pa.Table.from_arrays(
            [pa.chunked_array([c[0] for c in counted]), pa.chunked_array([c[1] for c in counted])],
            names=["v", "n"],
        )
        summed = both.group_by("v").aggregate([("n", "sum")]).filter(pc.is_valid(pc.field("v")))
        summed = summed.sort_by("v")
        starts: list[int] = []
        ends: list[int] = []
        size = 0
        # counts only are walked in Python (a backfill has a million papers); the
        # values are taken at the range ends
        for i, n in enumerate(summed.column("n_sum").to_numpy().tolist()):
            if starts and size + n <= max_rows:
                size += n
            else:
                if starts:
                    ends.append(i - 1)
                starts.append(i)
                size = n
        if starts:
            ends.append(summed.num_rows - 1)
        values = summed.column("v")
        lows = values.take(pa.array(starts, pa.int64())).to_pylist()
        highs = values.take(pa.array(ends, pa.int64())).to_pylist()
        return list(zip(lows, highs, strict=True))

    def _parts(self, table: str, where: Any) -> Iterator[tuple[int, pa.Table]]:
        """(file number in write order, its rows matching `where`, all if None) of each
        file with any."""
        for i, path in enumerate(self.files(table)):
            part = _read(path, table, where, None)
            if part.num_rows:
                yield i, part

    def _combine(self, table: str, parts: list[tuple[int, pa.Table]]) -> pa.Table:
        """The rows of `parts`; of `records` rows of one paper, the last written.

        Files of one process sort in write order (`<pid>-<tag>-<n>`), and one paper's
        bundles are always written by one process, so the last file wins.
        """
        import pyarrow.compute as pc

        spec = TABLES[table]
        if not parts:
            return spec.schema.empty_table()
        if table != "records":
            return pa.concat_tables([part for _, part in parts])
        named = pa.concat_tables(
            [part.append_column("__f", pa.array([i] * part.num_rows, pa.int32())) for i, part in parts]
        )
        rows = named.drop_columns(["__f"])
        key = named.column(spec.merge_column)
        if pc.count_distinct(key).as_py() == named.num_rows:
            return rows
        order = pc.sort_indices(named.select(["__f"]), sort_keys=[("__f", "descending")])
        seen: set[str] = set()
        keep = []
        for i, k in zip(order.to_pylist(), key.take(order).to_pylist(), strict=True):
            if k not in seen:
                seen.add(k)
                keep.append(i)
        return rows.take(pa.array(sorted(keep), pa.int64()))

    def subjects(self) -> Iterator[str]:
        """Pith numbers with rows here, sorted and unique (streamed from the files)."""

        def each() -> Iterator[str]:
            for batch in self.dataset("records").to_batches(columns=["pith_number"]):
                yield from batch.column(0).to_pylist()

        return sorted_unique(each())

    def log_ids(self) -> Iterator[str]:
        """The event ids (hex) of every log entry here, in no order (may repeat)."""

        for path in sorted((self.directory / LOG_DIR).glob("*.parquet")):
            for batch in _entry_batches(path, columns=["event_hex"]):
                yield from batch.column(0).to_pylist()

    def log_entries(self) -> Iterator[tuple[str, str, bytes]]:
        """(event id hex, event key, entry) of every event of the run's bundles, in the
        log's order (created_at, then event id), each id once.

        Each file is sorted; they are merged as they are read, at most `ENTRY_FAN_IN`
        at a time (more are first merged into fewer, larger files), so memory holds
        one small row group per open file whatever the size of the run."""
        files = sorted((self.directory / LOG_DIR).glob("*.parquet"))
        rounds = 0
        while len(files) > ENTRY_FAN_IN:
            rounds += 1
            merged = []
            for i in range(0, len(files), ENTRY_FAN_IN):
                group = files[i : i + ENTRY_FAN_IN]
                if len(group) == 1:
                    merged.append(group[0])
                    continue
                out = self.directory / LOG_DIR / f"merged-{rounds:02d}-{i // ENTRY_FAN_IN:06d}.parquet"
                _write_merged(group, out)
                for path in group:
                    path.unlink()
                merged.append(out)
            files = merged
        last = None
        for _created, hex_id, key, entry in _merge(files):
            if hex_id != last:
                yield hex_id, key, entry
            last = hex_id

    def close(self) -> None:
        """Drop rows not yet flushed; remove the directory if the sink made it."""
        self._pending = Rows()
        self._entries = []
        if self._own:
            shutil.rmtree(self.directory, ignore_errors=True)


def log_entries_of(bundle: dict[str, Any]) -> list[tuple[str, str, str, bytes]]:
    """(created_at, event id hex, event key, entry) of each event of a bundle just
    written: what the transparency log appends for it, made while the event is in
    hand (reading two million events back from the store dominated a 1 M-paper run's
    log append).

    The entry is the event's canonical JSON. Events the builder made are serialised
    on the fast path and kept only if their id recomputes from those bytes (had the
    fast serialisation differed from the canonical one anywhere in the content, it
    would not); any other event is serialised on the checked path, and one that
    cannot be is left to the log's own reading of the store.
    """
    subject = bundle.get("pith_number")
    body = subject.rsplit(":", 1)[-1] if isinstance(subject, str) else ""
    out = []
    for ev in bundle.get("events") or []:
        if not isinstance(ev, dict):
            continue
        created, digest = ev.get("created_at"), ev.get("content_sha256")
        if (
            not isinstance(created, str)
            or not isinstance(digest, str)
            or ev.get("event_id") != "sha256:" + digest
        ):
            continue
        try:
            if content_sha256(ev, trusted=True) == digest:
                entry = dumps_trusted(ev)
            elif content_sha256(ev) == digest:
                entry = dumps(ev)
            else:
                continue
        except (CanonicalJSONError, TypeError, ValueError):
            continue
        out.append((created, digest, event_key(body, digest), entry))
    return out


def _file_rows(path: str) -> int:
    import pyarrow.parquet as pq

    return int(pq.ParquetFile(path).metadata.num_rows)


def _read(path: str, table: str, where: Any, columns: list[str] | None) -> pa.Table:
    """A spilled file's rows of `table` matching `where` (None: all)."""
    import pyarrow.dataset as ds

    spec = TABLES[table]
    return ds.dataset(path, schema=spec.schema, format="parquet").to_table(filter=where, columns=columns)


def _entry_batches(path: Path, columns: list[str] | None = None) -> Iterator[pa.RecordBatch]:
    """An entries file a row group at a time: how every reader of them reads.

    pre_buffer=False: by default pyarrow reads the whole file ahead, and a merge has up
    to ENTRY_FAN_IN of them open (the 1 M-paper log phase held 1.8 GB so).
    use_threads=False: a row group's columns sent to the thread pool and back took
    three times as long as decoding them here (256 entries, 2 cores).
    """
    import pyarrow.parquet as pq

    reader = pq.ParquetFile(path, pre_buffer=False)
    yield from reader.iter_batches(batch_size=ENTRY_ROW_GROUP, columns=columns, use_threads=False)


def _read_sorted(path: Path) -> Iterator[tuple[str, str, str, bytes]]:
    for batch in _entry_batches(path):
        cols = [batch.column(i).to_pylist() for i in range(batch.num_columns)]
        yield from zip(*cols, strict=True)


def _merge(files: list[Path]) -> Iterator[tuple[str, str, str, bytes]]:
    import heapq

    return heapq.merge(*(_read_sorted(p) for p in files))


def _write_merged(files: list[Path], out: Path) -> None:
    """Merge sorted entries files into one sorted file, streamed a row group at a time."""
    import pyarrow.parquet as pq

    part = out.with_suffix(".part")
    with pq.ParquetWriter(part, ENTRY_SCHEMA, **ENTRY_WRITE) as writer:
        batch: list[tuple[str, str, str, bytes]] = []
        for row in _merge(files):
            batch.append(row)
            if len(batch) >= ENTRY_ROW_GROUP:
                writer.write_table(_entries_table(batch), row_group_size=ENTRY_ROW_GROUP)
                batch = []
        if batch:
            writer.write_table(_entries_table(batch), row_group_size=ENTRY_ROW_GROUP)
    part.replace(out)


def _entries_table(entries: list[tuple[str, str, str, bytes]]) -> pa.Table:
    return pa.table(
        {name: [e[i] for e in entries] for i, name in enumerate(ENTRY_SCHEMA.names)}, schema=ENTRY_SCHEMA
    )
