"""Keep Rust panic reports of deltalake's worker threads off the user's terminal.

Why: when a Delta write fails mid-way (a full disk), deltalake's object store drops
its runtime while upload tasks still run, and each of them panics ("thread
'tokio-rt-worker' panicked at … Already shut down"). The write's own error reaches
Python as an exception and becomes our one-line error; the panics are noise that
Rust's default panic hook prints straight to file descriptor 2, past Python. The
Python package offers no way to set a panic hook, and RUST_BACKTRACE only trims the
backtrace, so while a Delta operation runs, fd 2 is a pipe read by a thread that
passes every line on to the real stderr except Rust panic reports (logged at debug
level instead).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

log = logging.getLogger(__name__)

_HEADER = re.compile(rb"^thread '[^']*'(?: \(\d+\))? panicked at ")
_NOTE = re.compile(rb"^note: run with `RUST_BACKTRACE=")

_lock = threading.Lock()
_depth = 0
_saved_fd = -1
_reader: threading.Thread | None = None
_write_fd = -1
_last_panic = 0.0  # time.monotonic() of the last panic line the filter kept back

#: After a failed call, how long fd 2 stays filtered with no panic report arriving:
#: the runtime's tasks panic as it is dropped, a moment after the exception
SETTLE = 0.3
#: ... and at most this long in all
SETTLE_MAX = 3.0

F = TypeVar("F", bound=Callable[..., Any])


def _filter(read_fd: int, out_fd: int) -> None:
    """Copy lines from `read_fd` to `out_fd`, leaving out Rust panic reports: a
    `thread '…' panicked at` line, its message up to a blank line or the
    `RUST_BACKTRACE` note, and the blank line before it. Never stops before EOF, so
    a writer to the pipe cannot block."""
    with os.fdopen(read_fd, "rb", buffering=0) as pipe:
        in_panic = False
        held_blank = False
        buf = b""

        def emit(data: bytes) -> None:
            with contextlib.suppress(OSError):
                os.write(out_fd, data)

        while True:
            try:
                chunk = pipe.read(65536)
            except OSError:
                chunk = b""
            if not chunk:
                break
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                if _HEADER.match(line):
                    global _last_panic
                    _last_panic = time.monotonic()
                    in_panic, held_blank = True, False
                    log.debug("deltalake: %s", line.decode("utf-8", "replace"))
                    continue
                if in_panic:
                    if _NOTE.match(line) or not line.strip():
                        in_panic = False
                    else:
                        log.debug("deltalake: %s", line.decode("utf-8", "replace"))
                    continue
                if not line.strip():
                    if held_blank:
                        emit(b"\n")
                    held_blank = True
                    continue
                if held_blank:
                    emit(b"\n")
                    held_blank = False
                emit(line + b"\n")
            # a partial line (a progress bar's \r updates) goes on at once, unless
            # it may be the start of a panic report
            if buf and not in_panic and not buf.startswith(b"thread '"[: len(buf)]) and not _maybe(buf):
                if held_blank:
                    emit(b"\n")
                    held_blank = False
                emit(buf)
                buf = b""
        if held_blank:
            emit(b"\n")
        if buf and not in_panic:
            emit(buf)


def _maybe(buf: bytes) -> bool:
    """Whether a partial line may still become a panic report's first line."""
    return buf.startswith(b"thread '")


@contextlib.contextmanager
def quiet_rust_panics() -> Iterator[None]:
    """Within the block, Rust panic reports written to fd 2 are left out; every other
    byte written there reaches stderr as before. Re-entrant and thread-safe (one
    redirection for the outermost block of all threads); where no pipe can be made
    (no descriptors left), stderr is left as it is."""
    entered = _enter()
    try:
        yield
    except BaseException:
        if entered:  # a failed Delta write: its runtime's tasks may still panic
            _settle()
        raise
    finally:
        if entered:
            _leave()


def _settle() -> None:
    """Wait until no panic report has arrived for SETTLE seconds (at most SETTLE_MAX):
    only on the failure path, where a runtime was dropped with its tasks running."""
    start = time.monotonic()
    while True:
        now = time.monotonic()
        quiet_since = max(start, _last_panic)
        if now - quiet_since >= SETTLE or now - start >= SETTLE_MAX:
            return
        time.sleep(0.05)


def _enter() -> bool:
    global _depth, _saved_fd, _reader, _write_fd
    import sys

    with _lock:
        if _depth == 0:
            try:
                read_fd, write_fd = os.pipe()
            except OSError:
                return False
            try:
                saved = os.dup(2)
            except OSError:
                os.close(read_fd)
                os.close(write_fd)
                return False
            with contextlib.suppress(Exception):
                sys.stderr.flush()
            os.dup2(write_fd, 2)
            _saved_fd, _write_fd = saved, write_fd
            _reader = threading.Thread(target=_filter, args=(read_fd, saved), name="pith-stderr", daemon=True)
            _reader.start()
        _depth += 1
        return True


def _leave() -> None:
    global _depth, _saved_fd, _reader, _write_fd
    import sys

    with _lock:
        _depth -= 1
        if _depth:
            return
        with contextlib.suppress(Exception):
            sys.stderr.flush()
        os.dup2(_saved_fd, 2)
        os.close(_write_fd)  # the reader drains what is left, then sees the end
        if _reader is not None:
            _reader.join(10)
        os.close(_saved_fd)
        _saved_fd, _write_fd, _reader = -1, -1, None


def without_rust_panics(fn: F) -> F:
    """`fn` run inside `quiet_rust_panics`."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with quiet_rust_panics():
            return fn(*args, **kwargs)

    return wrapper  # type: ignore[return-value]
