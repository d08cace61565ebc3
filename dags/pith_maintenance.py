"""pith_maintenance: keep the indexes compact and check that what is published verifies.

Weekly (Sunday 03:00 UTC), or triggered with parameters:

    airflow dags trigger pith_maintenance --conf '{"rebuild_indexes": true}'
    airflow dags trigger pith_maintenance --conf '{"rebuild_bundles": true, "sample_size": 500}'
    airflow dags trigger pith_maintenance --conf '{"repair": true}'

    rebuild (only when asked) -> compact -> verify
                                         -> report

`rebuild_bundles` re-derives every bundle and state from the write-once event store
(then re-indexes); `rebuild_indexes` rebuilds the Parquet indexes from the bundles.
`verify` checks, with the checks of `pith-pipeline verify STORE`, every paper the runs
finished since its last clean check touched (their run manifests name them; the
checked runs are recorded in `maintenance/verify-watermark.json`) and `sample_size`
papers drawn from the whole store; it fails the run naming every problem and the
`pith-pipeline rebuild` command that fixes derived objects (`repair` runs it and
checks again). `report` writes the page of `pith-pipeline report` into the store as
`report/index.html` (docs/pages/report.md).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from airflow.sdk import Asset, CronTriggerTimetable, Param, dag, task

from pith_pipeline import airflow_tasks as at  # standard library only at import time

INDEX_ASSETS = [Asset(name) for name in at.INDEX_ASSET_NAMES]


@dag(
    dag_id="pith_maintenance",
    schedule=CronTriggerTimetable("0 3 * * 0", timezone="UTC"),
    start_date=datetime(2026, 1, 1, tzinfo=UTC),
    catchup=False,
    max_active_runs=1,
    default_args=at.default_args(),
    tags=["pith", "maintenance"],
    doc_md=__doc__,
    params={
        "rebuild_bundles": Param(
            False, type="boolean", description="Re-derive bundles from the event store."
        ),
        "rebuild_indexes": Param(
            False, type="boolean", description="Rebuild the Parquet indexes from the bundles."
        ),
        "sample_size": Param(
            200,
            type="integer",
            minimum=0,
            description="Papers drawn from the whole store to verify, beside every changed one.",
        ),
        "repair": Param(
            False,
            type="boolean",
            description="On problems: re-derive bundles, states, copies, pointers from events; verify again.",
        ),
        "retention_hours": Param(
            168,
            type="integer",
            minimum=0,
            description="Vacuum: index files no table version younger than this needs are deleted.",
        ),
    },
)
def pith_maintenance() -> None:
    @task(outlets=INDEX_ASSETS, multiple_outputs=False)
    def rebuild(params: Any = None) -> dict[str, Any]:
        """Only when asked: bundles from events and/or indexes from bundles."""
        from pith_pipeline import airflow_tasks as t
        from pith_pipeline.maintenance import rebuild_from_events

        return rebuild_from_events(
            t.load_settings(airflow_variables=True),
            bundles=bool(params["rebuild_bundles"]),
            indexes=bool(params["rebuild_indexes"]),
        )

    @task(outlets=INDEX_ASSETS, multiple_outputs=False)
    def compact(rebuilt: dict[str, Any], params: Any = None) -> dict[str, Any]:
        """Compact the Delta index tables, then vacuum files older versions no longer need."""
        from pith_pipeline import airflow_tasks as t
        from pith_pipeline.maintenance import compact_indexes

        return compact_indexes(
            t.load_settings(airflow_variables=True), retention_hours=float(params["retention_hours"])
        )

    @task(multiple_outputs=False)
    def verify(compacted: dict[str, Any], params: Any = None, run_id: Any = None) -> dict[str, Any]:
        """Verify every paper changed since the last clean check, and a sample; fail naming each problem."""
        from pith_pipeline import airflow_tasks as t
        from pith_pipeline.maintenance import verify_changes

        return verify_changes(
            t.load_settings(airflow_variables=True),
            sample_size=int(params["sample_size"]),
            seed=str(run_id),
            repair=bool(params["repair"]),
        )

    @task(multiple_outputs=False)
    def report(compacted: dict[str, Any]) -> dict[str, Any]:
        """Write the report page into the store, report/index.html (`pith-pipeline report`)."""
        from pith_pipeline import airflow_tasks as t
        from pith_pipeline.report import write_report

        return write_report(t.load_settings(airflow_variables=True))

    compacted = compact(rebuild())
    verify(compacted)
    report(compacted)


pith_maintenance()
