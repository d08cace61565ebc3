"""`benchmarks/build_bench.py ingest` runs the real command end to end and reports both phases."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_ingest_benchmark_reports_publishing_and_indexing(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    args = ["ingest", "--n", "20", "--workers", "1", "--no-fsync", "--step", "10"]
    r = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks/build_bench.py"), *args, "--workdir", str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    rows = [line.split() for line in r.stdout.splitlines()]
    row = next(f for f in rows if f[:1] == ["20"] and f[1] != "of")  # not a progress line
    assert float(row[1]) >= 0 and float(row[5]) >= 0  # publish s, index s: both phases timed
    assert "built 20" in r.stdout and "run manifest: runs/" in r.stdout


def test_the_build_benchmark_runs_its_three_paths_and_they_write_the_same_bytes(tmp_path: Path) -> None:
    """The build mode drives a `Publisher` on a store of its own (`DigestStore`): a change
    to the `Store` interface or the publisher's must keep it running, and (a) and (b)
    must write byte-identical objects."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    args = ["build", "--n", "30", "--reference-n", "10", "--rounds", "1"]
    r = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks/build_bench.py"), *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert "output bytes identical to the reference: build yes, publish yes" in r.stdout
