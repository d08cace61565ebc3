"""Our worker processes die with their parent, even when busy in C code (issue 25 item 8).

`kill -9` of a scheduler during a backfill left 32 processes running: the LocalExecutor's
workers, Airflow's own. Ours are the `ParallelPublisher` pools of `build` and `ingest
--workers` (the Airflow tasks start none). Their watchdog thread (`getppid()` polling)
cannot run while the worker's main thread holds the GIL in C code (a catastrophic
regular expression here; a huge lxml parse or a long signing call in a build), so on
Linux the kernel is asked to kill them with their parent as well (PR_SET_PDEATHSIG).
The test of a real build killed with `kill -9` is tests/test_parallel.py
`test_workers_exit_when_the_parent_is_killed`.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")

PARENT = textwrap.dedent(
    """
    import multiprocessing, os, sys, time
    from concurrent.futures import ProcessPoolExecutor
    from pith_pipeline import parallel_worker

    def hold_the_gil() -> None:
        import re
        sys.stdout.write(f"{os.getpid()}\\n"); sys.stdout.flush()
        re.match(r"(a+)+$", "a" * 64 + "b")  # hours in C, never releasing the GIL

    if __name__ == "__main__":
        pool = ProcessPoolExecutor(
            max_workers=1,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=parallel_worker.die_with_parent,
            initargs=(os.getpid(), True),
        )
        pool.submit(hold_the_gil)
        time.sleep(3600)
    """
)


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_a_worker_busy_in_c_code_dies_with_its_killed_parent(tmp_path: Path) -> None:
    script = tmp_path / "parent.py"
    script.write_text(PARENT, encoding="utf-8")
    out = tmp_path / "out.txt"
    with out.open("wb") as sink:
        parent = subprocess.Popen([sys.executable, str(script)], stdout=sink, stderr=subprocess.STDOUT)
    worker: psutil.Process | None = None
    try:
        deadline = time.monotonic() + 120
        while not out.read_text().strip().isdigit():
            assert parent.poll() is None, out.read_text()
            assert time.monotonic() < deadline, "the worker never started its task"
            time.sleep(0.1)
        worker = psutil.Process(int(out.read_text().strip()))
        time.sleep(1)  # the worker is inside the regular expression, holding the GIL
        assert _alive(worker)
        parent.kill()
        parent.wait()
        gone_by = time.monotonic() + 60  # a liveness bound, not a speed test
        while _alive(worker) and time.monotonic() < gone_by:
            time.sleep(0.2)
        assert not _alive(worker), f"worker {worker.pid} outlived its killed parent"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        if worker is not None and _alive(worker):  # only the process this test started
            worker.kill()
