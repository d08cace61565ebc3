"""Ad-hoc selection through arXiv's search API (the `arxiv` package): ids only.

The Atom API has no licence and no version dates, so it is used only to *discover*
ids (`--query "cat:cs.LG AND submittedDate:[...]"`) or to check and normalise given ones
(`--ids 1909.11150v2,hep-lat/0305021`); the records themselves come from OAI-PMH
`GetRecord` in `arXivRaw`. The package's own HTTP has no timeout and ignores
`Retry-After`, so its session is replaced by one whose every request goes through
the run's politeness `Gate` (with a timeout); the package's own delay and retries are
switched off so they do not stack on ours.
"""

from __future__ import annotations

import contextlib
import logging
import re
import socket
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import arxiv
import requests
import urllib3
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection

from pith_pipeline import config
from pith_pipeline._internal.capped import read_capped
from pith_pipeline.core.arxiv_record import is_arxiv_id
from pith_pipeline.core.limits import DEFAULT_LIMITS, InputLimits
from pith_pipeline.errors import (
    InputError,
    RequestDeadlineError,
    ResponseTooLargeError,
    TerminalError,
    TransientError,
)
from pith_pipeline.sources.arxivraw import MalformedPageError, parse_xml
from pith_pipeline.sources.oai_pages import public_url
from pith_pipeline.sources.politeness import Gate

DEFAULT_API_URL = config.DEFAULT_API_URL
API_URL_ENV = config.env_name("arxiv_api_url")
_VERSIONED = re.compile(r"(.+?)(v[0-9]+)?", re.ASCII | re.DOTALL)  # fullmatch; the id is checked after
_ABS_URL = re.compile(r"^https?://[^/]+/abs/")
_ATOM_FEED = "{http://www.w3.org/2005/Atom}feed"
# arXiv's date ranges: YYYYMMDD[HHMM[SS]] in GMT, both ends inclusive
_SUBMITTED = re.compile(r"submittedDate:\[\s*([0-9]{8,14})\s+TO\s+([0-9]{8,14})\s*\]", re.ASCII | re.I)
_NOT_EVERY = re.compile(r"\b(OR|ANDNOT)\b")
log = logging.getLogger(__name__)


# -- a total deadline below HTTP ----------------------------------------------------------
# The read timeout restarts with every byte received, so a server that drips its status
# line or headers is never stopped by it. Connections register themselves with the
# request in progress (per thread); a watchdog shuts their sockets down at the deadline,
# which ends any blocked read at once.
_TRACK = threading.local()


def _track(conn: HTTPConnection) -> None:
    conns: list[HTTPConnection] | None = getattr(_TRACK, "conns", None)
    if conns is not None:
        conns.append(conn)


class _TrackedHTTPConnection(HTTPConnection):
    def request(self, *args: Any, **kwargs: Any) -> None:
        _track(self)
        super().request(*args, **kwargs)


class _TrackedHTTPSConnection(HTTPSConnection):
    def request(self, *args: Any, **kwargs: Any) -> None:
        _track(self)
        super().request(*args, **kwargs)


class _TrackedHTTPPool(urllib3.HTTPConnectionPool):
    ConnectionCls = _TrackedHTTPConnection


class _TrackedHTTPSPool(urllib3.HTTPSConnectionPool):
    ConnectionCls = _TrackedHTTPSConnection


class _DeadlineAdapter(HTTPAdapter):
    """requests' adapter with connections a deadline watchdog can find."""

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = {"http": _TrackedHTTPPool, "https": _TrackedHTTPSPool}


def _shutdown(conns: list[HTTPConnection]) -> None:
    for conn in conns:
        sock = getattr(conn, "sock", None)
        if sock is not None:
            with contextlib.suppress(OSError):  # already closed: nothing to stop
                sock.shutdown(socket.SHUT_RDWR)


