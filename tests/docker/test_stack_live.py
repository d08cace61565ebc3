"""The docker/ compose stack, run for real: it builds, starts, signs, publishes, restarts
and still signs with the same key.

Steps (each an operator's step, against the unmodified docker/compose.yaml):
1. a Docker daemon (started here as root when none runs; stopped at the end);
2. images (CI: Debian/PyPI-built bases through the stack's build arguments);
3. `docker compose up --build --wait` with a docker/.env written by docker/make-env.sh;
4. the documented first run: `pith_backfill` on the bundled sample (a snapshot file in
   the image), offline: 30 signed bundles that verify;
5. `pith_ingest` for one day (a backfill run) against a loopback OAI-PMH server
   inside the scheduler container, signing with the stack's key file;
6. every published bundle verifies, pinned to the key in the keys volume;
7. `docker compose restart`: every service healthy again, airflow-init exits 0, the
   bucket (every key and its bytes) and the key file unchanged;
8. `down` + `up` (volumes kept): the next day is signed by the same key, the key
   file is unchanged, still 0600 and owned by AIRFLOW_UID;
9. `down --volumes`, and the daemon this test started is stopped.

Opt-in (PITH_DOCKER_STACK=1, as .ci/run sets); see tests/docker/conftest.py.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker_stack as st
import pytest

pytestmark = pytest.mark.docker_stack

OAI_DATA = st.REPO / "tests" / "data" / "oai"
OAI_NS = "http://www.openarchives.org/OAI/2.0/"
SCHEDULER = "airflow-scheduler"
KEY_FILE = "/opt/pith/keys/pith-private-key.json"
PUBLIC_KEY_FILE = "/opt/pith/keys/pith-signing-key.json"


def recorded_days() -> dict[str, list[str]]:
    """Real arXivRaw records: nine for 2024-01-02 and two (re-dated) for 2024-01-03."""
    from lxml import etree

    days: dict[str, list[str]] = {}
    sources = [(f"listrecords-2024-01-01-p{n}.xml", "2024-01-02") for n in (1, 2, 3)]
    sources.append(("listrecords-2024-01-10-p1.xml", "2024-01-03"))
    for name, day in sources:
        root = etree.parse(str(OAI_DATA / name)).getroot()
        for rec in root.iter(f"{{{OAI_NS}}}record"):
            rec.find(f"{{{OAI_NS}}}header/{{{OAI_NS}}}datestamp").text = day
            days.setdefault(day, []).append(etree.tostring(rec).decode())
    return days


def start_oai(stack: st.Stack, records: Path, port: int) -> None:
    """The loopback OAI server in the scheduler container (where LocalExecutor runs tasks).

    Called again while waiting for a run: if the container was restarted (its
    restart policy at work), the server is started again; the harvest task retries.
    """
    probe = f"import urllib.request as u; u.urlopen('http://127.0.0.1:{port}/oai?verb=Identify', timeout=5)"
    if _answers(stack, probe):
        return
    stack("cp", str(st.HERE / "oai_loopback.py"), f"{SCHEDULER}:/tmp/oai_loopback.py")
    stack("cp", str(records), f"{SCHEDULER}:/tmp/oai_records.json")
    stack(
        "exec", "-d", "-T", SCHEDULER,
        "python3", "/tmp/oai_loopback.py", str(port), "/tmp/oai_records.json", "/tmp/oai_requests.log",
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while not _answers(stack, probe):
        if time.monotonic() > deadline:
            raise st.StackError("the loopback OAI server did not start in the scheduler container")
        time.sleep(1)


def _answers(stack: st.Stack, probe: str) -> bool:
    return stack("exec", "-T", SCHEDULER, "python3", "-c", probe, check=False).returncode == 0


class Api:
    """Airflow's REST API on the published port, logged in as the stack's admin user.

    (The airflow CLI would do too, but each call imports all of Airflow: up to a
    minute on a busy CI host. Logging in also checks the generated password works.)
    """

    def __init__(self, values: dict[str, str]) -> None:
        self.base = f"http://127.0.0.1:{values['AIRFLOW_PORT']}"
        login = {"username": values["PITH_ADMIN_USER"], "password": values["AIRFLOW_ADMIN_PASSWORD"]}
        self.token = str(self.call("POST", "/auth/token", login, auth=False)["access_token"])

    def call(self, method: str, path: str, body: Any = None, *, auth: bool = True) -> Any:
        headers = {"Content-Type": "application/json"}
        if auth:
            headers["Authorization"] = f"Bearer {self.token}"
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.base + path, data=data, headers=headers, method=method)
        with urllib.request.urlopen(req, timeout=60) as resp:
            return json.loads(resp.read() or b"null")


def run_window(stack: st.Stack, values: dict[str, str], day: str, keep_up: Any) -> dict[str, Any]:
    """A one-day backfill of pith_ingest, as `airflow backfill create` makes it; waits for its run."""
    api = Api(values)
    deadline = time.monotonic() + 300
    while True:  # the dag-processor parses the DAG shortly after start
        try:
            api.call("PATCH", "/api/v2/dags/pith_ingest", {"is_paused": False})
            break
        except (TimeoutError, urllib.error.URLError) as exc:
            not_yet = not isinstance(exc, urllib.error.HTTPError) or exc.code == 404
            if not not_yet or time.monotonic() > deadline:
                raise
            time.sleep(3)
    stamp = f"{day}T00:00:00Z"
    request = {"dag_id": "pith_ingest", "from_date": stamp, "to_date": stamp, "max_active_runs": 1}
    while True:  # 409: Airflow allows one unfinished backfill per DAG (see wait_complete)
        try:
            backfill = api.call("POST", "/api/v2/backfills", request)
            break
        except urllib.error.HTTPError as exc:
            if exc.code != 409 or time.monotonic() > deadline:
                raise
            keep_up()
            time.sleep(5)
    deadline = time.monotonic() + 900
    while True:
        try:
            runs = api.call("GET", "/api/v2/dags/pith_ingest/dagRuns?limit=100")["dag_runs"]
        except (TimeoutError, urllib.error.URLError):  # a busy api-server: ask again
            runs = []
        mine = [r for r in runs if r["run_type"] == "backfill" and str(r["logical_date"]).startswith(day)]
        if mine and mine[0]["state"] in ("success", "failed"):
            if mine[0]["state"] != "success":
                logs = stack.exec(
                    SCHEDULER, "bash", "-c",
                    "for f in $(find /opt/airflow/logs -name '*.log' -newer /tmp/oai_records.json); "
                    "do echo \"== $f\"; tail -n 30 \"$f\"; done",
                    check=False,
                )  # fmt: skip
                raise AssertionError(f"pith_ingest {day} ended {mine[0]['state']}:\n{logs[-12000:]}")
            wait_complete(api, int(backfill["id"]), deadline)
            return dict(mine[0])
        if time.monotonic() > deadline:
            raise AssertionError(f"pith_ingest {day} did not finish in time: {mine}")
        keep_up()
        time.sleep(5)


#: The documented first run (docs/pages/docker.md, "First run, offline").
SAMPLE_CONF = {
    "source": "snapshot",
    "snapshot_path": "/opt/pith/sample/arxiv-sample.jsonl",
    "from": "1990-01-01",
    "until": "2027-01-01",
}


def trigger_and_wait(
    stack: st.Stack,
    values: dict[str, str],
    dag_id: str,
    conf: dict[str, Any],
) -> tuple[str, float]:
    """`airflow dags trigger DAG --conf ...`, through the REST API; waits for success and
    returns the run id and the seconds from trigger to success (reported, not asserted)."""
    api = Api(values)
    deadline = time.monotonic() + 600
    run_id, started = trigger(api, dag_id, conf, deadline)
    wait_run(stack, api, dag_id, run_id, conf, deadline)
    return run_id, time.monotonic() - started


def trigger(api: Api, dag_id: str, conf: dict[str, Any], deadline: float) -> tuple[str, float]:
    """POST a run of DAG_ID with CONF (retried until the dag-processor has parsed it)."""
    while True:  # the dag-processor parses the DAG shortly after start
        try:
            started = time.monotonic()
            run = api.call("POST", f"/api/v2/dags/{dag_id}/dagRuns", {"logical_date": None, "conf": conf})
            return str(run["dag_run_id"]), started
        except urllib.error.HTTPError as exc:
            if exc.code != 404 or time.monotonic() > deadline:
                raise
            time.sleep(3)


def wait_run(
    stack: st.Stack,
    api: Api,
    dag_id: str,
    dag_run_id: str,
    conf: dict[str, Any],
    deadline: float,
) -> None:
    """Wait for the run's success; on failure or timeout, fail with its task logs."""
    run_id = urllib.parse.quote(dag_run_id, safe="")
    while True:
        try:
            state = api.call("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}")["state"]
        except (TimeoutError, urllib.error.URLError):  # a busy api-server: ask again
            state = "running"
        if state == "success":
            return
        if state == "failed" or time.monotonic() > deadline:
            logs = stack.exec(
                SCHEDULER, "bash", "-c",
                "for f in $(find /opt/airflow/logs -path '*" + dag_id + "*' -name '*.log'); "
                "do echo \"== $f\"; tail -n 30 \"$f\"; done",
                check=False,
            )  # fmt: skip
            raise AssertionError(f"{dag_id} {conf} ended {state}:\n{logs[-12000:]}")
        time.sleep(3)


