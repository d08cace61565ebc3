"""Runs: the window of dates a run owns, how it is split into chunks and planned, and
its manifest (`runs/<run_id>/`).

Plain Python with no Airflow: the DAGs (through `airflow_tasks`), `pith-pipeline
backfill` and the CLI use these modules. Run manifests are not index data: they record
what a run published, and are written by the loader after the index update
(`manifest.finish_run`).
"""
