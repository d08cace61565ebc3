"""What every version of the index tables holds, for readers that time-travel, filter
or follow the change feed; and how the log stays cheap to open.

Two runs make the history: a sample build in which some papers have only their first
version, then a run with their newer versions (each supersedes the old record, moves
the `arxiv:` alias, and adds events).
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from index_helpers import Runner, record_with_versions

from pith_pipeline.core.canonical_json import loads
from pith_pipeline.index import compact, update_indexes
from pith_pipeline.index.bundles import read_bundles
from pith_pipeline.index.delta import location
from pith_pipeline.index.merge import merge_rows
from pith_pipeline.index.schema import TABLE_PROPERTIES, TABLES
from pith_pipeline.index.tables import live_files, open_table, to_table
from pith_pipeline.storage.base import Store
from pith_pipeline.storage.local import LocalStore

#: per table, the column naming the paper (or record) a row belongs to
PAPER = {"records": "arxiv_id", "aliases": "arxiv_id", "events": "subject"}
KEY = {"records": ["pith_number"], "events": ["event_id"], "aliases": ["alias_kind", "alias_value"]}


def _multi(sample: list[str]) -> list[str]:
    """Lines of papers with more than one version (the ones a second run supersedes)."""
    return [ln for ln in sample if len(json.loads(ln)["versions"]) > 1]


def _two_runs(store: Store, sample: list[str], run: Runner) -> tuple[dict[str, int], dict[str, list[int]]]:
    """The sample with its multi-version papers at v1, then their newest versions.

    Returns (each table's version after the first run, the second run's commits)."""
    multi = _multi(sample)
    first = [record_with_versions(ln, 1) if ln in multi else ln for ln in sample]
    _, key1 = run(store, first)
    _, key2 = run(store, multi[:6])
    one = loads(store.get(key1) or b"")["index"]
    two = loads(store.get(key2) or b"")["index"]
    return one["versions"], two["commits"]


def _at(store: Store, name: str, version: int) -> pa.Table:
    """Table `name` as of `version`, read by deltalake; Polars must read the same rows."""
    import polars as pl
    from deltalake import DeltaTable

    loc = location(store)
    uri, opts = loc.uri(name), loc.options or None
    table = pa.table(DeltaTable(uri, version=version, storage_options=opts).to_pyarrow_table())
    frame = pl.read_delta(uri, version=version, storage_options=opts)
    key = KEY[name]
    assert frame.height == table.num_rows, (name, version)
    got = sorted(tuple(r) for r in frame.select(key).rows())
    want = sorted(tuple(r[c] for c in key) for r in table.select(key).to_pylist())
    assert got == want, (name, version)
    return table


def _per_paper(name: str, table: pa.Table) -> dict[str, frozenset[tuple[Any, ...]]]:
    """paper -> its rows (the columns a change touches), to compare whole papers."""
    cols = [c for c in table.column_names if c not in ("created_at",)]
    out: dict[str, set[tuple[Any, ...]]] = {}
    for r in table.select(cols).to_pylist():
        out.setdefault(r[PAPER[name]], set()).add(tuple(str(r[c]) for c in cols))
    return {k: frozenset(v) for k, v in out.items()}


def _check_history(store: Store, start: dict[str, int], end: dict[str, int]) -> dict[str, int]:
    """Every version of every table between `start` (excluded) and `end` holds one row
    per key, one latest records row per paper, every alias kind of the end, and each
    paper as it was at `start` or as it is at `end`, never half of it.

    Returns per table how many of those versions changed the rows."""
    changes: dict[str, int] = {}
    for name in TABLES:
        before = _at(store, name, start[name]) if start[name] >= 0 else None
        after = _at(store, name, end[name])
        was = _per_paper(name, before) if before is not None else {}
        now = _per_paper(name, after)
        kinds = set(after.column("alias_kind").to_pylist()) if name == "aliases" else set()
        previous = was
        changes[name] = 0
        for v in range(start[name] + 1, end[name] + 1):
            table = _at(store, name, v)
            keys = table.select(KEY[name]).to_pylist()
            assert len({tuple(k.values()) for k in keys}) == len(keys), (name, v)
            papers = _per_paper(name, table)
            for paper, rows in papers.items():
                assert rows in (was.get(paper), now.get(paper)), (name, v, paper)
            if name == "records":
                latest = Counter(
                    r["arxiv_id"]
                    for r in table.select(["arxiv_id", "superseded_by"]).to_pylist()
                    if r["superseded_by"] is None
                )
                assert set(latest) == set(table.column("arxiv_id").to_pylist()), v
                assert set(latest.values()) <= {1}, (v, latest.most_common(3))
            if name == "aliases" and table.num_rows:
                assert set(table.column("alias_kind").to_pylist()) == kinds, v
            changes[name] += papers != previous
            previous = papers
        assert previous == now, name
    return changes


def test_every_version_a_run_commits_is_consistent_and_each_table_changes_once(
    any_store: Store, sample: list[str], run: Runner
) -> None:
    first, second = _two_runs(any_store, sample, run)
    end = {name: max(second[name]) for name in TABLES}
    assert set(second) == set(TABLES)  # the second run changed every table
    # from each table's creation through the first run, then through the second
    empty = {name: -1 for name in TABLES}
    assert _check_history(any_store, empty, first) == dict.fromkeys(TABLES, 1)
    assert _check_history(any_store, first, end) == dict.fromkeys(TABLES, 1)


def test_a_run_too_large_for_one_commit_commits_whole_papers(
    tmp_path: Path, sample: list[str], run: Runner
) -> None:
    """Runs larger than a commit's row budget commit several times, each holding every
    row of the papers it writes (all versions, all partitions)."""
    store = LocalStore(tmp_path / "s")
    multi = _multi(sample)

    def index(lines: list[str]) -> dict[str, list[int]]:
        run(store, lines, finish=False)
        subjects = [k.split("/")[1] for k in store.list("pith/") if k.endswith("/bundle.json")]
        return update_indexes(store, subjects, group_rows=7).commits

    one = index([record_with_versions(ln, 1) if ln in multi else ln for ln in sample])
    first = {name: max(v) for name, v in one.items()}
    two = index(multi[:6])
    end = {name: max(two.get(name, [first[name]])) for name in TABLES}
    changes = _check_history(store, {n: -1 for n in TABLES}, first)
    assert changes["records"] >= 3 and changes["aliases"] >= 3  # split, but never a paper
    _check_history(store, first, end)


def _view_types(schema: pa.Schema) -> list[str]:
    def views(t: pa.DataType) -> bool:
        if t in (pa.string_view(), pa.binary_view()):
            return True
        return pa.types.is_list(t) and views(t.value_type)

    return [f.name for f in schema if views(f.type)]


def _files_with_views(store: LocalStore) -> dict[str, list[str]]:
    import pyarrow.parquet as pq

    out: dict[str, list[str]] = {}
    for name, spec in TABLES.items():
        for f in live_files(open_table(location(store), spec), spec):
            path = store.root / "index" / name / f["path"]
            if _view_types(pq.read_schema(path)):
                out.setdefault(name, []).append(f["path"])
    return out


#: a string column of each table that readers filter on
PROBES = {"records": "arxiv_id", "events": "subject", "aliases": "alias_value"}


def _read_by_every_reader(store: LocalStore) -> None:
    """Every table, read by the readers that failed on files with view types: daft
    (`Unsupported Arrow DataType: Utf8View`), pyarrow filters and DuckDB over the
    dataset (`no kernel matching input types (string, string_view)`), each whole and
    filtered on a string column; all agree with deltalake's row counts."""
    import daft
    import duckdb
    from deltalake import DeltaTable

    loc = location(store)
    for name, column in PROBES.items():
        dt = DeltaTable(loc.uri(name))
        whole = pa.table(dt.to_pyarrow_table())
        value = whole.column(column)[0].as_py()
        hit = dt.to_pyarrow_table(filters=[(column, "=", value)])
        assert hit.num_rows >= 1
        dataset = dt.to_pyarrow_dataset()  # noqa: F841 (read by DuckDB below)
        con = duckdb.connect()
        n = con.execute(f"SELECT count(*) FROM dataset WHERE {column} = ?", [value]).fetchone()
        con.close()
        assert n == (hit.num_rows,), name
        frame = daft.read_deltalake(loc.uri(name))
        assert frame.count_rows() == whole.num_rows, name
        assert frame.where(daft.col(column) == value).count_rows() == hit.num_rows, name


