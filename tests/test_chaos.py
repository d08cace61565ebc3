"""Chaos: builds killed with SIGKILL at random moments while a second writer runs.

What must hold afterwards, on a local directory and on S3 (moto's server), once the
reruns complete (docs/pages/guarantees.md):
- `verify STORE` passes;
- every paper version has exactly one `record_created` event;
- every older version of a paper carries the correction naming its successor,
  whichever writer published which version first and wherever a run died;
- the index has exactly one row per Pith number;
- the transparency log holds exactly the event store's events (`verify STORE`
  checks it), though runs were killed between publishing events and appending
  them; and no pending marker is left (`tlog.pending`).

Two inputs race: the full records (each paper at its latest version) and the same
papers at v1 only, so supersession is exercised in both build orders. The moments
of the kills come from a seeded RNG (the seed is printed on failure), so a failing
schedule can be replayed.
"""

from __future__ import annotations

import itertools
import os
import random
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import orjson
import pytest

from pith_pipeline.loader import reserve_connections
from pith_pipeline.storage.base import Store, open_store

ROOT = Path(__file__).resolve().parents[1]
SEED = int(os.environ.get("PITH_CHAOS_SEED", "20261203"))


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PITH_")}
    return {**env, "PITH_WORKERS": "1"}


def pith(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "pith_pipeline", *args],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**_env(), **(env or {})},
    )


def inputs(tmp: Path, n: int) -> tuple[Path, Path, Path]:
    full = tmp / "full.jsonl"
    subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "gen_records.py"), "--n", str(n), "--out", str(full)],
        check=True,
        capture_output=True,
    )
    v1 = tmp / "v1.jsonl"
    with v1.open("wb") as out:
        for line in full.read_bytes().splitlines():
            rec = orjson.loads(line)
            rec["versions"] = rec["versions"][:1]
            out.write(orjson.dumps(rec) + b"\n")
    for d in ("keys", "logkey"):
        r = subprocess.run(
            [sys.executable, "-m", "pith_pipeline", "keys", "generate", "--out", str(tmp / d)],
            capture_output=True,
            text=True,
            env=_env(),
        )
        assert r.returncode == 0, r.stderr
    return full, v1, tmp / "keys" / "pith-private-key.json"


def build(
    store: str, source: Path, key: Path, cwd: Path, *tuning: str, env: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    """A `build` of `source`; `tuning`: extra options (S3: workers and concurrency)."""
    log_key = key.parent.parent / "logkey" / "pith-private-key.json"  # the log's own key
    return pith(
        "build",
        "--input",
        str(source),
        "--store",
        store,
        "--key",
        str(key),
        "--log-signer",
        str(log_key),
        "--wait",
        "600",
        *tuning,
        cwd=cwd,
        env=env,
    )


def kill(p: subprocess.Popen[str]) -> None:
    if p.poll() is None:
        p.send_signal(signal.SIGKILL)
    p.communicate()


def complete(p: subprocess.Popen[str]) -> str:
    out, err = p.communicate(timeout=1200)
    assert p.returncode == 0, out + err
    return out


def load(store: Store, key: str) -> Any:
    data = store.get(key)
    assert data is not None, key
    return orjson.loads(data)


def check_store(url: str, store: Store, cwd: Path, papers: int, multi_version: int) -> None:
    created: dict[str, int] = {}
    corrections: dict[str, set[str]] = {}
    keys = list(store.list("events/"))
    reserve_connections(store, 16)
    with ThreadPoolExecutor(16) as pool:  # on S3 each read waits on the server
        events = pool.map(lambda k: load(store, k), keys)
        for key, event in zip(keys, events, strict=True):
            body = key.split("/")[1]
            if event["event_type"] == "record_created":
                created[body] = created.get(body, 0) + 1
            elif event["event_type"] == "correction":
                corrections.setdefault(body, set()).add(str(event["payload"].get("pith_number")))
    assert set(created.values()) == {1}, {b: n for b, n in created.items() if n != 1}
    assert len(created) == papers + multi_version  # latest versions + the v1s before them

    pointers = [k for k in store.list("arxiv/") if k.endswith(".json")]
    assert len(pointers) == papers
    linked = 0
    for key in pointers:
        records = sorted(load(store, key)["records"], key=lambda r: (r["version"], r["created_at"]))
        for older, newer in itertools.pairwise(records):
            body = older["pith_number"].rsplit(":", 1)[1]
            assert newer["pith_number"] in corrections.get(body, set()), f"{key}: no correction"
            linked += 1
    assert linked == multi_version

    q = subprocess.run(
        [
            sys.executable,
            "-m",
            "pith_pipeline",
            "query",
            "SELECT count(*) AS n, count(DISTINCT pith_number) AS d FROM records",
            "--store",
            url,
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        env=_env(),
        cwd=cwd,
        timeout=600,
    )
    assert q.returncode == 0, q.stderr
    row = orjson.loads(q.stdout)[0]
    assert row["n"] == row["d"] == papers + multi_version, row

    r = subprocess.run(
        [sys.executable, "-m", "pith_pipeline", "verify", url],
        capture_output=True,
        text=True,
        env=_env(),
        cwd=cwd,
        timeout=1200,
    )
    assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-3000:])
    assert store.exists("log/checkpoint")
    assert list(store.list("log/pending/")) == []