def build_instances(api: Api, dag_run_id: str) -> list[dict[str, Any]]:
    """The pith_backfill run's task instances (mapped ones each on their own)."""
    quoted = urllib.parse.quote(dag_run_id, safe="")
    path = f"/api/v2/dags/pith_backfill/dagRuns/{quoted}/taskInstances?limit=100"
    try:
        return list(api.call("GET", path)["task_instances"])
    except (TimeoutError, urllib.error.URLError):  # a busy api-server: ask again
        return []


def steer_builds_to_both(
    daemon: st.Daemon, workers: dict[str, str], api: Api, dag_run_id: str, deadline: float
) -> None:
    """Make the run's build tasks land on both workers, whatever Celery's timing.

    Left alone, one worker can take every build: with four short builds, a worker that
    finishes one before the scheduler's next loop takes the next (a CI run showed it).
    So, as soon as one worker runs a build, it is frozen (`docker pause`: it holds one
    task at a time, acked late, so it cannot hold a second), the next build must go to
    the other worker, and once that one has started the first is thawed. The freeze is
    seconds long, well under the lease TTL (120 s) and Airflow's heartbeat timeout.
    """

    def started_on() -> set[str]:
        return {
            str(ti["hostname"])
            for ti in build_instances(api, dag_run_id)
            if ti["task_id"] == "build" and ti.get("hostname") and ti["state"] in ("running", "success")
        }

    while not (first := started_on()):
        assert time.monotonic() < deadline, "no build task started"
        time.sleep(0.3)
    frozen = workers[sorted(first)[0]]  # WORKERS: Airflow hostname -> container id
    st.run([*daemon.docker, "pause", frozen], env=daemon.env)
    try:
        while len(started_on()) < 2:
            assert time.monotonic() < deadline, f"no build started on the other worker ({first})"
            time.sleep(0.3)
    finally:
        st.run([*daemon.docker, "unpause", frozen], env=daemon.env)