def test_every_file_a_supersession_run_leaves_holds_plain_strings(
    tmp_path: Path, sample: list[str], run: Runner
) -> None:
    store = LocalStore(tmp_path / "s")
    _two_runs(store, sample, run)
    assert _files_with_views(store) == {}
    _read_by_every_reader(store)
    # and so does every file `compact` writes, bin-packed or z-ordered
    for z_order in (False, True):
        compact(store, z_order=z_order, retention_hours=0)
        assert _files_with_views(store) == {}
        _read_by_every_reader(store)


def test_compact_repairs_files_a_merge_left_as_string_views(
    tmp_path: Path, sample: list[str], run: Runner
) -> None:
    """A MERGE whose run died before tidying leaves string views, in partitions of a
    single file too; `compact` rewrites them plain."""
    store = LocalStore(tmp_path / "s")
    run(store, sample[:10])
    loc = location(store)
    keys = [k for k in store.list("pith/") if k.endswith("/bundle.json")]
    rows = [r for _, rs in read_bundles(store, keys) for r in rs.aliases if r["alias_kind"] == "arxiv"][:1]
    rows[0]["created_at"] = rows[0]["created_at"].replace(year=2030) if rows[0]["created_at"] else None
    spec = TABLES["aliases"]
    merge_rows(loc, spec, to_table(spec, rows))
    assert "aliases" in _files_with_views(store)
    per = Counter(f["partition"] for f in live_files(open_table(loc, spec), spec))
    assert per["arxiv"] == 1  # one file: plain compaction has nothing to bin-pack
    before = pa.table(open_table(loc, spec).to_pyarrow_table()).sort_by("alias")
    import daft

    with pytest.raises(Exception, match="Utf8View"):  # daft reads no view type
        daft.read_deltalake(loc.uri("aliases")).collect()
    with pytest.raises(Exception, match="string_view"):  # pyarrow cannot filter a mix
        _read_by_every_reader(store)
    compact(store)
    assert _files_with_views(store) == {}
    assert pa.table(open_table(loc, spec).to_pyarrow_table()).sort_by("alias").equals(before)
    _read_by_every_reader(store)


