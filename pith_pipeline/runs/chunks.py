"""Chunks of a run's input: the unit of the mapped build (one Airflow task each).

Standard library only at import time: DAG files import this while the scheduler
parses them.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pith_pipeline.config import integer
from pith_pipeline.errors import InputError, StorageError
from pith_pipeline.sources.snapshot_ranges import iter_snapshot_range
from pith_pipeline.storage.lease import SHARDS

if TYPE_CHECKING:
    from pith_pipeline.items import Item
    from pith_pipeline.storage.base import Store
    from pith_pipeline.window import Window

#: Below Airflow's default `max_map_length` (1024), with room to spare.
MAX_CHUNKS = 1000
#: The mapped build of an OAI window runs one task per page group and shard group, so
#: tasks of different shard groups publish at once and tasks of one group take turns.
SHARD_GROUPS = 4


def chunk_list(items: list[Any], max_chunks: int = MAX_CHUNKS) -> list[list[Any]]:
    """Split into at most `max_chunks` contiguous, non-empty, near-equal parts."""
    if not items:
        return []
    size = max(1, math.ceil(len(items) / max_chunks))
    return [items[i : i + size] for i in range(0, len(items), size)]


def plan_page_chunks(
    page_keys: list[str], max_chunks: int = MAX_CHUNKS, groups: int = SHARD_GROUPS
) -> list[dict[str, Any]]:
    """Chunks of raw OAI pages for the mapped build (each a small JSON-able dict).

    Each page group is split into `groups` shard groups: a task publishes only the
    papers of its shards, under their writer leases, so tasks of different groups run
    at once and never write the same paper. Rejected records are counted and
    quarantined by the group that holds shard 0 only.
    """

    parts = chunk_list(sorted(page_keys), max(1, max_chunks // max(1, groups))) or [[]]
    groups = max(1, min(groups, SHARDS))
    bounds = [(g * SHARDS // groups, (g + 1) * SHARDS // groups - 1) for g in range(groups)]
    return [  # an empty window still gets its (empty) manifest
        {
            "index": i * groups + g,
            "kind": "oai",
            "pages": part,
            "shards": f"{lo}-{hi}",
            "rejects": g == 0,
        }
        for i, part in enumerate(parts)
        for g, (lo, hi) in enumerate(bounds)
    ]


#: Snapshot byte ranges are at least this big, so small files are one chunk.
MIN_SNAPSHOT_CHUNK_BYTES = 64 * 1024 * 1024


def plan_snapshot_chunks(
    path: str | Path, window: Window, max_chunks: int = MAX_CHUNKS, min_bytes: int | None = None
) -> list[dict[str, Any]]:
    """Byte ranges of a snapshot file, each starting on a line (gzip files: one chunk).

    Every worker reads only its range, so a multi-GB snapshot is read once in total.
    """
    p = Path(path)
    if not p.is_file():
        raise InputError(f"snapshot file not found: {p}")
    size = p.stat().st_size
    base = {"kind": "snapshot", "path": str(p), "window": window.to_json()}
    with p.open("rb") as fh:  # named .gz: gzip, whatever it starts with (as `iter_jsonl`)
        gz = fh.read(2) == b"\x1f\x8b" or p.suffix == ".gz"
    if gz or size == 0:
        return [{**base, "index": 0, "start": 0, "end": None}]
    if min_bytes is None:
        min_bytes = integer("snapshot_chunk_bytes")
    step = max(1, min_bytes, math.ceil(size / max_chunks))
    chunks = []
    for i, start in enumerate(range(0, size, step)):
        end = min(size, start + step)
        chunks.append({**base, "index": i, "start": start, "end": end})
    return chunks


def iter_chunk_items(store: Store, chunk: Mapping[str, Any]) -> Iterator[Item]:
    """The records (and rejects) of one planned chunk."""
    if chunk["kind"] == "snapshot":
        yield from iter_snapshot_range(chunk)
    elif chunk["kind"] == "oai":
        # lazy: lxml, 75 ms at import
        from pith_pipeline.sources.arxivraw import parse_page

        # lazy: httpx2, lxml, oaipmh_scythe, 135 ms at import
        from pith_pipeline.sources.oai import gunzip

        for key in chunk["pages"]:
            data = store.get(key)
            if data is None:
                raise StorageError(
                    f"raw page {key} is missing from {store.url}; re-run the harvest task for this window"
                )
            yield from parse_page(gunzip(data, key), key).items
    else:
        raise InputError(f"unknown chunk kind {chunk['kind']!r}")