def wait_complete(api: Api, backfill_id: int, deadline: float) -> None:
    """Wait until the scheduler marks the backfill complete.

    A backfill's run can succeed several scheduler loops before the backfill itself
    gets `completed_at`; until then Airflow answers 409 to a new backfill of the same
    DAG, so the next window (or an operator's next `backfill create`) must wait for it.
    """
    while True:
        try:
            if api.call("GET", f"/api/v2/backfills/{backfill_id}").get("completed_at"):
                return
        except (TimeoutError, urllib.error.URLError):  # a busy api-server: ask again
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"backfill {backfill_id} was not marked complete in time")
        time.sleep(3)


def s3_client(values: dict[str, str]) -> Any:
    import boto3

    return boto3.session.Session().client(
        "s3",
        endpoint_url=f"http://127.0.0.1:{values['S3_PORT']}",
        aws_access_key_id=values["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=values["AWS_SECRET_ACCESS_KEY"],
        region_name="us-east-1",
    )


def published(values: dict[str, str]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The store's key document and every bundle, read over S3 from the host."""
    s3 = s3_client(values)
    keys = json.loads(s3.get_object(Bucket="pith", Key="store/pith-signing-key.json")["Body"].read())
    bundles = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket="pith", Prefix="store/pith/"):
        for obj in page.get("Contents", []):
            if obj["Key"].endswith("/bundle.json"):
                bundles.append(json.loads(s3.get_object(Bucket="pith", Key=obj["Key"])["Body"].read()))
    return keys, bundles


def head_key(doc: dict[str, Any]) -> dict[str, Any]:
    return dict(doc.get("keys", [doc])[0])


def verify_all(bundles: list[dict[str, Any]], fingerprint: str) -> None:
    from pith_pipeline.core.verify import verify_bundle

    assert bundles, "no bundles were published"
    for b in bundles:
        report = verify_bundle(b, pinned_fingerprint=fingerprint, source=b.get("pith_number", "?"))
        bad = [f"{c.name}: {c.detail}" for c in report.checks if c.status == "fail"]
        assert report.ok, (b.get("pith_number"), bad)


def key_file_facts(stack: st.Stack) -> tuple[str, str]:
    """(mode and owner, sha256) of the private key file in the keys volume."""
    facts = stack.exec(SCHEDULER, "stat", "-c", "%a %u", KEY_FILE).strip()
    digest = stack.exec(SCHEDULER, "sha256sum", KEY_FILE).split()[0]
    return facts, digest


def bucket_state(values: dict[str, str]) -> dict[str, str]:
    """Every object in the bucket: key -> sha256 of its bytes."""
    import hashlib

    s3 = s3_client(values)
    state = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket="pith"):
        for obj in page.get("Contents", []):
            body = s3.get_object(Bucket="pith", Key=obj["Key"])["Body"].read()
            state[obj["Key"]] = hashlib.sha256(body).hexdigest()
    return state


