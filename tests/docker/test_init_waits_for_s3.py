"""airflow-init after `docker compose restart`: compose restarts every container at
once, without waiting for health, so init may ask S3 before it answers again. It must
wait for the endpoint (up to PITH_INIT_S3_WAIT seconds), not exit 1 with
EndpointConnectionError while the other services report healthy."""

from __future__ import annotations

import importlib.util
import socket
import sys
import threading
from pathlib import Path
from types import ModuleType

import pytest
from moto.server import ThreadedMotoServer

DOCKER = Path(__file__).resolve().parents[2] / "docker"


def load_init() -> ModuleType:
    spec = importlib.util.spec_from_file_location("pith_init_s3wait", DOCKER / "pith_init.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def s3_env(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    port = free_port()
    env = {
        "AWS_ENDPOINT_URL_S3": f"http://127.0.0.1:{port}",
        "AWS_ACCESS_KEY_ID": "pith-local",
        "AWS_SECRET_ACCESS_KEY": "not-a-real-secret-0123456789",
        "AWS_DEFAULT_REGION": "us-east-1",
        "PITH_STORE": "s3://pith/store",
    }
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    return env | {"port": str(port)}


def test_init_waits_for_an_s3_endpoint_that_comes_up_late(s3_env: dict[str, str]) -> None:
    """The server starts only once init has been refused a connection at least once."""
    init = load_init()
    refused = threading.Event()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=int(s3_env["port"]), verbose=False)

    def pause(seconds: float) -> None:  # init's pause between tries: now start S3
        if not refused.is_set():
            refused.set()
            server.start()

    init._pause = pause
    try:
        line = init.ensure_bucket("s3://pith/store", s3_env | {"PITH_INIT_S3_WAIT": "120"})
    finally:
        if refused.is_set():
            server.stop()
    assert refused.is_set(), "init never met a refused connection"
    assert line == "store s3://pith/store (bucket pith created)"


def test_init_gives_up_in_one_line_naming_the_endpoint(
    s3_env: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    init = load_init()
    init._pause = lambda _s: None
    env = s3_env | {"PITH_INIT_S3_WAIT": "0"}
    with pytest.raises(init.InitError) as err:
        init.ensure_bucket("s3://pith/store", env)
    msg = str(err.value)
    assert "\n" not in msg
    assert s3_env["AWS_ENDPOINT_URL_S3"] in msg and "PITH_INIT_S3_WAIT" in msg
    assert s3_env["AWS_SECRET_ACCESS_KEY"] not in msg
