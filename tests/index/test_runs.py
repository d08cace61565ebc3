"""Publishing runs end to end on S3 (moto's server on 127.0.0.1) and on a local store:
re-runs, overlapping windows, a failure half way, conflicting writes, and analysts'
queries checked against the bundles themselves."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from typing import Any

import boto3
import pytest
from index_helpers import Runner, fixed_clock, record_with_versions, snapshot
from store_doubles import FailingStore, WriteBudget

from pith_pipeline.core.canonical_json import loads
from pith_pipeline.core.verify import verify_bundle
from pith_pipeline.errors import StorageError, WriteConflictError
from pith_pipeline.index import compact, run_query, status
from pith_pipeline.index.guard import commit_key
from pith_pipeline.publish import Publisher
from pith_pipeline.runs.manifest import finish_run
from pith_pipeline.sources.jsonl import iter_jsonl
from pith_pipeline.storage.base import Store
from pith_pipeline.storage.local import LocalStore
from pith_pipeline.storage.s3 import S3Store


def scalar(store: Store, sql: str) -> Any:
    return run_query(store, sql).rows[0][0]


def bundles(store: Store) -> list[dict[str, Any]]:
    return [
        loads(store.get(k) or b"")
        for k in store.list("pith/")
        if k.endswith("/bundle.json") and k.count("/") == 2
    ]


def assert_one_row_per_key(store: Store, n_records: int) -> None:
    assert scalar(store, "SELECT count(*) FROM records") == n_records
    assert scalar(store, "SELECT count(DISTINCT pith_number) FROM records") == n_records
    n_events = sum(1 for k in store.list("events/") if k.endswith(".json"))
    assert scalar(store, "SELECT count(*) FROM events") == n_events
    assert scalar(store, "SELECT count(DISTINCT event_id) FROM events") == n_events
    assert scalar(store, "SELECT count(*) - count(DISTINCT alias) FROM aliases") == 0


def test_publish_then_rerun_same_window_changes_nothing(
    s3_store: Store, sample: list[str], run: Runner
) -> None:
    window = sample[:15]  # half the sample keeps the test quick; the full one is used below
    first, key1 = run(s3_store, window, {"from": "2007-03-01", "until": "2007-04-01"})
    assert first.built == 15 and key1 == f"runs/{first.run_id}/manifest.json"
    assert isinstance(s3_store, S3Store)
    client = boto3.client("s3")

    def etags() -> dict[str, str]:
        pages = client.get_paginator("list_objects_v2").paginate(Bucket=s3_store.bucket)
        return {o["Key"]: o["ETag"] for p in pages for o in p.get("Contents", ())}

    before_tags, before = etags(), snapshot(s3_store)
    second, key2 = run(s3_store, window, {"from": "2007-03-01", "until": "2007-04-01"})
    assert (second.built, second.unchanged) == (0, 15)
    after_tags, after = etags(), snapshot(s3_store)
    assert set(after) - set(before) == {key2}  # only the new run's manifest
    assert {k: after[k] for k in before} == before
    assert {k: after_tags[k] for k in before_tags} == before_tags
    assert_one_row_per_key(s3_store, 15)


def test_run_manifest_lists_every_object_with_its_hash(
    any_store: Store, sample: list[str], run: Runner
) -> None:
    summary, key = run(any_store, sample[:5], {"from": "2019-09-01"})
    doc = loads(any_store.get(key) or b"")
    assert doc["window"] == {"from": "2019-09-01"} and doc["counts"]["built"] == 5
    objects = {o["key"]: o["sha256"] for o in doc["objects"]}
    assert set(summary.written) <= set(objects)
    # the Delta versions the run committed, each a log entry in the store
    # (one append per table: new keys, plain files, nothing to rewrite after)
    assert doc["index"]["versions"] == {"aliases": 1, "events": 1, "records": 1}
    assert doc["index"]["commits"] == {"aliases": [1], "events": [1], "records": [1]}
    for table, versions in doc["index"]["commits"].items():
        assert all(any_store.exists(commit_key(table, v)) for v in versions)
    for k, sha in objects.items():
        assert hashlib.sha256(any_store.get(k) or b"").hexdigest() == sha, k
    # events are listed before the run manifest exists and bundles have all their events
    assert sum(k.startswith("events/") for k in objects) == 10


def test_overlapping_windows(any_store: Store, sample: list[str], run: Runner) -> None:
    a, _ = run(any_store, sample[:12])
    b, key_b = run(any_store, sample[6:18])
    assert (a.built, b.built, b.unchanged) == (12, 6, 6)
    assert_one_row_per_key(any_store, 18)
    written_b = {o["key"] for o in loads(any_store.get(key_b) or b"")["objects"]}
    assert sum(k.startswith("pith/") and k.endswith("/bundle.json") for k in written_b) == 6
    # a backfill over both windows again: still one row per Pith number
    run(any_store, sample[:18])
    assert_one_row_per_key(any_store, 18)


def test_s3_error_half_way_then_rerun_completes(s3_store: Store, sample: list[str], run: Runner) -> None:
    with pytest.raises(StorageError, match="SlowDown"):
        run(FailingStore(s3_store, WriteBudget(after=70)), sample)
    assert not list(s3_store.list("runs/"))  # no run manifest: the run did not complete
    assert not list(s3_store.list("index/"))  # and indexes were not touched
    summary, key = run(s3_store, sample)
    assert summary.built + summary.unchanged == 30 and summary.unchanged > 0
    assert s3_store.exists(key)
    found = bundles(s3_store)
    assert len(found) == 30 and all(verify_bundle(b).ok for b in found)
    assert all(len(b["events"]) == 2 for b in found)  # no event written twice
    assert_one_row_per_key(s3_store, 30)


def test_failure_while_indexing_then_rerun(
    s3_store: Store, sample: list[str], run: Runner, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pith_pipeline.index import update

    real = update.merge_rows
    merged: list[str] = []

    def failing(loc: Any, spec: Any, table: Any, **kw: Any) -> list[int]:
        if spec.name == "records":  # events and aliases are committed, records not
            raise StorageError("PUT index/records/_delta_log/...: SlowDown (HTTP 503)", transient=True)
        merged.append(spec.name)
        return real(loc, spec, table, **kw)

    monkeypatch.setattr(update, "merge_rows", failing)
    with pytest.raises(StorageError, match="SlowDown"):
        run(s3_store, sample)
    assert merged == ["events", "aliases"] and not list(s3_store.list("runs/"))
    monkeypatch.setattr(update, "merge_rows", real)
    # readers see consistent tables meanwhile: no records yet, every event once
    assert scalar(s3_store, "SELECT count(*) FROM records") == 0
    assert scalar(s3_store, "SELECT count(*) - count(DISTINCT event_id) FROM events") == 0
    run(s3_store, sample)  # everything is unchanged, yet the index is completed
    assert_one_row_per_key(s3_store, 30)
    compact(s3_store, retention_hours=0)
    assert_one_row_per_key(s3_store, 30)


def test_conflicting_event_write_is_refused(
    s3_store: Store, sample: list[str], run: Runner, signer: Any
) -> None:
    run(s3_store, sample[:1])
    event_keys = list(s3_store.list("events/"))
    graph = next(k for k in event_keys if loads(s3_store.get(k) or b"")["event_type"] == "graph_snapshot")
    original = s3_store.get(graph) or b""
    with pytest.raises(WriteConflictError, match="never overwritten"):
        s3_store.put_once(graph, original.replace(b'"signed_at":"', b'"signed_at":"X'))
    assert s3_store.get(graph) == original


def test_conflicting_event_stops_that_paper_and_is_named(
    s3_store: Store, tmp_path: Any, sample: list[str], signer: Any, run: Runner
) -> None:
    scratch = LocalStore(tmp_path / "scratch")
    run(scratch, sample[:1])
    graph = next(
        k for k in scratch.list("events/") if loads(scratch.get(k) or b"")["event_type"] == "graph_snapshot"
    )
    tampered = (scratch.get(graph) or b"").replace(b'"signed_at":"', b'"signed_at":"1')
    s3_store.put_once(graph, tampered)  # someone else's different bytes at that key
    path = tmp_path / "two.jsonl"
    path.write_text(sample[0] + "\n" + sample[1] + "\n", encoding="utf-8")
    summary = Publisher(s3_store, signer, clock=fixed_clock).publish(iter_jsonl(path))
    assert s3_store.get(graph) == tampered  # never overwritten
    assert summary.failed == 1 and summary.built == 1  # the other paper is published
    assert graph in summary.problems[0]
    body = graph.split("/")[1]
    assert not list(s3_store.list(f"pith/{body}/"))  # no bundle made from it


def test_query_matches_counting_bundles(s3_store: Store, sample: list[str], run: Runner) -> None:
    run(s3_store, sample[:18])
    run(s3_store, sample[12:])
    expected = Counter()
    for b in bundles(s3_store):
        md = b["canonical_record"]["metadata"]
        expected[(md["submitted_at"][:7], md["primary_cat"], md["license"])] += 1
    got = run_query(
        s3_store, "SELECT submitted_month, primary_cat, license, count(*) FROM records GROUP BY ALL"
    )
    assert {r[:3]: r[3] for r in got.rows} == dict(expected)
    assert sum(expected.values()) == 30
    # the same answer after compaction
    compact(s3_store, retention_hours=0)
    again = run_query(
        s3_store, "SELECT submitted_month, primary_cat, license, count(*) FROM records GROUP BY ALL"
    )
    assert sorted(again.rows) == sorted(got.rows)


def test_arxiv_alias_resolves_to_newest_version(any_store: Store, sample: list[str], run: Runner) -> None:
    line = next(ln for ln in sample if json.loads(ln)["id"] == "hep-th/9901001")
    run(any_store, [record_with_versions(line, 1)])
    old = scalar(any_store, "SELECT pith_number FROM aliases WHERE alias = 'arxiv:hep-th/9901001'")
    summary, _ = run(any_store, [line])
    assert summary.superseded == 1
    new = summary.pith_numbers[0]
    assert new != old
    assert scalar(any_store, "SELECT pith_number FROM aliases WHERE alias = 'arxiv:hep-th/9901001'") == new
    assert (
        scalar(any_store, "SELECT pith_number FROM aliases WHERE alias = 'arxiv_version:hep-th/9901001v1'")
        == old
    )
    pointer = loads(any_store.get("arxiv/hep-th/9901001.json") or b"")
    assert pointer["latest"] == new
    rows = run_query(
        any_store, "SELECT pith_number, version, superseded_by FROM records ORDER BY version"
    ).rows
    assert rows == [(old, 1, new), (new, 3, None)]
    corrections = scalar(
        any_store, f"SELECT count(*) FROM events WHERE subject = '{old}' AND correction_kind = 'superseded'"
    )
    assert corrections == 1


def test_status_summarises(any_store: Store, sample: list[str], run: Runner) -> None:
    bad = json.dumps({"id": "0704.9999", "title": ""})
    _, key = run(any_store, [*sample[:4], bad])
    st = status(any_store, deep=True)
    assert st["records"] == 4 and st["events"] == 8 and st["bundles"] == 4
    assert st["bundles_not_indexed_count"] == 0
    assert st["runs"] == 1 and st["last_run"]["key"] == key
    assert st["quarantine"] == {"files": 1, "records": 1}


def test_finish_run_is_safe_to_repeat(any_store: Store, sample: list[str], run: Runner) -> None:
    summary, key = run(any_store, sample[:3])
    before = any_store.get(key)
    assert finish_run(any_store, summary, {"input": "input-0.jsonl"}, clock=fixed_clock) == key
    assert any_store.get(key) == before
    with pytest.raises(WriteConflictError):
        finish_run(any_store, summary, {"input": "another window"}, clock=fixed_clock)


@pytest.mark.parametrize("n", [0, 1, 7])
def test_run_manifest_streamed_equals_plain_json(tmp_path: Any, n: int) -> None:
    from pith_pipeline._internal.disk_backed import Ledger
    from pith_pipeline.core.canonical_json import dumps_pretty
    from pith_pipeline.index import IndexUpdate
    from pith_pipeline.publish import RunSummary
    from pith_pipeline.runs.manifest import write_manifest

    written = Ledger(limit=2)  # spilled to SQLite, as in a large run
    for i in range(n):
        written[f"pith/{n - i:04d}/bundle.json"] = f"{i:064x}"
    written["arxiv/\u00e9\u4e2d\U0001f600.json"] = "ab" * 32
    from pith_pipeline._internal.disk_backed import SpillList

    numbers = SpillList([f"pith:{n - i}" for i in range(n)] + ["pith:b", "pith:a"], limit=1)
    summary = RunSummary(run_id="r1", written=written, pith_numbers=numbers)
    index = IndexUpdate(
        versions={"records": 3},
        commits={"records": [2, 3]},
    )
    store = LocalStore(tmp_path / "s")
    key = write_manifest(store, summary, window={"from": "x"}, index=index, clock=fixed_clock)
    data = store.get(key)
    assert data is not None
    doc = json.loads(data)
    expected = dict(written)
    doc["objects"] = [{"key": k, "sha256": expected[k]} for k in sorted(expected)]
    assert data == dumps_pretty(doc) + b"\n"
    assert len(doc["objects"]) == n + 1
    assert doc["index"]["commits"] == {"records": [2, 3]}
    assert doc["pith_numbers"] == sorted(numbers)


def test_status_counts_quarantined_records_without_reading_a_file_whole(tmp_path: Any) -> None:
    """`status` read every quarantine file whole to count its lines: a run's quarantine
    may hold hundreds of megabytes of rejected input (docs/pages/input-limits.md)."""
    store = LocalStore(tmp_path / "s")
    store.put("quarantine/a.jsonl", b'{"r": 1}\n\n{"r": 2}\n   \n{"r": 3}')  # no final newline
    store.put("quarantine/b.jsonl", b'{"r": 4}\n' * 3)

    class NoWholeReads(LocalStore):
        def get(self, key: str) -> bytes | None:
            assert not key.startswith("quarantine/"), f"{key} read whole"
            return super().get(key)

    st = status(NoWholeReads(tmp_path / "s"))
    assert st["quarantine"] == {"files": 2, "records": 6}
