"""Concurrent windows, end to end: real Airflow 3.3.2 processes over overlapping days.

Why this test exists: `airflow backfill create` starts its runs concurrently (its own
`--max-active-runs`, default 10, overrides the DAG's `max_active_runs=1`), and a
`pith_backfill` run can reach the same days at the same time. What keeps the store
right then is not the scheduler but the store itself: the shard writer leases
(`storage/lease.py`), self-repairing supersession and the cross-process arXiv gate
(`sources/politeness.py`). `dag.test()` runs one task at a time in one process, so
only real processes show that these hold.

Set-up, as an operator runs it without Docker (all on 127.0.0.1, a temporary
AIRFLOW_HOME, SQLite, the LocalExecutor): `airflow db migrate`, the `arxiv_oai` pool,
then api-server, scheduler (`--skip-serve-logs`) and dag-processor. A loopback
OAI-PMH server serves three days whose records overlap: 2401.00001 appears at v1 on
the first day and at v2 on the next two, 1909.11150 on all three. Then, at once:
`airflow backfill create --dag-id pith_ingest` over the three days (default
max-active-runs, so the three runs run together) and a `pith_backfill` trigger over
the last two. The arXiv pool has three slots here, so harvests of different windows
run in parallel processes and only the shared gate spaces their requests.

Afterwards: every run succeeded, `pith-pipeline verify STORE` passes, every paper
version has exactly one `record_created` event, each older version carries the
correction naming its successor, each paper's pointer lists every version once with
the latest last, the index has one row per Pith number, and the OAI server saw at
least the configured interval (arXiv's 3 s) between any two requests.

Every process is started in its own session and stopped (with its descendants) in a
`finally`; nothing else is touched.
"""

from __future__ import annotations

import itertools
import json
import os
import secrets
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.airflow

INTERVAL = 3.0  # arXiv's: PITH_OAI_MIN_INTERVAL for every harvest of this test
#: Generous: Airflow's start-up alone takes a minute on two busy cores. Deadlines
#: bound the waits; nothing asserts how long anything took.
START_DEADLINE = 600.0
RUN_DEADLINE = 900.0
INGEST_DAYS = ("2024-01-02", "2024-01-03", "2024-01-04")
BACKFILL_CONF = {"from": "2024-01-03", "until": "2024-01-05", "source": "oai"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Stack:
    """The Airflow processes this test started, and how to reach their database."""

    def __init__(self, home: Path, env: dict[str, str], port: int) -> None:
        self.home = home
        self.env = env
        self.port = port
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def airflow(self, *args: str, timeout: float = 600) -> str:
        for _attempt in range(3):
            proc = subprocess.run(
                [sys.executable, "-m", "airflow", *args],
                env=self.env,
                capture_output=True,
                text=True,
                timeout=timeout,
                start_new_session=True,
            )
            # SQLite's one writer: on a starved machine the scheduler can hold the lock
            # past ?timeout=60, and the command's transaction is rolled back whole, so it
            # is asked again (what is tested is the command's effect, not SQLite's lock)
            if proc.returncode == 0 or "database is locked" not in proc.stderr:
                break
        assert proc.returncode == 0, (
            f"airflow {' '.join(args)} failed ({proc.returncode}):\n"
            f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        )
        return proc.stdout

    def start(self, name: str, *args: str) -> None:
        out = (self.home / f"{name}.log").open("wb")
        self.procs[name] = subprocess.Popen(
            [sys.executable, "-m", "airflow", *args],
            env=self.env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: stopped by us, and only us
        )
        out.close()

    def check_alive(self) -> None:
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                raise AssertionError(f"airflow {name} exited ({proc.returncode}):\n{self.log_tail(name)}")

    def log_tail(self, name: str, chars: int = 4000) -> str:
        path = self.home / f"{name}.log"
        return path.read_text(errors="replace")[-chars:] if path.exists() else ""

    def query(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        db = self.home / "airflow.db"
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=60) as conn:
            return list(conn.execute(sql, params).fetchall())

    def stop(self) -> None:
        """SIGTERM every process we started and every descendant it has, then SIGKILL."""
        import psutil

        tree: list[psutil.Process] = []
        for proc in self.procs.values():
            try:
                parent = psutil.Process(proc.pid)
                tree += [parent, *parent.children(recursive=True)]
            except psutil.NoSuchProcess:
                pass
        for p in tree:
            with suppress(psutil.NoSuchProcess):
                p.send_signal(signal.SIGTERM)
        _gone, alive = psutil.wait_procs(tree, timeout=30)
        for p in alive:
            with suppress(psutil.NoSuchProcess):
                p.kill()
        psutil.wait_procs(alive, timeout=10)
        for proc in self.procs.values():
            with suppress(subprocess.TimeoutExpired):
                proc.wait(10)


def wait_until(what: str, check: Any, stack: Stack, deadline: float, poll: float = 2.0) -> Any:
    """Poll `check()` until it returns something truthy; fail naming `what` at the deadline."""
    while True:
        stack.check_alive()
        try:
            got = check()
        except (sqlite3.OperationalError, OSError):  # a table not there yet, a busy DB
            got = None
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(
                f"timed out waiting for {what}\n--- scheduler\n{stack.log_tail('scheduler')}"
                f"\n--- dag-processor\n{stack.log_tail('dag-processor')}"
                f"\n--- api-server\n{stack.log_tail('api-server')}"
            )
        time.sleep(poll)


@contextmanager
def airflow_stack(
    tmp_path: Path, base_env: dict[str, str], *, schedule: bool = False, arxiv_slots: int = 3
) -> Iterator[Stack]:
    """api-server, scheduler and dag-processor on a fresh SQLite Airflow in `tmp_path`.

    `schedule`: the scheduler also makes the DAGs' scheduled runs (off: only the runs a
    test asks for). `arxiv_slots`: slots of the `arxiv_oai` pool.
    """
    home = tmp_path / "airflow-home"
    home.mkdir()
    port = free_port()
    env = {
        **base_env,
        # SQLite lets one process write at a time: wait for the lock, not 5 s and fail
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}?timeout=60",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
        "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{port}",
        "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_hex(32),
        "AIRFLOW__API__SECRET_KEY": secrets.token_hex(32),
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
        # without `schedule`, only the runs a test makes: no scheduled run of the daily DAG
        "AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE": str(schedule),
        "AIRFLOW__CORE__PARALLELISM": "8",
        # a task's calls to the api-server wait for a busy machine (default 5 s)
        "AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT": "60",
        "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
    }
    stack = Stack(home, env, port)
    try:
        stack.airflow("db", "migrate")
        stack.airflow("pools", "set", "arxiv_oai", str(arxiv_slots), "arXiv OAI-PMH")
        stack.start("api-server", "api-server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1")
        stack.start("scheduler", "scheduler", "--skip-serve-logs")
        stack.start("dag-processor", "dag-processor")
        yield stack
    finally:
        stack.stop()


