"""pith_backfill: publish a past range of arXiv, from OAI-PMH or from a snapshot file.

Trigger with parameters (nothing runs on a schedule):

    airflow dags trigger pith_backfill --conf '{"from": "2024-01-01", "until": "2024-02-01"}'
    airflow dags trigger pith_backfill --conf '{"from": "2007-01-01", "until": "2026-01-01",
        "source": "snapshot", "snapshot_path": "/data/arxiv-metadata-oai-snapshot.json"}'

`until` is exclusive. OAI windows are days named like the daily runs
(`ingest-<day>`), so days already published (a run manifest exists) are skipped and
a failed backfill resumes where it stopped. The alternative is one `pith_ingest` run
per day: `airflow backfill create --dag-id pith_ingest --from-date 2024-01-01
--to-date 2024-01-31`.

    plan -> harvest[window ...] (pool arxiv_oai) -> chunks -> build[chunk ...] -> publish
         -> finish (indexes and run manifests)
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from airflow.sdk import Asset, Param, dag, task

from pith_pipeline import airflow_tasks as at  # standard library only at import time
from pith_pipeline.runs.backfill_plan import SOURCES  # standard library only at import time

INDEX_ASSETS = [Asset(name) for name in at.INDEX_ASSET_NAMES]


@dag(
    dag_id="pith_backfill",
    schedule=None,
    start_date=datetime(2026, 1, 1, tzinfo=UTC),
    catchup=False,
    max_active_runs=1,
    # only ever triggered, so unpaused it starts nothing by itself: paused (Airflow's
    # default for new DAGs), a trigger would sit queued without a word
    is_paused_upon_creation=False,
    default_args=at.default_args(),
    tags=["pith", "backfill", "arxiv"],
    doc_md=__doc__,
    params={
        "from": Param(
            "2026-01-01",
            type="string",
            format="date",
            description="First OAI datestamp day (inclusive), YYYY-MM-DD.",
        ),
        "until": Param(
            "2026-01-02",
            type="string",
            format="date",
            description="Day after the last one (exclusive), YYYY-MM-DD.",
        ),
        "source": Param(
            "oai", enum=list(SOURCES), description="oai: harvest arXiv's OAI-PMH; snapshot: read a file."
        ),
        "snapshot_path": Param(
            None,
            type=["null", "string"],
            description="With source=snapshot: the snapshot file, readable by every worker.",
        ),
    },
)
def pith_backfill() -> None:
    @task(multiple_outputs=False)
    def plan(params: Any = None) -> list[dict[str, Any]]:
        """Windows still to do (those with a run manifest are complete and skipped)."""
        from pith_pipeline import airflow_tasks as t
        from pith_pipeline.runs.backfill_plan import plan_backfill

        return plan_backfill(
            t.load_settings(airflow_variables=True),
            params["from"],
            params["until"],
            params["source"],
            params.get("snapshot_path"),
        )

    @task(pool=at.ARXIV_POOL, pool_slots=1, multiple_outputs=False)
    def harvest(request: dict[str, Any]) -> dict[str, Any]:
        """One window's raw pages (OAI), or its byte ranges (snapshot): keys and counts."""
        from pith_pipeline import airflow_tasks as t
        from pith_pipeline.runs.backfill_plan import harvest_for

        return harvest_for(t.load_settings(airflow_variables=True), request)

    @task(multiple_outputs=False)
    def chunks(harvested: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Every window's chunks, at most MAX_CHUNKS (under max_map_length); snapshot
        ranges once per shard group, so their builds do not all wait on every lease."""
        from pith_pipeline import airflow_tasks as t
        from pith_pipeline.runs.backfill_plan import plan_chunks_for
        from pith_pipeline.runs.chunks import SHARD_GROUPS

        return plan_chunks_for(t.mapped_results(harvested), snapshot_groups=SHARD_GROUPS)

    @task(max_active_tis_per_dagrun=4, multiple_outputs=False)
    def build(item: dict[str, Any]) -> dict[str, Any]:
        """Build, sign and publish one chunk (its shard group, under their leases)."""
        from pith_pipeline import airflow_tasks as t

        return t.build_chunk(t.load_settings(airflow_variables=True), item["run_id"], item["chunk"])

    @task(multiple_outputs=False)
    def publish(built: list[dict[str, Any]]) -> dict[str, Any]:
        """Write the window's quarantine from the chunks' rejects; repeatable."""
        from pith_pipeline import airflow_tasks as t

        return t.publish_staged(
            t.load_settings(airflow_variables=True), [b["staged"] for b in t.mapped_results(built)]
        )

    @task(outlets=INDEX_ASSETS, multiple_outputs=False)
    def finish(
        harvested: list[dict[str, Any]], built: list[dict[str, Any]], published: dict[str, Any]
    ) -> list[dict[str, Any]]:
        """Indexes, then one run manifest per window; drops staging objects."""
        from pith_pipeline import airflow_tasks as t
        from pith_pipeline.runs.backfill_plan import finish_windows

        return finish_windows(
            t.load_settings(airflow_variables=True),
            t.mapped_results(harvested),
            t.mapped_results(built),
            published,
        )

    harvested = harvest.expand(request=plan())
    built = build.expand(item=chunks(harvested))
    finish(harvested, built, publish(built))


pith_backfill()