# -- the change feed ---------------------------------------------------------------


def _changed_keys(before: pa.Table | None, after: pa.Table, name: str) -> set[tuple[Any, ...]]:
    """Keys whose row differs between two versions (or exists in one only)."""
    key = KEY[name]

    def rows(t: pa.Table | None) -> dict[tuple[Any, ...], tuple[Any, ...]]:
        if t is None:
            return {}
        cols = sorted(t.column_names)
        return {tuple(r[c] for c in key): tuple(str(r[c]) for c in cols) for r in t.to_pylist()}

    a, b = rows(before), rows(after)
    return {k for k in a.keys() | b.keys() if a.get(k) != b.get(k)}


def test_the_change_feed_of_a_run_is_exactly_the_rows_it_changed(
    any_store: Store, sample: list[str], run: Runner
) -> None:
    from deltalake import DeltaTable

    first, second = _two_runs(any_store, sample, run)
    loc = location(any_store)
    for name in TABLES:
        dt = DeltaTable(loc.uri(name), storage_options=loc.options or None)
        config = dt.metadata().configuration
        assert {k: config.get(k) for k in TABLE_PROPERTIES} == TABLE_PROPERTIES, name
        feed = pa.table(
            dt.load_cdf(starting_version=min(second[name]), ending_version=max(second[name])).read_all()
        )
        kinds = Counter(feed.column("_change_type").to_pylist())
        assert not kinds.keys() - {"insert", "update_preimage", "update_postimage"}, (name, kinds)
        want = _changed_keys(_at(any_store, name, first[name]), _at(any_store, name, max(second[name])), name)
        got_after = {
            tuple(r[c] for c in KEY[name])
            for r in feed.to_pylist()
            if r["_change_type"] in ("insert", "update_postimage")
        }
        assert got_after == want and len(want) > 0, name
        assert kinds["update_preimage"] == kinds["update_postimage"], name
        assert feed.num_rows == len(want) + kinds["update_preimage"], name


