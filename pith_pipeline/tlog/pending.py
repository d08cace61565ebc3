"""Pending markers: which runs may have published events the log does not hold yet.

Why: a run appends the events it published at its end. A run killed before that
leaves events in the store that no log entry covers, and the next run must find and
append them. Counting the whole event store against the log's size on every run
finds them, but costs a listing of every event on every run (O(store): two million
keys a run on a 1 M-paper store, 2,000 LISTs on S3), however small the run.

So a publisher writes `log/pending/<run id>.<token>.json` before the first event it
writes (made durable before that event), and the key travels with the run's ledger
(`RunSummary.log_pending`: through worker processes and Airflow's staged chunks
too). Once the run's events are in the log, the run deletes the markers its ledger
covers. A marker outliving its run therefore means events may be missing; the next
run that logs:

- leaves alone the markers of runs still holding a writer lease (they append their
  own events when they finish; if they die, their marker stays for the run after);
- for every other marker, and any marker of its own run id that its ledger does not
  cover (a killed attempt of the same run: reproducible run ids, Airflow retries),
  compares the whole event store with the log, appends what is missing, then
  deletes those markers. They were judged before the store was listed, so every
  event their runs wrote is in that listing.

A run that never writes an event writes no marker. Markers are written even when
the store keeps no log (the run deletes its own at its end), so a log created while
the run was publishing still learns of its events. Events published by a version
of this program from before markers are appended by `pith-pipeline log sync`.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from pith_pipeline.core.canonical_json import dumps_pretty
from pith_pipeline.storage.base import Store, barrier
from pith_pipeline.storage.lease import default_owner, live_run_ids
from pith_pipeline.tlog.log import LOG_PREFIX

PENDING = LOG_PREFIX + "pending/"


def marker_key(run_id: str, token: str) -> str:
    return f"{PENDING}{run_id}.{token}.json"


def run_of(key: str) -> str:
    """The run id a marker names ("" for an object that is not a marker)."""
    name = key.removeprefix(PENDING)
    run, dot, _rest = name.rpartition(".json")[0].rpartition(".")
    return run if dot and key.startswith(PENDING) else ""


class PendingMark:
    """One publisher's marker: written once, before its first event.

    Thread-safe: the `Loader` publishes several papers at once through one publisher.
    """

    def __init__(self, store: Store) -> None:
        self.store = store
        self._lock = threading.Lock()
        self._key: str | None = None

    def ensure(self, run_id: str) -> str | None:
        """Write the marker unless it is written; the key when this call wrote it."""
        if self._key is not None:
            return None
        with self._lock:
            if self._key is not None:
                return None
            key = marker_key(run_id, secrets.token_hex(6))
            owner = default_owner(run_id, "publish")
            doc = {"run_id": run_id, "owner": owner, "written_at": datetime.now(UTC).isoformat()}
            self.store.put(key, dumps_pretty(doc) + b"\n")
            barrier(self.store)  # durable before any event it announces
            self._key = key
            return key


@dataclass(frozen=True, slots=True)
class Settled:
    """The markers a log append settles: `covered` by the run's own entries, and
    `stale` ones whose events only a comparison of the whole store finds."""

    covered: list[str]
    stale: list[str]


def judge(store: Store, run_id: str, covered: Iterable[str]) -> Settled:
    """Sort the store's markers (see the module docstring): read before the event
    store is listed, so a stale marker's events are all in that listing."""
    covered_set = set(covered)
    found = list(store.list(PENDING))
    others = [k for k in found if k not in covered_set]
    live = live_run_ids(store) if any(run_of(k) != run_id for k in others) else set()
    stale = [k for k in others if run_of(k) == run_id or run_of(k) not in live]
    return Settled([k for k in found if k in covered_set], stale)


def settle(store: Store, keys: Iterable[str]) -> None:
    for key in keys:
        store.delete(key)
