"""Streaming reader for JSON lines in the snapshot layout (`.jsonl`, `.json`, `.json.gz`).

Never loads the file whole: the bulk snapshot is several GB. A bad line does not
stop the stream; it comes out as a `Rejected` naming file, line, record and field,
so the caller can quarantine it and go on.
"""

from __future__ import annotations

import gzip
import io
import zlib
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from pathlib import Path
from typing import IO, Any

import orjson

from pith_pipeline.core.arxiv_record import ArxivRecord
from pith_pipeline.core.canonical_json import loads
from pith_pipeline.core.limits import DEFAULT_LIMITS, REJECT_OVERHEAD, InputLimits
from pith_pipeline.errors import DamagedInputError, InputError, UnreadableInputError
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
        with open_input(p) as raw_file:
            fh = open_stream(raw_file, p.suffix == ".gz")
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


def open_input(path: Path) -> IO[bytes]:
    """`path` opened for reading, or one `UnreadableInputError` naming it (a bare
    FileNotFoundError or IsADirectoryError would reach the person as a traceback)."""
    try:
        return path.open("rb")
    except OSError as exc:
        raise UnreadableInputError(f"{path}: cannot read the input file ({exc.strerror or exc})") from None


def open_stream(raw: IO[bytes], gz_suffix: bool) -> IO[bytes]:
    """`raw`, or its gzip decompression when it is named `.gz` or starts like gzip."""
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


def read_line(
    fh: IO[bytes], limit: int, label: str, read_so_far: str, position: Callable[[], int] | None
) -> tuple[bytes, int]:
    """`_read_line`, with a damaged stream turned into one `DamagedInputError`.

    Why one place: gzip reports a truncated file as `EOFError`, which the CLI's click
    takes for Ctrl-D ("aborted", exit 130), and a bad header as `BadGzipFile`; every
    reader of input files (whole files and the byte ranges of `snapshot_ranges`)
    must name the file and how far it got instead. `read_so_far` says that
    ("line 12", "reading 4096 bytes").
    """
    try:
        return _read_line(fh, limit)
    except _DAMAGE as exc:
        raise _damaged(label, read_so_far, position, exc) from None


_DAMAGE = (EOFError, zlib.error, gzip.BadGzipFile, OSError)

#: what a file that is not JSON lines starts with (after any gzip was taken off)
_MAGIC = (
    (b"\x1f\x8b", "gzip twice"),
    (b"BZh", "bzip2"),
    (b"\xfd7zXZ\x00", "xz"),
    (b"\x28\xb5\x2f\xfd", "zstd"),
    (b"PK\x03\x04", "zip"),
    (b"7z\xbc\xaf\x27\x1c", "7z"),
)


def _damaged(
    label: str, read_so_far: str, position: Callable[[], int] | None, exc: BaseException
) -> DamagedInputError:
    where = ""
    if position is not None:
        try:
            where = f", at byte {position()} of the file"
        except (OSError, ValueError):
            where = ""
    return DamagedInputError(
        f"{label}: damaged input after {read_so_far}{where}: {exc} "
        "(records before it were read; repair or download the file again)"
    )


def _is_json(line: bytes) -> bool:
    try:
        orjson.loads(line)
    except orjson.JSONDecodeError:
        return False
    return True


def check_start(fh: IO[bytes], label: str, position: Callable[[], int] | None = None) -> None:
    """Refuse a file that is not JSON lines at all, before its first line.

    Why: a binary file, or a snapshot compressed with something other than gzip, was
    read as lines of text, and every "line" quarantined: exit 0, and the whole file
    held in memory (base64) as quarantine entries. JSON text never starts with these
    magic numbers nor holds a NUL byte. Only the start decides (NUL bytes, and a first
    line that is not JSON): further in, a line of junk is one record's reject.
    """
    peek = getattr(fh, "peek", None)
    if peek is None:
        return
    try:
        head: bytes = peek(4096)[:4096]
    except _DAMAGE as exc:
        raise _damaged(label, "line 0", position, exc) from None
    for magic, name in _MAGIC:
        if head.startswith(magic):
            raise DamagedInputError(
                f"{label}: compressed with {name}, which is not read here; decompress it "
                "first (JSON lines are read as they are or gzip-compressed)"
            )
    if b"\x00" in head and not _is_json(head.split(b"\n", 1)[0]):
        raise DamagedInputError(
            f"{label}: binary data (or UTF-16/32 text), not UTF-8 JSON lines "
            f"(a NUL byte at byte {head.index(0)} of its content)"
        )


