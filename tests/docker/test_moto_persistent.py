"""The no-registry S3 stand-in keeps its state across a restart, also after concurrent
writes (moto's own recorder interleaves them into lines it cannot replay)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import boto3

WRAPPER = Path(__file__).resolve().parents[2] / "docker" / "base-images" / "moto-persistent.py"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(env: dict[str, str], ready: Path, port: int) -> subprocess.Popen[bytes]:
    ready.unlink(missing_ok=True)
    proc = subprocess.Popen([sys.executable, str(WRAPPER), str(port)], env=env, stderr=subprocess.DEVNULL)
    while not ready.exists():  # no time limit of our own: pytest's timeout, if any
        assert proc.poll() is None, f"moto-persistent exited {proc.returncode}"
        time.sleep(0.2)
    return proc


def client(port: int) -> Any:
    return boto3.client(
        "s3", endpoint_url=f"http://127.0.0.1:{port}", aws_access_key_id="pith-local",
        aws_secret_access_key="not-secret", region_name="us-east-1",
    )  # fmt: skip


def listing(port: int) -> dict[str, str]:
    pages = client(port).get_paginator("list_objects_v2").paginate(Bucket="pith")
    return {o["Key"]: o["ETag"] for page in pages for o in page.get("Contents", [])}


def test_bucket_and_objects_survive_a_restart_after_concurrent_writes(tmp_path: Path) -> None:
    port, ready = free_port(), tmp_path / "ready"
    bindir = str(Path(sys.executable).parent)
    env = dict(
        os.environ,
        MOTO_RECORDER_FILEPATH=str(tmp_path / "data" / "rec.jsonl"),
        MOTO_READY_FILE=str(ready),
        PATH=f"{bindir}:{os.environ.get('PATH', '')}",
    )
    proc = start(env, ready, port)
    try:
        client(port).create_bucket(Bucket="pith")
        with ThreadPoolExecutor(16) as pool:
            list(
                pool.map(
                    lambda i: client(port).put_object(Bucket="pith", Key=f"k/{i}", Body=os.urandom(9000)),
                    range(120),
                )
            )
        client(port).delete_object(Bucket="pith", Key="k/7")
        before = listing(port)
    finally:
        proc.terminate()
        proc.wait(60)
    proc = start(env, ready, port)
    try:
        assert listing(port) == before
        assert len(before) == 119
    finally:
        proc.terminate()
        proc.wait(60)