def assert_one_record_created_per_version(values: dict[str, str]) -> None:
    """Every bundle's events (store/events/<body>/) hold exactly one record_created."""
    s3 = s3_client(values)
    bodies = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket="pith", Prefix="store/pith/"):
        for obj in page.get("Contents", []):
            parts = obj["Key"].split("/")
            if len(parts) == 4 and parts[3] == "bundle.json":
                bodies.append(parts[2])
    assert bodies, "no bundles"
    for body in bodies:
        created = 0
        for page in s3.get_paginator("list_objects_v2").paginate(
            Bucket="pith", Prefix=f"store/events/{body}/"
        ):
            for obj in page.get("Contents", []):
                event = json.loads(s3.get_object(Bucket="pith", Key=obj["Key"])["Body"].read())
                created += event.get("event_type") == "record_created"
        assert created == 1, (body, created)


def quiesce(values: dict[str, str]) -> None:
    """Pause pith_ingest (unpaused, it schedules the latest day on its own) and wait until
    no run of any DAG is queued or running: nothing writes to the bucket until unpaused."""
    api = Api(values)
    api.call("PATCH", "/api/v2/dags/pith_ingest", {"is_paused": True})
    deadline = time.monotonic() + 900
    while True:
        busy = []
        for dag_id in ("pith_ingest", "pith_backfill", "pith_maintenance"):
            try:
                runs = api.call("GET", f"/api/v2/dags/{dag_id}/dagRuns?limit=100")["dag_runs"]
            except urllib.error.HTTPError as exc:
                if exc.code == 404:
                    continue
                raise
            busy += [(dag_id, r["dag_run_id"]) for r in runs if r["state"] in ("queued", "running")]
        if not busy:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"runs still active: {busy}")
        time.sleep(5)


