"""`RowSink`: the index rows a run already has, spilled to disk, handed to the update."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pith_pipeline.index import RowSink, run_query, update_indexes
from pith_pipeline.index.rows import Rows, rows_from_bundle
from pith_pipeline.storage.local import LocalStore


def _two_writes(asset: Any) -> tuple[Rows, Rows]:
    """Rows of one paper's bundle written twice in a run, the second one superseded."""
    bundle = json.loads(Path(asset("pith-bundle-1909.11150.json")).read_text(encoding="utf-8"))
    key = "pith/X/bundle.json"
    first = rows_from_bundle(bundle, bundle_key=key, bundle_sha256="f" * 64)
    last = rows_from_bundle(bundle, bundle_key=key, bundle_sha256="0" * 64)
    last.records[0]["superseded_by"] = "pith:2026:LATERLATERLATERLATERLATERLA"
    return first, last


@pytest.mark.parametrize("chunk", [1, 100])  # in two files / both in memory at the flush
def test_a_bundle_written_twice_is_indexed_as_last_written(tmp_path: Path, asset: Any, chunk: int) -> None:
    # same built_at: the MERGE winner rule alone (bundle_sha256 DESC) would keep the first
    first, last = _two_writes(asset)
    with RowSink(tmp_path / "rows", chunk_papers=chunk) as sink:
        sink.add(first)
        sink.add(last)
        sink.flush()
        (got,) = sink.groups("records", 1_000_000)
        assert got.column("bundle_sha256").to_pylist() == ["0" * 64]
        store = LocalStore(tmp_path / "s")
        update = update_indexes(store, [], rows=sink)
    assert update.rows["records"] == 1
    assert run_query(store, "SELECT bundle_sha256, superseded_by FROM records").rows == [
        ("0" * 64, "pith:2026:LATERLATERLATERLATERLATERLA")
    ]


def test_several_processes_share_one_directory_and_the_owner_keeps_it(tmp_path: Path, asset: Any) -> None:
    first, _ = _two_writes(asset)
    a, b = RowSink(tmp_path / "rows"), RowSink(tmp_path / "rows")  # as two worker processes
    a.add(first)
    a.flush()
    b.flush()  # nothing held: no file
    reader = RowSink(tmp_path / "rows")
    assert len(reader.files("records")) == 1 and list(reader.subjects()) == [first.records[0]["pith_number"]]
    reader.close()
    assert (tmp_path / "rows").is_dir()  # a sink given a directory leaves it to its owner
    own = RowSink()
    own.add(first)
    own.flush()
    own.close()
    assert not own.directory.exists()


