"""The `papers` view (latest version per paper) and `query --as-of RUN_ID`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_in_process import run_cli
from index_helpers import Runner, record_with_versions

from pith_pipeline.errors import InputError
from pith_pipeline.index import run_query
from pith_pipeline.storage.factory import open_store


def test_papers_counts_each_paper_once(tmp_path: Path, sample: list[str], run: Runner) -> None:
    store = open_store(str(tmp_path / "store"))
    run(store, [record_with_versions(sample[0], 1), *sample[1:6]])
    run(store, sample[:6])  # the first paper gains a version: a second record row
    papers = run_query(store, "SELECT count(*) FROM papers").rows[0][0]
    distinct = run_query(store, "SELECT count(DISTINCT arxiv_id) FROM records").rows[0][0]
    versions = run_query(store, "SELECT count(*) FROM records").rows[0][0]
    assert papers == distinct == 6
    assert versions == 7
    assert run_query(store, "SELECT count(*) FROM papers WHERE superseded_by IS NOT NULL").rows == [(0,)]


def test_as_of_reads_the_versions_the_run_named(tmp_path: Path, sample: list[str], run: Runner) -> None:
    store = open_store(str(tmp_path / "store"))
    paper = sample[0]
    first, _ = run(store, [record_with_versions(paper, 1), *sample[1:3]])
    run(store, [paper, *sample[3:5]])
    sql = "SELECT count(*) FROM papers"
    assert run_query(store, sql).rows == [(5,)]
    assert run_query(store, sql, as_of=first.run_id).rows == [(3,)]
    old = run_query(store, "SELECT count(*) FROM records", as_of=first.run_id).rows[0][0]
    assert old < run_query(store, "SELECT count(*) FROM records").rows[0][0]


def test_as_of_an_unknown_run_is_one_line(
    tmp_path: Path, sample: list[str], run: Runner, capsys: pytest.CaptureFixture[str]
) -> None:
    store = open_store(str(tmp_path / "store"))
    run(store, sample[:2])
    with pytest.raises(InputError, match="no run 'nope'"):
        run_query(store, "SELECT 1", as_of="nope")
    res = run_cli(capsys, "query", "--store", str(tmp_path / "store"), "--as-of", "nope", "SELECT 1")
    err = res.err.strip()
    assert res.code != 0 and "nope" in err and "\n" not in err and "Traceback" not in err


def test_every_run_names_every_tables_version_even_one_it_did_not_commit_to(
    tmp_path: Path, sample: list[str], run: Runner
) -> None:
    """A run's manifest is a whole snapshot: a table the run left alone is named at the
    version the run saw, so `--as-of` never reads it at a later version."""
    store = open_store(str(tmp_path / "store"))
    first, _ = run(store, sample[:2])
    again, _ = run(store, sample[:2])  # nothing changed: no commits
    named = json.loads(store.get(f"runs/{again.run_id}/manifest.json") or b"{}")["index"]["versions"]
    assert set(named) == {"records", "events", "aliases"}
    run(store, sample[2:4])
    sql = "SELECT count(*) FROM papers"
    assert run_query(store, sql, as_of=again.run_id).rows == run_query(store, sql, as_of=first.run_id).rows
    assert run_query(store, sql, as_of=again.run_id).rows == [(2,)]


def test_as_of_a_run_without_index_versions_is_one_line(
    tmp_path: Path, sample: list[str], run: Runner
) -> None:
    store = open_store(str(tmp_path / "store"))
    done, _ = run(store, sample[:2])
    key = f"runs/{done.run_id}/manifest.json"
    manifest = json.loads(store.get(key) or b"{}")
    manifest.pop("index", None)  # a run that never reached its index update
    (tmp_path / "store" / key).write_text(json.dumps(manifest))
    with pytest.raises(InputError, match="names no index versions"):
        run_query(store, "SELECT 1", as_of=done.run_id)


def _change_feed_recipe() -> str:
    text = (Path(__file__).parents[2] / "docs/pages/index-tables.md").read_text()
    after = text[text.index("**Rows changed since a run.**") :]
    return after[after.index("```python\n") + 10 : after.index("\n```", after.index("```python"))]


def test_the_change_feed_recipe_gives_the_rows_changed_since_a_run(
    tmp_path: Path,
    sample: list[str],
    run: Runner,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = open_store(str(tmp_path / "pith-store"))
    first, _ = run(store, [record_with_versions(sample[0], 1), *sample[1:3]])
    run(store, [sample[0], sample[3]])  # a new version of paper 0, and paper 3
    monkeypatch.chdir(tmp_path)
    recipe = _change_feed_recipe().replace('"RUN_ID"', repr(first.run_id))
    exec(compile(recipe, "index-tables.md", "exec"), {})
    out = capsys.readouterr().out
    new_id = json.loads(sample[3])["id"]
    old_id = json.loads(sample[1])["id"]
    assert new_id in out and json.loads(sample[0])["id"] in out and old_id not in out, out
