"""Writer leases: one contract on a local directory and on S3 (moto)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from pith_pipeline.core.layout import lease_key
from pith_pipeline.storage.base import Store
from pith_pipeline.storage.factory import open_store
from pith_pipeline.storage.lease import (
    INDEX_LEASE,
    SHARDS,
    LeaseBusyError,
    LeaseConfigError,
    LeaseLostError,
    WriterLease,
    default_owner,
    parse_shards,
    shard_leases,
    shard_of,
    writer_lease,
)
from pith_pipeline.storage.lease_holders import held_leases, holder_is_dead, parse_iso
from pith_pipeline.storage.memory import MemoryStore


@pytest.fixture(params=["local", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    if request.param == "local":
        return open_store(str(tmp_path / "store"))
    return open_store(request.getfixturevalue("s3_store_url"))


class Clock:
    def __init__(self) -> None:
        self.t = time.time()

    def __call__(self) -> float:
        return self.t


def owner(name: str) -> dict[str, object]:
    return {"host": "test", "pid": 1, "run_id": name, "command": "test"}


def test_shards_are_stable_and_cover_every_paper() -> None:
    assert shard_of("1909.11150") == shard_of("1909.11150")
    assert {shard_of(f"2101.{i:05d}") for i in range(2000)} == set(range(SHARDS))
    assert parse_shards("0-3,7") == frozenset({0, 1, 2, 3, 7})
    for bad in ("16", "3-1", "x", "-1", ""):
        with pytest.raises(LeaseConfigError, match="--shards"):
            parse_shards(bad)


def test_held_while_inside_and_gone_after(store: Store) -> None:
    with WriterLease(store, ["shard-00", "index"], owner=owner("a")) as lease:
        assert lease.held == ["shard-00", "index"]
        docs = held_leases(store)
        assert sorted(d["lease"] for d in docs) == ["index", "shard-00"]
        assert all(d["owner"]["run_id"] == "a" for d in docs)
        lease.check()
    assert list(store.list("leases/")) == []


def test_a_second_writer_of_the_same_shard_is_refused_naming_the_holder(store: Store) -> None:
    with WriterLease(store, shard_leases({3}), owner=owner("first")):
        with pytest.raises(LeaseBusyError, match=r"run first.*--wait"):
            WriterLease(store, shard_leases({2, 3}), owner=owner("second")).acquire()
        # the refused writer gave back what it had taken (shard 2)
        assert [d["lease"] for d in held_leases(store)] == ["shard-03"]


def test_writers_of_disjoint_shards_both_proceed(store: Store) -> None:
    with (
        WriterLease(store, shard_leases(range(0, 8)), owner=owner("a")) as a,
        WriterLease(store, shard_leases(range(8, 16)), owner=owner("b")) as b,
    ):
        a.check()
        b.check()
        assert len(held_leases(store)) == SHARDS


def test_a_waiting_writer_gets_the_lease_when_it_is_released(store: Store) -> None:
    first = WriterLease(store, ["shard-05"], owner=owner("first")).acquire()
    messages: list[str] = []
    threading.Timer(0.5, first.release).start()
    with WriterLease(store, ["shard-05"], owner=owner("second"), wait=30, poll=0.1, on_wait=messages.append):
        assert held_leases(store)[0]["owner"]["run_id"] == "second"
    assert messages and "run first" in messages[0]


def test_an_expired_lease_is_taken_over(store: Store) -> None:
    clock = Clock()
    stale = WriterLease(store, ["shard-01"], owner=owner("dead"), ttl=60, now=clock).acquire()
    stale._stop.set()  # a writer that stopped renewing (killed)
    clock.t += 61
    with WriterLease(store, ["shard-01"], owner=owner("next"), ttl=60, now=clock):
        assert held_leases(store)[0]["owner"]["run_id"] == "next"
        with pytest.raises(LeaseLostError, match=r"taken over|expired"):
            stale.renew()
            stale.check()
        stale.release()  # never deletes a lease that is no longer its own
        assert held_leases(store)[0]["owner"]["run_id"] == "next"


def test_renewal_extends_and_a_writer_past_its_expiry_stops(store: Store) -> None:
    clock = Clock()
    lease = WriterLease(store, ["shard-02"], owner=owner("a"), ttl=60, now=clock).acquire()
    try:
        first = held_leases(store)[0]["expires_at"]
        clock.t += 30
        lease.renew()
        assert held_leases(store)[0]["expires_at"] > first
        lease.check()
        clock.t += 59  # no renewal since: inside the safety margin of its expiry
        with pytest.raises(LeaseLostError, match="expired"):
            lease.check()
    finally:
        lease.release()


def test_an_unreadable_lease_object_is_taken_over(store: Store) -> None:
    store.put("leases/shard-04.json", b"not json")
    with WriterLease(store, ["shard-04"], owner=owner("a")):
        assert held_leases(store)[0]["owner"]["run_id"] == "a"


HOLDER = """
import sys, time
from pith_pipeline.storage.factory import open_store
from pith_pipeline.storage.lease import WriterLease
lease = WriterLease(open_store(sys.argv[1]), ["shard-07"], ttl=float(sys.argv[2])).acquire()
print("held", flush=True)
time.sleep(600)
"""


def test_a_killed_writer_blocks_the_store_for_at_most_one_ttl(store: Store) -> None:
    env = {**os.environ}
    proc = subprocess.Popen(
        # a TTL long enough that a loaded machine's late renewal cannot expire it early;
        # the kill is noticed at once (dead holder on this machine) or after the TTL
        [sys.executable, "-c", HOLDER, store.url, "30"],
        stdout=subprocess.PIPE,
        env=env,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
        with pytest.raises(LeaseBusyError):
            WriterLease(store, ["shard-07"], owner=owner("next")).acquire()
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        with WriterLease(store, ["shard-07"], owner=owner("next"), wait=90, poll=0.2):
            assert held_leases(store)[0]["owner"]["run_id"] == "next"
    finally:
        proc.kill()
        proc.wait()


def test_a_killed_writer_on_this_machine_is_taken_over_at_once(store: Store) -> None:
    """A rerun after SIGKILL need not wait out the TTL when the holder ran here."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, store.url, "600"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
        with pytest.raises(LeaseBusyError):  # alive: busy, whatever the machine
            writer_lease(store, command="next", shards=[7]).acquire()
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        with writer_lease(store, command="next", shards=[7]):  # no --wait needed
            assert held_leases(store)[0]["owner"]["command"] == "next"
    finally:
        proc.kill()
        proc.wait()


