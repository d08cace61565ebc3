"""Read arXiv's bulk metadata snapshot in byte ranges, one range per build chunk.

A multi-GB snapshot is split into ranges that start on a line boundary, so every
worker reads only its own part and the file is read once in total.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pith_pipeline.core.limits import DEFAULT_LIMITS, InputLimits
from pith_pipeline.errors import InputError
from pith_pipeline.runs.chunks import MAX_CHUNKS
from pith_pipeline.runs.windows import Window

if TYPE_CHECKING:
    from pith_pipeline.core.arxiv_record import ArxivRecord
    from pith_pipeline.items import Item

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
        from pith_pipeline.config import integer

        min_bytes = integer("snapshot_chunk_bytes")
    step = max(1, min_bytes, math.ceil(size / max_chunks))
    chunks = []
    for i, start in enumerate(range(0, size, step)):
        end = min(size, start + step)
        chunks.append({**base, "index": i, "start": start, "end": end})
    return chunks


def record_datestamp(rec: ArxivRecord) -> date:
    """The snapshot's `update_date` (≈ OAI datestamp), else the latest version's date."""
    if rec.update_date:
        try:
            return date.fromisoformat(rec.update_date[:10])
        except ValueError:
            pass
    from pith_pipeline.core.timeutil import parse_rfc2822

    latest = max(rec.versions, key=lambda v: v.number)
    return parse_rfc2822(latest.created).date()


def iter_snapshot_range(chunk: Mapping[str, Any], *, limits: InputLimits = DEFAULT_LIMITS) -> Iterator[Item]:
    """Lines that *start* in [start, end): each line belongs to exactly one chunk.

    Read like `iter_jsonl` reads a whole file (`jsonl.read_line`): a line over
    `limits.line_bytes` is a reject without being held whole, and a damaged file (a
    truncated or corrupt `.gz`) is one `DamagedInputError` naming it and the byte
    reached, never a bare `EOFError` (which the CLI would report as Ctrl-C).
    """
    from pith_pipeline.sources.jsonl import check_start, line_items, open_input, open_stream, read_line

    path = Path(chunk["path"])
    window = Window.from_json(chunk["window"])
    start, end = int(chunk["start"]), chunk["end"]
    limit = limits.line_bytes
    with open_input(path) as raw:
        fh: Any = open_stream(raw, path.suffix == ".gz")
        pos = 0
        if start == 0:
            check_start(fh, path.name, raw.tell)
        else:
            fh.seek(start - 1)
            read_line(fh, limit, path.name, f"reading {start - 1} bytes", raw.tell)  # the line before ours
            pos = fh.tell()

        def lines() -> Iterator[tuple[str, str, bytes, int]]:
            # byte offsets name lines; numbering would need a full scan
            nonlocal pos
            while end is None or pos < end:
                line, size = read_line(fh, limit, path.name, f"reading {pos} bytes", raw.tell)
                if not line:
                    return
                where = f"{path.name}@{pos}"
                pos += size
                yield where, f"byte {pos}", line, size

        def keep(rec: ArxivRecord) -> bool:
            return window.contains(record_datestamp(rec))

        yield from line_items(lines(), path.name, limits, keep, at_file_start=pos == 0)
