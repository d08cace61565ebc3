"""Task bodies for the Airflow DAGs (and for `pith-pipeline backfill`).

The DAG files in `dags/` stay thin: they declare schedules, pools, retries and
assets, and call these functions. Everything here is plain Python, testable
without a scheduler, and imports Airflow only where it reads Airflow Variables.

A run owns one *window* of OAI datestamps `[start, end)`. Each step is a
transaction for its window, so a retry or a re-run gives the same result:

1. harvest   raw OAI-PMH pages into `raw/` (write-once, replayable);
2. plan      split the window's input into at most `MAX_CHUNKS` chunks, so the
             mapped build stays under Airflow's `max_map_length`;
3. build     per chunk: build and sign against the published store, keeping every
             write in memory, then stage them as one object
             `staging/<run_id>/chunk-NNNN-<token>.jsonl` (one per build), its
             rejects beside it (`...-<token>.rejects.jsonl`, streamed, never held);
4. publish   copy staged objects into place: events write-once first, then bundles
             and states, then arXiv pointers. An object already there with the same
             bytes is skipped, so a publish that died half-way completes on retry
             without duplicates;
5. index     bring the Parquet indexes up to date with the window's records;
6. manifest  `runs/<run_id>/manifest.json`, deterministic for the window (no
             wall-clock time), then the run's staging objects are removed.

Values passed between steps (Airflow XComs) are keys and counts only: never
records, bundles or signer material.

What is not Airflow-shaped lives elsewhere, and `pith-pipeline backfill` uses it
without this module: the window steps (build, publish, index, finish) in
`runs/steps.py`, windows and run names in `runs/windows.py`, chunk planning in
`runs/chunks.py`, the harvest step in `runs/harvest.py`, backfill planning in
`runs/backfill_plan.py`, snapshot byte ranges in `sources/snapshot_ranges.py`, the
staging store in `storage/staging.py`, and maintenance in `maintenance.py`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

# Only the standard library, the error classes and this package's standard-library-only
# modules at import time: DAG files import this module while the scheduler parses
# them. Everything else is imported lazily.
from pith_pipeline.config import (
    Settings,
    integer,
    number,
)
from pith_pipeline.config import load_settings as config_load_settings

# The window steps live in runs/steps.py (no Airflow); the DAGs call them from here.
from pith_pipeline.runs.steps import (
    build_chunk,
    finish_window,
    index_window,
    publish_staged,
    run_signer,
    run_store,
    sha256_hex,
    window_summary,
)

#: what the DAG files take from here (the window steps re-exported from runs/steps.py)
__all__ = [
    "ARXIV_POOL",
    "INDEX_ASSET_NAMES",
    "Settings",
    "airflow_variable",
    "build_chunk",
    "default_args",
    "finish_window",
    "index_window",
    "integer",
    "load_settings",
    "mapped_results",
    "number",
    "publish_staged",
    "run_signer",
    "run_store",
    "sha256_hex",
    "window_summary",
]

log = logging.getLogger(__name__)

#: The Parquet index tables, published as Airflow Assets by the tasks that change them.
INDEX_ASSET_NAMES = ("pith_index_records", "pith_index_events", "pith_index_aliases")

#: The Airflow pool every arXiv request goes through (one slot: arXiv asks for one
#: client connection at a time).
ARXIV_POOL = "arxiv_oai"


def airflow_variable(name: str) -> str | None:
    """The Airflow Variable `name`, or None: the lookup `config.resolve` is given in tasks."""
    from airflow.sdk import Variable

    value = Variable.get(name, default=None)
    return value if isinstance(value, str) and value else None


def load_settings(
    env: Mapping[str, str] | None = None, *, airflow_variables: bool = False, **overrides: str | None
) -> Settings:
    """`config.load_settings`, with Airflow Variables read when `airflow_variables`
    (in tasks: an operator changes a deployment from the Airflow UI)."""
    return config_load_settings(env, variable=airflow_variable if airflow_variables else None, **overrides)


def default_args(env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Owner, retries with exponential backoff, and no retry for terminal errors.

    `PITH_RETRIES` (3) and `PITH_RETRY_DELAY_SECONDS` (60, doubling up to an hour)
    tune them per deployment (environment only: DAG files call this while the
    scheduler parses them, where reading Airflow Variables would cost a database
    query per parse). A `TerminalError` (bad configuration, a write-once conflict,
    a storage or signing failure no retry can fix) fails at once.
    """
    from airflow.sdk import ExceptionRetryPolicy, RetryAction, RetryRule

    return {
        "owner": "pith-pipeline",
        "retries": integer("retries", env),
        "retry_delay": timedelta(seconds=number("retry_delay_seconds", env)),
        "retry_exponential_backoff": 2.0,
        "max_retry_delay": timedelta(hours=1),
        "retry_policy": ExceptionRetryPolicy(
            rules=[
                RetryRule(
                    exception="pith_pipeline.errors.TerminalError",
                    action=RetryAction.FAIL,
                    reason="terminal error: a retry cannot fix it",
                )
            ]
        ),
    }


def mapped_results(results: Any) -> list[Any]:
    """The results of a mapped task, read by index up to its length.

    Why not `list(results)`: iterating Airflow's lazy XCom sequence fetches one index
    past the end and logs an `XCom not found` error on every run.
    """
    return [results[i] for i in range(len(results))]
