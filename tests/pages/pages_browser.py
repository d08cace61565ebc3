"""Serve a store on 127.0.0.1 and drive headless Chromium over the DevTools protocol.

A module the page tests import by name. Chromium is Debian's (`.ci/run` installs
it); a machine without it fails the tests that need it, never skips them.

Why the DevTools protocol and not `--dump-dom`: the look-up box navigates to the
record's page after a fetch, and `--dump-dom` either dumps before the fetch ends or,
with `--virtual-time-budget`, never returns after a navigation. The protocol runs
over a pipe (`--remote-debugging-pipe`: file descriptors 3 and 4, JSON messages
ended by NUL), so no port is opened and nothing beyond the standard library is used.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from browser import chromium

#: How long one page may take to settle before the test fails (a bound, not a measure).
SETTLE_SECONDS = 90.0


_MOVE_FDS = (
    "import os, sys\n"
    "os.dup2(int(sys.argv[1]), 3); os.dup2(int(sys.argv[2]), 4)\n"
    "os.close(int(sys.argv[1])); os.close(int(sys.argv[2]))\n"
    "os.execv(sys.argv[3], sys.argv[3:])\n"
)


def _above_4(fd: int) -> int:
    """`fd` moved to a number above 4, so moving the child's ends to 3 and 4 clobbers none."""
    import fcntl

    if fd > 4:
        return fd
    high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
    os.close(fd)
    return high


class ProtocolError(AssertionError):
    """Chromium refused a command (e.g. an evaluation while its page navigates away)."""


class Browser:
    """One headless Chromium, spoken to over its DevTools pipe."""

    def __init__(self, profile: Path) -> None:
        to_child_r, self._w = (_above_4(fd) for fd in os.pipe())
        self._r, from_child_w = (_above_4(fd) for fd in os.pipe())
        # the child reads commands on fd 3 and answers on fd 4 (a small exec moves them)
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-c",
                _MOVE_FDS,
                str(to_child_r),
                str(from_child_w),
                chromium(),
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
                f"--user-data-dir={profile}",
                "--remote-debugging-pipe",
                "about:blank",
            ],
            pass_fds=(to_child_r, from_child_w),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(to_child_r)
        os.close(from_child_w)
        self._buf = b""
        self._id = 0
        self._session: str | None = None

    def _send(self, method: str, params: dict[str, Any] | None = None, *, session: bool = True) -> Any:
        self._id += 1
        msg: dict[str, Any] = {"id": self._id, "method": method, "params": params or {}}
        if session and self._session is not None:
            msg["sessionId"] = self._session
        os.write(self._w, json.dumps(msg).encode() + b"\0")
        while True:
            while b"\0" not in self._buf:
                chunk = os.read(self._r, 1 << 16)
                if not chunk:
                    raise AssertionError(f"Chromium closed its DevTools pipe (exit {self.proc.poll()})")
                self._buf += chunk
            raw, self._buf = self._buf.split(b"\0", 1)
            reply = json.loads(raw)
            if reply.get("id") == self._id:
                if "error" in reply:
                    raise ProtocolError(f"{method}: {reply['error']}")
                return reply.get("result", {})

    def open(self, url: str) -> None:
        """A new tab at `url`; later calls act in it."""
        target = self._send("Target.createTarget", {"url": "about:blank"}, session=False)["targetId"]
        self._session = self._send(
            "Target.attachToTarget", {"targetId": target, "flatten": True}, session=False
        )["sessionId"]
        self._send("Page.enable")
        self._send("Page.navigate", {"url": url})

    def evaluate(self, expression: str) -> Any:
        got = self._send(
            "Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True}
        )
        return got.get("result", {}).get("value")

    def wait_for(self, expression: str) -> Any:
        """Poll `expression` in the page until it is truthy; its value."""
        deadline = time.monotonic() + SETTLE_SECONDS
        while True:
            try:
                value = self.evaluate(expression)
            except ProtocolError:  # the page navigated meanwhile: ask the new one
                value = None
            if value:
                return value
            if time.monotonic() > deadline:
                state = self.evaluate("location.href + ' ' + document.readyState")
                raise AssertionError(f"never true in the page: {expression} (page: {state})")
            time.sleep(0.1)

    def close(self) -> None:
        with contextlib.suppress(AssertionError, OSError):
            self._send("Browser.close", session=False)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._w)
        os.close(self._r)


@contextlib.contextmanager
def browser(profile: Path) -> Iterator[Browser]:
    b = Browser(profile)
    try:
        yield b
    finally:
        b.close()