def test_tables_made_before_the_properties_get_them_on_the_next_write(
    tmp_path: Path, sample: list[str], run: Runner
) -> None:
    from deltalake import DeltaTable

    store = LocalStore(tmp_path / "s")
    loc = location(store)
    for name, spec in TABLES.items():  # as an older writer made them: no properties
        DeltaTable.create(loc.uri(name), schema=spec.schema, partition_by=[spec.partition])
    run(store, sample[:5])
    for name in TABLES:
        config = DeltaTable(loc.uri(name)).metadata().configuration
        assert {k: config.get(k) for k in TABLE_PROPERTIES} == TABLE_PROPERTIES, name


# -- checkpoints -----------------------------------------------------------------------


def test_a_thousand_commits_leave_a_log_opened_from_a_checkpoint(tmp_path: Path) -> None:
    """Opening a table reads its last checkpoint and the commits after it, so the cost
    stays flat however many runs wrote it; retention keeps the log from growing."""
    from deltalake import write_deltalake

    store = LocalStore(tmp_path / "s")
    spec = TABLES["aliases"]
    loc = location(store)
    dt = open_table(loc, spec, create=True)
    row = to_table(spec, [{"alias_kind": "pith", "alias_value": "x", "alias": "pith:x", "pith_number": "p"}])
    commits = 1095  # delta-rs's default interval (100) would leave 95 commit files to read
    for _ in range(commits):
        write_deltalake(dt, row, mode="overwrite", partition_by=[spec.partition])
    log = Path(loc.uri(spec.name)) / "_delta_log"
    last = json.loads((log / "_last_checkpoint").read_text())
    after = [p for p in os.listdir(log) if p.endswith(".json") and int(p.split(".")[0]) > last["version"]]
    interval = int(TABLE_PROPERTIES["delta.checkpointInterval"])
    assert last["version"] > commits - interval and len(after) < interval
    assert open_table(loc, spec).to_pyarrow_table().num_rows == 1
    config = open_table(loc, spec).metadata().configuration
    assert "delta.logRetentionDuration" in config and "delta.deletedFileRetentionDuration" in config


@pytest.mark.parametrize("name", list(TABLES))
def test_table_properties_are_set_at_creation(tmp_path: Path, name: str) -> None:
    store = LocalStore(tmp_path / "s")
    config = open_table(location(store), TABLES[name], create=True).metadata().configuration
    assert {k: config.get(k) for k in TABLE_PROPERTIES} == TABLE_PROPERTIES


