"""Index internals: rows from a real bundle and their validation, the Delta tables read
by every engine with one row per key, compaction that readers never see half done,
repair by `reindex` from any state, and the CLI commands."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from deltalake import DeltaTable
from index_helpers import Runner, record_with_versions
from store_doubles import counting_gets

from pith_pipeline.cli import cli, main
from pith_pipeline.errors import InputError, StorageError
from pith_pipeline.index import (
    LEGACY_MANIFEST_KEY,
    check,
    check_bundle,
    compact,
    connect,
    reindex,
    run_query,
    status,
    update_indexes,
)
from pith_pipeline.index.delta import location
from pith_pipeline.index.guard import check_last_commit, version_key
from pith_pipeline.index.rows import rows_from_bundle
from pith_pipeline.index.schema import TABLES
from pith_pipeline.index.tables import live_files, open_table
from pith_pipeline.storage.base import Store
from pith_pipeline.storage.local import LocalStore


def test_rows_from_the_registry_bundle(reference_bundle: dict[str, Any]) -> None:
    rows = rows_from_bundle(reference_bundle, bundle_key="pith/X/bundle.json", bundle_sha256="ab" * 32)
    (rec,) = rows.records
    assert rec["pith_number"] == reference_bundle["pith_number"]
    assert rec["arxiv_id"] == "1909.11150" and rec["version"] == 1
    assert rec["submitted_at"] == datetime(2019, 9, 24, 19, 40, 59, tzinfo=UTC)
    assert rec["submitted_month"] == "2019-09"
    assert rec["primary_cat"] == "cs.LG" and rec["primary_archive"] == "cs"
    assert rec["categories"] == ["cs.LG", "cond-mat.mtrl-sci", "cs.DC", "physics.comp-ph", "stat.ML"]
    assert rec["doi"] == "10.48550/arxiv.1909.11150"
    assert len(rec["authors"]) == 9 and rec["authors"][0] == "Albina Borisevich"
    assert rec["key_id"] == reference_bundle["public_keys"][0]["key_id"]
    assert rec["title_canon_sha256"].startswith("74e55f40")
    assert {e["event_type"] for e in rows.events} == {"record_created", "graph_snapshot"}
    assert all(e["valid"] for e in rows.events)
    assert {a["alias"] for a in rows.aliases} >= {"arxiv:1909.11150", "arxiv_version:1909.11150v1"}


# -- validation before publishing (issue 16, item 2) -------------------------------------


def test_check_bundle_accepts_the_registry_bundle(reference_bundle: dict[str, Any]) -> None:
    rows = check_bundle(reference_bundle)
    assert [r["pith_number"] for r in rows.records] == [reference_bundle["pith_number"]]


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        (("canonical_record", "source", "version"), 3_000_000_000, "version"),  # int32 overflow
        (("canonical_record", "source", "version"), "3", "version"),
        (("state", "event_count"), "many", "event_count"),
        (("canonical_record", "metadata", "license"), ["a"], "license"),
    ],
)
def test_check_bundle_names_the_column_a_row_cannot_hold(
    reference_bundle: dict[str, Any], path: tuple[str, ...], value: Any, field: str
) -> None:
    bundle = copy.deepcopy(reference_bundle)
    node = bundle
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    with pytest.raises(InputError) as info:
        check_bundle(bundle)
    assert info.value.field == field
    assert info.value.record_id == reference_bundle["pith_number"]


def test_check_bundle_refuses_a_bundle_without_what_the_index_needs(
    reference_bundle: dict[str, Any],
) -> None:
    bundle = copy.deepcopy(reference_bundle)
    del bundle["canonical_record"]["metadata"]["primary_cat"]
    with pytest.raises(InputError, match="lacks what the index needs"):
        check_bundle(bundle)


def test_check_names_missing_keys_and_unknown_columns() -> None:
    with pytest.raises(InputError) as info:
        check(
            {"event_id": None, "created_month": "2026-01", "subject": "pith:x", "event_type": "t"}, "events"
        )
    assert info.value.field == "event_id"
    with pytest.raises(InputError) as info:
        check(
            {"alias_kind": "arxiv", "alias_value": "1", "alias": "arxiv:1", "pith_number": "p", "x": 1},
            "aliases",
        )
    assert info.value.field == "x"
    check({"alias_kind": "arxiv", "alias_value": "1", "alias": "arxiv:1", "pith_number": "p"}, "aliases")


# -- one row per key for every reader ------------------------------------------------------


def _keys(store: Store) -> dict[str, int]:
    """Distinct keys per table, counted from the bundles themselves."""
    from pith_pipeline.core.canonical_json import loads

    pns, events, aliases = set(), set(), set()
    for k in store.list("pith/"):
        if k.endswith("/bundle.json") and k.count("/") == 2:
            b = loads(store.get(k) or b"")
            pns.add(b["pith_number"])
            events.update(e["event_id"] for e in b["events"])
            aliases.update(f"{a['alias_kind']}:{a['alias_value']}" for a in b["source_aliases"])
    return {"records": len(pns), "events": len(events), "aliases": len(aliases)}


KEY_SQL = {
    "records": "pith_number",
    "events": "event_id",
    "aliases": "alias_kind || ':' || alias_value",
}


def _busy_store(store: Store, sample: list[str], run: Runner) -> None:
    """Overlapping windows and a paper published as v1, then again with newer versions."""
    line = next(ln for ln in sample if json.loads(ln)["id"] == "hep-th/9901001")
    run(store, [record_with_versions(line, 1), *sample[:8]])
    run(store, sample[4:14])
    run(store, [line, *sample[:14]])


def test_one_row_per_key_for_query_pyarrow_and_polars(
    any_store: Store, sample: list[str], run: Runner
) -> None:
    import polars as pl
    from deltalake import DeltaTable

    _busy_store(any_store, sample, run)
    expected = _keys(any_store)
    assert expected["records"] == 15
    loc = location(any_store)
    for name, key_sql in KEY_SQL.items():
        got = run_query(any_store, f"SELECT count(*), count(DISTINCT {key_sql}) FROM {name}").rows[0]
        assert got == (expected[name], expected[name]), name
        dt = DeltaTable(loc.uri(name), storage_options=loc.options or None)
        table = dt.to_pyarrow_table()
        key_cols = ["alias_kind", "alias_value"] if name == "aliases" else [KEY_SQL[name]]
        assert table.num_rows == expected[name]
        assert table.group_by(key_cols).aggregate([]).num_rows == expected[name]
        frame = pl.read_delta(loc.uri(name), storage_options=loc.options or None)
        assert frame.height == expected[name] == frame.select(key_cols).unique().height
    # the alias of the paper resolves to its newest version in every reader
    newest = run_query(
        any_store,
        "SELECT pith_number FROM records WHERE arxiv_id = 'hep-th/9901001' AND superseded_by IS NULL",
    ).rows
    frame = pl.read_delta(loc.uri("aliases"), storage_options=loc.options or None)
    assert frame.filter(pl.col("alias") == "arxiv:hep-th/9901001")["pith_number"].to_list() == [newest[0][0]]


def test_rerun_commits_nothing_and_groups_commit_once_each(
    tmp_path: Path, sample: list[str], run: Runner
) -> None:
    store = LocalStore(tmp_path / "s")
    run(store, sample, finish=False)
    subjects = [k.split("/")[1] for k in store.list("pith/") if k.endswith("/bundle.json")]
    update = update_indexes(store, subjects, batch_size=7, group_rows=10)
    # 30 papers in groups of whole papers of at most 10 rows: one append commit per group
    # (versions from 1, after the create); the one month of events (60 rows) and each
    # alias kind (30) are larger than a group: written in several commits, then compacted
    assert len(update.commits["records"]) >= 3
    for name, spec in TABLES.items():
        parts = [f["partition"] for f in live_files(open_table(location(store), spec), spec)]
        assert len(parts) == len(set(parts)), name  # one file per partition at the end
    for name, versions in update.commits.items():
        assert versions == list(range(1, len(versions) + 1)), name
    assert update.subjects_checked == update.subjects_changed == 30
    before = sorted(store.list("index/"))
    again = update_indexes(store, subjects, batch_size=10)
    assert again.subjects_changed == 0 and again.commits == {} and sorted(store.list("index/")) == before
    assert run_query(store, "SELECT count(*), count(DISTINCT pith_number) FROM records").rows[0] == (30, 30)


def test_rows_the_run_has_are_not_read_back(tmp_path: Path, sample: list[str], signer: Any) -> None:
    """A run's publisher feeds a `RowSink`; the index update then reads no bundle."""
    from index_helpers import fixed_clock

    from pith_pipeline.index import RowSink
    from pith_pipeline.publish import Publisher
    from pith_pipeline.runs.manifest import finish_run
    from pith_pipeline.sources.jsonl import iter_jsonl

    path = tmp_path / "in.jsonl"
    path.write_text("\n".join(sample) + "\n", encoding="utf-8")
    store = LocalStore(tmp_path / "s")
    with RowSink(tmp_path / "rows", chunk_papers=7) as sink:
        pub = Publisher(store, signer, clock=fixed_clock, on_bundle=sink.add_bundle)
        summary = pub.publish(iter_jsonl(path))
        sink.flush()  # what a worker process does at the end of its chunk
        with counting_gets(store) as reads:
            finish_run(store, summary, {"input": "in"}, clock=fixed_clock, rows=RowSink(tmp_path / "rows"))
    assert not [k for k in reads if k.endswith("/bundle.json")]
    assert (tmp_path / "rows").is_dir()  # a sink given a directory leaves it to its owner
    # the same rows as reading the bundles back (`reindex`)
    sql = {name: f"SELECT * FROM {name} ORDER BY ALL" for name in TABLES}
    got = {name: run_query(store, q).rows for name, q in sql.items()}
    assert len(got["records"]) == 30
    reindex(store)
    assert {name: run_query(store, q).rows for name, q in sql.items()} == got


