"""Leases under pauses and faults (issue 26): a wait longer than the TTL, a renewal
that fails, a lock held by a paused writer, every write checking the lease."""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path

import pytest

from pith_pipeline.storage.base import Store
from pith_pipeline.storage.factory import open_store
from pith_pipeline.storage.lease import LeaseLostError, WriterLease, shard_lease


def owner(name: str) -> dict[str, object]:
    return {"host": "test", "pid": 1, "run_id": name, "command": "test"}


@pytest.fixture(params=["local", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    if request.param == "local":
        return open_store(str(tmp_path / "store"))
    return open_store(request.getfixturevalue("s3_store_url"))


def test_wait_longer_than_the_ttl_keeps_the_leases_already_held(store: Store) -> None:
    """Leases taken one at a time are renewed while the writer waits for the next."""
    busy = WriterLease(store, [shard_lease(1)], owner=owner("busy"), ttl=60).acquire()
    threading.Timer(5.0, busy.release).start()  # held past the waiter's TTL (2 s)
    waiter = WriterLease(
        store, [shard_lease(0), shard_lease(1)], owner=owner("w"), ttl=2.0, wait=60, poll=0.2
    )
    with waiter:
        waiter.check()  # shard-00 was renewed all along
        assert waiter.held == [shard_lease(0), shard_lease(1)]


def test_a_renewal_that_fails_is_recorded_and_stops_the_writer(tmp_path: Path) -> None:
    """Another writer removed `leases/` (the holder was paused): the renewal records
    the loss instead of dying with a traceback, and `check` stops the writer."""
    store = open_store(str(tmp_path / "store"))
    lease = WriterLease(store, [shard_lease(0)], owner=owner("a"), ttl=60).acquire()
    try:
        shutil.rmtree(tmp_path / "store" / "leases")
        lease.renew()
        with pytest.raises(LeaseLostError) as err:
            lease.check()
        assert "\n" not in str(err.value) and "leases/shard-00.json" in str(err.value)
    finally:
        lease.release()


def test_an_unexpected_renewal_error_is_recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = open_store(str(tmp_path / "store"))
    lease = WriterLease(store, [shard_lease(0)], owner=owner("a"), ttl=60).acquire()
    try:

        def broken(*args: object, **kwargs: object) -> bool:
            raise RuntimeError("boom")

        monkeypatch.setattr(store, "put_if_match", broken)
        lease.renew()
        with pytest.raises(LeaseLostError, match="could not be renewed"):
            lease.check()
    finally:
        monkeypatch.undo()
        lease.release()


def test_the_renewal_thread_records_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = open_store(str(tmp_path / "store"))
    lease = WriterLease(store, [shard_lease(0)], owner=owner("a"), ttl=0.4).acquire()
    try:

        def broken(*args: object, **kwargs: object) -> bool:
            raise FileNotFoundError(2, "No such file or directory")

        monkeypatch.setattr(store, "put_if_match", broken)
        deadline = time.monotonic() + 30
        while lease._lost is None and time.monotonic() < deadline:
            time.sleep(0.05)
        with pytest.raises(LeaseLostError, match="could not be renewed"):
            lease.check()
    finally:
        monkeypatch.undo()
        lease.release()


def _run_bounded(fn: object, limit: float = 120.0) -> list[BaseException | None]:
    """Run `fn` in a thread; the result (its exception or None) once it ends, [] if
    it is still blocked after `limit` seconds (the defect: blocked for good)."""
    out: list[BaseException | None] = []

    def run() -> None:
        try:
            fn()  # type: ignore[operator]
            out.append(None)
        except BaseException as exc:
            out.append(exc)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(limit)
    return out


def test_a_paused_lock_holder_does_not_hang_other_writers(tmp_path: Path) -> None:
    """A writer suspended while it holds the lock of `leases/` (here: the lock taken
    and never let go) must not block other writers beyond their --wait."""
    import fcntl
    import os

    from pith_pipeline.storage.lease import LeaseBusyError

    store = open_store(str(tmp_path / "store"))
    stale = WriterLease(store, [shard_lease(0)], owner=owner("old"), ttl=0.5).acquire()
    stale._stop.set()  # no renewal: its lease expires, and can be taken over
    time.sleep(1.0)
    fd = os.open(tmp_path / "store" / "leases", os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(fd, fcntl.LOCK_EX)  # the paused holder
    try:
        waiter = WriterLease(store, [shard_lease(0)], owner=owner("new"), ttl=60, wait=1, poll=0.1)
        got = _run_bounded(lambda: waiter.acquire().release())
        assert got, "the second writer hung on the paused writer's lock"
        assert isinstance(got[0], LeaseBusyError), got
        assert "\n" not in str(got[0])
    finally:
        os.close(fd)
