"""Index internals: rows from a real bundle, the manifest's compare-and-swap,
compaction that readers never see half done, and the CLI commands."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from click.testing import CliRunner
from index_helpers import Runner, fixed_clock

from pith_pipeline.cli import cli
from pith_pipeline.index import MANIFEST_KEY, compact, connect, run_query, update_indexes
from pith_pipeline.index import manifest as mf
from pith_pipeline.index.rows import rows_from_bundle
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


def test_manifest_commit_survives_a_lost_race(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    stale = mf.load(store)
    entry = {
        "path": "index/records/submitted_month=2019-09/a.parquet",
        "partition": "2019-09",
        "rows": 1,
        "bytes": 1,
    }
    mf.commit(store, mf.Change(added={"records": [entry]}, removed=set(), retired_at="t"))
    other = {**entry, "path": "index/records/submitted_month=2019-09/b.parquet"}
    # a writer that read the manifest before the first commit: re-applies, loses nothing
    new, _ = mf.commit(
        store, mf.Change(added={"records": [other]}, removed=set(), retired_at="t"), base=stale
    )
    assert new.generation == 2
    assert {f["path"] for f in mf.load(store).files["records"]} == {entry["path"], other["path"]}


def _partition_file_counts(store: Store) -> list[int]:
    m = mf.load(store)
    return [len(v) for name in m.files for v in m.partitions(name).values()]


def test_compaction_is_invisible_to_readers(any_store: Store, sample: list[str], run: Runner) -> None:
    run(any_store, sample[:8])
    run(any_store, sample[4:14])
    run(any_store, sample[:14])
    sql = "SELECT primary_cat, count(*), count(DISTINCT pith_number) FROM records GROUP BY ALL ORDER BY ALL"
    before = run_query(any_store, sql).rows
    assert max(_partition_file_counts(any_store)) > 1
    reader = connect(any_store)  # a reader that loaded the previous manifest
    update = compact(any_store, clock=fixed_clock, grace_seconds=3600)
    assert update.compacted_partitions > 0 and update.deleted == []
    assert max(_partition_file_counts(any_store)) == 1
    assert run_query(any_store, sql).rows == before
    assert reader.sql(sql).fetchall() == before  # its files are kept for the grace period
    reader.close()
    retired = [r["path"] for r in mf.load(any_store).retired]
    assert retired and all(any_store.exists(p) for p in retired)
    later = compact(any_store, clock=fixed_clock, grace_seconds=0)
    assert sorted(later.deleted) == sorted(retired)
    assert not any(any_store.exists(p) for p in retired)
    assert run_query(any_store, sql).rows == before


def test_crowded_partitions_are_compacted_on_update(tmp_path: Path, sample: list[str], run: Runner) -> None:
    store = LocalStore(tmp_path / "s")
    run(store, sample[:3])
    subjects = [k.split("/")[1] for k in store.list("pith/") if k.endswith("/bundle.json")]
    # force re-indexing by making the index think rows changed: drop records and re-add
    for _ in range(3):
        m = mf.load(store)
        mf.commit(
            store,
            mf.Change(
                added={}, removed={f["path"] for f in m.files["records"]}, retired_at="2026-03-04T05:06:07Z"
            ),
        )
        update_indexes(store, subjects, clock=fixed_clock, max_parts=2)
    counts = _partition_file_counts(store)
    assert max(counts) <= 2
    assert run_query(store, "SELECT count(*) FROM records").rows[0][0] == 3


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
    res = runner.invoke(cli, ["compact", "--store", url, "--grace", "0"])
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
    assert store.exists(MANIFEST_KEY) and list(store.list("runs/"))
    assert run_query(store, "SELECT count(*) FROM records").rows[0][0] == 4
    res = runner.invoke(cli, ["rebuild", "--store", str(out), "--key", key])
    assert res.exit_code == 0, res.output
    assert "rebuilt 4 bundles" in res.output
    assert run_query(store, "SELECT count(*) FROM records").rows[0][0] == 4
    shas = {r[0] for r in run_query(store, "SELECT bundle_sha256 FROM records").rows}
    import hashlib

    assert shas == {
        hashlib.sha256(store.get(k) or b"").hexdigest()
        for k in store.list("pith/")
        if k.endswith("/bundle.json")
    }


def test_update_writes_batches_and_commits_them_once(tmp_path: Path, sample: list[str], run: Runner) -> None:
    store = LocalStore(tmp_path / "s")
    run(store, sample, finish=False)
    subjects = [k.split("/")[1] for k in store.list("pith/") if k.endswith("/bundle.json")]
    assert len(subjects) > 8
    before = mf.load(store).generation
    update_indexes(store, subjects, clock=fixed_clock, batch_size=4, max_parts=1 << 30)
    m = mf.load(store)
    assert m.generation == before + 1  # every batch listed by one swap
    assert max(_partition_file_counts(store)) > 1  # one part file per batch and partition
    assert run_query(store, "SELECT count(*), count(DISTINCT pith_number) FROM records").rows[0] == (
        len(subjects),
        len(subjects),
    )
    again = update_indexes(store, subjects, clock=fixed_clock, batch_size=4)
    assert again.subjects_changed == 0 and mf.load(store).generation == m.generation


def test_batched_update_compacts_crowded_partitions_once(
    tmp_path: Path, sample: list[str], run: Runner
) -> None:
    store = LocalStore(tmp_path / "s")
    run(store, sample, finish=False)
    subjects = [k.split("/")[1] for k in store.list("pith/") if k.endswith("/bundle.json")]
    update = update_indexes(store, subjects, clock=fixed_clock, batch_size=3, max_parts=2)
    assert update.compacted_partitions > 0
    assert max(_partition_file_counts(store)) <= 2
    # the batch files a compaction folded were never listed and are gone
    on_disk = {k for k in store.list("index/") if k.endswith(".parquet")}
    assert on_disk == mf.load(store).listed()
    assert set(update.written) - {MANIFEST_KEY} <= on_disk
    assert run_query(store, "SELECT count(*), count(DISTINCT pith_number) FROM records").rows[0] == (
        len(subjects),
        len(subjects),
    )


def test_update_compaction_reads_bounded_groups(tmp_path: Path, sample: list[str], run: Runner) -> None:
    store = LocalStore(tmp_path / "s")
    run(store, sample, finish=False)
    subjects = [k.split("/")[1] for k in store.list("pith/") if k.endswith("/bundle.json")]
    update = update_indexes(store, subjects, clock=fixed_clock, batch_size=3, max_parts=2, compact_rows=4)
    assert update.compacted_partitions > 0
    m = mf.load(store)
    # batch files hold at most 3 records each; no fold read more than 4 rows at once
    assert max(f["rows"] for f in m.files["records"]) <= 4
    assert any(f["rows"] == 4 for f in m.files["records"])
    on_disk = {k for k in store.list("index/") if k.endswith(".parquet")}
    assert on_disk == m.listed()
    for table, key in (("records", "pith_number"), ("events", "event_id")):
        assert (
            run_query(store, f"SELECT count(*), count(DISTINCT {key}) FROM {table}").rows[0][0]
            == run_query(store, f"SELECT count(DISTINCT {key}) FROM {table}").rows[0][0]
        )
    assert run_query(store, "SELECT count(*) FROM records").rows[0][0] == len(subjects)


def test_compact_reads_bounded_groups_and_readers_see_the_same(
    tmp_path: Path, sample: list[str], run: Runner
) -> None:
    store = LocalStore(tmp_path / "s")
    run(store, sample, finish=False)
    subjects = [k.split("/")[1] for k in store.list("pith/") if k.endswith("/bundle.json")]
    update_indexes(store, subjects, clock=fixed_clock, batch_size=2, max_parts=1 << 30)
    queries = [
        "SELECT pith_number, title FROM records ORDER BY 1",
        "SELECT event_id, event_type FROM events ORDER BY 1",
        "SELECT alias, pith_number FROM aliases ORDER BY 1",
    ]
    before = [run_query(store, q).rows for q in queries]
    crowded = max(_partition_file_counts(store))
    assert crowded > 2
    bound = 2 * max(f["rows"] for fs in mf.load(store).files.values() for f in fs)
    done = compact(store, clock=fixed_clock, grace_seconds=0, compact_rows=bound)
    assert done.compacted_partitions > 0
    m = mf.load(store)
    # no step read more than `bound` rows; what could be merged within it was merged
    for name in m.files:
        for files in m.partitions(name).values():
            sizes = sorted(f["rows"] for f in files)
            assert len(files) == 1 or sizes[0] + sizes[1] > bound
            assert all(f["rows"] <= bound for f in files)
    assert max(_partition_file_counts(store)) < crowded
    # nothing the manifest does not list is left behind, and readers see the same rows
    assert {k for k in store.list("index/") if k.endswith(".parquet")} == m.listed()
    assert [run_query(store, q).rows for q in queries] == before
    # an unbounded compaction folds every partition into one file
    compact(store, clock=fixed_clock, grace_seconds=0)
    assert max(_partition_file_counts(store)) == 1
    assert [run_query(store, q).rows for q in queries] == before
