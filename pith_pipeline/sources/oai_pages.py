"""What an OAI-PMH harvest stores and reports, apart from fetching: the deterministic
gzip of a stored page and its capped inflation, a window's checkpoint, the identity of
a page's content, and the findings about records listed outside their window.

No HTTP here: a build step that reads stored pages back (`runs.chunks`) imports this,
not the client (`sources.oai_client`).
"""

from __future__ import annotations

import gzip
import hashlib
import zlib
from dataclasses import dataclass, field
from datetime import date
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from pith_pipeline.core.arxiv_record import ArxivRecord
from pith_pipeline.core.limits import DEFAULT_LIMITS
from pith_pipeline.errors import DamagedInputError
from pith_pipeline.sources.arxivraw import Page
from pith_pipeline.window import Window


def gz(data: bytes) -> bytes:
    """Deterministic gzip (no timestamp), so identical responses store identical bytes."""
    return gzip.compress(data, compresslevel=6, mtime=0)


def gunzip(data: bytes, where: str, cap: int = DEFAULT_LIMITS.response_bytes) -> bytes:
    """A stored page's bytes: one gzip member, at most `cap` bytes when inflated.

    Why not `gzip.decompress`: a truncated object raised a bare `EOFError` (which the
    CLI reports as Ctrl-C, "aborted") and one that inflates without end was inflated
    whole. No page is stored bigger than a response may be (`response_bytes`), so
    anything bigger, or damaged, is `DamagedInputError` naming the object.
    """
    inflate = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    try:
        body = inflate.decompress(data, cap + 1)
    except zlib.error as exc:
        raise DamagedInputError(f"{where}: damaged gzip ({exc}); move it away to harvest it again") from None
    if len(body) > cap:
        raise DamagedInputError(
            f"{where}: inflates to more than {cap} bytes, the limit of a response; "
            "no page is stored that big (see docs/pages/input-limits.md)"
        )
    if not inflate.eof or inflate.unused_data:
        raise DamagedInputError(
            f"{where}: damaged gzip ({'truncated' if not inflate.eof else 'data after its end'}); "
            "move it away to harvest it again"
        )
    return body


@dataclass(slots=True)
class Checkpoint:
    """Where a window's harvest stands; replaced after every committed page."""

    window: Window
    attempt: int = 1
    pages_done: int = 0
    resumption_token: str | None = None
    complete: bool = False
    complete_list_size: int | None = None
    records: int = 0
    deleted: int = 0
    restarts: int = 0
    oai_url: str = ""
    updated_at: str = ""
    #: digests (`short_digest`) of the resumption tokens this attempt has used and of the
    #: pages it has committed: one coming back means the list goes round, and keeping
    #: them here means a rerun does not start another round (see `_check_progress`)
    seen_tokens: list[str] = field(default_factory=list)
    seen_pages: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "window": self.window.oai_json(),
            "oai_url": self.oai_url,
            "attempt": self.attempt,
            "pages_done": self.pages_done,
            "resumption_token": self.resumption_token,
            "complete": self.complete,
            "complete_list_size": self.complete_list_size,
            "records": self.records,
            "deleted": self.deleted,
            "restarts": self.restarts,
            "updated_at": self.updated_at,
            "seen_tokens": self.seen_tokens,
            "seen_pages": self.seen_pages,
        }

    @classmethod
    def from_json(cls, window: Window, obj: dict[str, Any]) -> Checkpoint:
        token = obj.get("resumption_token")
        # checkpoints written before the lists existed: the current token is known used
        tokens = obj.get("seen_tokens", [short_digest(token)] if isinstance(token, str) and token else [])
        pages = obj.get("seen_pages", [])
        for seen in (tokens, pages):
            if not isinstance(seen, list) or not all(isinstance(d, str) for d in seen):
                raise TypeError("seen_tokens and seen_pages must be lists of strings")
        return cls(
            window=window,
            attempt=int(obj.get("attempt", 1)),
            pages_done=int(obj.get("pages_done", 0)),
            resumption_token=obj.get("resumption_token"),
            complete=bool(obj.get("complete", False)),
            complete_list_size=obj.get("complete_list_size"),
            records=int(obj.get("records", 0)),
            deleted=int(obj.get("deleted", 0)),
            restarts=int(obj.get("restarts", 0)),
            oai_url=str(obj.get("oai_url", "")),
            updated_at=str(obj.get("updated_at", "")),
            seen_tokens=list(tokens),
            seen_pages=list(pages),
        )


def short_digest(text: str) -> str:
    """A short name for a token or a page's content (64 bits: a collision would need a
    server that tries, and costs only a window stopped early)."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def page_digest(page: Page) -> str:
    """What a page lists, whatever its token and response date: the identity of each
    record (id and datestamp), deletion and reject, in order-free form."""
    parts = []
    for item in page.items:
        if isinstance(item, ArxivRecord):
            parts.append(f"r {item.id} {item.update_date}")
        else:
            parts.append(f"x {item.record_id} {short_digest(item.raw)}")
    parts.extend(f"d {d.arxiv_id} {d.datestamp}" for d in page.deleted)
    return short_digest("\n".join(sorted(parts)))


@dataclass(slots=True)
class HarvestedPage:
    """A parsed page and where its raw bytes are stored."""

    key: str
    page: Page
    number: int
    attempt: int = 1
    from_store: bool = False
    complete_list_size: int | None = None


#: how many records outside their window a run lists by name (all are counted)
OUTSIDE_WINDOW_LISTED = 1000


def public_url(url: str) -> str:
    """`url` as it may be shown: without user:password and without a query (either may
    hold a credential), so a log line or manifest can name the server safely."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:
        port = None
    netloc = host + (f":{port}" if port is not None else "")
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def datestamp_day(datestamp: str | None) -> date | None:
    """The day of an OAI `header/datestamp` (`YYYY-MM-DD` or `YYYY-MM-DDThh:mm:ssZ`), or
    None when there is none or it is not a date."""
    if not datestamp or len(datestamp) < 10:
        return None
    try:
        return date.fromisoformat(datestamp[:10])
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class OutsideWindow:
    """A record (or deletion) a server listed for a window its datestamp is not in.

    The datestamp is the OAI `header/datestamp` (`ArxivRecord.update_date`,
    `Deleted.datestamp`); a record without a readable one is not shown to be in the
    window, and counts as outside it (`datestamp` None)."""

    arxiv_id: str
    datestamp: str | None
    deleted: bool
    window: str
    page: str

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.arxiv_id,
            "datestamp": self.datestamp,
            "deleted": self.deleted,
            "window": self.window,
            "page": self.page,
        }


