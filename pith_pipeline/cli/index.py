"""`pith-pipeline index …`: the index tables' data dictionary, for catalogs."""

from __future__ import annotations

import click


def register(group: click.Group) -> None:
    group.add_command(index)


@click.group()
def index() -> None:
    """The index tables (Delta Lake under <store>/index/).

    \b
      pith-pipeline index schema                       # JSON: tables, columns, types, comments
      pith-pipeline index schema --format athena --store s3://bucket/pith-store
      pith-pipeline index schema --format dbt > models/pith_sources.yml
    """


@index.command()
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["json", "athena", "dbt", "markdown"]),
    default="json",
    show_default=True,
    help="json; athena (Athena/Glue CREATE EXTERNAL TABLE DDL); dbt (sources.yml); markdown (the docs table)",
)
@click.option("--store", "store_url", help="the store's URL: the tables' location (required for athena)")
@click.option("--database", default="pith", show_default=True, help="Athena/Glue database, dbt source name")
def schema(fmt: str, store_url: str | None, database: str) -> None:
    """Print the tables' data dictionary: names, descriptions, columns, types, NOT NULL keys.

    The same descriptions are in the Delta tables themselves (table name, description,
    each column's `comment`). Reads no store.
    """
    from pith_pipeline.index.dictionary import render  # lazy: pyarrow, 180 ms at every start

    if not database.replace("_", "").isalnum():
        raise click.BadParameter(f"{database!r} is not a plain SQL name", param_hint="--database")
    try:
        text = render(fmt, store_url=store_url, database=database)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    click.echo(text, nl=False)
