"""Runs: the windows of dates a run owns, and how a run is split into chunks and planned.

Plain Python with no Airflow: the DAGs (through `airflow_tasks`) and
`pith-pipeline backfill` both use these modules.
"""
