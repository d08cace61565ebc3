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

from pith_pipeline import __version__  # noqa: E402
from pith_pipeline._internal.error_text import describe_os_error, one_line, redact  # noqa: E402
from pith_pipeline.cli import backfill, core, ingest, signing, storage  # noqa: E402
from pith_pipeline.cli import config as config_cli  # noqa: E402
from pith_pipeline.cli import log as log_cli  # noqa: E402
from pith_pipeline.config import env_name, from_env  # noqa: E402
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


for module in (core, ingest, storage, signing, backfill, log_cli, config_cli):
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


def main(argv: list[str] | None = None) -> None:
    with _interrupts() as received:
        try:
            cli.main(args=argv, prog_name="pith-pipeline", standalone_mode=False)
        except (click.exceptions.Abort, KeyboardInterrupt):
            _abort(received)
        except click.exceptions.ClickException as exc:
            if received:
                _abort(received)
            if isinstance(exc, click.exceptions.UsageError):
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
            if from_env("traceback") == "1":
                raise
            _fail(
                f"unexpected {type(exc).__name__}: {one_line(str(exc)) or '(no message)'} "
                f"(a bug: please report it with the command line; {TRACEBACK_ENV}=1 shows the traceback)",
                INTERNAL_ERROR,
            )
