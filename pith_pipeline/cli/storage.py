"""Store and index commands: query, status, rebuild, reindex, compact.

pyarrow and DuckDB are imported inside the commands, so `pith-pipeline --help`
stays fast and the other commands never load them.
"""

from __future__ import annotations

import json
from typing import Any

import click
from tqdm import tqdm

from pith_pipeline.audit import audit_store
from pith_pipeline.cli.options import (
    FiniteFloat,
    command_settings,
    command_signer,
    existing_store,
    lease_notice,
    signer_option,
    site_options,
    store_option,
    wait_option,
)
from pith_pipeline.errors import IncompleteRunError
from pith_pipeline.publish import rebuild as do_rebuild
from pith_pipeline.storage.lease import writer_lease


def register(group: click.Group) -> None:
    """Add this module's commands to the `pith-pipeline` group."""
    for command in (query, status, rebuild, reindex, compact):
        group.add_command(command)


@click.command()
@click.argument("sql")
@store_option()
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "csv", "json"]),
    default="table",
    show_default=True,
    help="Output format.",
)
@click.option(
    "--as-of",
    "as_of",
    metavar="RUN_ID",
    default=None,
    help="Read the table versions that run's manifest names (a consistent snapshot).",
)
def query(sql: str, store: str, fmt: str, as_of: str | None) -> None:
    """Run SQL (DuckDB) over the index's Delta tables: records, events, aliases,
    and papers (the latest version of each paper).

    \b
    Examples:
      pith-pipeline query "SELECT count(*) FROM records"
      pith-pipeline query --store s3://bucket/pith \\
        "SELECT submitted_month, license, count(*) AS n FROM records
         WHERE primary_cat = 'cs.LG' AND submitted_month >= '2015-01'
         GROUP BY ALL ORDER BY ALL"
      pith-pipeline query \\
        "SELECT pith_number FROM aliases WHERE alias = 'arxiv:1909.11150'"
    \b
    Filters on submitted_month (records), created_month (events) and alias_kind
    (aliases) skip whole files. Columns are listed in docs/pages/analysts.md.
    """
    import csv
    import io

    # lazy: pith_pipeline.index, pyarrow, 88 ms at import
    from pith_pipeline.index import format_table, run_query

    result = run_query(existing_store(store), sql, as_of=as_of)
    if fmt == "table":
        click.echo(format_table(result))
    elif fmt == "csv":
        buf = io.StringIO()
        writer = csv.writer(buf)
        writer.writerow(result.columns)
        writer.writerows(result.rows)
        click.echo(buf.getvalue(), nl=False)
    else:
        rows = [dict(zip(result.columns, r, strict=True)) for r in result.rows]
        click.echo(json.dumps(rows, default=str, ensure_ascii=False, indent=1))


