"""A failed Delta write's runtime panics can reach fd 2 after the write's exception:
deltalake's upload tasks panic ("Already shut down") once the runtime is dropped,
which may be a moment after Python saw the error. Those late reports are still kept
off the user's terminal, so a full disk stays a one-line error."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent(
    """
    import os, sys, threading, time
    from pith_pipeline._internal.rust_panics import without_rust_panics

    def late_panic():
        time.sleep(0.1)  # after the call below has raised
        os.write(2, b"thread 'tokio-rt-worker' (5856) panicked at buffered.rs:369:41:\\n"
                    b"Already shut down\\n\\n")

    @without_rust_panics
    def write():
        threading.Thread(target=late_panic).start()
        raise OSError("No space left on device")

    try:
        write()
    except OSError as exc:
        time.sleep(0.5)  # the process goes on (it reports the error, then exits)
        print(f"error: {exc}", file=sys.stderr)
    """
)


def test_a_panic_report_after_the_failed_call_stays_off_stderr() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == ["error: No space left on device"], done.stderr
