"""Who holds a store's writer leases (`lease`): the owner a lease names, whether that
holder is gone, and the leases and live runs a store shows (`status`, `clean`).

Reads only: taking, renewing and releasing a lease is `lease.WriterLease`.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from pith_pipeline.core.canonical_json import loads
from pith_pipeline.core.layout import LEASES
from pith_pipeline.storage.base import Store


def one_line(exc: BaseException) -> str:
    """An exception as one line: its message, else its type (never a traceback)."""
    text = " ".join(str(exc).split())
    return text or type(exc).__name__


def iso(t: float) -> str:
    return datetime.fromtimestamp(t, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_iso(text: Any) -> float | None:
    if not isinstance(text, str):
        return None
    try:
        return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC).timestamp()
    except ValueError:
        return None


def boot_id() -> str:
    """This machine's boot id (Linux): with the host name, it tells whether a lease's
    holder ran on this very machine since its last boot, so its pid can be checked."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as fh:
            return fh.read().strip()
    except OSError:
        return ""


def default_owner(run_id: str = "", command: str = "") -> dict[str, Any]:
    """Who holds a lease, for the message another writer sees (never a secret)."""
    return {
        "host": socket.gethostname(),
        "boot_id": boot_id(),
        "pid": os.getpid(),
        "run_id": run_id,
        "command": command,
    }


def holder_is_dead(doc: dict[str, Any]) -> bool:
    """Whether the lease's holder is a process of this machine that no longer runs.

    Why: a writer killed with SIGKILL leaves its lease until the TTL runs out; on the
    same machine (same host name and boot id) we can see at once that its process is
    gone, so the next run (an operator's rerun, Airflow's retry) need not wait.
    """
    owner = doc.get("owner")
    if not isinstance(owner, dict):
        return False
    boot = boot_id()
    pid = owner.get("pid")
    if not boot or owner.get("boot_id") != boot or owner.get("host") != socket.gethostname():
        return False
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0 or pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return False


def describe_owner(doc: dict[str, Any]) -> str:
    owner = doc.get("owner") if isinstance(doc.get("owner"), dict) else {}
    assert isinstance(owner, dict)
    parts = [f"{owner.get('host', '?')} pid {owner.get('pid', '?')}"]
    if owner.get("command"):
        parts.append(str(owner["command"]))
    if owner.get("run_id"):
        parts.append(f"run {owner['run_id']}")
    return ", ".join(parts)


def held_leases(store: Store) -> list[dict[str, Any]]:
    """Every lease object in the store, as written (for `status`)."""
    out = []
    for key in store.list(LEASES):
        data = store.get(key)
        if data is None:
            continue
        try:
            doc = loads(data)
        except ValueError:
            doc = {"lease": key, "unreadable": True}
        if isinstance(doc, dict):
            out.append(doc)
    return out


def live_run_ids(store: Store, now: Callable[[], float] = time.time) -> set[str]:
    """Run ids of writers holding a lease right now: not expired, and not a process of
    this machine that is gone (`holder_is_dead`). A run between two of its steps (an
    Airflow window between tasks) holds none and is not in the set."""
    out: set[str] = set()
    t = now()
    for doc in held_leases(store):
        expires = parse_iso(doc.get("expires_at"))
        owner = doc.get("owner")
        if expires is None or expires < t or holder_is_dead(doc) or not isinstance(owner, dict):
            continue
        run_id = owner.get("run_id")
        if isinstance(run_id, str) and run_id:
            out.add(run_id)
    return out
