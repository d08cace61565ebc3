"""The command line's one error boundary: no fault an operator meets ends in a traceback.

Issue 16 item 16 and its sweep: a read-only store, a full disk, a path that is a
file, a damaged index, a Ctrl-C or SIGTERM at any moment. Each ends in one line on
stderr naming what and where, with an exit status from docs/pages/exit-codes.md,
and no secret from the environment is ever printed.
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

import click
import pytest

from pith_pipeline.cli import cli as cli_group
from pith_pipeline.cli import main

ROOT = Path(__file__).resolve().parents[2]


class Result(NamedTuple):
    code: int
    out: str
    err: str


def run(capsys: pytest.CaptureFixture[str], *args: str) -> Result:
    capsys.readouterr()
    try:
        main(list(args))
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    cap = capsys.readouterr()
    return Result(code, cap.out, cap.err)


def one_error_line(result: Result) -> str:
    lines = [line for line in result.err.splitlines() if line.strip()]
    assert "Traceback" not in result.err, result.err
    assert len(lines) == 1, result.err
    return lines[0]


@pytest.fixture
def failing_command() -> Iterator[Callable[[Callable[[], None]], str]]:
    """Register a throw-away command whose body is the given function."""
    names: list[str] = []

    def add(body: Callable[[], None]) -> str:
        name = f"fault-{len(names)}"

        @cli_group.command(name)
        def _cmd() -> None:
            body()

        names.append(name)
        return name

    yield add
    for name in names:
        cli_group.commands.pop(name, None)


# -- environmental faults (OSError) -------------------------------------------------


@pytest.mark.parametrize(
    ("err", "words"),
    [
        (errno.ENOSPC, "disk is full"),
        (errno.EROFS, "read-only"),
        (errno.EACCES, "permission denied"),
        (errno.ENOTDIR, "Not a directory"),
    ],
)
def test_an_os_error_is_one_line_naming_the_path(
    capsys: pytest.CaptureFixture[str], failing_command, err: int, words: str
) -> None:  # type: ignore[no-untyped-def]
    def body() -> None:
        raise OSError(err, os.strerror(err), "/srv/pith-store/runs/x/manifest.json")

    result = run(capsys, failing_command(body))
    line = one_error_line(result)
    assert result.code == 1
    assert line.startswith("error: /srv/pith-store/runs/x/manifest.json: ")
    assert words in line


def test_a_multi_line_os_error_from_the_delta_library_is_one_line(
    capsys: pytest.CaptureFixture[str], failing_command
) -> None:  # type: ignore[no-untyped-def]
    def body() -> None:  # how deltalake (Rust) reports a full disk: no errno, several lines
        raise OSError(
            "Generic LocalFileSystem error\n          \x1b[31m↳\x1b[0m Unable to copy data to file\n"
            "           \x1b[31m↳\x1b[0m No space left on device (os error 28)"
        )

    line = one_error_line(run(capsys, failing_command(body)))
    assert "Unable to copy data to file" in line and "\x1b" not in line
    assert "disk is full" in line


def test_keys_generate_under_a_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    afile = tmp_path / "afile"
    afile.write_text("x")
    result = run(capsys, "keys", "generate", "--out", str(afile / "sub"))
    assert result.code == 1
    assert str(afile / "sub") in one_error_line(result)


# -- bugs: still one line, a distinct status, and the traceback on request -----------


def test_an_unexpected_error_is_one_line_with_its_own_status(
    capsys: pytest.CaptureFixture[str], failing_command, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.delenv("PITH_TRACEBACK", raising=False)

    def body() -> None:
        raise KeyError("records")

    result = run(capsys, failing_command(body))
    line = one_error_line(result)
    assert result.code == 70
    assert "KeyError" in line and "PITH_TRACEBACK=1" in line


def test_pith_traceback_shows_the_traceback(
    capsys: pytest.CaptureFixture[str], failing_command, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("PITH_TRACEBACK", "1")

    def body() -> None:
        raise KeyError("records")

    with pytest.raises(KeyError):
        main([failing_command(body)])


def test_secrets_of_the_environment_never_reach_an_error_line(
    capsys: pytest.CaptureFixture[str], failing_command, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    secret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
    token = "FwoGZXIvYXdzEXAMPLESESSIONTOKEN0123456789"
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    monkeypatch.setenv("AWS_SESSION_TOKEN", token)
    bodies: list[Callable[[], None]] = [
        lambda: (_ for _ in ()).throw(RuntimeError(f"signature mismatch for {secret}")),
        lambda: (_ for _ in ()).throw(OSError("GET https://AKIAX:hunter2pass@s3.example.org/b failed")),
        lambda: (_ for _ in ()).throw(click.ClickException(f"token {token} rejected")),
    ]
    for body in bodies:
        result = run(capsys, failing_command(body))
        text = result.out + result.err
        assert secret not in text and token not in text, text
        assert "hunter2pass" not in text, text
        one_error_line(result)


# -- Ctrl-C and SIGTERM ---------------------------------------------------------------


def test_an_error_caused_by_ctrl_c_is_reported_as_aborted(
    capsys: pytest.CaptureFixture[str], failing_command
) -> None:  # type: ignore[no-untyped-def]
    """DuckDB turns the KeyboardInterrupt of a Ctrl-C into RuntimeError("Query
    interrupted"); other libraries do the same with their own errors."""

    def body() -> None:
        try:
            os.kill(os.getpid(), signal.SIGINT)
            signal.sigtimedwait([], 0)  # let the handler run
            for _ in range(1000):
                pass
        except KeyboardInterrupt:
            raise RuntimeError("Query interrupted") from None

    result = run(capsys, failing_command(body))
    assert result.code == 130
    assert one_error_line(result) == "aborted"


def test_sigterm_ends_the_run_like_ctrl_c_with_status_143(
    capsys: pytest.CaptureFixture[str], failing_command
) -> None:  # type: ignore[no-untyped-def]
    cleaned: list[bool] = []

    class Sentinel(BaseException):
        pass

    def outside(signum: int, frame: object) -> None:
        raise Sentinel  # the default action would end pytest itself

    def body() -> None:
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(1000):
                pass
        finally:
            cleaned.append(True)  # leases and temporaries are released on the way out

    previous = signal.signal(signal.SIGTERM, outside)
    try:
        result = run(capsys, failing_command(body))
        assert signal.getsignal(signal.SIGTERM) is outside  # restored after the command
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert result.code == 143
    assert one_error_line(result) == "aborted (SIGTERM)"
    assert cleaned == [True]


def test_ctrl_c_while_the_command_line_is_still_loading_is_not_a_traceback(tmp_path: Path) -> None:
    """The first half second of every command imports its modules; a Ctrl-C there came
    before `main` could catch anything. Here the interrupt arrives at a fixed point of
    that import (when `pith_pipeline.parallel` is first imported)."""
    script = (
        "import os, signal, sys, importlib.abc\n"
        "class Hook(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'pith_pipeline.parallel':\n"
        "            sys.meta_path.remove(self)\n"
        "            os.kill(os.getpid(), signal.SIGINT)\n"
        "        return None\n"
        "sys.meta_path.insert(0, Hook())\n"
        "from pith_pipeline.cli import main\n"
        "main(['--help'])\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=60)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 130, proc.stderr
    assert proc.stderr.strip() == "aborted"