def test_a_fresh_bundles_rows_are_made_once(
    tmp_path: Path, sample: list[str], signer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rows checked before a fresh bundle is published are the ones the sink keeps:
    one `rows_from_bundle` per bundle, with the bundle's real key and hash."""
    import hashlib

    from index_helpers import fixed_clock

    import pith_pipeline.index.rows as rows_mod
    import pith_pipeline.index.sink as sink_mod
    from pith_pipeline.index import RowSink
    from pith_pipeline.publish import Publisher
    from pith_pipeline.sources.jsonl import iter_jsonl

    calls: list[str] = []

    def counted(bundle: dict[str, Any], **kw: Any) -> Any:
        calls.append(bundle["pith_number"])
        return rows_from_bundle(bundle, **kw)

    monkeypatch.setattr(rows_mod, "rows_from_bundle", counted)
    monkeypatch.setattr(sink_mod, "rows_from_bundle", counted)
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join(sample) + "\n", encoding="utf-8")
    store = LocalStore(tmp_path / "s")
    with RowSink(tmp_path / "rows") as sink:
        Publisher(store, signer, clock=fixed_clock, on_bundle=sink.add_bundle).publish(iter_jsonl(path))
        sink.flush()
        kept = sink.dataset("records").to_table().to_pylist()
    assert len(calls) == len(set(calls)) == len(kept) == 30
    for row in kept:
        data = store.get(row["bundle_key"])
        assert data is not None and row["bundle_sha256"] == hashlib.sha256(data).hexdigest()