@click.command()
@store_option()
@click.option(
    "--deep",
    is_flag=True,
    help="Also list every bundle and event object, report bundles not indexed, and "
    "audit every stored object as `verify` does (exit 1 when any is damaged).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def status(store: str, deep: bool, as_json: bool) -> None:
    """Summarise what a store has published: records, events, runs, quarantine, index.

    With --deep, every event object, bundle, state, .well-known copy and arXiv
    pointer is checked too; each damaged object is one line naming its path, and
    the exit status is 1 when there is any.

    \b
    Example:
      pith-pipeline status --deep
    """
    import sys

    # lazy: pith_pipeline.index, pyarrow, 581 ms at import
    from pith_pipeline.index import format_status

    # lazy: pith_pipeline.index, pyarrow, 140 ms at import
    from pith_pipeline.index import status as get_status

    opened = existing_store(store)
    st = get_status(opened, deep=deep)
    damaged: list[str] = []
    if deep:
        damaged = [f.line(opened.url) for f in audit_store(opened)]
        st["damaged_objects"] = len(damaged)
        st["damaged"] = damaged[:MAX_LISTED]
    if as_json:
        click.echo(json.dumps(st, indent=1, default=str))
    else:
        click.echo(format_status(st))
        if deep:
            click.echo(f"integrity: {len(damaged)} damaged stored objects (`verify` lists them all)")
            for line in damaged[:MAX_LISTED]:
                click.echo(f"  FAIL {line}")
    if damaged:
        sys.exit(1)


#: Damaged objects `status --deep` lists (the count is always exact).
MAX_LISTED = 50


@click.command()
@store_option()
@signer_option(dest="key_path")
@wait_option
@site_options
def rebuild(
    store: str, key_path: str, lease_wait: float, base_url: str, registry_name: str, signer_id: str
) -> None:
    """Re-derive bundles, states, pages and arXiv pointers from the event store, then every index.

    The event store (events/<ID>/<sha256>.json) is the source of truth; bundles,
    states, .well-known copies, record pages, arXiv pointers and indexes are derived
    and can be rebuilt from it at any time. A bundle that already says what its events
    say, signed by this key, is left as it is (so running it twice changes nothing the
    second time); its page is written only when missing or not what it renders to.
    Papers whose stored objects fail their checks are named and left as they are;
    the command then exits 3.

    \b
    Example:
      pith-pipeline rebuild --signer pith-keys/pith-private-key.json
    """
    # lazy: pith_pipeline.index, pyarrow, 136 ms at import
    from pith_pipeline.runs.run import REINDEX, Run

    failures: list[str] = []
    unchanged: list[str] = []
    pointers: list[str] = []
    pages: list[str] = []
    with Run.open(
        command_settings(),
        command="rebuild",
        store=existing_store(store),
        signer=command_signer(key_path),
        lease_wait=lease_wait,
        notice=lease_notice,
        ending=REINDEX,  # every index, under the leases held from the start
        index_progress=lambda: tqdm(desc="index", unit="bundle", disable=None),
        workers=1,
    ) as run:
        n = 0
        with tqdm(desc="bundles", unit="rec", disable=None) as bar:
            for _subject in do_rebuild(
                run.store,
                run.signer,
                publisher=run.publisher,
                failures=failures,
                unchanged=unchanged,
                pointers=pointers,
                pages=pages,
            ):
                n += 1
                bar.update(1)
        click.echo(
            f"bundles from events: {n} rebuilt, {len(unchanged)} unchanged "
            "(already what their events say, signed by this key); "
            f"arXiv pointers from events: {len(pointers)} rewritten; "
            f"record pages: {len(pages)} written"
        )
    update = run.result
    click.echo(update.line())
    if failures:
        for problem in failures:
            click.echo(f"not rebuilt: {problem}", err=True)
        raise IncompleteRunError(
            f"{len(failures)} papers were not rebuilt because stored objects failed their checks "
            f"(listed above; their published bundles are unchanged); inspect with: "
            f"pith-pipeline verify {store}"
        )


def _retention_option(fn: Any) -> Any:
    return click.option(
        "--retention",
        "retention_hours",
        type=FiniteFloat(min=0),
        default=168.0,
        show_default=True,
        help="Hours files no current table version uses are kept for readers of older "
        "versions before vacuum deletes them; 0 deletes them at once.",
    )(fn)


@click.command()
@store_option()
@_retention_option
@wait_option
def reindex(store: str, retention_hours: float, lease_wait: float) -> None:
    """Rebuild the index tables from every published bundle (bundles untouched).

    Repairs any state of the index: missing or damaged tables are started anew, an
    index in the old layout (index/_manifest.json) is migrated and its files removed.

    \b
    Example:
      pith-pipeline reindex --store s3://bucket/pith
    """
    # lazy: pith_pipeline.index, pyarrow, 355 ms at import
    from pith_pipeline.index import reindex as do_reindex

    st = existing_store(store)
    with (
        writer_lease(st, command="reindex", papers=False, index=True, wait=lease_wait, on_wait=lease_notice),
        tqdm(desc="index", unit="bundle", disable=None) as bar,
    ):
        update = do_reindex(st, progress=bar.update, retention_hours=retention_hours)
    click.echo(update.line())


@click.command()
@store_option()
@_retention_option
@click.option(
    "--z-order",
    "z_order",
    is_flag=True,
    help="Order records by primary_cat while compacting (see docs/pages/analysts.md: it did not pay).",
)
@wait_option
def compact(store: str, retention_hours: float, z_order: bool, lease_wait: float) -> None:
    """Compact each index table's small files (Delta OPTIMIZE), then VACUUM old files.

    Readers never see a half-done compaction: it is one Delta commit per table, and
    files older versions still use are deleted only after --retention hours.

    \b
    Example:
      pith-pipeline compact --store s3://bucket/pith --retention 24
    """
    # lazy: pith_pipeline.index, pyarrow, 135 ms at import
    from pith_pipeline.index import compact as do_compact

    st = existing_store(store)
    with (
        writer_lease(st, command="compact", papers=False, index=True, wait=lease_wait, on_wait=lease_notice),
        tqdm(desc="compact", unit="table", disable=None) as bar,
    ):
        st.sweep_temporary(published=True)  # a killed writer's leftovers, wherever they are
        update = do_compact(st, retention_hours=retention_hours, z_order=z_order, progress=bar.update)
    click.echo(update.compact_line())
