"""A real Airflow for DAG tests: a temporary AIRFLOW_HOME with a migrated SQLite DB.

Airflow reads its configuration once, when first imported, so the session fixture
sets the environment *before* anything here imports `airflow`. Each xdist worker
is its own process with its own `tmp_path_factory` directory, so workers never
share a database. Airflow missing is an error, not a skip: CI installs it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
DAGS = REPO / "dags"
POOL = "arxiv_oai"


def airflow_env(home: Path) -> dict[str, str]:
    """The settings a test Airflow runs with (no examples, SQLite, our dags/)."""
    return {
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__LOGGING__LOGGING_LEVEL": "WARNING",
        "AIRFLOW__CORE__ALLOWED_DESERIALIZATION_CLASSES_REGEXP": "pith_pipeline\\..*",
        # Retries happen within the test, without waiting minutes.
        "PITH_RETRY_DELAY_SECONDS": "0",
        "PITH_RETRIES": "2",
        "PITH_INGEST_START": "2020-01-01",
    }


@pytest.fixture(scope="session", name="airflow_env")
def airflow_env_fixture() -> Any:
    """`airflow_env(home)`: the environment of a test Airflow in `home`."""
    return airflow_env


def run_airflow(args: list[str], env: dict[str, str], timeout: float = 300) -> str:
    proc = subprocess.run([sys.executable, "-m", "airflow", *args], env={**os.environ, **env},
                          capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise AssertionError(f"airflow {' '.join(args)} failed ({proc.returncode}):\n"
                             f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc.stdout


@pytest.fixture(scope="session")
def airflow_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A migrated SQLite metadata DB and the `arxiv_oai` pool, for this test process.

    The environment stays set for the whole session: Airflow cannot be re-configured
    after import.
    """
    home = tmp_path_factory.mktemp("airflow-home")
    env = airflow_env(home)
    if "airflow.configuration" in sys.modules:
        from airflow.configuration import conf

        if conf.get("core", "dags_folder") != str(DAGS):
            raise AssertionError("airflow was imported before the airflow_home fixture set "
                                 "its environment; import airflow only inside tests")
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        run_airflow(["db", "migrate"], env)
        run_airflow(["pools", "set", POOL, "1", "arXiv OAI-PMH: one request at a time"], env)
        yield home
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture(scope="session")
def dagbag(airflow_home: Path) -> Any:
    """Every DAG in dags/, parsed the way the dag-processor parses them."""
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(DAGS))


# --- a local OAI-PMH server serving arXiv's recorded arXivRaw records ----------------

OAI_DATA = REPO / "tests" / "data" / "oai"
OAI_NS = "http://www.openarchives.org/OAI/2.0/"


def recorded_records() -> dict[str, list[bytes]]:
    """Two consecutive days of real arXivRaw records, keyed by datestamp.

    2024-01-02: the nine records arXiv listed for that day (three recorded pages).
    2024-01-03: the two records of a later recorded day (a new version of
    2401.00001, and 1909.11150 again), re-dated so the windows are consecutive.
    """
    from lxml import etree

    days: dict[str, list[bytes]] = {}
    sources = [(f"listrecords-2024-01-01-p{n}.xml", "2024-01-02") for n in (1, 2, 3)]
    sources.append(("listrecords-2024-01-10-p1.xml", "2024-01-03"))
    for name, day in sources:
        root = etree.parse(str(OAI_DATA / name)).getroot()
        for rec in root.iter(f"{{{OAI_NS}}}record"):
            rec.find(f"{{{OAI_NS}}}header/{{{OAI_NS}}}datestamp").text = day
            days.setdefault(day, []).append(etree.tostring(rec))
    return days


class OAIServer:
    """`ListRecords` with from/until (inclusive days) and resumption tokens, page size 4."""

    PAGE = 4

    def __init__(self, days: dict[str, list[bytes]]) -> None:
        self.days = days
        self.requests: list[dict[str, str]] = []

    def listing(self, from_: str, until: str) -> list[bytes]:
        return [r for day in sorted(self.days) if from_ <= day <= until for r in self.days[day]]

    def respond(self, params: dict[str, str]) -> bytes:
        from datetime import UTC, datetime

        self.requests.append(params)
        now = datetime.now(tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        head = (f'<?xml version="1.0" encoding="UTF-8"?>\n<OAI-PMH xmlns="{OAI_NS}">'
                f"<responseDate>{now}</responseDate>"
                '<request verb="ListRecords">http://127.0.0.1/oai</request>')
        if params.get("verb") != "ListRecords":
            return (head + '<error code="badVerb">only ListRecords here</error>'
                    "</OAI-PMH>").encode()
        if "resumptionToken" in params:
            from_, until, offset = params["resumptionToken"].split("|")
            start = int(offset)
        else:
            from_, until, start = params["from"], params["until"], 0
        records = self.listing(from_, until)
        if not records:
            return (head + '<error code="noRecordsMatch">empty list</error></OAI-PMH>').encode()
        page = records[start:start + self.PAGE]
        nxt = start + self.PAGE
        token = (f'<resumptionToken cursor="{start}" completeListSize="{len(records)}">'
                 f"{from_}|{until}|{nxt}</resumptionToken>" if nxt < len(records) else
                 f'<resumptionToken cursor="{start}" completeListSize="{len(records)}"/>')
        return (head.encode() + b"<ListRecords>" + b"".join(page) + token.encode()
                + b"</ListRecords></OAI-PMH>")


@pytest.fixture
def oai_server() -> Iterator[tuple[str, OAIServer]]:
    """(base URL, server) on 127.0.0.1 and a free port; stopped after the test."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    from urllib.parse import parse_qsl, urlsplit

    oai = OAIServer(recorded_records())

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = oai.respond(dict(parse_qsl(urlsplit(self.path).query)))
            self.send_response(200)
            self.send_header("Content-Type", "text/xml; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/oai", oai
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


@pytest.fixture
def pith_env(tmp_path: Path, oai_server: tuple[str, OAIServer], s3_store_url: str,
             monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """PITH_* settings for a run: moto's S3, the local OAI server, a local key."""
    from pith_pipeline.signing.local import generate_key

    priv, _pub, _doc = generate_key(tmp_path / "keys", key_id="pith-test-key")
    env = {"PITH_STORE": s3_store_url, "PITH_SIGNER": f"file:{priv}",
           "PITH_OAI_URL": oai_server[0], "PITH_OAI_MIN_INTERVAL": "0",
           "PITH_BASE_URL": "https://pith.test.example"}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    return env