def outside_window(page: Page, window: Window, key: str) -> list[OutsideWindow]:
    """The page's records and deletions whose datestamp day is not in `window`
    (rejected records have no trusted datestamp and are quarantined anyway)."""
    out = []
    for item in page.items:
        if isinstance(item, ArxivRecord):
            day = datestamp_day(item.update_date)
            if day is None or not window.contains(day):
                out.append(OutsideWindow(item.id, item.update_date, False, window.id, key))
    for d in page.deleted:
        day = datestamp_day(d.datestamp)
        if day is None or not window.contains(day):
            out.append(OutsideWindow(d.arxiv_id, d.datestamp, True, window.id, key))
    return out


def weekdays(window: Window, before: date) -> list[str]:
    """The Monday-to-Friday days of a closed window that ended before `before` (arXiv
    announces on each of them; a day not over yet may still get its records)."""
    if window.start is None or window.end is None:
        return []
    return [
        w.start.isoformat()
        for w in window.days()
        if w.start is not None and w.start.weekday() < 5 and w.start < before
    ]


@dataclass(slots=True)
class HarvestStats:
    """What the harvester saw, beyond the records themselves.

    `outside_window` counts the records and deletions listed for a window their
    datestamp is not in (`outside_listed`: the first `OUTSIDE_WINDOW_LISTED` of them);
    `warnings`: one JSON object per finding, each with a stable `code`
    (`outside-window`, `empty-weekday`), as the run manifest lists them."""

    requests: int = 0
    pages: int = 0
    pages_from_store: int = 0
    malformed_pages: int = 0
    refused_tokens: int = 0
    restarts: int = 0
    windows_already_complete: int = 0
    malformed_keys: list[str] = field(default_factory=list)
    outside_window: int = 0
    outside_listed: list[OutsideWindow] = field(default_factory=list)
    warnings: list[dict[str, Any]] = field(default_factory=list)

    def note_outside(
        self, window: Window, found: list[OutsideWindow], key: str, server: str, request: dict[str, str]
    ) -> str:
        """Count and list the records of page `key` outside `window` (`found`), and add
        them to the window's one `outside-window` warning; the line to log.

        They are still built: they are real arXiv records, publishing is idempotent and
        content-addressed, and dropping them would lose what a server said (records
        re-dated while a list was served). What the run must not do is pass them off
        as the window's: the run manifest counts them apart and names each one."""
        self.outside_window += len(found)
        room = OUTSIDE_WINDOW_LISTED - len(self.outside_listed)
        self.outside_listed.extend(found[: max(room, 0)])
        server = public_url(server)
        days = sorted({o.datestamp or "no datestamp" for o in found})
        # one warning per window in the manifest, however many pages it took
        entry = next(
            (
                w
                for w in self.warnings
                if w["code"] == "outside-window" and w["window"] == window.id and w["server"] == server
            ),
            None,
        )
        if entry is None:
            entry = {
                "code": "outside-window",
                "window": window.id,
                "server": server,
                "request": window.params() if "verb" in request else dict(request),
                "pages": [],
                "count": 0,
                "datestamps": [],
            }
            self.warnings.append(entry)
        entry["pages"].append(key)
        entry["count"] += len(found)
        entry["datestamps"] = sorted(set(entry["datestamps"]) | set(days))
        entry["message"] = (
            f"outside-window: {server} answered ListRecords {_request_text(entry['request'])} "
            f"(window {window.id}) with {entry['count']} records dated outside it "
            f"({', '.join(entry['datestamps'])}); built, and counted as outside_window"
        )
        return (
            f"outside-window: {server} answered ListRecords {_request_text(request)} for window "
            f"{window.id} with {len(found)} records dated outside it ({', '.join(days)}), page {key}; "
            "built, and counted as outside_window in the run manifest"
        )

    def note_empty(self, window: Window, days: list[str], server: str, request: dict[str, str]) -> str:
        """Add the `empty-weekday` warning of a window whose weekdays `days` listed
        nothing; the line to log."""
        server = public_url(server)
        message = (
            f"empty-weekday: {server} listed no records for window {window.id} "
            f"({_request_text(request)}), which has the weekdays {', '.join(days)}; arXiv "
            "announces every weekday, so unless those were holidays the server answered wrongly"
        )
        self.warnings.append(
            {
                "code": "empty-weekday",
                "window": window.id,
                "weekdays": days,
                "server": server,
                "request": dict(request),
                "message": message,
            }
        )
        return message


def _request_text(request: dict[str, str]) -> str:
    """A request's parameters as `k=v` words (the verb is said by the message)."""
    return " ".join(f"{k}={v}" for k, v in request.items() if k != "verb")
