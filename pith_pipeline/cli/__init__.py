"""The `pith-pipeline` command.

Each capability registers its commands from its own module, so the command line
grows without one file everyone edits. `main` is the one error boundary: whatever
ends a command ends in one line on stderr, with no traceback and never a secret,
and an exit status from docs/pages/exit-codes.md:

- `PithError`: its `diagnostics()`, with its class's `exit_code`;
- `OSError`: an environmental fault (a full disk, a read-only file system, a path
  that is a file, a missing permission) raised where no module turned it into a
  `PithError`: the path and what to do, status 1;
- Ctrl-C (SIGINT) and SIGTERM: `aborted`, status 130 or 143, also when a library
  turned the interrupt into an error of its own (DuckDB's "Query interrupted");
- anything else is a bug: one line naming it, status 70 (EX_SOFTWARE), and the
  traceback when `PITH_TRACEBACK=1`.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import NoReturn


def _aborted_while_loading(signum: int, frame: FrameType | None) -> None:
    """Ctrl-C or SIGTERM before `main` runs (importing the commands takes half a
    second): nothing has started, so end at once, as `main` would."""
    term = signum == signal.SIGTERM
    sys.stderr.write("aborted (SIGTERM)\n" if term else "aborted\n")
    sys.stderr.flush()
    os._exit(128 + signum if term else 130)


def _loading_handlers() -> dict[int, object]:
    """Install `_aborted_while_loading` where the default is in place (a host program,
    such as a test runner, may have chosen its own); the previous handlers."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    defaults = {signal.SIGINT: signal.default_int_handler, signal.SIGTERM: signal.SIG_DFL}
    return {
        sig: signal.signal(sig, _aborted_while_loading)
        for sig, default in defaults.items()
        if signal.getsignal(sig) is default
    }


_loading = _loading_handlers()

import click  # noqa: E402  (after the handler: importing the commands takes time)
from click.core import ParameterSource  # noqa: E402

from pith_pipeline import __version__  # noqa: E402
from pith_pipeline._internal.error_text import describe_os_error, one_line, redact  # noqa: E402
from pith_pipeline.cli import backfill, core, ingest, signing, storage  # noqa: E402
from pith_pipeline.cli import config as config_cli  # noqa: E402
from pith_pipeline.cli import index as index_cli  # noqa: E402
from pith_pipeline.cli import log as log_cli  # noqa: E402
from pith_pipeline.cli import report as report_cli  # noqa: E402
from pith_pipeline.config import env_name, flag  # noqa: E402
from pith_pipeline.errors import PithError  # noqa: E402

for _sig, _handler in _loading.items():
    signal.signal(_sig, _handler)  # type: ignore[arg-type]

#: Exit status of a bug (an exception no module meant to raise): EX_SOFTWARE.
INTERNAL_ERROR = 70
#: Environment variable that shows a bug's traceback instead of its one line.
TRACEBACK_ENV = env_name("traceback")


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="pith-pipeline")
def cli() -> None:
    """Turn arXiv metadata into signed, content-addressed Pith bundles.

    \b
    Quick start (no network, no cloud account):
      pith-pipeline ingest --sample              # bundled real arXiv sample -> ./pith-store
      pith-pipeline verify ./pith-store           # check every published bundle
    \b
    Building blocks:
      pith-pipeline keys generate --out keys/    # a local Ed25519 key (mode 0600)
      pith-pipeline build --input papers.jsonl --store out/ --key keys/pith-private-key.json
      pith-pipeline state out/pith/<ID>/bundle.json
    """


for module in (core, ingest, storage, signing, backfill, log_cli, config_cli, index_cli, report_cli):
    module.register(cli)


@contextmanager
def _interrupts() -> Iterator[list[int]]:
    """While a command runs, SIGINT and SIGTERM raise KeyboardInterrupt (so every
    `finally` releases its lease and temporaries, as for Ctrl-C), and the signals
    received are listed: an error raised after one is the interrupt's doing."""
    received: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return

    def interrupt(signum: int, frame: FrameType | None) -> None:
        received.append(signum)
        raise KeyboardInterrupt

    previous = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield received
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _abort(received: list[int]) -> NoReturn:
    if signal.SIGTERM in received:
        click.echo("aborted (SIGTERM)", err=True)
        sys.exit(128 + signal.SIGTERM)
    click.echo("aborted", err=True)
    sys.exit(130)


def _fail(text: str, code: int) -> NoReturn:
    click.echo(redact(f"error: {one_line(text)}"), err=True)
    sys.exit(code)


def _quiet_rust_panics() -> None:
    """Turn off Rust backtraces, unless `PITH_TRACEBACK=1` asks for tracebacks.

    Why: the Delta library's worker threads panic on some I/O failures (a full disk)
    before the error reaches us, and with `RUST_BACKTRACE=1` in the environment (common
    where Rust is built) each panic printed a backtrace above the one error line. Rust
    reads the variables when it panics, so setting them before any command has started
    a Delta thread is enough; worker processes inherit them. Rust's one-line panic
    notice itself cannot be silenced from here without taking over stderr.
    """
    if not flag("traceback"):  # a value that is not 1 or 0 is one line naming it
        os.environ["RUST_BACKTRACE"] = "0"
        os.environ["RUST_LIB_BACKTRACE"] = "0"


def _wants_traceback() -> bool:
    """PITH_TRACEBACK=1, read where an error is already being reported (never raises)."""
    try:
        return flag("traceback")
    except PithError:
        return False


def _name_the_variable(exc: click.exceptions.UsageError) -> None:
    """Make a bad option value that came from the environment name its variable.

    click says "Invalid value for '--workers'" when the value came from PITH_WORKERS,
    and nobody had typed --workers: the operator must learn which variable to fix."""
    if not isinstance(exc, click.exceptions.BadParameter) or exc.param is None or exc.ctx is None:
        return
    param = exc.param
    if exc.ctx.get_parameter_source(param.name or "") is not ParameterSource.ENVIRONMENT:
        return
    names = [param.envvar] if isinstance(param.envvar, str) else list(param.envvar or ())
    for name in names:
        if os.environ.get(name):
            exc.param_hint = f"{param.get_error_hint(exc.ctx)} from {name}={os.environ[name]!r}"
            return


def main(argv: list[str] | None = None) -> None:
    with _interrupts() as received:
        try:
            _quiet_rust_panics()
            cli.main(args=argv, prog_name="pith-pipeline", standalone_mode=False)
        except (click.exceptions.Abort, KeyboardInterrupt):
            _abort(received)
        except click.exceptions.ClickException as exc:
            if received:
                _abort(received)
            if isinstance(exc, click.exceptions.UsageError):
                _name_the_variable(exc)
                exc.show()  # click's own text about the command line: no outside text
                sys.exit(exc.exit_code)
            _fail(exc.format_message(), exc.exit_code)
        except PithError as exc:
            if received:
                _abort(received)
            _fail(exc.diagnostics(), exc.exit_code)
        except OSError as exc:
            if received:
                _abort(received)
            _fail(describe_os_error(exc), 1)
        except Exception as exc:
            if received:
                _abort(received)
            if _wants_traceback():
                raise
            _fail(
                f"unexpected {type(exc).__name__}: {one_line(str(exc)) or '(no message)'} "
                f"(a bug: please report it with the command line; {TRACEBACK_ENV}=1 shows the traceback)",
                INTERNAL_ERROR,
            )