def test_every_version_a_reindex_commits_holds_whole_papers(
    tmp_path: Path, sample: list[str], run: Runner, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`reindex` reads the bundles in chunks (bounded memory) in bundle-key order, which
    is not paper order: its commits still never split a paper."""
    from deltalake import DeltaTable

    from pith_pipeline.index import reindexing

    store = LocalStore(tmp_path / "s")
    _two_runs(store, sample, run)
    loc = location(store)
    start = {name: int(DeltaTable(loc.uri(name)).version()) for name in TABLES}
    monkeypatch.setattr(reindexing, "REINDEX_CHUNK", 4)
    reindexing.reindex(store)
    end = {name: int(DeltaTable(loc.uri(name)).version()) for name in TABLES}
    _check_history(store, start, end)


def test_an_invalid_event_stays_invalid_and_a_valid_copy_commits_nothing(
    tmp_path: Path, sample: list[str], run: Runner
) -> None:
    store = LocalStore(tmp_path / "s")
    run(store, sample[:3])
    loc = location(store)
    spec = TABLES["events"]
    indexed = pa.table(open_table(loc, spec).to_pyarrow_table()).cast(spec.schema).slice(0, 2)
    flags = indexed.schema.get_field_index("valid")
    invalid = indexed.set_column(flags, "valid", pa.array([False, False]))
    assert len(merge_rows(loc, spec, invalid)) == 1
    # a bundle that still calls them valid changes nothing, so nothing is committed
    assert merge_rows(loc, spec, indexed) == []
    now = pa.table(open_table(loc, spec).to_pyarrow_table())
    ids = set(indexed.column("event_id").to_pylist())
    assert {r["valid"] for r in now.to_pylist() if r["event_id"] in ids} == {False}


def _duckdb_delta() -> Any:
    """A DuckDB connection with the `delta` extension loaded from its wheel (offline), as
    docs/pages/analysts.md loads it."""
    import duckdb
    import duckdb_extension_delta

    wheel = Path(duckdb_extension_delta.__file__).parent
    con = duckdb.connect()
    con.load_extension(str(wheel / f"extensions/v{duckdb.__version__}/delta.duckdb_extension"))
    return con


def test_every_engine_on_the_page_reads_every_table_after_a_supersession_run(
    tmp_path: Path, sample: list[str], run: Runner
) -> None:
    """Polars, pandas (deltalake), pyarrow, daft, DuckDB's delta extension and `query`
    (the engines docs/pages/analysts.md runs; Spark and Athena need a cluster) read the
    same keys of every table, and count the same papers. On S3, deltalake and Polars
    read every version (`test_every_version_a_run_commits_is_consistent...`)."""
    import daft
    import polars as pl
    from deltalake import DeltaTable

    from pith_pipeline.index import run_query

    store = LocalStore(tmp_path / "s")
    _two_runs(store, sample, run)
    loc = location(store)
    con = _duckdb_delta()
    for name in TABLES:
        uri, key = loc.uri(name), KEY[name]

        def keys(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
            return sorted(tuple(r) for r in rows)

        want = keys(
            [tuple(r[c] for c in key) for r in DeltaTable(uri).to_pyarrow_table(columns=key).to_pylist()]
        )
        assert want and len(set(want)) == len(want), name
        got = {
            "polars": keys(pl.scan_delta(uri).select(key).collect().rows()),
            "pandas": keys(DeltaTable(uri).to_pandas(columns=key).itertuples(index=False, name=None)),
            "daft": keys(zip(*daft.read_deltalake(uri).select(*key).to_pydict().values(), strict=True)),
            "duckdb delta": keys(con.sql(f"SELECT {', '.join(key)} FROM delta_scan('{uri}')").fetchall()),
            "query": keys(run_query(store, f"SELECT {', '.join(key)} FROM {name}").rows),
        }
        for engine, rows in got.items():
            assert rows == want, (name, engine)
    papers = "superseded_by IS NULL"
    n = pl.scan_delta(loc.uri("records")).filter(pl.col("superseded_by").is_null()).select(pl.len()).collect()
    counts = {
        "polars": n.item(),
        "daft": daft.read_deltalake(loc.uri("records"))
        .where(daft.col("superseded_by").is_null())
        .count_rows(),
        "duckdb delta": con.sql(
            f"SELECT count(*) FROM delta_scan('{loc.uri('records')}') WHERE {papers}"
        ).fetchone()[0],
        "query papers view": run_query(store, "SELECT count(*) FROM papers").rows[0][0],
    }
    con.close()
    assert len(set(counts.values())) == 1, counts
    assert counts["polars"] == len({json.loads(ln)["id"] for ln in sample}), counts