def test_changed_rows_are_merged_and_rewritten_plain(tmp_path: Path, sample: list[str], run: Runner) -> None:
    from pith_pipeline.index.bundles import read_bundles

    store = LocalStore(tmp_path / "s")
    run(store, sample[:12])
    keys = [k for k in store.list("pith/") if k.endswith("/bundle.json")]
    rows = [rs for _, rs in read_bundles(store, keys)]
    for rs in rows[:5]:
        rs.records[0]["title"] = "retitled"
        rs.records[0]["bundle_sha256"] = "e" * 64
    update = update_indexes(store, [], rows=rows)
    # only the 5 changed records rows are written (a MERGE, then the rewrite of its
    # string-view files); events and aliases, indexed as they are, commit nothing
    assert set(update.commits) == {"records"} and update.rows == {"records": 5}
    assert update.files_compacted > 0
    assert _kinds(store)["records"] == {"string"}
    assert run_query(store, "SELECT count(*) FROM records WHERE title = 'retitled'").rows == [(5,)]
    assert run_query(store, "SELECT count(*), count(DISTINCT pith_number) FROM records").rows[0] == (12, 12)


def _kinds(store: LocalStore) -> dict[str, set[str]]:
    """Per table, the string types its live files hold (`string` or `string_view`)."""
    import pyarrow.parquet as pq

    out = {}
    for name, spec in TABLES.items():
        files = live_files(open_table(location(store), spec), spec)
        out[name] = {
            str(pq.read_schema(store.root / "index" / name / f["path"]).field(spec.merge_column).type)
            for f in files
        }
    return out


