"""Read arXiv's bulk metadata snapshot in byte ranges, one range per build chunk.

A multi-GB snapshot is split into ranges (`runs.chunks.plan_snapshot_chunks`); a
range's records are those whose line starts in it, so every worker reads only its
own part and the file is read once in total.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pith_pipeline.core.limits import DEFAULT_LIMITS, InputLimits
from pith_pipeline.core.timeutil import parse_rfc2822
from pith_pipeline.sources.jsonl import check_start, line_items, open_input, open_stream, read_line
from pith_pipeline.window import Window

if TYPE_CHECKING:
    from pith_pipeline.core.arxiv_record import ArxivRecord
    from pith_pipeline.items import Item


def record_datestamp(rec: ArxivRecord) -> date:
    """The snapshot's `update_date` (≈ OAI datestamp), else the latest version's date."""
    if rec.update_date:
        try:
            return date.fromisoformat(rec.update_date[:10])
        except ValueError:
            pass
    latest = max(rec.versions, key=lambda v: v.number)
    return parse_rfc2822(latest.created).date()


def iter_snapshot_range(chunk: Mapping[str, Any], *, limits: InputLimits = DEFAULT_LIMITS) -> Iterator[Item]:
    """Lines that *start* in [start, end): each line belongs to exactly one chunk.

    Read like `iter_jsonl` reads a whole file (`jsonl.read_line`): a line over
    `limits.line_bytes` is a reject without being held whole, and a damaged file (a
    truncated or corrupt `.gz`) is one `DamagedInputError` naming it and the byte
    reached, never a bare `EOFError` (which the CLI would report as Ctrl-C).
    """
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
