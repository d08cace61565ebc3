"""Streaming reader for JSON lines in the snapshot layout (`.jsonl`, `.json`, `.json.gz`).

Never loads the file whole: the bulk snapshot is several GB. A bad line does not
stop the stream; it comes out as a `Rejected` naming file, line, record and field,
so the caller can quarantine it and go on.
"""

from __future__ import annotations

import gzip
import io
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import IO, Any

import orjson

from pith_pipeline.core.model import ArxivRecord
from pith_pipeline.errors import InputError


@dataclass(frozen=True, slots=True)
class Rejected:
    """Input that could not become a record: kept whole, with the reason."""

    where: str
    reason: str
    raw: str
    record_id: str | None = None
    field: str | None = None

    @classmethod
    def of_error(cls, exc: InputError, record_id: str) -> Rejected:
        """A record that parsed but could not be built (the raw input is the caller's)."""
        return cls(exc.where or "", exc.message, "", record_id, exc.field)

    def to_json(self) -> dict[str, str | None]:
        return {
            "where": self.where,
            "record_id": self.record_id,
            "field": self.field,
            "reason": self.reason,
            "raw": self.raw,
        }


Item = ArxivRecord | Rejected


def _open(path: Path) -> IO[bytes]:
    raw = path.open("rb")
    magic = raw.peek(2)[:2] if isinstance(raw, io.BufferedReader) else b""
    if path.suffix == ".gz" or magic == b"\x1f\x8b":
        return gzip.GzipFile(fileobj=raw)  # type: ignore[return-value]
    return raw


def parse_line(line: bytes, where: str) -> Item:
    text = line.decode("utf-8", errors="replace").rstrip("\r\n")
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        return Rejected(where, f"invalid JSON: {exc}", text)
    try:
        return ArxivRecord.from_json(obj, where=where)
    except InputError as exc:
        return Rejected(where, exc.message, text, exc.record_id, exc.field)


def iter_jsonl(
    path: str | Path | IO[bytes],
    *,
    categories: set[str] | None = None,
    submitted_from: datetime | None = None,
    submitted_until: datetime | None = None,
    name: str | None = None,
) -> Iterator[Item]:
    """Records (and rejects) from a JSON-lines file, optionally filtered.

    `path` may also be an open binary stream (gzip-compressed or not; e.g. a download
    in progress), read line by line. `categories` keeps records with any listed
    category (`cs.LG`) or archive (`cs`); the dates filter on the v1 submission time,
    `until` exclusive.
    """
    if isinstance(path, str | Path):
        p = Path(path)
        with _open(p) as fh:
            yield from _iter_lines(fh, name or p.name, categories, submitted_from, submitted_until)
        return
    raw: Any = path
    stream: Any = raw if isinstance(raw, io.BufferedReader) else io.BufferedReader(raw)
    lines: Any = gzip.GzipFile(fileobj=stream) if stream.peek(2)[:2] == b"\x1f\x8b" else stream
    yield from _iter_lines(
        lines, name or str(getattr(path, "name", "<stream>")), categories, submitted_from, submitted_until
    )


def _iter_lines(
    fh: IO[bytes], label: str, categories: set[str] | None, since: datetime | None, until: datetime | None
) -> Iterator[Item]:
    for n, line in enumerate(fh, start=1):
        if not line.strip():
            continue
        item = parse_line(line, f"{label}:{n}")
        if isinstance(item, ArxivRecord) and not _keep(item, categories, since, until):
            continue
        yield item


def _keep(
    rec: ArxivRecord, categories: set[str] | None, since: datetime | None, until: datetime | None
) -> bool:
    if since is not None and rec.submitted_at < since:
        return False
    if until is not None and rec.submitted_at >= until:
        return False
    if categories:
        cats = rec.categories.split()
        if not any(c in categories or c.split(".")[0] in categories for c in cats):
            return False
    return True