def test_update_leaves_plain_files_one_per_touched_partition(
    tmp_path: Path, sample: list[str], run: Runner
) -> None:
    store = LocalStore(tmp_path / "s")
    run(store, sample, finish=False)
    subjects = [k.split("/")[1] for k in store.list("pith/") if k.endswith("/bundle.json")]
    update_indexes(store, subjects, batch_size=4, group_rows=4)
    # appended files hold plain strings (no views stopping DuckDB's filter pushdown), and
    # each partition ends as one file (those written by several groups of 4 rows were
    # compacted)
    assert _kinds(store) == {"records": {"string"}, "events": {"string"}, "aliases": {"string"}}
    for name, spec in TABLES.items():
        per: dict[str, int] = {}
        for f in live_files(open_table(location(store), spec), spec):
            per[f["partition"]] = per.get(f["partition"], 0) + 1
        assert set(per.values()) == {1}, name
    for name, key_sql in KEY_SQL.items():
        got = run_query(store, f"SELECT count(*), count(DISTINCT {key_sql}) FROM {name}").rows[0]
        assert got[0] == got[1] == _keys(store)[name]
    con = connect(store)
    plan = con.sql("EXPLAIN SELECT count(*) FROM records WHERE submitted_month = '2007-04'").fetchall()
    assert "Filters:" in plan[0][1]  # pushed into the scan: files of other months are skipped
    con.close()


def test_query_reads_files_a_merge_left_as_string_views(
    tmp_path: Path, sample: list[str], run: Runner
) -> None:
    from pith_pipeline.index.bundles import read_bundles
    from pith_pipeline.index.merge import merge_rows
    from pith_pipeline.index.tables import to_table

    store = LocalStore(tmp_path / "s")
    run(store, sample[:10])
    keys = [k for k in store.list("pith/") if k.endswith("/bundle.json")]
    rows = [r for _, rs in read_bundles(store, keys) for r in rs.records]
    for r in rows:
        r["title"] = "retitled"
        r["bundle_sha256"] = "e" * 64  # a row is a function of its bundle: another bundle
    # a MERGE whose run died before tidying: its files hold string views
    merge_rows(location(store), TABLES["records"], to_table(TABLES["records"], rows))
    assert "string_view" in _kinds(store)["records"]
    sql = "SELECT count(*) FROM records WHERE title = 'retitled' AND primary_cat <> 'x'"
    assert run_query(store, sql).rows == [(10,)]
    assert status(store)["records"] == 10


def test_compaction_is_invisible_to_readers(any_store: Store, sample: list[str], run: Runner) -> None:
    run(any_store, sample[:14], finish=False)
    subjects = [k.split("/")[1] for k in any_store.list("pith/") if k.endswith("/bundle.json")]
    for i in range(0, len(subjects), 3):  # small events files: several runs per partition
        update_indexes(any_store, subjects[i : i + 3], max_parts=1 << 30)
    loc = location(any_store)
    sql = "SELECT primary_cat, count(*), count(DISTINCT pith_number) FROM records GROUP BY ALL ORDER BY ALL"
    before = run_query(any_store, sql).rows
    spec = TABLES["events"]
    files_before = live_files(open_table(loc, spec), spec)
    assert len(files_before) > len({f["partition"] for f in files_before})  # small files to compact
    reader = connect(any_store)  # a reader of the previous versions
    update = compact(any_store)  # default retention: nothing is deleted yet
    assert update.files_compacted > 0 and update.deleted == []
    files_after = live_files(open_table(loc, spec), spec)
    assert len(files_after) == len({f["partition"] for f in files_after})
    assert run_query(any_store, sql).rows == before
    assert reader.sql(sql).fetchall() == before  # its files are kept for the retention period
    reader.close()
    later = compact(any_store, retention_hours=0)
    old = {f"index/events/{f['path']}" for f in files_before} - {
        f"index/events/{f['path']}" for f in files_after
    }
    assert old and old <= set(later.deleted)
    assert not any(any_store.exists(p) for p in old)
    assert run_query(any_store, sql).rows == before