class _GatedSession(requests.Session):
    """A requests session that asks the gate before every request, sets a timeout, and
    reads each body with a size cap and a total deadline (`InputLimits`)."""

    def __init__(self, gate: Gate, limits: InputLimits = DEFAULT_LIMITS) -> None:
        super().__init__()
        self.gate = gate
        self.limits = limits
        self.mount("http://", _DeadlineAdapter())
        self.mount("https://", _DeadlineAdapter())
        self.headers["User-Agent"] = gate.policy.user_agent

    def request(self, method: str | bytes, url: str | bytes, *args: Any, **kwargs: Any) -> requests.Response:
        verb = method.decode("ascii") if isinstance(method, bytes) else method
        target = url.decode("utf-8") if isinstance(url, bytes) else url
        kwargs.setdefault("timeout", self.gate.policy.timeout)
        kwargs["allow_redirects"] = False  # a followed redirect would be an unspaced request
        headers = dict(kwargs.pop("headers", None) or {})
        headers["User-Agent"] = self.gate.policy.user_agent  # ours, not the package's
        kwargs["headers"] = headers
        kwargs["stream"] = True  # the body is read here, capped and under the deadline
        send = super().request
        what = f"arXiv API {target}"
        too_large = [False]

        deadline = self.limits.request_deadline

        def fetch() -> requests.Response:
            started = time.monotonic()
            conns: list[HTTPConnection] = []
            _TRACK.conns = conns
            watchdog = threading.Timer(deadline, _shutdown, args=(conns,))
            watchdog.daemon = True
            watchdog.start()
            try:
                response = send(verb, target, *args, **kwargs)
                try:
                    body = read_capped(
                        _chunks(response),
                        cap=self.limits.response_bytes,
                        started=started,
                        deadline=deadline,
                        what=what,
                    )
                finally:
                    response.close()
            except requests.RequestException:
                if time.monotonic() - started < deadline:
                    raise
                raise RequestDeadlineError(
                    f"{what}: no complete response within the deadline of {deadline:g} s"
                ) from None
            finally:
                watchdog.cancel()
                _TRACK.conns = None
            response._content = body.data  # what reading `.content` would have set
            response._content_consumed = True
            too_large[:] = [body.too_large]
            return response

        try:
            response = self.gate.send(
                fetch,
                what=what,
                retry_on=(requests.Timeout, requests.ConnectionError, RequestDeadlineError),
                endpoint=target,
            )
        except requests.RequestException as exc:
            raise TransientError(f"arXiv API: {type(exc).__name__}: {exc}") from None
        if too_large[0]:
            raise ResponseTooLargeError(
                f"{what}: response larger than the limit of {self.limits.response_bytes} bytes; "
                "stopped reading it (see docs/pages/input-limits.md)"
            )
        if response.is_redirect:
            raise TerminalError(
                f"arXiv API {target}: redirected to "
                f"{response.headers.get('location')}; set --api-url (or "
                f"{API_URL_ENV}) to that address"
            )
        if response.status_code == 200:
            _check_feed(response.content, what, self.limits)
        return response


def _check_feed(body: bytes, what: str, limits: InputLimits) -> None:
    """Refuse an answer that is not an Atom feed, before the `arxiv` package reads it.

    Why: its feed parser is lenient, so an HTML error page or a feed cut short read as
    a feed without entries: `--query` found nothing, and every `--ids` id was
    quarantined as unknown to arXiv. Checked as OAI pages are (`parse_xml`: no DTD,
    UTF-8).
    """
    try:
        root = parse_xml(body, what, limits)
    except MalformedPageError as exc:
        raise TransientError(f"{what}: {exc.message}; try again later") from None
    if root.tag != _ATOM_FEED:
        raise TransientError(f"{what}: not an Atom feed (root element {root.tag!r}); try again later")


def _chunks(response: requests.Response) -> Iterator[bytes]:
    """The body as the socket delivers it (`read1`), so the deadline is checked between
    pieces however slowly they come; `iter_content` would wait for whole chunks."""
    raw = response.raw
    try:
        while True:
            chunk = raw.read1(64 * 1024, decode_content=True)
            if not chunk:
                return
            yield chunk
    except Exception as exc:  # urllib3's errors, as requests would have raised them
        if isinstance(exc, RequestDeadlineError):
            raise
        raise requests.ConnectionError(f"reading the response: {exc}") from None


def normalise_id(text: str) -> str:
    """`1909.11150v2`, `arXiv:1909.11150`, `https://arxiv.org/abs/hep-lat/0305021v1` -> bare id."""
    t = text.strip()
    t = _ABS_URL.sub("", t)
    if t.lower().startswith("arxiv:"):
        t = t[6:]
    m = _VERSIONED.fullmatch(t)
    bare = m.group(1) if m else t
    if not is_arxiv_id(bare):
        raise InputError(f"not an arXiv identifier: {text!r} (expected e.g. 1909.11150 or hep-lat/0305021)")
    return bare


