"""docs/pages/pages.md's commands, as an operator runs them: the local server on a
sample store, and the S3 website configuration (on moto's server)."""

from __future__ import annotations

import json
import re
import shlex
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import boto3
import pytest
from doc_blocks import fenced_blocks
from pages_store import STORE, bodies, sample_dir_fixture

__all__ = ["sample_dir_fixture"]

PAGE = Path(__file__).resolve().parents[2] / "docs" / "pages" / "pages.md"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def test_the_local_server_command_serves_the_pages(sample_dir: Path) -> None:
    """The page's one shell command, from the directory `ingest --sample` ran in (on a
    free port instead of 8000, which another program may hold)."""
    (block,) = (body for _info, body in fenced_blocks(PAGE.read_text(), "sh"))
    argv = shlex.split(block.strip())
    assert argv[:3] == ["python3", "-m", "http.server"] and argv[-1] == "8000"
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, *argv[1:-1], str(port)],
        cwd=sample_dir,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        body = bodies(sample_dir / STORE)[0]
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                home = urllib.request.urlopen(f"{base}/", timeout=10)
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise
                time.sleep(0.1)
        assert b'id="pith-lookup"' in home.read()
        page = urllib.request.urlopen(f"{base}/pith/{body}", timeout=10)  # no slash: redirected
        assert page.url == f"{base}/pith/{body}/"
        assert page.headers["Content-Type"].startswith("text/html")
        assert b'data-pith-bundle="bundle.json"' in page.read()
    finally:
        proc.terminate()
        proc.wait(30)


@pytest.mark.parametrize("prefix", ["store", ""])
def test_the_s3_website_configuration_runs_as_written(s3_bucket: str, prefix: str) -> None:
    (block,) = (body for _info, body in fenced_blocks(PAGE.read_text(), "python"))
    code, n = re.subn(r'^BUCKET = "[^"]*"', f'BUCKET = "{s3_bucket}"', block, count=1, flags=re.M)
    code, m = re.subn(r'^STORE = "[^"]*"', f'STORE = "{prefix}"', code, count=1, flags=re.M)
    assert n == m == 1, "the block sets BUCKET and STORE on lines of their own"
    exec(compile(code, str(PAGE), "exec"), {"__name__": "pages_md"})
    s3 = boto3.client("s3")
    assert s3.get_bucket_website(Bucket=s3_bucket)["IndexDocument"] == {"Suffix": "index.html"}
    policy = json.loads(s3.get_bucket_policy(Bucket=s3_bucket)["Policy"])
    (statement,) = policy["Statement"]
    resources = statement["Resource"]
    root = f"arn:aws:s3:::{s3_bucket}/{prefix + '/' if prefix else ''}"
    assert f"{root}pith/*" in resources and f"{root}index.html" in resources
    assert all(r.startswith(root) for r in resources)
    for private in ("runs/", "quarantine/", "leases/", "index/", "raw/", "log/pending/"):
        assert not [r for r in resources if r.startswith(root + private)], private