# -- a lost or damaged index: query says so, reindex repairs (issue 16, items 16 and 18) ----


def test_query_on_an_empty_store_is_empty_and_on_a_lost_index_says_reindex(
    tmp_path: Path, sample: list[str], run: Runner
) -> None:
    empty = LocalStore(tmp_path / "empty")
    assert run_query(empty, "SELECT count(*) FROM records").rows == [(0,)]
    store = LocalStore(tmp_path / "s")
    run(store, sample[:3])
    for key in list(store.list("index/")):
        store.delete(key)
    with pytest.raises(StorageError, match="run `pith-pipeline reindex`"):
        run_query(store, "SELECT count(*) FROM records")
    reindex(store)
    assert run_query(store, "SELECT count(*) FROM records").rows == [(3,)]


def _damage_log(store: LocalStore) -> None:
    log = sorted((store.root / "index" / "records" / "_delta_log").glob("*.json"))
    log[-1].write_bytes(b'{"add": {"path": ')


def _empty_last_commit(store: LocalStore) -> None:
    """An empty last commit: delta-rs read it as a commit with no actions, so the rows
    it added were gone and `query` said 0 rows."""
    log = sorted((store.root / "index" / "records" / "_delta_log").glob("*.json"))
    log[-1].write_bytes(b"")


def _cut_last_commit_at_a_line(store: LocalStore) -> None:
    """Cut after its first line (commitInfo): valid JSON lines, the add actions lost."""
    log = sorted((store.root / "index" / "records" / "_delta_log").glob("*.json"))
    log[-1].write_bytes(log[-1].read_bytes().split(b"\n")[0] + b"\n")


def _delete_last_commit(store: LocalStore) -> None:
    """The newest commit file gone (tampering, a lost object): delta-rs read the table
    at the version before, silently, so `query` answered without that commit's rows
    and `status` passed."""
    log = sorted((store.root / "index" / "records" / "_delta_log").glob("*.json"))
    log[-1].unlink()


def _damage_parquet(store: LocalStore) -> str:
    spec = TABLES["records"]
    path = live_files(open_table(location(store), spec), spec)[0]["path"]
    (store.root / "index" / "records" / path).write_bytes(b"not parquet at all")
    return f"index/records/{path}"


def _delete_table(store: LocalStore) -> None:
    for key in list(store.list("index/events/")):
        store.delete(key)


def _legacy_layout(store: LocalStore) -> None:
    """The layout before Delta: our own manifest and generation-named part files."""
    for key in list(store.list("index/")):
        store.delete(key)
    name = "index/records/submitted_month=2007-04/part-g00000001-20260304T050607Z-0123456789abcdef.parquet"
    store.put(name, b"PAR1 old")
    store.put(LEGACY_MANIFEST_KEY, json.dumps({"format": "pith-index-v1", "generation": 1}).encode())


@pytest.mark.parametrize(
    "damage",
    [
        _damage_log,
        _empty_last_commit,
        _cut_last_commit_at_a_line,
        _delete_last_commit,
        _damage_parquet,
        _delete_table,
        _legacy_layout,
    ],
)
def test_reindex_repairs_any_state_of_the_index(
    tmp_path: Path, sample: list[str], run: Runner, damage: Any
) -> None:
    store = LocalStore(tmp_path / "s")
    run(store, sample[:6])
    damage(store)
    with pytest.raises(StorageError, match="reindex"):
        run_query(store, "SELECT count(*) FROM records, events, aliases")
    update = reindex(store, retention_hours=0)
    assert update.subjects_checked == 6
    expected = _keys(store)
    for name, key_sql in KEY_SQL.items():
        got = run_query(store, f"SELECT count(*), count(DISTINCT {key_sql}) FROM {name}").rows[0]
        assert got == (expected[name], expected[name]), name
    assert not store.exists(LEGACY_MANIFEST_KEY)
    assert not [k for k in store.list("index/") if "/part-g" in k]
    status(store)  # readable again


