"""pith_ingest: every day, publish what arXiv changed the day before.

Each run owns one window of OAI datestamps, `[data_interval_start,
data_interval_end)`: one whole UTC day (a data-interval timetable; a plain cron
`@daily` would give Airflow 3 runs a zero-length interval). Re-running a window
gives the same result; `max_active_runs=1` keeps windows publishing in order, so
a new version always supersedes the one published before it.

    harvest (pool arxiv_oai) -> plan -> build[chunk ...] -> publish -> index -> manifest

Backfill a range with `airflow backfill create --dag-id pith_ingest --from-date ...
--to-date ...` (one run per day), or use the `pith_backfill` DAG.
Configuration (environment or Airflow Variables): PITH_STORE, PITH_SIGNER,
PITH_OAI_URL, PITH_BASE_URL, PITH_REGISTRY_NAME, PITH_SIGNER_ID.

Every run owns the day (UTC) of its logical date: scheduled, backfill and manual runs
alike (a manual run's data interval comes from the trigger time and is not used). One
past day: `airflow dags trigger pith_ingest --conf '{"day": "2019-09-26"}'` (repeatable)
or `--logical-date 2019-09-26` (once per day: Airflow keeps one run per logical date;
rerun that run with `airflow tasks clear pith_ingest -s 2019-09-26 -e 2019-09-26 -y`).
Days before arXiv's first (1991-08-14), today (not over yet) or later fail loudly
instead of succeeding with nothing done.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from airflow.sdk import Asset, CronDataIntervalTimetable, dag, task

from pith_pipeline import airflow_tasks as at  # standard library only at import time

INDEX_ASSETS = [Asset(name) for name in at.INDEX_ASSET_NAMES]


@dag(
    dag_id="pith_ingest",
    schedule=CronDataIntervalTimetable("@daily", timezone="UTC"),
    # arXiv's first day, so every day can be backfilled; catchup=False means unpausing
    # runs only the latest day
    start_date=datetime(1991, 8, 14, tzinfo=UTC),
    catchup=False,
    max_active_runs=1,
    default_args=at.default_args(),
    tags=["pith", "ingest", "arxiv"],
    doc_md=__doc__,
)
def pith_ingest() -> None:
    @task(pool=at.ARXIV_POOL, pool_slots=1, multiple_outputs=False)
    def harvest(
        data_interval_start: Any = None,
        data_interval_end: Any = None,
        logical_date: Any = None,
        dag_run: Any = None,
    ) -> dict[str, Any]:
        """Raw OAI-PMH pages of the window into raw/; returns their keys and a count."""
        from pith_pipeline import airflow_tasks as t
        from pith_pipeline.runs.harvest import harvest_window
        from pith_pipeline.runs.windows import window_for_run

        window = window_for_run(
            data_interval_start,
            data_interval_end,
            logical_date=logical_date,
            # an enum in the Task SDK's context (str() is "DagRunType.MANUAL"): passed as
            # it is, window_for_run reads every form
            run_type=getattr(dag_run, "run_type", None),
            conf=getattr(dag_run, "conf", None),
        )
        return harvest_window(t.load_settings(airflow_variables=True), window)

    @task(multiple_outputs=False)
    def plan(harvested: dict[str, Any]) -> list[dict[str, Any]]:
        """At most MAX_CHUNKS chunks of pages, so the mapped build fits max_map_length."""
        from pith_pipeline.runs.chunks import plan_page_chunks

        return plan_page_chunks(harvested["pages"])

    @task(max_active_tis_per_dagrun=4, multiple_outputs=False)
    def build(chunk: dict[str, Any], harvested: dict[str, Any]) -> dict[str, Any]:
        """Build, sign and publish one chunk (its shard group, under their leases); returns counts."""
        from pith_pipeline import airflow_tasks as t

        return t.build_chunk(t.load_settings(airflow_variables=True), harvested["run_id"], chunk)

    @task(multiple_outputs=False)
    def publish(built: list[dict[str, Any]]) -> dict[str, Any]:
        """Write the window's quarantine from the chunks' rejects; repeatable."""
        from pith_pipeline import airflow_tasks as t

        return t.publish_staged(
            t.load_settings(airflow_variables=True), [b["staged"] for b in t.mapped_results(built)]
        )

    @task(outlets=INDEX_ASSETS, multiple_outputs=False)
    def index(
        harvested: dict[str, Any], built: list[dict[str, Any]], published: dict[str, Any]
    ) -> dict[str, Any]:
        """Bring the Parquet indexes up to date with the window's records."""
        from pith_pipeline import airflow_tasks as t

        return t.index_window(
            t.load_settings(airflow_variables=True),
            harvested["run_id"],
            [b["staged"] for b in t.mapped_results(built)],
        )

    @task(multiple_outputs=False)
    def manifest(
        harvested: dict[str, Any],
        built: list[dict[str, Any]],
        published: dict[str, Any],
        indexed: dict[str, Any],
    ) -> dict[str, Any]:
        """runs/<run_id>/manifest.json for the window; then drop the staging objects."""
        from pith_pipeline import airflow_tasks as t

        return t.finish_window(
            t.load_settings(airflow_variables=True),
            harvested,
            [b["staged"] for b in t.mapped_results(built)],
            indexed,
            published,
        )

    harvested = harvest()
    built = build.partial(harvested=harvested).expand(chunk=plan(harvested))
    published = publish(built)
    indexed = index(harvested, built, published)
    manifest(harvested, built, published, indexed)


pith_ingest()
