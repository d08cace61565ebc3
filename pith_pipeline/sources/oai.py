"""OAI-PMH harvesting of arXiv (`ListRecords`, `GetRecord`), resumable and replayable.

Why a small harvester around `oaipmh-scythe` rather than its iterators: scythe's
`list_records()` fetches, parses and follows resumption tokens in one generator, so
there is no point at which the raw page can be stored before it is parsed, no
checkpoint between pages, and its retries read `Retry-After` only as seconds. We
keep scythe for what it does well — the endpoint, the HTTP configuration and its
`httpx2` client (pinned here to one connection) — and drive the protocol ourselves:

1. every request goes through the run's politeness `Gate` (one place for the 3 s
   interval, `Retry-After` in both forms and jittered backoff);
2. each response is stored gzip-compressed (deterministic: `mtime=0`) under the
   store's `raw/` prefix, write-once, before any record is built from it;
3. after the caller has published a page's records, a checkpoint records the pages
   done and the next resumption token, so a killed harvest resumes where it stopped;
4. a refused token (`badResumptionToken`, tokens expire) restarts the window from its
   start as a new *attempt*; earlier attempts' pages stay stored (their records are
   already published, and republishing them is a no-op), so nothing is lost or doubled.

Raw layout (`<root>` is `raw/oai`, or `raw/sample` for the bundled sample):

    <root>/arXivRaw/<from>_<until>[_<set>]/checkpoint.json
    <root>/arXivRaw/<from>_<until>[_<set>]/attempt-001/page-00001.xml.gz
    <root>/arXivRaw/<from>_<until>[_<set>]/attempt-001/page-00002.malformed-01.xml.gz
    <root>/arXivRaw/<from>_<until>[_<set>]/attempt-001/page-00003.refused.xml.gz
    <root>/arXivRaw/getrecord/<run id>/00001-<id>.xml.gz

Only `page-NNNNN.xml.gz` files are replayed; the others are kept as evidence.
A page whose bytes were stored but whose records were not yet committed (the run
died in between) is taken from the store on resume, not fetched again.
"""

from __future__ import annotations

import gzip
import hashlib
import logging
import re
import time
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx2
from oaipmh_scythe import Scythe
from oaipmh_scythe.config import HTTPConfig

from pith_pipeline import config
from pith_pipeline._internal.capped import deadline_scope, deadline_transport, read_capped
from pith_pipeline.clock import system_clock
from pith_pipeline.core.arxiv_record import ArxivRecord
from pith_pipeline.core.canonical_json import dumps_pretty, loads
from pith_pipeline.core.limits import DEFAULT_LIMITS, InputLimits
from pith_pipeline.core.timeutil import Clock, iso_seconds
from pith_pipeline.errors import (
    DamagedInputError,
    RequestDeadlineError,
    ResponseTooLargeError,
    ResumptionLoopError,
    TerminalError,
    TransientError,
)
from pith_pipeline.items import Rejected
from pith_pipeline.sources.arxivraw import MalformedPageError, Page, oai_identifier, parse_page
from pith_pipeline.sources.politeness import Gate, Politeness
from pith_pipeline.storage.base import Store
from pith_pipeline.window import METADATA_PREFIX, Window

log = logging.getLogger(__name__)

DEFAULT_OAI_URL = config.DEFAULT_OAI_URL
OAI_URL_ENV = config.env_name("oai_url")
RAW_ROOT = "raw/oai"
# store keys can be planted by anyone who can write the store: ASCII digits, no `$`
_PAGE = re.compile(r"/attempt-([0-9]+)/page-([0-9]+)\.xml\.gz\Z")
_GETRECORD = re.compile(r"/getrecord/[^/]+/[0-9]+-[^/]+\.xml\.gz\Z")
MAX_RESTARTS = 3


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
    #: digests (`_digest`) of the resumption tokens this attempt has used and of the
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
        tokens = obj.get("seen_tokens", [_digest(token)] if isinstance(token, str) and token else [])
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


def _digest(text: str) -> str:
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
            parts.append(f"x {item.record_id} {_digest(item.raw)}")
    parts.extend(f"d {d.arxiv_id} {d.datestamp}" for d in page.deleted)
    return _digest("\n".join(sorted(parts)))


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


