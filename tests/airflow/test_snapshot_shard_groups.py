"""Snapshot chunks of the `pith_backfill` DAG take one shard group's leases each.

Why: a snapshot byte range holds papers of every shard, so a chunk that publishes all
of them must hold all 16 shard leases, and the mapped build then runs one chunk at a
time. Planned once per shard group, a chunk publishes only its group's papers under
only its group's leases, so chunks of different groups publish at once. (No Airflow
needed: the task functions are called directly.)
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from pith_pipeline import airflow_tasks as at
from pith_pipeline.core.canonical_json import loads
from pith_pipeline.runs import backfill_plan
from pith_pipeline.runs import chunks as chunks_mod
from pith_pipeline.storage.lease import SHARDS, parse_shards, writer_lease
from pith_pipeline.storage.local import LocalStore

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "arxiv-sample.jsonl"


@pytest.fixture
def settings(tmp_path: Path) -> at.Settings:
    from pith_pipeline.signing.local import generate_key

    key = generate_key(tmp_path / "keys", key_id="pith-test-key")[0]
    # lease_wait 0: a chunk that needs a lease someone holds fails at once
    return at.Settings(store=str(tmp_path / "store"), signer=f"file:{key}", lease_wait="0")


def test_snapshot_chunks_split_by_shard_group_publish_side_by_side(
    settings: at.Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PITH_SNAPSHOT_CHUNK_BYTES", "20000")  # several byte ranges
    store = LocalStore(settings.store)
    [request] = backfill_plan.plan_backfill(
        settings, "1990-01-01", "2030-01-01", "snapshot", str(SAMPLE), store=store
    )
    harvested = backfill_plan.harvest_for(settings, request, store=store)
    ranges = harvested["chunks"]
    assert len(ranges) > 1
    items = backfill_plan.plan_chunks_for([harvested], snapshot_groups=chunks_mod.SHARD_GROUPS)
    chunks = [i["chunk"] for i in items]
    run_id = str(harvested["run_id"])

    assert len(chunks) == len(ranges) * chunks_mod.SHARD_GROUPS
    assert len({c["index"] for c in chunks}) == len(chunks)  # staged keys do not collide
    for r in ranges:  # each byte range once per group: disjoint groups covering every shard
        same = [c for c in chunks if (c["start"], c["end"]) == (r["start"], r["end"])]
        groups = [parse_shards(c["shards"]) for c in same]
        assert len(groups) == chunks_mod.SHARD_GROUPS
        assert sum(len(g) for g in groups) == SHARDS
        assert frozenset().union(*groups) == frozenset(range(SHARDS))
        assert sum(bool(c["rejects"]) for c in same) == 1  # rejected lines: quarantined once

    first = chunks[0]
    other = next(c for c in chunks if c["shards"] != first["shards"])
    with writer_lease(store, command="another chunk", run_id=run_id, shards=parse_shards(first["shards"])):
        built = [at.build_chunk(settings, run_id, other, store=store)]  # no wait: other leases
    built += [at.build_chunk(settings, run_id, c, store=store) for c in chunks if c is not other]

    staged = [b["staged"] for b in built]
    at.publish_staged(settings, staged, store=store)
    summary = at.window_summary(store, run_id, staged)
    lines = [ln for ln in SAMPLE.read_text().splitlines() if ln.strip()]
    assert summary.fetched == len(lines)  # every line counted once, whichever group read it
    bundles = [k for k in store.list("pith/") if k.endswith("/bundle.json") and k.count("/") == 2]
    assert len(bundles) == summary.built > 0
    # each chunk's pending log marker reaches the window's summary through its staged
    # ledger, so the window's log append settles them without listing the event store
    assert sorted(summary.log_pending) == sorted(store.list("log/pending/")) != []
    for key in bundles:
        events = [loads(store.get(k) or b"") for k in store.list(f"events/{key.split('/')[1]}/")]
        assert Counter(e["event_type"] for e in events)["record_created"] == 1, key


def test_the_cli_backfill_keeps_one_chunk_per_byte_range(settings: at.Settings) -> None:
    """One process, chunks in turn: splitting would only read the snapshot more often."""
    store = LocalStore(settings.store)
    [request] = backfill_plan.plan_backfill(
        settings, "1990-01-01", "2030-01-01", "snapshot", str(SAMPLE), store=store
    )
    harvested = backfill_plan.harvest_for(settings, request, store=store)
    assert [i["chunk"] for i in backfill_plan.plan_chunks_for([harvested])] == harvested["chunks"]