def test_a_lost_last_commit_is_named_after_compact_and_reindex_and_never_claimed_by_a_race(
    any_store: Store, sample: list[str], run: Runner
) -> None:
    """The version note follows every commit of ours (MERGE, append, compaction,
    vacuum, a reindex that starts the table anew), and a commit made after a reader
    opened the table is not taken for a lost one."""
    run(any_store, sample[:6])
    loc, spec = location(any_store), TABLES["records"]
    compact(any_store, retention_hours=0)
    reindex(any_store, retention_hours=0)
    version = int(open_table(loc, spec).version())
    assert json.loads(any_store.get(version_key("records")) or b"{}") == {"version": version}
    stale = DeltaTable(loc.uri("records"), storage_options=loc.options or None)  # opened before
    update_indexes(any_store, [], rows=_retitled_rows(any_store))  # another writer commits
    assert int(open_table(loc, spec).version()) > version
    check_last_commit(loc, spec, stale)  # not a lost commit: the log is listed again
    newest = int(open_table(loc, spec).version())
    any_store.delete(f"index/records/_delta_log/{newest:020d}.json")
    lost = f"ends at version {newest - 1} but version {newest} was committed"
    with pytest.raises(StorageError, match=lost):
        status(any_store)
    reindex(any_store, retention_hours=0)
    assert run_query(any_store, "SELECT count(*) FROM records").rows == [(6,)]
    status(any_store)


def _retitled_rows(store: Store) -> Any:
    from pith_pipeline.index.rows import Rows

    out = Rows()
    for key in sorted(k for k in store.list("pith/") if k.endswith("/bundle.json"))[:2]:
        bundle = json.loads(store.get(key) or b"{}")
        rows = rows_from_bundle(bundle, bundle_key=key, bundle_sha256="e" * 64)
        for r in rows.records:
            r["title"] = "retitled"
        out.extend(rows)
    return out


def test_status_on_a_damaged_parquet_file_is_one_line_naming_it(
    tmp_path: Path, sample: list[str], run: Runner, capsys: pytest.CaptureFixture[str]
) -> None:
    store = LocalStore(tmp_path / "s")
    run(store, sample[:4])
    key = _damage_parquet(store)
    with pytest.raises(SystemExit) as info:
        main(["status", "--store", str(store.root)])
    assert info.value.code == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"{store.root}/{key}" in err and "reindex" in err


@pytest.mark.parametrize(
    "damage", [_damage_log, _empty_last_commit, _cut_last_commit_at_a_line, _delete_last_commit]
)
def test_status_on_a_damaged_log_is_one_line_naming_the_table(
    tmp_path: Path, sample: list[str], run: Runner, capsys: pytest.CaptureFixture[str], damage: Any
) -> None:
    store = LocalStore(tmp_path / "s")
    run(store, sample[:4])
    damage(store)
    with pytest.raises(SystemExit) as info:
        main(["status", "--store", str(store.root)])
    assert info.value.code == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "index/records" in err and "reindex" in err


# -- the CLI ------------------------------------------------------------------------------


def test_cli_query_status_compact(tmp_path: Path, any_store: Store, sample: list[str], run: Runner) -> None:
    run(any_store, sample[:6])
    runner = CliRunner()
    url = any_store.url
    res = runner.invoke(cli, ["query", "--store", url, "SELECT count(*) AS n FROM records"])
    assert res.exit_code == 0, res.output
    assert res.output.splitlines()[2].strip() == "6"
    res = runner.invoke(
        cli, ["query", "--store", url, "--format", "csv", "SELECT arxiv_id FROM records ORDER BY 1 LIMIT 2"]
    )
    assert res.exit_code == 0 and res.output.splitlines()[0] == "arxiv_id"
    res = runner.invoke(cli, ["status", "--store", url])
    assert res.exit_code == 0 and "records: 6" in res.output
    assert "records" in res.output and "version 1" in res.output
    res = runner.invoke(cli, ["compact", "--store", url, "--retention", "0"])
    assert res.exit_code == 0, res.output
    res = runner.invoke(cli, ["query", "--store", url, "SELECT nope FROM records"])
    assert res.exit_code != 0