class _OneConnectionScythe(Scythe):
    """scythe's client, limited to one connection, with an optional transport."""

    def __init__(
        self, endpoint: str, policy: Politeness, transport: httpx2.BaseTransport | None = None
    ) -> None:
        super().__init__(
            endpoint, http_config=HTTPConfig(timeout=policy.timeout, user_agent=policy.user_agent)
        )
        self._transport = transport

    @property
    def client(self) -> httpx2.Client:
        if self._client is None or self._client.is_closed:
            limits = httpx2.Limits(max_connections=1, max_keepalive_connections=1)
            self._client = httpx2.Client(
                headers={"Accept": "text/xml, application/xml", "User-Agent": self.http_config.user_agent},
                timeout=self.http_config.timeout,
                limits=limits,
                follow_redirects=False,  # see OAIClient.request
                # sockets that honour the request's total deadline (see capped.py)
                transport=self._transport or deadline_transport(limits),
            )
        return self._client


class OAIClient:
    """HTTP for OAI-PMH: scythe's client, every request through the gate.

    Bodies are streamed with a cap (`limits.response_bytes`) and every request has a
    total deadline (`limits.request_deadline`) on top of the read timeout.
    """

    def __init__(
        self,
        base_url: str = DEFAULT_OAI_URL,
        *,
        gate: Gate | None = None,
        transport: httpx2.BaseTransport | None = None,
        limits: InputLimits = DEFAULT_LIMITS,
    ) -> None:
        self.base_url = base_url
        self.gate = gate or Gate()
        self.limits = limits
        self._scythe = _OneConnectionScythe(base_url, self.gate.policy, transport)

    def close(self) -> None:
        self._scythe.close()

    def __enter__(self) -> OAIClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _get(
        self, client: httpx2.Client, params: dict[str, str], what: str, too_large: list[bool]
    ) -> httpx2.Response:
        """One GET, its body read with the cap and the deadline (`too_large` records
        whether it was cut, so the gate still sees a response and keeps its spacing)."""
        deadline = self.limits.request_deadline
        with deadline_scope(deadline) as started:
            try:
                request = client.build_request("GET", self.base_url, params=params)
                response = client.send(request, stream=True)
                try:
                    body = read_capped(
                        response.iter_bytes(),
                        cap=self.limits.response_bytes,
                        started=started,
                        deadline=deadline,
                        what=what,
                    )
                finally:
                    response.close()
            except httpx2.TimeoutException:
                if time.monotonic() - started < deadline:
                    raise
                raise RequestDeadlineError(
                    f"{what}: no complete response within the deadline of {deadline:g} s"
                ) from None
        response._content = body.data  # what `read()` would have set
        too_large[:] = [body.too_large]
        return response

    def request(self, params: dict[str, str]) -> httpx2.Response:
        what = f"OAI-PMH {params.get('verb')} at {self.base_url}"
        client = self._scythe.client
        too_large = [False]
        try:
            response = self.gate.send(
                lambda: self._get(client, params, what, too_large),
                what=what,
                retry_on=(
                    httpx2.TimeoutException,
                    httpx2.NetworkError,
                    httpx2.RemoteProtocolError,
                    RequestDeadlineError,
                ),
                endpoint=self.base_url,
            )
        except httpx2.HTTPError as exc:
            raise TransientError(f"{what}: {type(exc).__name__}: {exc}") from None
        if too_large[0]:
            raise ResponseTooLargeError(
                f"{what}: response larger than the limit of {self.limits.response_bytes} bytes; "
                "stopped reading it (see docs/pages/input-limits.md)"
            )
        if 300 <= response.status_code < 400:  # following it would be a second, unspaced request
            location = response.headers.get("location")
            if location is None:
                raise TerminalError(f"{what}: HTTP {response.status_code} redirect without a Location")
            raise TerminalError(
                f"{what}: HTTP {response.status_code}, redirected to {location}; "
                f"set --oai-url (or {OAI_URL_ENV}) to that address"
            )
        return response


class _TokenRefused(Exception):
    pass