def api_ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v2/monitor/health", timeout=10) as r:
            return bool(r.status == 200)
    except (urllib.error.URLError, TimeoutError, ConnectionError):
        return False


def served_subjects(days: dict[str, list[bytes]]) -> dict[str, dict[int, str]]:
    """arXiv id -> {version: Pith number} for every record the server serves."""
    from lxml import etree

    from pith_pipeline.core.arxiv_record import ArxivRecord
    from pith_pipeline.core.builder import Identity
    from pith_pipeline.sources.arxivraw_record import parse_record

    out: dict[str, dict[int, str]] = {}
    for records in days.values():
        for raw in records:
            item = parse_record(etree.fromstring(raw), "test")
            if isinstance(item, ArxivRecord):
                identity = Identity.of(item)
                latest = max(v.number for v in item.versions)
                out.setdefault(item.id, {})[latest] = identity.subject
    return out


def run_failures(stack: Stack) -> str:
    """Every task instance that did not succeed, with the end of its log."""
    rows = stack.query(
        "SELECT dag_id, run_id, task_id, map_index, state, try_number FROM task_instance "
        "WHERE state IS NULL OR state NOT IN ('success', 'skipped')"
    )
    out = []
    for dag_id, run_id, task_id, map_index, state, tries in rows:
        out.append(f"{dag_id} {run_id} {task_id}[{map_index}]: {state} (try {tries})")
        base = stack.home / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}" / f"task_id={task_id}"
        if map_index >= 0:
            base = base / f"map_index={map_index}"
        for log in sorted(base.glob("attempt=*.log"))[-1:]:
            out.append(log.read_text(errors="replace")[-3000:])
    return "\n".join(out)


