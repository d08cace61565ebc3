"""Run `pith-pipeline ARGS...` in the test's own process, through the real entry point
(`cli.main`, with its error boundary and exit codes), capturing what it prints: faster
than a subprocess, and what a user sees, not click's test runner's view."""

from __future__ import annotations

from typing import NamedTuple

import pytest


class CliResult(NamedTuple):
    code: int
    out: str
    err: str


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> CliResult:
    """Exit code, standard output and standard error of one command."""
    from pith_pipeline.cli import main

    capsys.readouterr()
    try:
        main(list(args))
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    cap = capsys.readouterr()
    return CliResult(code, cap.out, cap.err)
