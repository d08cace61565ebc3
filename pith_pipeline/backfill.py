"""Backfills without Airflow: the same windows and steps as the DAGs, one after another.

`run_backfill` plans the windows still to do (a window with a run manifest is
complete), and for each: harvest (or read the snapshot's byte ranges), build and
publish chunk by chunk, index, write the run manifest. Snapshot chunks also leave a
checkpoint (`runs/backfill/<run_id>/chunk-NNNN.json`) once published, so a
multi-GB snapshot resumes at the chunk where a killed run stopped; an OAI day is
short, and its harvest resumes from the harvester's own page checkpoint.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pith_pipeline.core.canonical_json import dumps_pretty, loads_stored
from pith_pipeline.core.layout import backfill_chunk_key, backfill_prefix
from pith_pipeline.publish import RunSummary
from pith_pipeline.runs import steps as at
from pith_pipeline.runs.backfill_plan import harvest_for, plan_backfill, plan_chunks_for
from pith_pipeline.storage.base import Store

if TYPE_CHECKING:
    from pith_pipeline.config import Settings

Progress = Callable[[int], None]


@dataclass(slots=True)
class BackfillResult:
    """What a backfill did, for the summary line."""

    windows_planned: int = 0
    windows_done: int = 0
    chunks_resumed: int = 0
    total: RunSummary = field(default_factory=lambda: RunSummary.part("backfill"))
    manifests: list[str] = field(default_factory=list)
    windows_added: int = 0

    @property
    def counts(self) -> dict[str, int]:
        return self.total.counts() if self.windows_added else {}

    def add(self, counts: dict[str, Any]) -> None:
        """Add a finished window's counts (`finish_window`'s answer) to the total."""
        self.total.add(RunSummary.part("backfill", **{k: int(counts.get(k, 0)) for k in RunSummary.COUNTERS}))
        self.windows_added += 1

    def line(self) -> str:
        c = ", ".join(f"{k} {v}" for k, v in self.counts.items()) or "nothing to do"
        resumed = f", {self.chunks_resumed} chunks resumed" if self.chunks_resumed else ""
        return f"{self.windows_done}/{self.windows_planned} windows{resumed}: {c}"


def _checkpoint(store: Store, run_id: str, index: int, built: dict[str, Any]) -> None:

    store.put(backfill_chunk_key(run_id, index), dumps_pretty(built) + b"\n")


def run_window(
    settings: Settings,
    request: dict[str, Any],
    *,
    store: Store,
    signer: Any,
    result: BackfillResult,
    on_chunk: Progress | None = None,
    io_concurrency: int | None = None,
) -> dict[str, Any]:
    """One planned window, start to finish; every step is safe to repeat."""

    harvested = harvest_for(settings, request, store=store)
    run_id = str(harvested["run_id"])
    chunks = [c["chunk"] for c in plan_chunks_for([harvested])]
    staged: list[str] = []
    written = 0
    for chunk in chunks:
        index = int(chunk["index"])
        done = store.get(backfill_chunk_key(run_id, index))
        marker = loads_stored(done, backfill_chunk_key(run_id, index)) if done is not None else None
        if (
            isinstance(marker, dict)
            and isinstance(marker.get("staged"), str)
            and store.exists(marker["staged"])
        ):
            staged.append(marker["staged"])
            result.chunks_resumed += 1
        else:
            built = at.build_chunk(
                settings, run_id, chunk, signer=signer, store=store, io_concurrency=io_concurrency
            )
            written += at.publish_staged(settings, [built["staged"]], store=store)["written"]
            _checkpoint(store, run_id, index, built)
            staged.append(built["staged"])
        if on_chunk:
            on_chunk(1)
    indexed = at.index_window(settings, run_id, staged, store=store)
    finished = at.finish_window(settings, harvested, staged, indexed, {"written": written}, store=store)
    for key in store.list(backfill_prefix(run_id)):
        store.delete(key)
    result.add(finished)
    result.manifests.append(finished["manifest"])
    result.windows_done += 1
    return finished


def run_backfill(
    settings: Settings,
    start: str,
    until: str,
    source: str = "oai",
    snapshot_path: str | None = None,
    *,
    progress: bool | None = None,
    io_concurrency: int | None = None,
) -> BackfillResult:
    """Publish every window of [start, until) not yet complete; resumable after a kill."""
    from tqdm import tqdm

    store = at.run_store(settings)
    signer = at.run_signer(settings)
    requests = plan_backfill(settings, start, until, source, snapshot_path, store=store)
    result = BackfillResult(windows_planned=len(requests))
    unit = "chunk" if source == "snapshot" else "day"
    total = None if source == "snapshot" else len(requests)
    disable = None if progress is None else not progress
    with tqdm(total=total, desc="backfill", unit=unit, disable=disable) as bar:
        for request in requests:
            bar.set_postfix_str(request["run_id"], refresh=False)
            run_window(
                settings,
                request,
                store=store,
                signer=signer,
                result=result,
                on_chunk=bar.update if source == "snapshot" else None,
                io_concurrency=io_concurrency,
            )
            if source != "snapshot":
                bar.update(1)
    return result
