"""`pith-pipeline report`: the store's figures as one offline HTML page (`pith_pipeline.report`)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import click

from pith_pipeline.cli.options import existing_store, store_option
from pith_pipeline.report import report_html

DEFAULT_OUT = "pith-report.html"


def register(group: click.Group) -> None:
    """Add this module's commands to the `pith-pipeline` group."""
    group.add_command(report)


def _write(path: Path, text: str) -> None:
    """Write `text` to `path` whole or not at all (a temporary file renamed over it)."""
    directory = path.parent if str(path.parent) else Path(".")
    if not directory.is_dir():
        raise click.BadParameter(f"{path}: the directory {directory} does not exist", param_hint="--out")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@click.command()
@store_option()
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=DEFAULT_OUT,
    show_default=True,
    metavar="FILE",
    help="The HTML file to write (replaced whole); '-' prints the page.",
)
def report(store: str, out: Path) -> None:
    """Write one static HTML page of the store's figures, readable offline.

    \b
    Papers per month and per day, category mix (primary archive and category),
    licences and versions per paper, from the index tables read as `query` reads
    them (a paper is the latest version of an arXiv id: superseded_by IS NULL);
    runs and their counts (runs/*/manifest.json); quarantine reasons
    (quarantine/*.jsonl). Charts are inline SVG: the page fetches nothing.
    \b
    Examples:
      pith-pipeline report                       # ./pith-store -> ./pith-report.html
      pith-pipeline report --store s3://bucket/pith --out /tmp/pith.html
      pith-pipeline report --out - > page.html
    \b
    Each figure's numbers are in the page too (a table under "numbers"). Needs
    matplotlib: pip install 'pith-pipeline[report]'. The weekly maintenance DAG
    writes the same page into the store as report/index.html.
    """
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise click.ClickException(
            "report: matplotlib is not installed; install it with: pip install 'pith-pipeline[report]'"
        ) from None

    page = report_html(existing_store(store))
    if str(out) == "-":
        click.echo(page, nl=False)
        return
    _write(out, page)
    click.echo(f"report written to {out}")