def compose_ps(stack: st.Stack) -> list[dict[str, Any]]:
    out = stack("ps", "-a", "--format", "json", timeout=120).stdout.decode().strip()
    if out.startswith("["):  # older compose: one JSON array
        return list(json.loads(out))
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def restart_until_healthy(stack: st.Stack) -> None:
    """`docker compose restart`, as an operator types it; then every long-running
    service must come back healthy and airflow-init must run again and exit 0."""
    stack("restart", timeout=900)
    deadline = time.monotonic() + 900
    while True:
        rows = compose_ps(stack)
        init = [r for r in rows if r["Service"] == "airflow-init"]
        others = [r for r in rows if r["Service"] != "airflow-init"]
        if init and init[0]["State"] == "exited" and int(init[0].get("ExitCode", 0)) != 0:
            logs = stack("logs", "--no-color", "airflow-init", timeout=120, check=False).stdout.decode()
            raise AssertionError(f"airflow-init exited {init[0]['ExitCode']} after restart:\n{logs[-4000:]}")
        if init and init[0]["State"] == "exited" and all(r.get("Health") == "healthy" for r in others):
            return
        if time.monotonic() > deadline:
            states = [(r["Service"], r["State"], r.get("Health")) for r in rows]
            raise AssertionError(f"not healthy after restart: {states}")
        time.sleep(5)


@dataclass
class Host:
    """The daemon and the images, shared by every live test of this module."""

    daemon: st.Daemon
    work: Path
    official: bool

    def stack(self, name: str, overrides: dict[str, str]) -> tuple[st.Stack, dict[str, str]]:
        """A fresh compose project: make-env.sh (--local-images unless official) + overrides."""
        files = [st.DOCKER_DIR / "compose.yaml"]
        if not self.official:
            files.append(st.NO_REGISTRY)
        env_file = self.work / name / ".env"
        env_file.parent.mkdir()
        base = {
            "AIRFLOW_PORT": str(st.free_port()),
            "S3_PORT": str(st.free_port()),
            "PITH_SNAPSHOT_DIR": str(self.work / name / "snapshots"),
        }
        values = st.write_env(env_file, base | overrides, local_images=not self.official)
        if not self.official:  # the files name nothing the daemon must already hold
            assert st.unbuilt_images(files, values, set(st.ci_images())) == []
        project = f"pith-ci-{name}-{uuid.uuid4().hex[:8]}"
        return st.Stack(self.daemon, env_file, project, files, st.compose_command(self.daemon.env)), values