def oversized(where: str, line: bytes, size: int, limit: int) -> Rejected:
    """The reject for a line over `limit` bytes: its start is kept, to name it."""
    return Rejected.of_bytes(
        where,
        f"line of {size} bytes, over the limit of {limit} "
        f"(the first {KEPT_OF_LONG_LINE} bytes are kept here)",
        _utf8_prefix(line[:KEPT_OF_LONG_LINE]),
    )


class RejectBudget:
    """Stops a file that is mostly rejects.

    Why: 911 bytes of gzip (300,000 lines of `{}`) made 387 MB of quarantine, and a
    small gzip bomb any amount. Rejects are spooled to disk, not held in memory
    (`_internal/quarantine_spool.py`), but the quarantine object is still stored whole.
    A real snapshot has few rejects; one with more than `limits.rejected_bytes` of
    them is not arXiv metadata, and fails whole like a damaged file.
    """

    def __init__(self, label: str, limits: InputLimits) -> None:
        self.label = label
        self.limit = limits.rejected_bytes
        self.spent = 0

    def spend(self, item: Rejected, read_so_far: str) -> Rejected:
        self.spent += len(item.raw) + REJECT_OVERHEAD
        if self.spent > self.limit:
            raise DamagedInputError(
                f"{self.label}: more than {self.limit} bytes of rejected lines by {read_so_far} "
                "(each is kept whole in the quarantine); the file is probably not "
                "arXiv metadata (see docs/pages/input-limits.md)"
            )
        return item


def _iter_lines(
    fh: IO[bytes],
    label: str,
    categories: set[str] | None,
    since: datetime | None,
    until: datetime | None,
    limits: InputLimits = DEFAULT_LIMITS,
    position: Callable[[], int] | None = None,
) -> Iterator[Item]:
    check_start(fh, label, position)

    def lines() -> Iterator[tuple[str, str, bytes, int]]:
        n = 0
        while True:
            line, size = read_line(fh, limits.line_bytes, label, f"line {n}", position)
            if not line:
                return
            n += 1
            yield f"{label}:{n}", f"line {n}", line, size

    def keep(rec: ArxivRecord) -> bool:
        return _keep(rec, categories, since, until)

    yield from line_items(lines(), label, limits, keep, at_file_start=True)


def line_items(
    lines: Iterable[tuple[str, str, bytes, int]],
    label: str,
    limits: InputLimits,
    keep: Callable[[ArxivRecord], bool],
    *,
    at_file_start: bool,
) -> Iterator[Item]:
    """The items of a file's lines, each `(where, reached, line, size)`: what every
    snapshot reader (a whole file, a byte range of one) does with a line, in one place.

    A line over `limits.line_bytes` is a reject holding its start; the file's first
    line (`at_file_start`: `lines` begin there) loses a byte order mark; blank lines
    are skipped; a record `keep` refuses is left out; every reject is spent from the
    file's `RejectBudget` (`reached`, e.g. `line 7`, says where it ran out).
    """
    budget = RejectBudget(label, limits)
    first = at_file_start
    for where, reached, line, size in lines:
        if first:  # a byte order mark is no part of the first record
            line = without_bom(line)
            first = False
        if size > limits.line_bytes:
            yield budget.spend(oversized(where, line, size, limits.line_bytes), reached)
            continue
        if not line.strip():
            continue
        item = parse_line(line, where)
        if isinstance(item, Rejected):
            budget.spend(item, reached)
        elif not keep(item):
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
