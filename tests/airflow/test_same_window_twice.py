"""Two runs of one window at the same time (no Airflow needed: the task functions).

Why: a `pith_ingest` backfill run and a `pith_backfill` window, or two manual
triggers, can own the same day at once; both are named `ingest-<day>`. Found by
tests/airflow/test_concurrent_backfill.py: the second harvest of a window wrote the
same write-once raw page with other bytes (a later `responseDate`) and failed for
good, and one run's manifest step deleted the other run's staged chunks.
"""

from __future__ import annotations

from datetime import date
from pathlib import Path
from typing import Any

import pytest

from pith_pipeline import airflow_tasks as at
from pith_pipeline.runs import chunks as chunks_mod
from pith_pipeline.runs import harvest, windows
from pith_pipeline.storage.lease import LeaseBusyError, WriterLease
from pith_pipeline.storage.local import LocalStore

DAY = windows.Window(date(2024, 1, 2), date(2024, 1, 3))


@pytest.fixture
def settings(tmp_path: Path, oai_server: tuple[str, Any]) -> at.Settings:
    from pith_pipeline.signing.local import generate_key

    key = generate_key(tmp_path / "keys", key_id="pith-test-key")[0]
    return at.Settings(
        store=str(tmp_path / "store"),
        signer=f"file:{key}",
        oai_url=oai_server[0],
        oai_min_interval="0",
        lease_wait="0",  # a busy lease fails at once instead of waiting
    )


def test_a_window_is_harvested_by_one_run_at_a_time(settings: at.Settings, oai_server: Any) -> None:
    _url, server = oai_server
    store = LocalStore(settings.store)
    # another run is harvesting the day
    with WriterLease(store, [harvest.harvest_lease(DAY)]), pytest.raises(LeaseBusyError):
        harvest.harvest_window(settings, DAY, store=store)
    assert server.requests == []
    first = harvest.harvest_window(settings, DAY, store=store)
    asked = len(server.requests)
    second = harvest.harvest_window(settings, DAY, store=store)  # after it: replayed, no request
    assert second["pages"] == first["pages"] and len(server.requests) == asked


def test_two_runs_of_one_window_keep_their_own_staged_chunks(settings: at.Settings) -> None:
    store = LocalStore(settings.store)
    harvested = harvest.harvest_window(settings, DAY, store=store)
    run_id = str(harvested["run_id"])
    chunks = chunks_mod.plan_page_chunks(harvested["pages"])

    def build() -> list[str]:
        return [at.build_chunk(settings, run_id, c, store=store)["staged"] for c in chunks]

    def finish(staged: list[str]) -> dict[str, Any]:
        published = at.publish_staged(settings, staged, store=store)
        indexed = at.index_window(settings, run_id, staged, store=store)
        return at.finish_window(settings, harvested, staged, indexed, published, store=store)

    first, second = build(), build()  # the second run builds while the first has not finished
    assert not set(first) & set(second)
    done = finish(first)
    assert done["built"] > 0 and all(store.exists(k) for k in second)  # not deleted under it
    again = finish(second)
    assert again["built"] == 0 and again["unchanged"] == done["built"]
    assert list(store.list("staging/")) == []


def test_objects_staged_before_the_upgrade_are_published_only_under_the_paper_leases(
    tmp_path: Path,
) -> None:
    """Issue 16 item 4: the publish task wrote the paper objects of a chunk staged by
    an older version (bundles, arXiv pointers) holding no lease, so it could replace a
    pointer while the paper's writer was adding a version to it. It takes the paper
    leases for them now (a busy store fails or waits as for every writer)."""
    from pith_pipeline.core.canonical_json import dumps_compact
    from pith_pipeline.storage.lease import writer_lease
    from pith_pipeline.storage.staging import staged_key

    store = LocalStore(tmp_path / "store")
    settings = at.Settings(store=str(store.root), lease_wait="0")
    key = staged_key("ingest-2024-01-01", 0, "abcd")
    header = {"chunk": 0, "run_id": "ingest-2024-01-01", "counts": {}, "quarantine": []}
    obj = {"key": "arxiv/2101.00001.json", "data": '{"records": []}\n', "once": False}
    store.put(key, dumps_compact(header) + b"\n" + dumps_compact(obj) + b"\n")
    with writer_lease(store, command="another build"), pytest.raises(LeaseBusyError):
        at.publish_staged(settings, [key], store=store)
    assert not store.exists("arxiv/2101.00001.json")
    assert at.publish_staged(settings, [key], store=store)["written"] == 1  # once it is free