@pytest.fixture(scope="module")
def host() -> Iterator[Host]:
    """A daemon (its data root empty unless PITH_CI_DOCKER_CACHE keeps one) with the CI
    images built once for both stacks; everything removed at the end."""
    work = st.tmp_workdir()
    official = os.environ.get("PITH_STACK_IMAGES") == "official"
    try:
        with st.docker_daemon(work) as daemon:
            if not official:
                started = time.monotonic()
                st.build_ci_images(daemon, work)
                print(f"\nimages: {time.monotonic() - started:.0f}s")
            yield Host(daemon, work, official)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def test_stack_signs_publishes_restarts_and_keeps_its_key(host: Host) -> None:
    oai_port = 18080
    records = host.work / "oai_records.json"
    records.write_text(json.dumps(recorded_days()))
    stack, values = host.stack(
        "local",
        {
            "COMPOSE_PROFILES": "local-s3",
            "PITH_OAI_URL": f"http://127.0.0.1:{oai_port}/oai",
            "PITH_OAI_MIN_INTERVAL": "0.2",
            "PITH_INGEST_START": "2024-01-01",
            "PITH_RETRIES": "1",
            "PITH_RETRY_DELAY_SECONDS": "5",
        },
    )
    try:
        stack.up()

        # the first run an operator makes: the bundled sample, offline
        _, took = trigger_and_wait(stack, values, "pith_backfill", SAMPLE_CONF)
        print(f"\nfirst run (bundled sample): signed bundles {took:.0f}s after the trigger")
        doc, sample_bundles = published(values)
        # the sample's 30 papers, one bundle each, signed with the stack's key
        assert len({b["pith_number"] for b in sample_bundles}) == 30
        verify_all(sample_bundles, head_key(doc)["fingerprint_sha256_hex"])

        def oai() -> None:
            start_oai(stack, records, oai_port)

        oai()
        run_window(stack, values, "2024-01-02", oai)

        facts, key_digest = key_file_facts(stack)
        assert facts == f"600 {values['AIRFLOW_UID']}"
        local_public = json.loads(stack.exec(SCHEDULER, "cat", PUBLIC_KEY_FILE))
        doc, bundles = published(values)
        assert head_key(doc)["public_key_hex"] == local_public["public_key_hex"]
        first_key = head_key(doc)
        verify_all(bundles, first_key["fingerprint_sha256_hex"])
        first_count = len(bundles)

        # `docker compose restart`: healthy again, bucket and key as they were
        quiesce(values)
        before = bucket_state(values)
        restart_until_healthy(stack)
        assert bucket_state(values) == before, "the bucket changed across a restart"
        assert key_file_facts(stack) == (facts, key_digest), "the signing key changed on restart"

        stack.down(volumes=False)
        stack.up()
        oai()
        run_window(stack, values, "2024-01-03", oai)

        assert key_file_facts(stack) == (facts, key_digest), "the signing key changed on restart"
        doc, bundles = published(values)
        assert [k["key_id"] for k in doc.get("keys", [doc])] == [first_key["key_id"]]
        assert head_key(doc)["public_key_hex"] == first_key["public_key_hex"]
        verify_all(bundles, first_key["fingerprint_sha256_hex"])
        assert bundles and first_count
    finally:
        stack.down(volumes=True)


def test_celery_two_workers_share_a_snapshot_backfill(host: Host) -> None:
    """The celery profile as a user scales it: Redis, CeleryExecutor, two workers (one
    task at a time each). The sample's snapshot backfill, its builds steered onto both
    workers (steer_builds_to_both): both publish into one store, which verifies with
    one record_created per paper version."""
    stack, values = host.stack(
        "celery",
        {
            "COMPOSE_PROFILES": "local-s3,celery",
            "AIRFLOW_EXECUTOR": "CeleryExecutor",
            "AIRFLOW_WORKER_CONCURRENCY": "1",
        },
    )
    try:
        stack.up("--scale", "airflow-worker=2")
        # the name each worker records on the task instances it runs (Airflow's hostname)
        name = "from airflow.utils.net import get_hostname; print(get_hostname())"
        docker, env = host.daemon.docker, host.daemon.env
        workers = {}  # Airflow hostname -> container id
        for cid in stack("ps", "-q", "airflow-worker").stdout.decode().split():
            proc = st.run([*docker, "exec", cid, "python3", "-c", name], env=env, timeout=300)
            workers[proc.stdout.decode().strip()] = cid
        assert len(workers) == 2, workers
        api = Api(values)
        deadline = time.monotonic() + 600
        run_id, _ = trigger(api, "pith_backfill", SAMPLE_CONF, deadline)
        steer_builds_to_both(host.daemon, workers, api, run_id, deadline)
        wait_run(stack, api, "pith_backfill", run_id, SAMPLE_CONF, deadline)
        tis = build_instances(api, run_id)
        builds = [ti for ti in tis if ti["task_id"] == "build"]
        assert len(builds) >= 2 and all(ti["state"] == "success" for ti in builds), builds
        assert {ti["hostname"] for ti in builds} == set(workers), (builds, workers)

        # the whole store verifies (`pith-pipeline verify` on PITH_STORE), and each paper
        # version has exactly one record_created although two workers published
        verify = stack("exec", "-T", SCHEDULER, "python3", "-m", "pith_pipeline", "verify", "-q", check=False)
        assert verify.returncode == 0, (verify.stdout + verify.stderr).decode()[-4000:]
        assert_one_record_created_per_version(values)
    finally:
        stack.down(volumes=True)
