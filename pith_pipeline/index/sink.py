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

from pith_pipeline.index.rows import Rows, rows_from_bundle
from pith_pipeline.index.schema import TABLES

CHUNK_PAPERS = 10_000  # papers' rows held in memory before they go to a Parquet file
ROW_GROUP = 4_096  # small row groups: reading one partition group skips the others


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
        self.add(rows)

    def flush(self) -> None:
        """Write the rows held in memory (a worker calls it before its chunk ends)."""
        import pyarrow.parquet as pq

        with self._lock:
            pending, self._pending = self._pending, Rows()
            self._n += 1
            n = self._n
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
            table = table.sort_by([(spec.partition, "ascending"), *((c, "ascending") for c in spec.key)])
            final = self.directory / name / f"{self._tag}-{n:06d}.parquet"
            part = final.with_suffix(".part")
            pq.write_table(table, part, row_group_size=ROW_GROUP, compression="zstd")
            part.replace(final)  # a reader never sees half a file

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

    def group(self, table: str, partitions: list[str]) -> pa.Table:
        """`table`'s rows in `partitions`; of `records` rows of one paper, the last written.

        Files of one process sort in write order (`<pid>-<tag>-<n>`), and one paper's
        bundles are always written by one process, so the last file wins.
        """
        import pyarrow.dataset as ds

        spec = TABLES[table]
        dataset = self.dataset(table)
        where = ds.field(spec.partition).isin(partitions)
        if table != "records" or not self.files(table):
            return dataset.to_table(filter=where)
        import pyarrow.compute as pc

        parts = []
        for i, path in enumerate(self.files(table)):  # in write order within a process
            part = ds.dataset(path, schema=spec.schema, format="parquet").to_table(filter=where)
            if part.num_rows:
                parts.append(part.append_column("__f", pa.array([i] * part.num_rows, pa.int32())))
        if not parts:
            return spec.schema.empty_table()
        named = pa.concat_tables(parts)
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
        from pith_pipeline._internal.disk_backed import sorted_unique

        def each() -> Iterator[str]:
            for batch in self.dataset("records").to_batches(columns=["pith_number"]):
                yield from batch.column(0).to_pylist()

        return sorted_unique(each())

    def close(self) -> None:
        """Drop rows not yet flushed; remove the directory if the sink made it."""
        self._pending = Rows()
        if self._own:
            shutil.rmtree(self.directory, ignore_errors=True)