def test_cli_build_indexes_and_rebuild_reindexes(tmp_path: Path, sample: list[str]) -> None:
    runner = CliRunner()
    keys, out = tmp_path / "keys", tmp_path / "out"
    assert runner.invoke(cli, ["keys", "generate", "--out", str(keys)]).exit_code == 0
    data = tmp_path / "in.jsonl"
    data.write_text("\n".join(sample[:4]) + "\n", encoding="utf-8")
    key = str(keys / "pith-private-key.json")
    res = runner.invoke(cli, ["build", "--input", str(data), "--store", str(out), "--key", key])
    assert res.exit_code == 0, res.output
    store = LocalStore(out)
    assert store.exists("index/records/_delta_log/00000000000000000000.json") and list(store.list("runs/"))
    assert run_query(store, "SELECT count(*) FROM records").rows[0][0] == 4
    res = runner.invoke(cli, ["rebuild", "--store", str(out), "--key", key])
    assert res.exit_code == 0, res.output
    assert "0 rebuilt, 4 unchanged" in res.output  # the bundles already say what the events say
    assert run_query(store, "SELECT count(*) FROM records").rows[0][0] == 4
    shas = {r[0] for r in run_query(store, "SELECT bundle_sha256 FROM records").rows}
    import hashlib

    assert shas == {
        hashlib.sha256(store.get(k) or b"").hexdigest()
        for k in store.list("pith/")
        if k.endswith("/bundle.json")
    }


def test_s3_tables_use_boto3s_endpoint_and_credentials_and_never_show_them(s3_store_url: str) -> None:
    from pith_pipeline.storage.factory import open_store

    loc = location(open_store(s3_store_url))
    assert loc.uri("records") == f"{s3_store_url}/index/records"
    opts = loc.options
    assert opts["conditional_put"] == "etag"  # commits are conditional PUTs of the next log entry
    assert opts["AWS_ENDPOINT_URL"].startswith("http://127.0.0.1:") and opts["AWS_ALLOW_HTTP"] == "true"
    assert opts["AWS_ACCESS_KEY_ID"] == "testing-access-key" and opts["AWS_REGION"] == "us-east-1"
    assert "testing-secret-key" not in repr(loc) + str(loc)


def test_log_entries_merge_many_files_in_order_with_bounded_fan_in(
    tmp_path: Path, sample: list[str], signer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """More entries files than the fan-in are merged in rounds; the result is every
    event of the run's bundles once, in (created_at, event id) order."""
    from index_helpers import fixed_clock

    import pith_pipeline.index.sink as sink_mod
    from pith_pipeline.index import RowSink
    from pith_pipeline.publish import Publisher
    from pith_pipeline.sources.jsonl import iter_jsonl

    monkeypatch.setattr(sink_mod, "ENTRY_FAN_IN", 3)
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join(sample) + "\n", encoding="utf-8")
    store = LocalStore(tmp_path / "s")
    with RowSink(tmp_path / "rows", chunk_papers=2) as sink:
        Publisher(store, signer, clock=fixed_clock, on_bundle=sink.add_bundle).publish(iter_jsonl(path))
        sink.flush()
        assert len(list((tmp_path / "rows" / sink_mod.LOG_DIR).glob("*.parquet"))) > 9
        got = list(sink.log_entries())
    events = {k: json.loads(store.get(k) or b"") for k in store.list("events/")}
    want = sorted((e["created_at"], e["event_id"].removeprefix("sha256:"), k) for k, e in events.items())
    assert [(h, k) for h, k, _ in got] == [(h, k) for _c, h, k in want]
    assert all(json.loads(entry) == events[k] for _h, k, entry in got)


def test_columns_of_unique_values_are_stored_without_dictionaries(
    tmp_path: Path, sample: list[str], run: Runner
) -> None:
    """Why: a dictionary of 32,768 unique hashes outgrows its page and falls back, and
    plain strings carry a 4-byte length each; no dictionary and delta-encoded lengths
    make the 1 M-row `records` table 333 bytes a row, not 363 (benchmarks/index_bench.py)."""
    import pyarrow.parquet as pq

    store = LocalStore(tmp_path / "s")
    run(store, sample)
    for name, spec in TABLES.items():
        assert spec.unique_text, name
        for f in live_files(open_table(location(store), spec), spec):
            meta = pq.ParquetFile(store.root / "index" / name / f["path"]).metadata
            columns = {
                meta.row_group(0).column(i).path_in_schema: meta.row_group(0).column(i)
                for i in range(meta.num_columns)
            }
            for col in spec.unique_text:
                chunk = columns[col]
                assert not chunk.has_dictionary_page, (name, col)
                assert "DELTA_LENGTH_BYTE_ARRAY" in chunk.encodings, (name, col, chunk.encodings)
            if name == "records":
                assert columns["primary_cat"].has_dictionary_page  # repeated values keep theirs


