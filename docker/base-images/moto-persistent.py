"""moto's S3 server with its state kept across restarts (the CI stand-in for SeaweedFS).

moto keeps objects in memory. Its recorder appends every request to
MOTO_RECORDER_FILEPATH (on the s3 service's volume); on start this wrapper replays that
recording into the fresh server before it reports ready, so a restarted stack finds its
bucket and every object as they were. Ready = the file READY_FILE exists (the compose
healthcheck tests it); it is removed first, so a restarted container is not ready early.
Replaying requests in order gives the same objects, bytes and ETags (conditional writes
replay with the same outcome); version ids are new, and a multipart upload (the store
makes none) would not replay, since its upload id changes.

usage: moto-persistent.py PORT
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

READY_FILE = Path(os.environ.get("MOTO_READY_FILE", "/tmp/moto-ready"))


def main(port: int) -> int:
    READY_FILE.unlink(missing_ok=True)
    recording = Path(os.environ.get("MOTO_RECORDER_FILEPATH", "moto_recording"))
    recording.parent.mkdir(parents=True, exist_ok=True)
    recording.touch()
    env = dict(os.environ, MOTO_ENABLE_RECORDING="True", MOTO_RECORDER_FILEPATH=str(recording))
    serve = [sys.executable, __file__, "--serve", str(port)]
    server = subprocess.Popen(serve, env=env)
    # stop (SIGTERM, SIGINT) reaches the server, which then exits and so does this wrapper
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, _frame: server.send_signal(signum))
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while True:
        try:
            urllib.request.urlopen(f"{base}/moto-api/", timeout=5).close()
            break
        except OSError:
            if server.poll() is not None or time.monotonic() > deadline:
                print(f"moto-persistent: moto_server did not start on port {port}", file=sys.stderr)
                server.kill()
                return 1
            time.sleep(0.3)
    if recording.stat().st_size:
        req = urllib.request.Request(f"{base}/moto-api/recorder/replay-recording", method="POST", data=b"")
        urllib.request.urlopen(req, timeout=600).close()
        print(f"moto-persistent: replayed {recording}", flush=True)
    READY_FILE.touch()
    return server.wait()


def serve(port: int) -> None:
    """moto_server, with each request recorded whole under a lock: moto's recorder
    appends an entry and its newline in two writes, which concurrent requests (the
    server is threaded) interleave into lines that cannot be replayed."""
    import threading

    from moto.moto_api._internal.recorder import models
    from moto.server import main as moto_main

    lock = threading.Lock()
    record = models.Recorder._record_request

    def locked(self: object, request: object, body: bytes | None = None) -> None:
        with lock:
            record(self, request, body)  # type: ignore[arg-type]

    models.Recorder._record_request = locked  # type: ignore[method-assign,assignment]
    moto_main(["-H", "0.0.0.0", "-p", str(port)])


if __name__ == "__main__":
    if sys.argv[1] == "--serve":
        serve(int(sys.argv[2]))
        sys.exit(0)
    sys.exit(main(int(sys.argv[1])))
