"""On S3, a conditional write that S3 applied but whose response was lost is ours,
not another writer's (issue 26): botocore retries it and gets 412; stored bytes
identical to ours count as done. A fault proxy in front of moto drops the responses."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fault_proxy import FaultProxy, fault_proxy

from pith_pipeline.core.keys import Ed25519Signer
from pith_pipeline.storage.base import Store
from pith_pipeline.storage.factory import open_store
from pith_pipeline.storage.lease import WriterLease, shard_lease


@pytest.fixture
def proxy(s3_env: str, s3_bucket: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[FaultProxy]:
    with fault_proxy(s3_env) as p:
        monkeypatch.setenv("AWS_ENDPOINT_URL", p.url)
        yield p


@pytest.fixture
def store(proxy: FaultProxy, s3_bucket: str) -> Store:
    return open_store(f"s3://{s3_bucket}/store")


def owner() -> dict[str, object]:
    return {"host": "test", "pid": 1, "run_id": "r", "command": "test"}


def test_a_lease_acquired_whose_response_was_lost_is_held(store: Store, proxy: FaultProxy) -> None:
    proxy.drop("leases/shard-00.json")
    with WriterLease(store, [shard_lease(0)], owner=owner(), ttl=60) as lease:
        assert proxy.dropped, "the fault was not injected"
        assert lease.held == [shard_lease(0)]
        lease.check()


def test_a_renewal_whose_response_was_lost_keeps_the_lease(store: Store, proxy: FaultProxy) -> None:
    with WriterLease(store, [shard_lease(0)], owner=owner(), ttl=60) as lease:
        proxy.drop("leases/shard-00.json")
        lease.renew()
        assert proxy.dropped
        lease.check()
        lease.renew()  # the tag it holds is the stored object's
        lease.check()


def test_a_swap_whose_response_was_lost_counts_as_done(store: Store, proxy: FaultProxy) -> None:
    assert store.put_if_match("log/checkpoint", b"one\n", None)
    got = store.get_tagged("log/checkpoint")
    assert got is not None
    proxy.drop("log/checkpoint")
    assert store.put_if_match("log/checkpoint", b"two\n", got[1])
    assert proxy.dropped and store.get("log/checkpoint") == b"two\n"
    # a real rival's write is still refused
    assert not store.put_if_match("log/checkpoint", b"three\n", got[1])


def test_a_write_once_whose_response_was_lost_counts_as_written_now(store: Store, proxy: FaultProxy) -> None:
    proxy.drop("events/")
    assert store.put_once("events/x/1.json", b"{}\n") is True  # ours: written now
    assert proxy.dropped
    assert store.put_once("events/x/1.json", b"{}\n") is False  # already there


def test_the_log_checkpoint_swap_survives_a_lost_response(
    store: Store, proxy: FaultProxy, tmp_path: object, sample_lines: list[str]
) -> None:
    from datetime import UTC, datetime
    from pathlib import Path

    from testclock import StepClock

    from pith_pipeline.publish import BuildConfig, Publisher
    from pith_pipeline.sources.jsonl import iter_jsonl
    from pith_pipeline.tlog.log import LogSigner
    from pith_pipeline.tlog.pipeline import append_events, check_log_matches_event_store, event_store_keys

    assert isinstance(tmp_path, Path)
    src = tmp_path / "in.jsonl"
    src.write_text("\n".join(sample_lines[:3]) + "\n", encoding="utf-8")
    signer = Ed25519Signer(bytes(range(32)), "pipeline-test")
    Publisher(store, signer, BuildConfig(), clock=StepClock(datetime(2026, 7, 1, tzinfo=UTC))).publish(
        iter_jsonl(src)
    )
    log = LogSigner.from_signer(Ed25519Signer(bytes(range(1, 33)), "log"), "pith.example.org/log")
    proxy.drop("log/checkpoint")
    run = append_events(store, log, list(event_store_keys(store)))
    assert proxy.dropped and run.result is not None and run.result.size > 0
    assert check_log_matches_event_store(store) == []