def test_the_keys_a_slice_holds_are_looked_up_without_reading_the_whole_partition(
    tmp_path: Path, sample: list[str], run: Runner, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Why: a snapshot's events are one partition; checking each slice's keys against
    every key indexed there held the whole partition's keys (2 M at 1 M papers) in
    memory. The target is scanned in batches and only the slice's keys are kept."""
    import pyarrow as pa

    from pith_pipeline.index import merge

    store = LocalStore(tmp_path / "s")
    run(store, sample)
    loc = location(store)
    spec = TABLES["events"]
    dt = open_table(loc, spec)
    indexed = dt.to_pyarrow_table()
    assert indexed.num_rows == 60 and len(set(indexed.column("created_month").to_pylist())) == 1
    source = indexed.slice(0, 3).cast(spec.schema)
    source = source.set_column(
        source.schema.get_field_index("valid"), "valid", pa.array([True, False, True], pa.bool_())
    )
    fresh = source.slice(2, 1).set_column(0, spec.schema.field("event_id"), pa.array(["sha256:" + "ab" * 32]))
    source = pa.concat_tables([source.slice(0, 2), fresh])
    seen: list[int] = []
    real = merge._target_rows

    def spy(*a: Any, **kw: Any) -> pa.Table:
        out = real(*a, **kw)
        seen.append(out.num_rows)
        return out

    monkeypatch.setattr(merge, "_target_rows", spy)
    new, changed = merge.split_new(loc, dt, spec, source)
    assert seen == [2]  # of 60 rows in the partition, the two keys the slice holds
    assert new.column("event_id").to_pylist() == ["sha256:" + "ab" * 32]
    assert set(indexed.column("valid").to_pylist()) == {True}
    # the first row is indexed as it is (nothing to write); the second's flag changed
    assert changed.column("event_id").to_pylist() == [source.column("event_id")[1].as_py()]


# -- a full disk while the index is written ------------------------------------------------

# how deltalake (Rust) reports a full disk while it writes a data file: no errno, and a
# first line about parsing Parquet that has nothing to do with it
_ENOSPC_TEXT = (
    "Failed to parse parquet: External: Generic LocalFileSystem error: Unable to copy data "
    "to file: No space left on device (os error 28)"
)


def _delta_enospc() -> Exception:
    from deltalake.exceptions import DeltaError

    return DeltaError(_ENOSPC_TEXT)


@pytest.mark.parametrize(
    "make", [_delta_enospc, lambda: OSError(_ENOSPC_TEXT)], ids=["DeltaError", "OSError"]
)
def test_a_full_disk_while_writing_the_index_says_write_and_disk_full(
    tmp_path: Path,
    sample: list[str],
    run: Runner,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    make: Any,
) -> None:
    """It failed to *write*: "cannot be read ... reindex" sent the operator to repair a
    table that is fine, and reindex fails the same way until there is space."""
    import deltalake

    store = LocalStore(tmp_path / "s")
    run(store, sample[:3])

    def full(*_a: object, **_k: object) -> None:
        raise make()

    monkeypatch.setattr(deltalake, "write_deltalake", full)
    with pytest.raises(SystemExit) as info:
        main(["reindex", "--store", str(store.root)])
    assert info.value.code == 1
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert "index/records" in lines[0] and "writing" in lines[0] and "disk is full" in lines[0], err
    assert "cannot be read" not in lines[0]


def test_only_real_legacy_part_files_are_removed() -> None:
    """The old layout's files are deleted by name: a name that only looks like one (a
    trailing newline, other scripts' digits, as anyone who can write the store could
    plant) is not taken for one."""
    from pith_pipeline.index.legacy import remove_legacy_files
    from pith_pipeline.storage.memory import MemoryStore

    legacy = "index/records/m=2007-04/part-g00000001-20260304T050607Z-0123456789abcdef.parquet"
    look_alikes = [
        legacy + "\n",
        legacy.replace("g00000001", "g\u0660\u0660\u0660\u0661"),
        legacy.replace("20260304", "\uff12\uff10\uff12\uff16\uff10\uff13\uff10\uff14"),
    ]
    store = MemoryStore()
    for key in (legacy, *look_alikes):
        store.put(key, b"PAR1")
    assert remove_legacy_files(store, "index/") == [legacy]
    assert sorted(store.list("index/")) == sorted(look_alikes)