def test_a_partition_larger_than_a_group_is_written_in_bounded_groups_of_papers(
    tmp_path: Path, asset: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Why: a snapshot's events all fall in one `created_month` (and its aliases in a few
    kinds), so writing a partition as one group made the update's memory grow with the
    run (838 MB at 100 k papers, 1.1 GB at 300 k). Each write now takes at most
    `group_rows` rows (or one paper's), and the tables end the same as in one go."""
    from pith_pipeline.index.schema import TABLES

    papers = _papers(asset, 24)  # one spilled file per 2: every event in one month
    sizes = _write_sizes(monkeypatch)
    got = {}
    for group_rows in (5, 10_000):
        with RowSink(tmp_path / f"rows-{group_rows}", chunk_papers=2) as sink:
            for rows in papers:
                sink.add(rows)
            sink.flush()
            per_paper = {
                name: max(len(getattr(rows, name)) for rows in papers) for name in ("events", "aliases")
            }
            sizes.clear()
            store = LocalStore(tmp_path / f"s-{group_rows}")
            update_indexes(store, [], rows=sink, group_rows=group_rows)
        if group_rows == 5:
            for name in ("events", "aliases"):
                assert len(sizes[name]) > 1, name  # the one big partition took several writes
                assert max(sizes[name]) <= max(group_rows, per_paper[name]), (name, sizes[name])
        got[group_rows] = {
            name: run_query(store, f"SELECT * EXCLUDE (bundle_key) FROM {name} ORDER BY ALL").rows
            if name == "records"
            else run_query(store, f"SELECT * FROM {name} ORDER BY ALL").rows
            for name in TABLES
        }
    assert got[5] == got[10_000]
    assert len(got[5]["records"]) == 24


def _write_sizes(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[int]]:
    """Per table, the rows of each `merge_rows` call the index update makes (filled as
    it runs)."""
    import pith_pipeline.index.update as update

    sizes: dict[str, list[int]] = {}
    real = update.merge_rows

    def spy(loc: Any, spec: Any, table: Any, **kw: Any) -> Any:
        sizes.setdefault(spec.name, []).append(table.num_rows)
        return real(loc, spec, table, **kw)

    monkeypatch.setattr(update, "merge_rows", spy)
    return sizes


def _papers(asset: Any, n: int) -> list[Rows]:
    """The rows of `n` distinct papers (one real bundle's, with its keys renamed)."""
    bundle = json.loads(Path(asset("pith-bundle-1909.11150.json")).read_text(encoding="utf-8"))
    papers = []
    for i in range(n):
        rows = rows_from_bundle(bundle, bundle_key=f"pith/P{i:02d}/bundle.json", bundle_sha256=f"{i:064x}")
        for table in (rows.records, rows.events, rows.aliases):
            for row in table:
                for col in ("pith_number", "event_id", "alias_value", "alias", "subject", "arxiv_id"):
                    if row.get(col):
                        row[col] = f"{row[col]}-{i:02d}"
        papers.append(rows)
    return papers


def test_a_write_takes_a_byte_budget_of_rows_so_wide_rows_come_fewer_at_a_time(
    tmp_path: Path, asset: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Why: at 300 k papers the update's peak was its `records` writes (100,000 rows of
    titles, authors and hashes, held a few times over); an `aliases` row is a fraction
    of that. Each write now holds about `GROUP_BYTES` of rows."""
    import pith_pipeline.index.update as update

    with RowSink(tmp_path / "rows", chunk_papers=1) as sink:
        for rows in _papers(asset, 12):
            sink.add(rows)
        sink.flush()
        wide = sink.rows_within("records", 10_000)
        narrow = sink.rows_within("aliases", 10_000)
        assert 1 <= wide < narrow
        sizes = _write_sizes(monkeypatch)
        monkeypatch.setattr(update, "GROUP_BYTES", 10_000)
        update_indexes(LocalStore(tmp_path / "s"), [], rows=sink)
    # a write takes the budget (or one paper's rows, when a paper is wider)
    assert max(sizes["records"]) <= max(wide, 1) and len(sizes["records"]) > 1
    assert sum(sizes["records"]) == 12


def test_a_records_partition_written_in_slices_is_compacted_not_z_ordered(
    tmp_path: Path, asset: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Why: z-ordering sorts a whole partition in memory (the 300 k run's peak: 1,041 MB
    on months of 100,000 papers); slices are each written sorted, so joining them
    (compaction, streamed) is enough. A partition a MERGE wrote is still z-ordered."""
    from deltalake import DeltaTable

    import pith_pipeline.index.update as update
    from pith_pipeline.index.delta import location

    store = LocalStore(tmp_path / "s")
    with RowSink(tmp_path / "rows", chunk_papers=1) as sink:
        for rows in _papers(asset, 12):  # one month
            sink.add(rows)
        sink.flush()
        monkeypatch.setattr(update, "GROUP_BYTES", 10_000)
        update_indexes(store, [], rows=sink)
    dt = DeltaTable(location(store).uri("records"))
    plans = [c.get("operationMetrics", {}).get("plannerStrategy") for c in dt.history()]
    assert len(dt.file_uris()) == 1 and "preserveLocality" in plans and "zOrder" not in plans, plans
    assert run_query(store, "SELECT count(*), count(DISTINCT pith_number) FROM records").rows == [(12, 12)]


def test_entries_are_read_a_row_group_at_a_time_not_the_whole_file(tmp_path: Path) -> None:
    """Why: pyarrow pre-buffers a whole Parquet file by default, and the log's merge
    opens up to 32 entries files at once: at 1 M papers the log phase held 1.8 GB, the
    run's peak. Reading them holds about one row group (256 entries) each."""
    import os

    import pyarrow as pa

    from pith_pipeline.index.sink import ENTRY_ROW_GROUP, _read_sorted, _write_merged

    part = tmp_path / "a.parquet"
    import pyarrow.parquet as pq

    from pith_pipeline.index.sink import ENTRY_SCHEMA, _entries_table

    rows = sorted(
        (f"2026-01-01T00:00:{i % 60:02d}Z", os.urandom(32).hex(), f"events/X/{i}", os.urandom(1024))
        for i in range(64 * ENTRY_ROW_GROUP)
    )
    with pq.ParquetWriter(part, ENTRY_SCHEMA, compression="zstd") as writer:
        for i in range(0, len(rows), ENTRY_ROW_GROUP):
            writer.write_table(_entries_table(rows[i : i + ENTRY_ROW_GROUP]), row_group_size=ENTRY_ROW_GROUP)
    size = part.stat().st_size
    assert size > 64 * ENTRY_ROW_GROUP * 1000  # 64 row groups of 1 KB entries
    before = pa.total_allocated_bytes()
    held = 0
    got = []
    for row in _read_sorted(part):
        got.append(row)
        held = max(held, pa.total_allocated_bytes() - before)
    assert got == rows
    assert held < size // 8, (held, size)  # a few row groups, not the file
    out = tmp_path / "m.parquet"
    _write_merged([part], out)
    assert list(_read_sorted(out)) == rows


@pytest.mark.parametrize("fan_in", [2, 3, 64])
def test_log_entries_are_a_sort_of_every_file_s_rows_in_one_round_or_several(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fan_in: int
) -> None:
    """The merge of the run's entries files gives what sorting every row as a tuple
    gives, each event id's first row kept: across row group boundaries, with (created_at, id) ties broken by
    key and entry, repeats within and across files, empty files, and in one round or
    several (a small fan-in)."""
    import random

    import pith_pipeline.index.sink as sink_mod

    monkeypatch.setattr(sink_mod, "ENTRY_ROW_GROUP", 4)
    monkeypatch.setattr(sink_mod, "ENTRY_FAN_IN", fan_in)
    for seed in range(5):
        rng = random.Random(seed)
        rows: list[tuple[str, str, str, bytes]] = []
        with RowSink(tmp_path / f"rows-{seed}") as sink:
            for _ in range(9):
                entries = [
                    (
                        f"2026-01-01T00:00:{rng.randrange(3):02d}Z",
                        f"{rng.randrange(6):064x}",  # few ids: ties and repeats
                        f"events/X/{rng.randrange(2)}",
                        bytes([rng.randrange(2)]) * rng.randrange(1, 4),
                    )
                    for _ in range(rng.randrange(0, 40))
                ]
                rows += entries
                sink._entries = entries  # what add_bundle collects
                sink.flush()
            want, last = [], None
            for _c, hex_id, key, entry in sorted(rows):
                if hex_id != last:
                    want.append((hex_id, key, entry))
                last = hex_id
            assert list(sink.log_entries()) == want


def test_entries_files_carry_no_dictionary_and_no_statistics(tmp_path: Path) -> None:
    """Why: every entry and id is unique, so a dictionary page is a second copy of the
    row group when it is read, and an entry's min and max are 5 KB of footer a row
    group; the merge holds up to ENTRY_FAN_IN files open (32 files: 259 MB, 195 without)."""
    import pyarrow.parquet as pq

    from pith_pipeline.index.sink import LOG_DIR, _write_merged

    with RowSink(tmp_path / "rows") as sink:
        sink._entries = [
            (f"2026-01-01T00:00:0{i}Z", f"{i:064x}", f"events/X/{i}", b"{}" * i) for i in range(9)
        ]
        sink.flush()
        (path,) = (tmp_path / "rows" / LOG_DIR).glob("*.parquet")
        _write_merged([path], tmp_path / "m.parquet")
        for written in (path, tmp_path / "m.parquet"):
            meta = pq.ParquetFile(written).metadata
            for i in range(meta.num_columns):
                col = meta.row_group(0).column(i)
                assert not col.has_dictionary_page and not col.is_stats_set, (written, col.path_in_schema)


@pytest.mark.parametrize("budget", [1, 7, 20, 1_000])
def test_groups_hold_every_row_once_and_never_split_a_paper(tmp_path: Path, budget: int) -> None:
    """Each group is one commit: it holds every row of the papers it has (so no table
    version holds half a paper), at most `budget` rows unless one paper is larger."""
    import random

    import pyarrow as pa
    import pyarrow.parquet as pq

    from pith_pipeline.index.schema import TABLES

    rng = random.Random(budget)
    ids = [f"{rng.randrange(50):04d}.{rng.randrange(3)}" for _ in range(300)]
    with RowSink(tmp_path / "rows") as sink:
        for k in range(3):  # three spilled files, papers spread over all of them
            rows = [
                {
                    "pith_number": f"p{k}-{i}",
                    "arxiv_id": a,
                    "submitted_month": "2020-01",
                    "primary_cat": "x",
                    "bundle_key": f"pith/p{k}-{i}/bundle.json",  # required: NOT NULL
                }
                for i, a in enumerate(ids[k * 100 : (k + 1) * 100])
            ]
            table = pa.Table.from_pylist(rows, schema=TABLES["records"].schema)
            pq.write_table(table, tmp_path / "rows" / "records" / f"f{k}.parquet")
        groups = list(sink.groups("records", budget))
    seen: dict[str, int] = {}
    for n, group in enumerate(groups):
        papers = set(group.column("arxiv_id").to_pylist())
        assert group.num_rows <= budget or len(papers) == 1
        for paper in papers:
            assert seen.setdefault(paper, n) == n, paper  # all its rows in one group
    assert sorted(r for g in groups for r in g.column("pith_number").to_pylist()) == sorted(
        f"p{k}-{i}" for k in range(3) for i in range(100)
    )
    assert (len(groups) == 1) == (budget >= 300)  # all rows fit: one commit
