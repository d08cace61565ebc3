"""Every documented way of choosing `pith_ingest`'s day, through real Airflow processes.

Why this test exists (issue 25): `airflow dags trigger pith_ingest --logical-date
2019-11-01`, as the docs and the DAG's docstring say, harvested *yesterday* and
reported success. The task read `dag_run.run_type` from the Task SDK's context, an
enum whose `str()` is `DagRunType.MANUAL`, and compared it with "manual"; the unit
test passed the plain string, so only a real run could show it. A manual run's data
interval comes from the trigger time, so the run fell back to it.

One Airflow (api-server, scheduler with its schedule on, dag-processor; SQLite with
`?timeout=60`, LocalExecutor, all on 127.0.0.1) and a loopback OAI-PMH server. Each
way the docs name, each on its own day:

- a scheduled run: unpausing the DAG runs the latest complete day (yesterday);
- `airflow dags trigger pith_ingest --logical-date 2024-01-02` (made while the DAG is
  still paused: it waits, queued, for the unpause);
- the REST API, `POST /api/v2/dags/pith_ingest/dagRuns` with `logical_date` 2024-01-03;
- `airflow dags trigger pith_ingest --conf '{"day": "2024-01-04"}'`;
- `airflow backfill create --dag-id pith_ingest --from-date 2024-01-05 --to-date 2024-01-05`
  (and a second one while it runs, refused by Airflow with the documented reason);
- then the documented reruns of a day already run: `--conf '{"day": "2024-01-02"}'`,
  and `airflow tasks clear pith_ingest -s 2024-01-02 -e 2024-01-02 -y` (a second
  `--logical-date 2024-01-02` is refused by Airflow: one run per logical date).

Each run's `harvest` result (its XCom) must name the run id of its day, the OAI server
must have been asked for exactly those days, and each day must have its manifest. The
rerun replays the stored harvest (no request) and succeeds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from test_concurrent_backfill import (
    RUN_DEADLINE,
    START_DEADLINE,
    Stack,
    airflow_stack,
    api_ready,
    run_failures,
    wait_until,
)

pytestmark = pytest.mark.airflow


def dag_runs(stack: Stack) -> list[dict[str, Any]]:
    """pith_ingest's runs: id, type, state, the day their trigger chose, harvest's XCom."""
    harvested = {
        str(run_id): json.loads(value) if isinstance(value, str | bytes) else value
        for run_id, value in stack.query(
            "SELECT run_id, value FROM xcom WHERE dag_id = 'pith_ingest' AND task_id = 'harvest' "
            "AND key = 'return_value'"
        )
    }
    out = []
    for run_id, run_type, state, logical_date, conf in stack.query(
        "SELECT run_id, run_type, state, logical_date, conf FROM dag_run WHERE dag_id = 'pith_ingest'"
    ):
        conf = json.loads(conf) if isinstance(conf, str | bytes) and conf else (conf or {})
        chosen = conf.get("day") or (str(logical_date)[:10] if logical_date else None)
        out.append(
            {
                "run_id": str(run_id),
                "run_type": str(run_type),
                "state": str(state),
                "chosen": chosen,
                "harvested": (harvested.get(str(run_id)) or {}).get("run_id"),
            }
        )
    return out


class Held(threading.Event):
    """A `RecordedDays.hold` event that holds the request until set, however long."""

    def wait(self, timeout: float | None = None) -> bool:
        return super().wait(RUN_DEADLINE)


def airflow_cli(stack: Stack, *args: str) -> subprocess.CompletedProcess[str]:
    """An `airflow` command whose failure is the point: its exit status and output."""
    return subprocess.run(
        [sys.executable, "-m", "airflow", *args],
        env=stack.env,
        capture_output=True,
        text=True,
        timeout=600,
        start_new_session=True,
    )


def finished(stack: Stack, n: int) -> bool:
    runs = dag_runs(stack)
    return len(runs) == n and all(r["state"] in ("success", "failed") for r in runs)


def post_json(url: str, body: dict[str, Any]) -> Any:
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), method="POST", headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=60) as r:  # all-admins: no token needed
        return json.loads(r.read())


def test_every_documented_way_of_choosing_a_day_harvests_that_day(
    tmp_path: Path, oai_server: tuple[str, Any], airflow_env: Any
) -> None:
    from pith_pipeline.signing.local import generate_key
    from pith_pipeline.storage.factory import open_store

    url, server = oai_server
    yesterday = (datetime.now(tz=UTC) - timedelta(days=1)).date().isoformat()
    priv, _pub, _doc = generate_key(tmp_path / "keys", key_id="pith-test-key")
    store_dir = tmp_path / "store"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PITH_", "AIRFLOW"))}
    env.update(airflow_env(tmp_path / "airflow-home"))
    env.update(
        {
            "PITH_STORE": str(store_dir),
            "PITH_SIGNER": f"file:{priv}",
            "PITH_OAI_URL": url,
            "PITH_OAI_MIN_INTERVAL": "0",
            "PITH_POLITENESS_DIR": str(tmp_path / "politeness"),
            "PITH_BASE_URL": "https://pith.test.example",
        }
    )
    with airflow_stack(tmp_path, env, schedule=True, arxiv_slots=1) as stack:
        deadline = time.monotonic() + START_DEADLINE
        wait_until(
            "the dag-processor to serialize pith_ingest",
            lambda: {r[0] for r in stack.query("SELECT dag_id FROM serialized_dag")} >= {"pith_ingest"},
            stack,
            deadline,
        )
        wait_until("the api-server", lambda: api_ready(stack.port), stack, deadline)

        paused = dict(stack.query("SELECT dag_id, is_paused FROM dag"))
        # pith_backfill runs only when triggered: it starts unpaused, so a trigger runs;
        # the scheduled DAGs start paused (pith_maintenance would run its missed week)
        assert paused == {"pith_ingest": 1, "pith_backfill": 0, "pith_maintenance": 1}, paused
        # while paused: the run is made, queued, and waits for the unpause
        stack.airflow("dags", "trigger", "pith_ingest", "--logical-date", "2024-01-02")
        assert [r["state"] for r in dag_runs(stack)] == ["queued"]
        stack.airflow("dags", "unpause", "pith_ingest")  # and the latest complete day runs
        post_json(
            f"http://127.0.0.1:{stack.port}/api/v2/dags/pith_ingest/dagRuns",
            {"logical_date": "2024-01-03T00:00:00Z"},
        )
        stack.airflow("dags", "trigger", "pith_ingest", "--conf", json.dumps({"day": "2024-01-04"}))
        day = "2024-01-05"
        # the backfill's harvest waits at the server until released, so the backfill is
        # unfinished for certain when the second `backfill create` comes
        held = server.hold[day] = Held()
        stack.airflow("backfill", "create", "--dag-id", "pith_ingest", "--from-date", day, "--to-date", day)
        second = airflow_cli(
            stack, "backfill", "create", "--dag-id", "pith_ingest", "--from-date", day, "--to-date", day
        )
        held.set()
        reason = (
            "airflow.models.backfill.AlreadyRunningBackfill: Another backfill is running for Dag "
            "pith_ingest. There can be only one running backfill per Dag."
        )  # the last line of the traceback, as airflow-backfills.md quotes it
        lines = [line.strip() for line in second.stderr.splitlines() if line.strip()]
        assert second.returncode != 0 and lines[-1:] == [reason], second.stderr[-2000:]
        wait_until("five runs to finish", lambda: finished(stack, 5), stack, time.monotonic() + RUN_DEADLINE)
        requests_before = len(server.requests)

        # the documented rerun of a day already run (a second --logical-date for the same
        # day is refused by Airflow: the logical date is unique per DAG)
        stack.airflow("dags", "trigger", "pith_ingest", "--conf", json.dumps({"day": "2024-01-02"}))
        wait_until("the rerun to finish", lambda: finished(stack, 6), stack, time.monotonic() + RUN_DEADLINE)

        # the same --logical-date again is Airflow's to refuse, as the docs say, and
        # makes no run; the day's own run is rerun by clearing it
        again = airflow_cli(stack, "dags", "trigger", "pith_ingest", "--logical-date", "2024-01-02")
        assert again.returncode != 0 and "UNIQUE constraint failed" in again.stderr, again.stderr[-2000:]
        with pytest.raises(urllib.error.HTTPError) as refused:
            post_json(
                f"http://127.0.0.1:{stack.port}/api/v2/dags/pith_ingest/dagRuns",
                {"logical_date": "2024-01-03T00:00:00Z"},
            )
        assert refused.value.code == 409, refused.value
        assert finished(stack, 6)  # neither made a run
        stack.airflow("tasks", "clear", "pith_ingest", "-s", "2024-01-02", "-e", "2024-01-02", "-y")
        deadline = time.monotonic() + RUN_DEADLINE
        wait_until("the cleared run to finish", lambda: finished(stack, 6), stack, deadline)
        tries = stack.query(
            "SELECT max(ti.try_number) FROM task_instance ti JOIN dag_run dr ON dr.run_id = ti.run_id "
            "AND dr.dag_id = ti.dag_id WHERE ti.task_id = 'harvest' AND dr.logical_date LIKE '2024-01-02%'"
        )
        assert tries[0][0] >= 2, tries  # harvested again
        runs = dag_runs(stack)
        assert all(r["state"] == "success" for r in runs), f"{runs}\n{run_failures(stack)}"
        assert not stack.query("SELECT run_id FROM dag_run WHERE dag_id = 'pith_maintenance'")

    expected = {
        ("scheduled", yesterday),
        ("manual", "2024-01-02"),
        ("manual", "2024-01-03"),
        ("manual", "2024-01-04"),
        ("backfill", "2024-01-05"),
    }
    assert {(r["run_type"], r["chosen"]) for r in runs} == expected, runs
    assert sorted((r["run_type"], r["chosen"]) for r in runs).count(("manual", "2024-01-02")) == 2
    for r in runs:  # each run harvested the day it was given, whatever its kind
        assert r["harvested"] == f"ingest-{r['chosen']}", runs
    asked = {q["from"] for q in server.requests if "from" in q}
    assert asked == {day for _, day in expected}, asked
    assert len(server.requests) == requests_before  # the rerun replayed the stored harvest
    store = open_store(str(store_dir))
    for _, day in expected:
        assert store.exists(f"runs/ingest-{day}/manifest.json"), day