class Harvester:
    """Harvests windows and single records into a store's raw area, and replays them."""

    def __init__(
        self,
        store: Store,
        client: OAIClient | None,
        *,
        raw_root: str = RAW_ROOT,
        metadata_prefix: str = METADATA_PREFIX,
        clock: Clock = system_clock,
        limits: InputLimits = DEFAULT_LIMITS,
    ) -> None:
        self.store = store
        self.limits = limits
        self.client = client
        self.raw_root = raw_root.rstrip("/")
        self.prefix = metadata_prefix
        self.clock = clock
        self.stats = HarvestStats()
        #: findings go to `stats` only, not the log (`findings`: already logged once)
        self.quiet = False

    # -- keys --------------------------------------------------------------
    def window_prefix(self, window: Window) -> str:
        return f"{self.raw_root}/{window.metadata_prefix}/{window.label}"

    def checkpoint_key(self, window: Window) -> str:
        return f"{self.window_prefix(window)}/checkpoint.json"

    def page_key(self, window: Window, attempt: int, number: int, suffix: str = "") -> str:
        return f"{self.window_prefix(window)}/attempt-{attempt:03d}/page-{number:05d}{suffix}.xml.gz"

    # -- checkpoints ---------------------------------------------------------
    def load_checkpoint(self, window: Window) -> Checkpoint | None:
        raw = self.store.get(self.checkpoint_key(window))
        if raw is None:
            return None
        try:
            return Checkpoint.from_json(window, loads(raw))
        except (ValueError, TypeError, AttributeError) as exc:
            raise TerminalError(
                f"{self.checkpoint_key(window)} in {self.store.url} is "
                f"unreadable ({exc}); move it away to start the window "
                "again"
            ) from None

    def _save(self, cp: Checkpoint) -> None:
        cp.updated_at = iso_seconds(self.clock())
        if self.client is not None:
            cp.oai_url = self.client.base_url
        self.store.put(self.checkpoint_key(cp.window), dumps_pretty(cp.to_json()) + b"\n")

    # -- fetching ------------------------------------------------------------
    def _need_client(self) -> OAIClient:
        if self.client is None:
            raise TerminalError("this harvester replays stored pages only (no OAI-PMH URL)")
        return self.client

    def _fetch(self, params: dict[str, str], where: str, malformed_key: Any) -> tuple[bytes, Page]:
        """One OAI response that is an OAI-PMH document; malformed ones are kept and retried."""
        client = self._need_client()
        policy = client.gate.policy
        for attempt in range(policy.max_retries + 1):
            sent = client.gate.requests
            response = client.request(params)
            self.stats.requests += client.gate.requests - sent  # retries included
            body = response.content
            status = response.status_code
            try:
                # OAI-PMH answers 200 and reports its errors in the body: any other status
                # (429 and 5xx were retried by the gate) is not a page, whatever the body
                if status != 200:
                    raise MalformedPageError(f"HTTP {status} from {client.base_url}", where=where)
                page = parse_page(body, where, limits=self.limits)
            except MalformedPageError as exc:
                self.stats.malformed_pages += 1
                key = self._free_key(malformed_key)
                self.store.put_once(key, gz(body), content_type="application/gzip")
                self.stats.malformed_keys.append(key)
                log.warning("%s (HTTP %s); kept as %s", exc, status, key)
                if status != 200:
                    raise TerminalError(
                        f"{where}: HTTP {status} from {client.base_url}; response kept as {key}"
                    ) from None
                if attempt >= policy.max_retries:
                    raise TransientError(
                        f"{where}: {exc.message}; gave up after "
                        f"{attempt + 1} tries; responses kept under "
                        f"{key.rsplit('/', 1)[0]}; rerun to resume"
                    ) from None
                client.gate.penalize(attempt)
                continue
            return body, page
        raise AssertionError("unreachable")

    def _free_key(self, make: Any) -> str:
        k = 1
        while self.store.exists(make(k)):
            k += 1
        key: str = make(k)
        return key

    # -- ListRecords windows ----------------------------------------------------
    def harvest(self, window: Window, *, refresh: bool = False) -> Iterator[HarvestedPage]:
        """Pages of one window, resuming from its checkpoint.

        The checkpoint advances when the consumer asks for the next page, i.e. after it
        has published the previous one. A complete window yields nothing unless
        `refresh`, which harvests it again as a new attempt.
        """
        cp = self.load_checkpoint(window) or Checkpoint(window)
        if cp.complete:
            if not refresh:
                self.stats.windows_already_complete += 1
                return
            cp = Checkpoint(window, attempt=cp.attempt + 1, restarts=cp.restarts)
            self._save(cp)
        # per run, not per window: a window that used up its restarts once must still
        # be able to start again later (its stored token has expired by then)
        restarts_left = MAX_RESTARTS
        while True:
            n = cp.pages_done + 1
            key = self.page_key(window, cp.attempt, n)
            where = key
            stored = self.store.get(key)
            try:
                if stored is not None:
                    body = gunzip(stored, key, self.limits.response_bytes)
                    page = parse_page(body, where, limits=self.limits)
                    from_store = True
                    self.stats.pages_from_store += 1
                else:
                    if n > 1 and not cp.resumption_token:
                        raise TerminalError(
                            f"{self.checkpoint_key(window)}: page {n} is due "
                            "but no resumption token is recorded"
                        )
                    params = (
                        window.params()
                        if n == 1
                        else {"verb": "ListRecords", "resumptionToken": str(cp.resumption_token)}
                    )
                    body, page = self._fetch(
                        params,
                        where,
                        lambda k, a=cp.attempt, m=n: self.page_key(window, a, m, f".malformed-{k:02d}"),
                    )
                    from_store = False
                    if page.error_code == "badResumptionToken":
                        self.store.put_once(
                            self.page_key(window, cp.attempt, n, ".refused"),
                            gz(body),
                            content_type="application/gzip",
                        )
                        raise _TokenRefused(page.error_message)
                    # `noRecordsMatch` is an empty window only as the answer to its first
                    # request; to a token it means the list broke off, records missing
                    if page.error_code is not None and (page.error_code != "noRecordsMatch" or n > 1):
                        bad = self._free_key(
                            lambda k, a=cp.attempt, m=n: self.page_key(window, a, m, f".error-{k:02d}")
                        )
                        self.store.put_once(bad, gz(body), content_type="application/gzip")
                        broke_off = " to a resumption token: the list broke off" if n > 1 else ""
                        raise TerminalError(
                            f"{where}: arXiv's OAI-PMH answered {page.error_code}{broke_off}: "
                            f"{page.error_message} (request {params}; response kept as {bad})"
                        )
                    self.store.put_once(key, gz(body), content_type="application/gzip")
            except _TokenRefused as exc:
                self.stats.refused_tokens += 1
                if restarts_left <= 0:
                    raise TransientError(
                        f"{self.window_prefix(window)}: resumption token refused again "
                        f"({exc}); restarted {MAX_RESTARTS} times in this run already; try later"
                    ) from None
                restarts_left -= 1
                log.warning(
                    "%s: resumption token refused (%s); restarting the window from its start", where, exc
                )
                self.stats.restarts += 1
                cp = Checkpoint(window, attempt=cp.attempt + 1, restarts=cp.restarts + 1)
                self._save(cp)
                continue
            self._check_progress(window, cp, page, where)
            self.stats.pages += 1
            server = cp.oai_url if from_store and cp.oai_url else self._need_client().base_url
            request = (
                window.params()
                if n == 1
                else {"verb": "ListRecords", "resumptionToken": str(cp.resumption_token)}
            )
            self._note_outside(window, page, key, server, request)
            if page.complete_list_size is not None:
                cp.complete_list_size = page.complete_list_size
            yield HarvestedPage(key, page, n, cp.attempt, from_store, cp.complete_list_size)
            cp.pages_done = n
            cp.resumption_token = page.resumption_token
            cp.records += len(page.items)
            cp.deleted += len(page.deleted)
            cp.complete = page.resumption_token is None
            self._save(cp)
            if cp.complete:
                if cp.records + cp.deleted == 0:
                    self._note_empty(window, self._need_client().base_url, window.params())
                return

    def _note_outside(
        self, window: Window, page: Page, key: str, server: str, request: dict[str, str]
    ) -> None:
        """Count, list and warn of the page's records outside `window`.

        They are still built: they are real arXiv records, publishing is idempotent and
        content-addressed, and dropping them would lose what a server said (records
        re-dated while a list was served). What the run must not do is pass them off
        as the window's: the run manifest counts them apart and names each one."""
        found = outside_window(page, window, key)
        if not found:
            return
        self.stats.outside_window += len(found)
        room = OUTSIDE_WINDOW_LISTED - len(self.stats.outside_listed)
        self.stats.outside_listed.extend(found[: max(room, 0)])
        server = public_url(server)
        days = sorted({o.datestamp or "no datestamp" for o in found})
        (log.debug if self.quiet else log.warning)(
            "outside-window: %s answered ListRecords %s for window %s with %d records dated "
            "outside it (%s), page %s; built, and counted as outside_window in the run manifest",
            server,
            _request_text(request),
            window.id,
            len(found),
            ", ".join(days),
            key,
        )
        # one warning per window in the manifest, however many pages it took
        entry = next(
            (
                w
                for w in self.stats.warnings
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
            self.stats.warnings.append(entry)
        entry["pages"].append(key)
        entry["count"] += len(found)
        entry["datestamps"] = sorted(set(entry["datestamps"]) | set(days))
        entry["message"] = (
            f"outside-window: {server} answered ListRecords {_request_text(entry['request'])} "
            f"(window {window.id}) with {entry['count']} records dated outside it "
            f"({', '.join(entry['datestamps'])}); built, and counted as outside_window"
        )

    def _note_empty(self, window: Window, server: str, request: dict[str, str]) -> None:
        """Warn of a window with a weekday that listed nothing: arXiv announces every
        weekday, so it is a holiday or a server that wrongly answers with nothing."""
        # the wall clock, not `self.clock`: SOURCE_DATE_EPOCH must not hide a day that is over
        days = weekdays(window, datetime.now(tz=UTC).date())
        if not days:
            return
        server = public_url(server)
        message = (
            f"empty-weekday: {server} listed no records for window {window.id} "
            f"({_request_text(request)}), which has the weekdays {', '.join(days)}; arXiv "
            "announces every weekday, so unless those were holidays the server answered wrongly"
        )
        (log.debug if self.quiet else log.warning)("%s", message)
        self.stats.warnings.append(
            {
                "code": "empty-weekday",
                "window": window.id,
                "weekdays": days,
                "server": server,
                "request": dict(request),
                "message": message,
            }
        )

    def _check_progress(self, window: Window, cp: Checkpoint, page: Page, where: str) -> None:
        """Stop a list that does not end, before its page is published.

        Why: a server that hands back a token already used, or new tokens for pages
        already seen (the same records again, or empty pages), or pages beyond its own
        `completeListSize`, would be followed forever, republishing the same records.
        The token and the page are recorded in `cp` (saved with the next commit).
        """
        stop = f"{self.window_prefix(window)}: "
        why = "; window stopped (the server's list does not end; try again later)"
        total = cp.records + cp.deleted + len(page.items) + len(page.deleted)
        size = page.complete_list_size if page.complete_list_size is not None else cp.complete_list_size
        if size is not None and total > size:
            raise ResumptionLoopError(
                f"{stop}{total} records by {where}, more than the completeListSize of {size} "
                f"the server announced{why}"
            )
        token = page.resumption_token
        if token is not None:
            token_digest = _digest(token)
            if token_digest in cp.seen_tokens:
                raise ResumptionLoopError(
                    f"{stop}resumption token {token[:200]!r} in {where} was already used in this window{why}"
                )
            cp.seen_tokens.append(token_digest)
        listed = page_digest(page)
        if listed in cp.seen_pages:
            what = "lists the same records as" if page.items or page.deleted else "is empty, like"
            raise ResumptionLoopError(f"{stop}{where} {what} an earlier page of this window{why}")
        cp.seen_pages.append(listed)

    def findings(self, window: Window, keys: Iterable[str]) -> HarvestStats:
        """What `harvest` warns of (records outside `window`, an empty weekday) for the
        stored pages `keys` of one complete attempt, from the store, without logging.

        For a harvest whose pages are built later (the Airflow tasks): a rerun of a
        complete window fetches nothing, yet its run manifest must say the same."""
        cp = self.load_checkpoint(window)
        server = (cp.oai_url if cp is not None else "") or "the stored pages"
        found = Harvester(self.store, None, raw_root=self.raw_root, limits=self.limits)
        found.quiet = True
        listed = 0
        for key in keys:
            data = self.store.get(key)
            if data is None:
                continue
            page = parse_page(gunzip(data, key, self.limits.response_bytes), key, limits=self.limits)
            listed += len(page.items) + len(page.deleted)
            found._note_outside(window, page, key, server, window.params())
        if listed == 0:
            found._note_empty(window, server, window.params())
        return found.stats

    # -- GetRecord -----------------------------------------------------------
    def get_records(self, ids: Iterable[str], run_id: str) -> Iterator[HarvestedPage]:
        """`GetRecord` for each id, each response stored before it is parsed."""
        base = f"{self.raw_root}/{self.prefix}/getrecord/{run_id}"
        for n, arxiv_id in enumerate(ids, start=1):
            safe = arxiv_id.replace("/", "_")
            key = f"{base}/{n:05d}-{safe}.xml.gz"
            params = {
                "verb": "GetRecord",
                "identifier": oai_identifier(arxiv_id),
                "metadataPrefix": self.prefix,
            }
            body, page = self._fetch(
                params, key, lambda k, b=base, m=n, s=safe: f"{b}/{m:05d}-{s}.malformed-{k:02d}.xml.gz"
            )
            self.store.put_once(key, gz(body), content_type="application/gzip")
            self.stats.pages += 1
            _explain_getrecord_error(page, arxiv_id, body)
            yield HarvestedPage(key, page, n)

    def last_harvested_until(self, set_spec: str | None = None) -> str | None:
        """The latest `until` of a complete window (same set) in the store, if any."""
        best: str | None = None
        for key in self.store.list(f"{self.raw_root}/{self.prefix}/"):
            if not key.endswith("/checkpoint.json"):
                continue
            raw = self.store.get(key)
            try:
                obj = loads(raw) if raw else {}
                w = obj["window"]
            except (ValueError, KeyError, TypeError):
                continue
            if obj.get("complete") and w.get("set") == set_spec and w.get("until"):
                best = max(best or "", str(w["until"]))
        return best

    # -- replay --------------------------------------------------------------
    def stored_pages(self, window: Window | None = None) -> list[str]:
        """Keys of stored pages in replay order: attempt, then page number."""
        prefix = (self.window_prefix(window) + "/") if window else f"{self.raw_root}/{self.prefix}/"
        keys = []
        for k in self.store.list(prefix):
            m = _PAGE.search(k)
            if m:
                keys.append((k[: m.start()], int(m.group(1)), int(m.group(2)), k))
            elif _GETRECORD.search(k) and ".malformed-" not in k:
                keys.append((k.rsplit("/", 1)[0], 0, 0, k))
            elif ".malformed-" in k:
                self.stats.malformed_pages += 1
        keys.sort()
        return [k for *_, k in keys]

    def replay(self, window: Window | None = None) -> Iterator[HarvestedPage]:
        """Stored pages parsed again, with no network: the run, minus arXiv."""
        cp = self.load_checkpoint(window) if window is not None else None
        server = (cp.oai_url if cp is not None else "") or "the stored pages"
        listed = 0
        for n, key in enumerate(self.stored_pages(window), start=1):
            data = self.store.get(key)
            if data is None:
                continue
            body = gunzip(data, key, self.limits.response_bytes)
            page = parse_page(body, key, limits=self.limits)
            if "/getrecord/" in key:
                ident = key.rsplit("/", 1)[1].split("-", 1)[1][: -len(".xml.gz")]
                _explain_getrecord_error(page, ident.replace("_", "/"), body)
            self.stats.pages += 1
            self.stats.pages_from_store += 1
            listed += len(page.items) + len(page.deleted)
            if window is not None:
                self._note_outside(window, page, key, server, {"replay": key})
            yield HarvestedPage(key, page, n, from_store=True)
        if window is not None and listed == 0:
            self._note_empty(window, server, {"replay": self.window_prefix(window)})


def _request_text(request: dict[str, str]) -> str:
    """A request's parameters as `k=v` words (the verb is said by the message)."""
    return " ".join(f"{k}={v}" for k, v in request.items() if k != "verb")


def _explain_getrecord_error(page: Page, arxiv_id: str, body: bytes) -> None:
    """A `GetRecord` error becomes a quarantined item: the id was asked for and not built.

    So does an answer holding another paper's record (or its deletion): a look-up builds
    only what was asked for, never what a server chose to send instead."""
    others = [i for i in page.items if isinstance(i, ArxivRecord) and i.id != arxiv_id]
    others_deleted = [d for d in page.deleted if d.arxiv_id != arxiv_id]
    if others or others_deleted:
        named = sorted({r.id for r in others} | {d.arxiv_id for d in others_deleted})
        reason = f"GetRecord for {oai_identifier(arxiv_id)} answered with another record: {', '.join(named)}"
        page.items = [i for i in page.items if not isinstance(i, ArxivRecord)]
        page.deleted = []
        page.items.append(Rejected.of_bytes(page.where, reason, body, arxiv_id, "id"))
        return
    if page.error_code is None:
        return
    reason = {"idDoesNotExist": f"arXiv's OAI-PMH has no record {oai_identifier(arxiv_id)}"}.get(
        page.error_code, f"OAI-PMH error {page.error_code}"
    )
    if page.error_message:
        reason += f" ({page.error_message})"
    page.items.append(Rejected.of_bytes(page.where, reason, body, arxiv_id, "id"))
