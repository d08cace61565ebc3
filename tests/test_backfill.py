"""`pith-pipeline backfill`: the DAGs' windows without Airflow, resumable after a kill."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from pith_pipeline.cli import cli
from pith_pipeline.core.canonical_json import loads
from pith_pipeline.core.verify import verify_bundle
from pith_pipeline.storage.local import LocalStore

SAMPLE = Path(__file__).parent / "data" / "arxiv-sample.jsonl"


@pytest.fixture
def key(tmp_path: Path) -> Path:
    from pith_pipeline.signing.local import generate_key

    return generate_key(tmp_path / "keys", key_id="pith-test-key")[0]


def bundles(store: LocalStore) -> list[str]:
    return [k for k in store.list("pith/") if k.endswith("/bundle.json") and k.count("/") == 2]


def assert_no_duplicates(store: LocalStore) -> None:
    """One record_created per subject, one pointer entry per Pith number, all verify."""
    for key in bundles(store):
        body = key.split("/")[1]
        events = [loads(store.get(k) or b"") for k in store.list(f"events/{body}/")]
        assert Counter(e["event_type"] for e in events)["record_created"] == 1, body
        assert verify_bundle(loads(store.get(key) or b"")).ok, key
    for key in store.list("arxiv/"):
        pointer = loads(store.get(key) or b"")
        numbers = [r["pith_number"] for r in pointer["records"]]
        assert len(numbers) == len(set(numbers)), key


def test_snapshot_backfill_publishes_every_record_in_range(
    tmp_path: Path, key: Path, monkeypatch: Any
) -> None:
    monkeypatch.setenv("PITH_SNAPSHOT_CHUNK_BYTES", "8000")  # several chunks
    out = tmp_path / "store"
    res = CliRunner().invoke(
        cli,
        [
            "backfill",
            "--from",
            "1990-01-01",
            "--until",
            "2030-01-01",
            "--source",
            "snapshot",
            "--snapshot",
            str(SAMPLE),
            "--store",
            str(out),
            "--signer",
            f"file:{key}",
            "--no-progress",
        ],
        catch_exceptions=False,
    )
    assert res.exit_code == 0, res.output
    store = LocalStore(out)
    lines = [ln for ln in SAMPLE.read_text().splitlines() if ln.strip()]
    manifest = loads(store.get("runs/snapshot-1990-01-01--2030-01-01/manifest.json") or b"")
    assert manifest["counts"]["fetched"] == len(lines)
    assert len(bundles(store)) == manifest["counts"]["built"] > 0
    assert list(store.list("staging/")) == list(store.list("runs/backfill/")) == []
    assert_no_duplicates(store)
    again = CliRunner().invoke(
        cli,
        [
            "backfill",
            "--from",
            "1990-01-01",
            "--until",
            "2030-01-01",
            "--source",
            "snapshot",
            "--snapshot",
            str(SAMPLE),
            "--store",
            str(out),
            "--signer",
            f"file:{key}",
            "--no-progress",
        ],
    )
    assert again.exit_code == 0 and "0/0 windows" in again.output


def test_snapshot_window_selects_by_date(tmp_path: Path, key: Path) -> None:
    """Only records whose latest change falls in [from, until) are published."""
    from pith_pipeline.sources.jsonl import iter_jsonl
    from pith_pipeline.sources.snapshot_ranges import record_datestamp

    inside = [
        r
        for r in iter_jsonl(SAMPLE)
        if not hasattr(r, "reason") and "2000-01-01" <= record_datestamp(r).isoformat() < "2010-01-01"
    ]
    out = tmp_path / "store"
    res = CliRunner().invoke(
        cli,
        [
            "backfill",
            "--from",
            "2000-01-01",
            "--until",
            "2010-01-01",
            "--source",
            "snapshot",
            "--snapshot",
            str(SAMPLE),
            "--store",
            str(out),
            "--signer",
            f"file:{key}",
        ],
    )
    assert res.exit_code == 0, res.output
    assert 0 < len(inside) < 30
    assert len(bundles(LocalStore(out))) == len(inside)


def test_bad_parameters_are_named(tmp_path: Path, key: Path) -> None:
    res = CliRunner().invoke(
        cli,
        [
            "backfill",
            "--from",
            "2024-02-30",
            "--until",
            "2024-03-01",
            "--store",
            str(tmp_path),
            "--signer",
            f"file:{key}",
        ],
    )
    assert res.exit_code != 0 and "from" in str(res.exception or res.output)
    res = CliRunner().invoke(
        cli,
        [
            "backfill",
            "--from",
            "2024-03-02",
            "--until",
            "2024-03-01",
            "--store",
            str(tmp_path),
            "--signer",
            f"file:{key}",
        ],
    )
    assert res.exit_code != 0 and "until" in str(res.exception or res.output)


def test_oai_backfill_resumes_after_a_kill(tmp_path: Path, key: Path, oai_server: Any) -> None:
    """Killed (SIGKILL) while harvesting day 2: the re-run skips day 1 and finishes day 2."""
    import threading

    url, server = oai_server
    server.hold["2024-01-03"] = threading.Event()
    server.arrived["2024-01-03"] = threading.Event()
    out = tmp_path / "store"
    env = {
        **os.environ,
        "PITH_OAI_URL": url,
        "PITH_OAI_MIN_INTERVAL": "0",
        "PITH_STORE": str(out),
        "PITH_SIGNER": f"file:{key}",
    }
    args = [
        sys.executable,
        "-m",
        "pith_pipeline",
        "backfill",
        "--from",
        "2024-01-02",
        "--until",
        "2024-01-04",
        "--no-progress",
    ]
    proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert server.arrived["2024-01-03"].wait(60), proc.stderr.read() if proc.stderr else ""
        store = LocalStore(out)
        assert store.exists("runs/ingest-2024-01-02/manifest.json")
        assert not store.exists("runs/ingest-2024-01-03/manifest.json")
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(30) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        server.hold["2024-01-03"].set()
    day1_requests = [r for r in server.requests if r.get("from") == "2024-01-02"]
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "1/1 windows" in done.stdout
    assert [r for r in server.requests if r.get("from") == "2024-01-02"] == day1_requests
    assert store.exists("runs/ingest-2024-01-03/manifest.json")
    pointer = loads(store.get("arxiv/2401.00001.json") or b"")
    assert [r["version"] for r in pointer["records"]] == [1, 2]
    assert_no_duplicates(store)


def _gaps(times: list[float]) -> list[float]:
    ordered = sorted(times)
    return [b - a for a, b in itertools.pairwise(ordered)]


def _backfill(url: str, store: Path, key: Path, interval: str) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "PITH_OAI_URL": url,
        "PITH_OAI_MIN_INTERVAL": interval,
        "PITH_STORE": str(store),
        "PITH_SIGNER": f"file:{key}",
    }
    args = ["backfill", "--from", "2024-01-02", "--until", "2024-01-05", "--no-progress"]
    return subprocess.Popen(
        [sys.executable, "-m", "pith_pipeline", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def test_the_request_interval_holds_across_windows_and_processes(
    tmp_path: Path, key: Path, oai_server: Any
) -> None:
    """Each window opens its own client, and two backfills run at once: every request
    to the endpoint still keeps the interval (before, windows went 0.1 s apart)."""
    url, server = oai_server
    interval = 0.6
    procs = [_backfill(url, tmp_path / f"store-{i}", key, str(interval)) for i in range(2)]
    for p in procs:
        _out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err.decode()
    windows = {r.get("from") for r in server.requests if "from" in r}
    assert len(windows) == 3 and len(server.times) >= 6
    # measured where the server sees them; the gate spaces end-of-response to request
    assert min(_gaps(server.times)) >= interval * 0.9, _gaps(server.times)
