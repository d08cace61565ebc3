"""The `pith-pipeline` command.

Each capability registers its commands from its own module, so the command line
grows without one file everyone edits. Only `PithError` is caught: it is printed
as a diagnosis, with no traceback and never a secret.
"""

from __future__ import annotations

import sys

import click

from pith_pipeline import __version__
from pith_pipeline.cli import backfill, core, ingest, signing, storage
from pith_pipeline.cli import config as config_cli
from pith_pipeline.cli import log as log_cli
from pith_pipeline.errors import PithError


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


def main(argv: list[str] | None = None) -> None:
    try:
        cli.main(args=argv, prog_name="pith-pipeline", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.exceptions.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except PithError as exc:
        click.echo(f"error: {exc.diagnostics()}", err=True)
        sys.exit(exc.exit_code)
