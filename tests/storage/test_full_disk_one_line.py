"""A disk that fills during the index write ends in one line on stderr (issue 26):
deltalake's worker threads panic ("tokio-rt-worker panicked … Already shut down")
when a write fails mid-way; those reports must not reach the user."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from testclock import StepClock

from pith_pipeline.core.keys import Ed25519Signer
from pith_pipeline.publish import BuildConfig, Publisher
from pith_pipeline.sources.jsonl import iter_jsonl
from pith_pipeline.storage.factory import open_store

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def small_fs(tmp_path: Path) -> object:
    """A 4 MiB tmpfs (needs root, as the container and CI run)."""
    mnt = tmp_path / "fs"
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small file system needs root")
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mnt)], check=True)
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


@pytest.mark.parametrize("leave", [60_000, 30_000])
def test_a_full_disk_during_the_index_write_is_one_line(
    small_fs: Path, tmp_path: Path, sample_lines: list[str], leave: int
) -> None:
    store_dir = small_fs / "store"
    src = tmp_path / "in.jsonl"
    src.write_text("\n".join(sample_lines[:20]) + "\n", encoding="utf-8")
    Publisher(
        open_store(str(store_dir)),
        Ed25519Signer(bytes(range(32)), "t"),
        BuildConfig(),
        clock=StepClock(datetime(2026, 7, 1, tzinfo=UTC)),
    ).publish(iter_jsonl(src))
    st = os.statvfs(small_fs)
    with open(small_fs / "filler", "wb") as fh:  # leaves about `leave` bytes free
        fh.write(b"\0" * max(0, st.f_bavail * st.f_frsize - leave))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("RUST_BACKTRACE", None)
    done = subprocess.run(
        [sys.executable, "-m", "pith_pipeline", "reindex", "--store", str(store_dir)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode != 0
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("error: ") and "disk is full" in lines[0]
    shutil.rmtree(store_dir, ignore_errors=True)