@pytest.mark.slow
@pytest.mark.parametrize("where", ["local", "s3"])
def test_killed_and_racing_builds_leave_a_store_that_verifies(
    where: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    n = 2000
    # on S3 each request waits on the server: two worker processes, each publishing
    # many papers at once, keep moto busy (it answers ~130 requests/s on a CI box)
    tuning = ("--workers", "2", "--io-concurrency", "32") if where == "s3" else ()
    url = str(tmp_path / "store") if where == "local" else request.getfixturevalue("s3_store_url")
    full, v1, key = inputs(tmp_path, n)
    multi = sum(1 for line in full.read_bytes().splitlines() if len(orjson.loads(line)["versions"]) > 1)
    rng = random.Random(f"{SEED}-{where}")
    try:
        for _round in range(3):
            first, second = (full, v1) if rng.random() < 0.5 else (v1, full)
            a = build(url, first, key, tmp_path, *tuning)
            time.sleep(rng.uniform(0.2, 2.5))
            b = build(url, second, key, tmp_path, *tuning)  # a second writer, started meanwhile
            time.sleep(rng.uniform(0.2, 2.5))
            kill(a)
            time.sleep(rng.uniform(0.0, 1.5))
            kill(b)
        # then reruns until complete: both inputs, at once
        a, b = build(url, full, key, tmp_path, *tuning), build(url, v1, key, tmp_path, *tuning)
        complete(a), complete(b)
    except AssertionError as exc:
        raise AssertionError(f"chaos seed {SEED} ({where}): {exc}") from None
    check_store(url, open_store(url), tmp_path, n, multi)


#: The lease TTL of the pause test: a pause longer than it lets the other writer take
#: the paused one's leases over, which is what the test is about.
PAUSE_TTL = 3.0


def _ended(p: subprocess.Popen[str]) -> tuple[int, str]:
    """Wait (bounded) for a writer to end, whatever its status; its stderr."""
    _out, err = p.communicate(timeout=600)
    return p.returncode, err


@pytest.mark.slow
def test_paused_killed_and_racing_builds_leave_a_store_and_log_that_verify(tmp_path: Path) -> None:
    """Writers stopped (SIGSTOP) for longer than the lease TTL at random moments, then
    resumed (SIGCONT), racing another writer that takes their leases over, some also
    killed; the log on. A resumed writer must stop at its next write (never overwrite
    what the other wrote, never a traceback), and after every round's reruns the
    store and the log verify."""
    n = 150
    url = str(tmp_path / "store")
    full, v1, key = inputs(tmp_path, n)
    multi = sum(1 for line in full.read_bytes().splitlines() if len(orjson.loads(line)["versions"]) > 1)
    rng = random.Random(f"{SEED}-pause")
    short = {"PITH_LEASE_TTL": str(PAUSE_TTL)}
    try:
        for _round in range(3):
            first, second = (full, v1) if rng.random() < 0.5 else (v1, full)
            a = build(url, first, key, tmp_path, env=short)
            time.sleep(rng.uniform(0.2, 2.0))
            b = build(url, second, key, tmp_path, env=short)
            time.sleep(rng.uniform(0.2, 2.0))
            paused, other = (a, b) if rng.random() < 0.5 else (b, a)
            if paused.poll() is None:
                paused.send_signal(signal.SIGSTOP)
                time.sleep(PAUSE_TTL + rng.uniform(1.0, 3.0))  # its leases expire meanwhile
                if rng.random() < 0.4:
                    kill(other)
                paused.send_signal(signal.SIGCONT)
            for p in (a, b):
                _status, err = _ended(p)
                assert "Traceback" not in err and "panicked" not in err, err[-3000:]
            # reruns until complete, then the store and the log verify
            complete(build(url, full, key, tmp_path, env=short))
            complete(build(url, v1, key, tmp_path, env=short))
            check_store(url, open_store(url), tmp_path, n, multi)
    except AssertionError as exc:
        raise AssertionError(f"chaos seed {SEED} (pause): {exc}") from None
