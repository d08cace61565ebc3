"""Maintenance commands say what they did: `rebuild`, `reindex` and `compact` on a
store nothing changed in change nothing, and their numbers match `status`."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner, Result
from sampled_store import here_fixture, sampled_fixture  # noqa: F401  (fixtures)

from pith_pipeline.cli import cli

KEY = "pith-keys/pith-private-key.json"


def run(*args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(cli, list(args), env=env)


def published(store: Path) -> dict[str, bytes]:
    return {str(p.relative_to(store)): p.read_bytes() for p in sorted((store / "pith").rglob("*.json"))}


def test_rebuild_of_an_unchanged_store_changes_nothing_and_says_so(here: Path) -> None:
    before = published(here / "pith-store")
    result = run("rebuild", "--signer", KEY)
    assert result.exit_code == 0, result.output
    assert "0 rebuilt, 30 unchanged" in result.output
    assert published(here / "pith-store") == before


def test_rebuild_rewrites_a_bundle_that_differs_from_its_events(here: Path) -> None:
    store = here / "pith-store"
    bundle = sorted(store.glob("pith/*/bundle.json"))[0]
    doc = json.loads(bundle.read_bytes())
    doc["state"] = {"damaged": True}
    bundle.write_text(json.dumps(doc))
    result = run("rebuild", "--signer", KEY)
    assert result.exit_code == 0, result.output
    assert "1 rebuilt, 29 unchanged" in result.output
    assert json.loads(bundle.read_bytes())["state"] != {"damaged": True}
    assert run("verify").exit_code == 0


def test_reindex_of_an_unchanged_store_counts_no_changes(here: Path) -> None:
    result = run("reindex")
    assert result.exit_code == 0, result.output
    assert "0 of 30 records changed" in result.output


def test_compact_names_the_generation_status_then_reports(here: Path) -> None:
    result = run("compact")
    assert result.exit_code == 0, result.output
    status = json.loads(run("status", "--json").output)
    for table, version in status_versions(status).items():
        assert f"{table} v{version}" in result.output


def test_compact_of_a_fresh_store_reports_what_compact_does_not_records(here: Path) -> None:
    """compact looks at no record: its line says what it compacted and deleted (it
    said `0 of 0 records changed (no new rows)` for a store of 30 records, the
    update line of `reindex`, as if the index were empty)."""
    result = run("compact")
    assert result.exit_code == 0, result.output
    assert "records changed" not in result.output and "0 of 0" not in result.output
    assert "no small files to compact" in result.output and "0 old files deleted" in result.output


def status_versions(status: dict[str, object]) -> dict[str, int]:
    index = status["index"]
    assert isinstance(index, dict)
    tables = index["tables"]
    assert isinstance(tables, dict) and tables
    return {name: int(t["version"]) for name, t in tables.items()}