class ArxivAPI:
    """Id discovery through `arxiv.Client`, politely."""

    def __init__(
        self,
        gate: Gate,
        api_url: str = DEFAULT_API_URL,
        *,
        page_size: int = 100,
        limits: InputLimits = DEFAULT_LIMITS,
    ) -> None:
        self.gate = gate
        self.api_url = api_url
        client = arxiv.Client(page_size=page_size, delay_seconds=0.0, num_retries=0)
        # instance attributes shadow the class defaults: this client only
        client.query_url_format = api_url + "?{}"
        client._session = _GatedSession(gate, limits)
        self.client = client
        #: (id, published) of query matches submitted outside the query's range
        self.outside: list[tuple[str, str | None]] = []

    def _results(self, search: arxiv.Search) -> Iterator[arxiv.Result]:
        try:
            yield from self.client.results(search)
        except arxiv.HTTPError as exc:
            raise TransientError(f"arXiv API at {self.api_url}: HTTP {exc.status} for {exc.url}") from None
        except arxiv.ArxivError as exc:
            raise TransientError(f"arXiv API at {self.api_url}: {exc}") from None
        except (ValueError, TypeError, KeyError, AttributeError, IndexError) as exc:
            # the package's own parsing of the answer (a bad `<updated>` is a ValueError):
            # the server's answer is input, so it is named, never a traceback
            raise TransientError(
                f"arXiv API at {self.api_url}: an answer the arxiv package cannot read "
                f"({type(exc).__name__}: {exc}); try again later"
            ) from None

    def ids_for_query(self, query: str, *, max_results: int | None = 1000) -> list[str]:
        """Ids matching an API query, de-duplicated, in the API's order.

        A query whose `submittedDate` range binds every match (`submitted_range`) is a
        window: a match submitted outside it is still returned (it is a real paper) but
        listed in `outside` as (id, its `<published>`) and warned of, naming the server
        and the query, for the run to count apart."""
        if not query.strip():
            raise InputError("--query is empty")
        search = arxiv.Search(
            query=query,
            max_results=max_results,
            sort_by=arxiv.SortCriterion.SubmittedDate,
            sort_order=arxiv.SortOrder.Ascending,
        )
        window = submitted_range(query)
        ids = []
        for r in self._results(search):
            i = _result_id(r)
            if i is None:
                continue
            ids.append(i)
            published = r.published.astimezone(UTC) if r.published else None
            if window is not None and (published is None or not window[0] <= published < window[1]):
                self.outside.append((i, None if published is None else published.isoformat()))
        if self.outside:
            log.warning(
                "outside-window: %s answered search_query=%s with %d papers submitted outside its "
                "submittedDate range: %s; fetched and built, and counted as outside_window in the "
                "run manifest",
                public_url(self.api_url),
                query,
                len(self.outside),
                ", ".join(f"{i} ({at})" for i, at in self.outside[:20]),
            )
        return _unique(ids)

    def check_ids(self, ids: list[str]) -> tuple[list[str], list[str]]:
        """(ids the API knows, ids it returned nothing for), both bare and in input order."""
        wanted = _unique(normalise_id(i) for i in ids)
        if not wanted:
            raise InputError("--ids is empty")
        found: set[str] = set()
        for start in range(0, len(wanted), 100):
            chunk = wanted[start : start + 100]
            search = arxiv.Search(id_list=chunk, max_results=len(chunk))
            for r in self._results(search):
                try:
                    found.add(normalise_id(r.get_short_id()))
                except InputError:
                    continue  # the API's error entries are not ids
        return [i for i in wanted if i in found], [i for i in wanted if i not in found]


def _stamp(text: str, end: bool) -> datetime | None:
    """An arXiv range bound as a UTC instant; an upper bound as the instant after it."""
    formats = {
        8: ("%Y%m%d", timedelta(days=1)),
        12: ("%Y%m%d%H%M", timedelta(minutes=1)),
        14: ("%Y%m%d%H%M%S", timedelta(seconds=1)),
    }
    if len(text) not in formats:
        return None
    fmt, step = formats[len(text)]
    try:
        at = datetime.strptime(text, fmt).replace(tzinfo=UTC)
    except ValueError:
        return None
    return at + step if end else at


def submitted_range(query: str) -> tuple[datetime, datetime] | None:
    """`[start, end)` every match of `query` must have been submitted in (its v1's
    `<published>`), or None when the query does not bind every match to one range:
    no `submittedDate:[A TO B]`, more than one, or an `OR`/`ANDNOT` that may let a
    match through without it."""
    found = _SUBMITTED.findall(query)
    if len(found) != 1 or _NOT_EVERY.search(query):
        return None
    start, end = _stamp(found[0][0], end=False), _stamp(found[0][1], end=True)
    if start is None or end is None or end <= start:
        return None
    return start, end


def _result_id(result: arxiv.Result) -> str | None:
    """A search result's bare id, or None (with a warning naming it) when the server's
    entry id is not an arXiv identifier: the answer is input too, and one bad entry
    must not stop a query whose other matches are fine."""
    try:
        return normalise_id(result.get_short_id())
    except InputError as exc:
        log.warning("search API result left out: %s", exc.message)
        return None


def _unique(ids: Iterator[str] | list[str]) -> list[str]:
    seen: dict[str, None] = {}
    for i in ids:
        seen.setdefault(i, None)
    return list(seen)
