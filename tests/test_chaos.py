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
  them; and no pending marker is left (`tlog.pending`);
- after every round (its reruns complete), the log also verifies with Go's
  golang.org/x/mod/sumdb/{note,tlog} (an independent implementation: the signed
  checkpoint, the tiles against its root, the inclusion of a few entries, and the
  consistency of today's tree with every checkpoint seen in the rounds before), and
  `log monitor`, its state file kept across the rounds, sees no fork, no shrink and no
  bad entry.

On S3 the builds go through a fault proxy (tests/fault_proxy.py) that drops, at random
from a seeded RNG and a bounded number of times, the response of a write that S3 has
applied: the lost response that botocore retries.

Two inputs race: the full records (each paper at its latest version) and the same
papers at v1 only, so supersession is exercised in both build orders. The moments
of the kills come from a seeded RNG (the seed is printed on failure), so a failing
schedule can be replayed.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import orjson
import pytest
from fault_proxy import FaultProxy, fault_proxy

from pith_pipeline.storage.base import Store
from pith_pipeline.storage.concurrency import reserve_connections
from pith_pipeline.storage.factory import open_store
from pith_pipeline.storage.local import LocalStore
from pith_pipeline.tlog.client import LogLocation
from pith_pipeline.tlog.log import TileReader

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


GOPATH = "/usr/share/gocode"
GO_SOURCE = ROOT / "tests" / "tlog" / "go" / "interop.go"


@pytest.fixture(scope="module")
def go_checker(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Go's sumdb/tlog checker (tests/tlog/go/interop.go), built once. Without Go the
    test fails rather than skips, as tests/tlog/test_go_interop.py does."""
    go = shutil.which("go")
    if go is None or not (Path(GOPATH) / "src/golang.org/x/mod/sumdb/tlog").is_dir():
        pytest.fail("Go and golang.org/x/mod are needed: apt-get install golang-go golang-golang-x-mod-dev")
    out = tmp_path_factory.mktemp("go")
    env = {**os.environ, "GO111MODULE": "off", "GOPATH": GOPATH, "GOCACHE": str(out / "cache"), "GOFLAGS": ""}
    subprocess.run([go, "build", "-o", str(out / "interop"), str(GO_SOURCE)], check=True, env=env, cwd=out)
    return out / "interop"


def _b64(h: bytes) -> str:
    return base64.b64encode(h).decode()


class LogAuditor:
    """What an outside auditor checks after each round, remembering across rounds:
    Go's checker on the checkpoint, tiles, a few inclusions and the consistency with
    every checkpoint seen before; and `log monitor` with one state file throughout."""

    def __init__(self, checker: Path, work: Path, rng: random.Random) -> None:
        self.checker = checker
        self.work = work
        self.state = work / "monitor-state.json"
        self.rng = rng
        self.seen: list[tuple[int, bytes]] = []  # (size, root) of each round's checkpoint

    def check(self, url: str, store: Store) -> None:
        r = subprocess.run(
            [sys.executable, "-m", "pith_pipeline", "log", "monitor", url, "--state", str(self.state)],
            capture_output=True,
            text=True,
            env=_env(),
            cwd=self.work,
            timeout=600,
        )
        assert r.returncode == 0, f"log monitor: {r.stdout[-2000:]} {r.stderr[-2000:]}"
        assert "LOG PROBLEM" not in r.stderr, r.stderr[-2000:]

        loc = LogLocation.open(url)
        verifier = loc.verifier()
        cp, _raw = loc.checkpoint(verifier)
        reader = TileReader(loc.fetch, cp.size, loc.where)
        assert reader.root() == cp.root, "the tiles do not hash to the signed root"
        for size, root in self.seen:
            assert size <= cp.size, f"the log shrank from {size} to {cp.size}"
            if size == cp.size:
                assert root == cp.root, f"two roots for size {size}: a fork"
        indexes = sorted({0, cp.size - 1, *self.rng.sample(range(cp.size), min(4, cp.size))})
        request = {
            "dir": str(self._log_dir(url, store)),
            "vkey": verifier.vkey,
            "inclusion": [
                {"index": i, "proof": [_b64(h) for h in reader.inclusion_proof(i)]} for i in indexes
            ],
            "consistency": [
                {
                    "old_size": size,
                    "old_root": _b64(root),
                    "proof": [_b64(h) for h in reader.consistency_proof(size)],
                }
                for size, root in self.seen
                if 0 < size < cp.size
            ],
        }
        got = subprocess.run([str(self.checker)], input=json.dumps(request), capture_output=True, text=True)
        assert got.returncode == 0, f"Go's tlog checker: {got.stdout[-2000:]} {got.stderr[-2000:]}"
        assert got.stdout.count("ok inclusion") == len(indexes), got.stdout
        assert got.stdout.count("ok consistency") == len(request["consistency"]), got.stdout
        assert "ok tiles hash to the signed root" in got.stdout, got.stdout
        self.seen.append((cp.size, cp.root))

    def _log_dir(self, url: str, store: Store) -> Path:
        """The log as files for Go: the local store's own directory, or a copy of S3's."""
        if isinstance(store, LocalStore):
            return Path(url) / "log"
        copy = self.work / f"log-copy-{len(self.seen)}"
        for key in ["log/checkpoint", *store.list("log/tile/")]:
            data = store.get(key)
            assert data is not None, key
            (copy / key).parent.mkdir(parents=True, exist_ok=True)
            (copy / key).write_bytes(data)
        return copy / "log"


#: The S3 rounds' lost responses: each write's response is dropped with this chance,
#: at most DROP_LIMIT times in a test (botocore retries each one; moto applied it).
DROP_RATE, DROP_LIMIT = 0.02, 40


@pytest.fixture
def s3_through_proxy(s3_store_url: str, s3_env: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[FaultProxy]:
    """The builds' S3 endpoint is a fault proxy in front of moto."""
    with fault_proxy(s3_env) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
        yield proxy


@pytest.mark.slow
@pytest.mark.parametrize("where", ["local", "s3"])
def test_killed_and_racing_builds_leave_a_store_that_verifies(
    where: str, tmp_path: Path, request: pytest.FixtureRequest, go_checker: Path
) -> None:
    n = 300
    rounds = 3
    # on S3 each request waits on the server: two worker processes, each publishing
    # many papers at once, keep moto busy (it answers ~130 requests/s on a CI box)
    tuning = ("--workers", "2", "--io-concurrency", "32") if where == "s3" else ()
    url = str(tmp_path / "store") if where == "local" else request.getfixturevalue("s3_store_url")
    proxy: FaultProxy | None = request.getfixturevalue("s3_through_proxy") if where == "s3" else None
    full, v1, key = inputs(tmp_path, n)
    multi = sum(1 for line in full.read_bytes().splitlines() if len(orjson.loads(line)["versions"]) > 1)
    rng = random.Random(f"{SEED}-{where}")
    auditor = LogAuditor(go_checker, tmp_path, random.Random(f"{SEED}-{where}-audit"))
    if proxy is not None:
        proxy.drop_randomly(f"{SEED}-{where}-drops", DROP_RATE, DROP_LIMIT)
    try:
        for _round in range(rounds):
            first, second = (full, v1) if rng.random() < 0.5 else (v1, full)
            a = build(url, first, key, tmp_path, *tuning)
            time.sleep(rng.uniform(0.2, 2.5))
            b = build(url, second, key, tmp_path, *tuning)  # a second writer, started meanwhile
            time.sleep(rng.uniform(0.2, 2.5))
            kill(a)
            time.sleep(rng.uniform(0.0, 1.5))
            kill(b)
            # then reruns until complete: both inputs, at once; and every check
            a, b = build(url, full, key, tmp_path, *tuning), build(url, v1, key, tmp_path, *tuning)
            complete(a), complete(b)
            check_store(url, open_store(url), tmp_path, n, multi)
            auditor.check(url, open_store(url))
    except AssertionError as exc:
        raise AssertionError(f"chaos seed {SEED} ({where}, round {_round}): {exc}") from None
    if proxy is not None:
        assert proxy.dropped, "no response was dropped: the fault was not injected"


#: The lease TTL of the pause test: a pause longer than it lets the other writer take
#: the paused one's leases over, which is what the test is about.
PAUSE_TTL = 3.0


def _ended(p: subprocess.Popen[str]) -> tuple[int, str]:
    """Wait (bounded) for a writer to end, whatever its status; its stderr."""
    _out, err = p.communicate(timeout=600)
    return p.returncode, err


@pytest.mark.slow
def test_paused_killed_and_racing_builds_leave_a_store_and_log_that_verify(
    tmp_path: Path, go_checker: Path
) -> None:
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
    auditor = LogAuditor(go_checker, tmp_path, random.Random(f"{SEED}-pause-audit"))
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
            auditor.check(url, open_store(url))
    except AssertionError as exc:
        raise AssertionError(f"chaos seed {SEED} (pause): {exc}") from None