def test_a_dead_pid_of_another_machine_is_not_trusted(store: Store) -> None:
    """The same pid number on another machine (or before a reboot) says nothing."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    other = {**default_owner("elsewhere", "test"), "boot_id": "another-boot", "pid": dead.pid}
    with WriterLease(store, ["shard-07"], owner=other, ttl=600):
        with pytest.raises(LeaseBusyError, match="elsewhere"):
            writer_lease(store, command="next", shards=[7]).acquire()
        assert holder_is_dead({"owner": {**other, "boot_id": default_owner()["boot_id"]}})


@pytest.mark.parametrize("ttl", ["inf", "nan", "-inf", "1e300"])
def test_a_lease_ttl_that_is_not_a_usable_number_of_seconds_is_one_clear_error(ttl: str) -> None:
    """PITH_LEASE_TTL=inf passed the positivity check and overflowed the lease's
    expiry timestamp: a traceback in every writing command. The setting refuses it
    where it is read, and a lease given such a TTL anyway refuses it too."""
    from pith_pipeline.config import SettingError, load_settings

    with pytest.raises(SettingError, match="PITH_LEASE_TTL"):
        load_settings(env={"PITH_LEASE_TTL": ttl})
    store = MemoryStore()
    store.lease_ttl = float(ttl)
    with pytest.raises(LeaseConfigError, match="lease TTL"):
        writer_lease(store, command="t")


def test_a_lease_lasts_the_ttl_its_store_was_opened_with(tmp_path: Path) -> None:
    """PITH_LEASE_TTL reaches every lease a command takes through the store it opened
    (`open_store(..., **settings.store_options)`), however deep the lease is taken."""
    from pith_pipeline.config import load_settings
    from pith_pipeline.storage.factory import open_store

    store = open_store(str(tmp_path / "s"), **load_settings(env={"PITH_LEASE_TTL": "300"}).store_options)
    lease = writer_lease(store, command="t", index=True, papers=False)
    assert lease.ttl == 300.0
    with lease:
        held = json.loads(store.get(lease_key(INDEX_LEASE)) or b"{}")
    assert held and float(parse_iso(held["expires_at"]) - parse_iso(held["acquired_at"])) == pytest.approx(
        300.0
    )
