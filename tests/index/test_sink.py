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
        month = first.records[0]["submitted_month"]
        got = sink.group("records", [month])
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