def test_concurrent_backfills_of_overlapping_days(
    tmp_path: Path, oai_server: tuple[str, Any], airflow_env: Any
) -> None:
    from pith_pipeline.core.canonical_json import loads
    from pith_pipeline.index import run_query
    from pith_pipeline.signing.local import generate_key
    from pith_pipeline.storage.factory import open_store

    url, server = oai_server
    # a third day: 2401.00001 at v2 again, 1909.11150 again, and a paper of the first day
    server.days["2024-01-04"] = [*server.days["2024-01-03"], server.days["2024-01-02"][6]]
    expected = served_subjects(server.days)
    assert {"2401.00001", "1909.11150", "0704.0199"} <= set(expected)
    assert len(expected["2401.00001"]) == 2

    priv, _pub, _doc = generate_key(tmp_path / "keys", key_id="pith-test-key")
    store_dir = tmp_path / "store"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PITH_", "AIRFLOW"))}
    env.update(airflow_env(tmp_path / "airflow-home"))
    env.update(
        {
            "PITH_STORE": str(store_dir),
            "PITH_SIGNER": f"file:{priv}",
            "PITH_OAI_URL": url,
            "PITH_OAI_MIN_INTERVAL": str(INTERVAL),
            "PITH_POLITENESS_DIR": str(tmp_path / "politeness"),
            "PITH_BASE_URL": "https://pith.test.example",
        }
    )
    started = time.monotonic()
    # three arXiv slots: harvests of different windows overlap, only the gate spaces them
    with airflow_stack(tmp_path, env, arxiv_slots=3) as stack:
        deadline = time.monotonic() + START_DEADLINE
        wait_until(
            "the dag-processor to serialize pith_ingest and pith_backfill",
            lambda: (
                {r[0] for r in stack.query("SELECT dag_id FROM serialized_dag")}
                >= {"pith_ingest", "pith_backfill"}
            ),
            stack,
            deadline,
        )
        wait_until("the api-server", lambda: api_ready(stack.port), stack, deadline)
        stack.airflow("dags", "unpause", "--treat-dag-id-as-regex", "-y", "^pith_(ingest|backfill)$")

        # one after the other (SQLite takes one writer at a time); the scheduler starts
        # all four runs together in its next loop
        stack.airflow(
            "backfill",
            "create",
            "--dag-id",
            "pith_ingest",
            "--from-date",
            INGEST_DAYS[0],
            "--to-date",
            INGEST_DAYS[-1],
        )
        stack.airflow("dags", "trigger", "pith_backfill", "--conf", json.dumps(BACKFILL_CONF))

        def runs() -> list[tuple[str, str, str, str | None, str | None]]:
            return [
                (str(a), str(b), str(c), d, e)
                for a, b, c, d, e in stack.query(
                    "SELECT dag_id, run_id, state, start_date, end_date FROM dag_run"
                )
            ]

        def finished() -> bool:
            rs = runs()
            return len(rs) == len(INGEST_DAYS) + 1 and all(r[2] in ("success", "failed") for r in rs)

        wait_until("every run to finish", finished, stack, time.monotonic() + RUN_DEADLINE, poll=5.0)
        final = runs()
        assert all(r[2] == "success" for r in final), f"{final}\n{run_failures(stack)}"
        ingest = [r for r in final if r[0] == "pith_ingest"]
        assert len(ingest) == len(INGEST_DAYS)
        # the backfill's runs really ran at the same time (else this tests nothing)
        assert max(str(r[3]) for r in ingest) < min(str(r[4]) for r in ingest), ingest
        backfill = stack.query(
            "SELECT max_active_runs, completed_at FROM backfill WHERE dag_id = 'pith_ingest'"
        )
        assert len(backfill) == 1 and backfill[0][0] > 1, backfill
    print(f"concurrent backfill: {time.monotonic() - started:.0f} s with Airflow start-up")

    store = open_store(str(store_dir))
    for day in INGEST_DAYS:
        assert store.exists(f"runs/ingest-{day}/manifest.json"), day

    verify = subprocess.run(
        [sys.executable, "-m", "pith_pipeline", "verify", str(store_dir)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert verify.returncode == 0, verify.stdout[-3000:] + verify.stderr[-3000:]

    created: dict[str, int] = {}
    corrections: dict[str, set[str]] = {}
    for key in store.list("events/"):
        body = key.split("/")[1]
        event = loads(store.get(key) or b"")
        if event["event_type"] == "record_created":
            created[body] = created.get(body, 0) + 1
        elif event["event_type"] == "correction":
            corrections.setdefault(body, set()).add(str(event["payload"].get("pith_number")))
    subjects = {s for versions in expected.values() for s in versions.values()}
    assert created == {s.rsplit(":", 1)[1]: 1 for s in subjects}  # one per version, no duplicates

    for arxiv_id, versions in expected.items():
        pointer = loads(store.get(f"arxiv/{arxiv_id}.json") or b"")
        listed = sorted((r["version"], r["pith_number"]) for r in pointer["records"])
        assert listed == sorted(versions.items()), arxiv_id
        assert pointer["latest"] == versions[max(versions)], arxiv_id
        for (_, older), (_, newer) in itertools.pairwise(listed):
            assert newer in corrections.get(older.rsplit(":", 1)[1], set()), f"{arxiv_id}: no correction"

    rows, distinct = run_query(store, "SELECT count(*), count(DISTINCT pith_number) FROM records").rows[0]
    assert rows == distinct == len(subjects)

    froms = {r["from"] for r in server.requests if "from" in r}
    assert froms >= set(INGEST_DAYS), froms
    gaps = [b - a for a, b in itertools.pairwise(sorted(server.times))]
    assert len(gaps) >= len(INGEST_DAYS) and min(gaps) >= INTERVAL, gaps
