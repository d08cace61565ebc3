"""Streaming reader for JSON lines in the snapshot layout (`.jsonl`, `.json`, `.json.gz`).

Never loads the file whole: the bulk snapshot is several GB. A bad line does not
stop the stream; it comes out as a `Rejected` naming file, line, record and field,
so the caller can quarantine it and go on.
"""

from __future__ import annotations

import gzip
import io
import zlib
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import IO, Any

from pith_pipeline.core.arxiv_record import ArxivRecord
from pith_pipeline.core.canonical_json import loads
from pith_pipeline.core.limits import DEFAULT_LIMITS, InputLimits
from pith_pipeline.errors import DamagedInputError, InputError
from pith_pipeline.items import Item, Rejected

#: how much of an over-long line is kept in the quarantine (its start names it)
KEPT_OF_LONG_LINE = 4096


def parse_line(line: bytes, where: str) -> Item:
    """One snapshot line -> record, or a reject carrying the line's exact bytes."""
    raw = line.rstrip(b"\r\n")
    try:
        # strict, and a key given twice is refused: which of two titles would be signed
        # depends on the reader (orjson keeps the last, others the first)
        obj = loads(line)
    except ValueError as exc:  # orjson's errors and DuplicateKeyError
        return Rejected.of_bytes(where, f"invalid JSON: {exc}", raw)
    try:
        return ArxivRecord.from_json(obj, where=where, raw=raw)
    except InputError as exc:
        return Rejected.of_bytes(where, exc.message, raw, exc.record_id, exc.field)


def iter_jsonl(
    path: str | Path | IO[bytes],
    *,
    categories: set[str] | None = None,
    submitted_from: datetime | None = None,
    submitted_until: datetime | None = None,
    name: str | None = None,
    limits: InputLimits = DEFAULT_LIMITS,
) -> Iterator[Item]:
    """Records (and rejects) from a JSON-lines file, optionally filtered.

    `path` may also be an open binary stream (gzip-compressed or not; e.g. a download
    in progress), read line by line. `categories` keeps records with any listed
    category (`cs.LG`) or archive (`cs`); the dates filter on the v1 submission time,
    `until` exclusive. A line over `limits.line_bytes` is a reject (its start kept); a
    file that cannot be read to its end raises `DamagedInputError` naming it and where.
    """
    if isinstance(path, str | Path):
        p = Path(path)
        with p.open("rb") as raw_file:
            fh = _open_stream(raw_file, p.suffix == ".gz")
            yield from _iter_lines(
                fh, name or p.name, categories, submitted_from, submitted_until, limits, raw_file.tell
            )
        return
    raw: Any = path
    stream: Any = raw if isinstance(raw, io.BufferedReader) else io.BufferedReader(raw)
    lines: Any = gzip.GzipFile(fileobj=stream) if stream.peek(2)[:2] == b"\x1f\x8b" else stream
    yield from _iter_lines(
        lines,
        name or str(getattr(path, "name", "<stream>")),
        categories,
        submitted_from,
        submitted_until,
        limits,
        _teller(stream),
    )


def _open_stream(raw: IO[bytes], gz_suffix: bool) -> IO[bytes]:
    magic = raw.peek(2)[:2] if isinstance(raw, io.BufferedReader) else b""
    if gz_suffix or magic == b"\x1f\x8b":
        return gzip.GzipFile(fileobj=raw)  # type: ignore[return-value]
    return raw


def _teller(stream: Any) -> Callable[[], int] | None:
    def tell() -> int:
        return int(stream.tell())

    try:
        stream.tell()
    except (OSError, ValueError, AttributeError):
        return None
    return tell


def _read_line(fh: IO[bytes], limit: int) -> tuple[bytes, int]:
    """The next line (at most `limit` + 1 bytes of it) and its full length; the rest of
    an over-long line is read and dropped in pieces, never held whole."""
    line = fh.readline(limit + 1)
    if len(line) <= limit or line.endswith(b"\n"):
        return line, len(line)
    size = len(line)
    while True:
        more = fh.readline(limit + 1)
        size += len(more)
        if not more or more.endswith(b"\n"):
            return line, size


def _iter_lines(
    fh: IO[bytes],
    label: str,
    categories: set[str] | None,
    since: datetime | None,
    until: datetime | None,
    limits: InputLimits = DEFAULT_LIMITS,
    position: Callable[[], int] | None = None,
) -> Iterator[Item]:
    n = 0
    while True:
        try:
            line, size = _read_line(fh, limits.line_bytes)
        except (EOFError, zlib.error, gzip.BadGzipFile, OSError) as exc:
            where = ""
            if position is not None:
                try:
                    where = f", at byte {position()} of the file"
                except (OSError, ValueError):
                    where = ""
            raise DamagedInputError(
                f"{label}: damaged input after line {n}{where}: {exc} "
                "(records before it were read; repair or download the file again)"
            ) from None
        if not line:
            return
        if n == 0:
            line = without_bom(line)
        n += 1
        if size > limits.line_bytes:
            yield Rejected.of_bytes(
                f"{label}:{n}",
                f"line of {size} bytes, over the limit of {limits.line_bytes} "
                f"(the first {KEPT_OF_LONG_LINE} bytes are kept here)",
                _utf8_prefix(line[:KEPT_OF_LONG_LINE]),
            )
            continue
        if not line.strip():
            continue
        item = parse_line(line, f"{label}:{n}")
        if isinstance(item, ArxivRecord) and not _keep(item, categories, since, until):
            continue
        yield item


#: a UTF-8 byte order mark: some editors and exporters write one before the text
UTF8_BOM = b"\xef\xbb\xbf"


def without_bom(first_line: bytes) -> bytes:
    """A file's first line without a UTF-8 byte order mark before it.

    Why: the mark is no part of the first record (JSON forbids it, so the record was
    quarantined); only at the very start of a file is it a mark. Anywhere else it is
    input, and the line stays a reject."""
    return first_line[len(UTF8_BOM) :] if first_line.startswith(UTF8_BOM) else first_line


def _utf8_prefix(data: bytes) -> bytes:
    """`data` without a UTF-8 sequence cut at its end (so a cut line stays text)."""
    for cut in range(len(data), max(len(data) - 4, 0) - 1, -1):
        try:
            data[:cut].decode("utf-8")
        except UnicodeDecodeError:
            continue
        return data[:cut]
    return data


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
