"""Backfill planning: which windows a backfill still has to run, and their chunks.

Shared by the `pith_backfill` DAG and `pith-pipeline backfill` (no Airflow needed).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pith_pipeline.core.layout import run_manifest_key
from pith_pipeline.errors import InputError
from pith_pipeline.runs.chunks import MAX_CHUNKS, plan_page_chunks, plan_snapshot_chunks
from pith_pipeline.runs.harvest import harvest_window
from pith_pipeline.runs.steps import finish_window, index_window, run_store
from pith_pipeline.runs.windows import run_id_for, split_windows
from pith_pipeline.storage.lease import SHARDS
from pith_pipeline.window import Window, parse_day

if TYPE_CHECKING:
    from pith_pipeline.config import Settings
    from pith_pipeline.storage.base import Store

SOURCES = ("oai", "snapshot")


def plan_backfill(
    settings: Settings,
    start: str | date,
    until: str | date,
    source: str,
    snapshot_path: str | None = None,
    *,
    store: Store | None = None,
    max_windows: int = MAX_CHUNKS,
) -> list[dict[str, Any]]:
    """The windows a backfill still has to run, each `{"run_id", "window", "source"}`.

    OAI: one window per day (longer when there would be more than `max_windows`),
    named like the daily runs (`ingest-<day>`), so a day the daily DAG already did is
    skipped. Snapshot: one window over the whole range. A window whose run
    manifest exists is complete and left out: that is what makes a backfill resumable.
    """

    if source not in SOURCES:
        raise InputError(f"source must be one of {', '.join(SOURCES)}, not {source!r}")
    whole = Window(parse_day(start, "from"), parse_day(until, "until"))

    store = store or run_store(settings)
    if source == "snapshot":
        if not snapshot_path:
            raise InputError(
                "source 'snapshot' needs a snapshot path "
                "(arXiv's arxiv-metadata-oai-snapshot.json, or .jsonl[.gz])"
            )
        if not Path(snapshot_path).is_file():
            raise InputError(f"snapshot file not found: {snapshot_path}")
        windows, kind = [whole], "snapshot"
    else:
        windows, kind = split_windows(whole, max_windows), "ingest"
    out = []
    for w in windows:
        run_id = run_id_for(kind, w)
        if store.exists(run_manifest_key(run_id)):
            continue
        req: dict[str, Any] = {"run_id": run_id, "window": w.to_json(), "source": source}
        if source == "snapshot":
            req["snapshot"] = str(snapshot_path)
        out.append(req)
    return out


def harvest_for(
    settings: Settings, request: Mapping[str, Any], *, store: Store | None = None
) -> dict[str, Any]:
    """A planned window's input: OAI pages harvested into raw/, or snapshot byte ranges."""

    window = Window.from_json(request["window"])
    if request["source"] == "oai":
        return harvest_window(settings, window, store=store)
    chunks = plan_snapshot_chunks(request["snapshot"], window)
    return {
        "run_id": request["run_id"],
        "window": window.to_json(),
        "source": "snapshot",
        "snapshot": request["snapshot"],
        "pages": [],
        "chunks": chunks,
    }


def split_by_shard_group(chunks: list[dict[str, Any]], groups: int) -> list[dict[str, Any]]:
    """Each snapshot byte range once per shard group (see `plan_chunks_for`)."""

    groups = max(1, min(groups, SHARDS))
    if groups == 1:
        return chunks
    bounds = [(g * SHARDS // groups, (g + 1) * SHARDS // groups - 1) for g in range(groups)]
    return [
        {**c, "index": int(c["index"]) * groups + g, "shards": f"{lo}-{hi}", "rejects": g == 0}
        for c in chunks
        for g, (lo, hi) in enumerate(bounds)
    ]


def plan_chunks_for(
    harvested: list[Mapping[str, Any]], max_chunks: int = MAX_CHUNKS, snapshot_groups: int = 1
) -> list[dict[str, Any]]:
    """`{"run_id", "chunk"}` for every chunk of every window, at most `max_chunks`.

    OAI windows get one chunk per page group; when that would be too many, one
    chunk per window (there are at most `max_chunks` windows).

    `snapshot_groups` (the DAG: `SHARD_GROUPS`): a byte range holds papers of every
    shard, so as one chunk it must hold all 16 shard leases and chunks publish one
    at a time. Planned once per shard group, each chunk publishes only its group's
    papers under its group's leases, and groups publish at once; each range is then
    read once per group (parsing is cheap beside building and signing). Fewer groups
    when there would be more than `max_chunks` chunks; the CLI backfill, which runs
    chunks in turn anyway, keeps 1.
    """
    ranges = sum(len(h["chunks"]) for h in harvested if h["source"] == "snapshot")
    snapshot_groups = max(1, min(snapshot_groups, max_chunks // max(1, ranges)))
    per_window: list[tuple[str, list[dict[str, Any]]]] = []
    for h in harvested:
        if h["source"] == "snapshot":
            per_window.append((h["run_id"], split_by_shard_group(list(h["chunks"]), snapshot_groups)))
        else:
            per_window.append((h["run_id"], plan_page_chunks(h["pages"], max_chunks)))
    if sum(len(c) for _, c in per_window) > max_chunks:
        per_window = [
            (run_id, plan_page_chunks(h["pages"], 1)) if h["source"] == "oai" else (run_id, chunks)
            for h, (run_id, chunks) in zip(harvested, per_window, strict=True)
        ]
    items = [{"run_id": run_id, "chunk": c} for run_id, chunks in per_window for c in chunks]
    if len(items) > max_chunks:
        raise InputError(
            f"{len(items)} chunks exceed max_map_length headroom ({max_chunks}); "
            "backfill a shorter range at a time"
        )
    return items


def staged_by_run(built: Iterable[Mapping[str, Any]]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for b in built:
        run_id = str(b["staged"]).split("/")[1]
        out.setdefault(run_id, []).append(str(b["staged"]))
    return out


def finish_windows(
    settings: Settings,
    harvested: list[Mapping[str, Any]],
    built: list[Mapping[str, Any]],
    published: Mapping[str, Any],
    *,
    store: Store | None = None,
) -> list[dict[str, Any]]:
    """Index, then write the run manifest, for each window of a backfill."""

    store = store or run_store(settings)
    staged = staged_by_run(built)
    results = []
    for h in harvested:
        keys = staged.get(str(h["run_id"]), [])
        indexed = index_window(settings, str(h["run_id"]), keys, store=store)
        results.append(finish_window(settings, h, keys, indexed, published, store=store))
    return results
