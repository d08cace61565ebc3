"""A local stand-in for arXiv: OAI-PMH (`/oai`) and the Atom search API (`/api/query`).

The one test server of the suite (the `oai_server` fixture in tests/conftest.py serves
recorded records by day through it; tests/sources use it directly).

Listens on 127.0.0.1 on a free port, in a thread, and serves the recorded responses
in tests/data/oai (arXiv's real formats). Scripted faults (503 with Retry-After in
either form, a refused resumption token, a truncated page, a dropped connection) are
queued per request and served once each before the normal answer. Every request is
logged with its arrival time, so tests can check the politeness interval *at the
server*. Written with the standard library only, independent of the package under test.
"""

from __future__ import annotations

import email.utils
import threading
import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

DATA = Path(__file__).resolve().parent / "data" / "oai"
OAI = "{http://www.openarchives.org/OAI/2.0/}"
ATOM = "{http://www.w3.org/2005/Atom}"
FIRST = "<first page>"


def data(name: str) -> bytes:
    return (DATA / name).read_bytes()


@dataclass(frozen=True)
class Logged:
    at: float
    path: str
    params: dict[str, str]
    user_agent: str


@dataclass(frozen=True)
class Fault:
    """One scripted misbehaviour: a status with headers and body, or a dropped connection."""

    status: int = 503
    headers: tuple[tuple[str, str], ...] = ()
    body: bytes = b""
    drop: bool = False


def retry_after_seconds(seconds: int) -> Fault:
    return Fault(503, (("Retry-After", str(seconds)),), b"<html>503 Service Unavailable</html>")


def retry_after_date(seconds_ahead: int) -> Callable[[], Fault]:
    """A 503 whose Retry-After is an HTTP-date, computed when served."""

    def make() -> Fault:
        when = email.utils.formatdate(time.time() + seconds_ahead, usegmt=True)
        return Fault(503, (("Retry-After", when),), b"<html>503 Service Unavailable</html>")

    return make


def truncated(body: bytes, n: int = 700) -> Fault:
    return Fault(200, (("Content-Type", "text/xml; charset=utf-8"),), body[:n])


def refused_token() -> Fault:
    return Fault(200, (("Content-Type", "text/xml; charset=utf-8"),), data("error-badResumptionToken.xml"))


DROP = Fault(drop=True)


@dataclass
class Repository:
    """What the server knows: ListRecords pages, GetRecord documents, Atom entries."""

    pages: dict[str, bytes] = field(default_factory=dict)  # token (or FIRST) -> page
    first_by_window: dict[tuple[str | None, str | None], bytes] = field(default_factory=dict)
    getrecord: dict[str, bytes] = field(default_factory=dict)  # oai identifier -> document
    atom_entries: dict[str, bytes] = field(default_factory=dict)  # bare id -> <entry> bytes
    atom_query: dict[str, bytes] = field(default_factory=dict)  # search_query -> feed

    def add_window(self, from_: str | None, until: str | None, *names: str) -> None:
        """Pages joined by the resumption tokens written in them."""
        bodies = [data(n) for n in names]
        self.first_by_window[(from_, until)] = bodies[0]
        for body in bodies[1:]:
            req = ET.fromstring(body).find(f"{OAI}request")
            assert req is not None
            self.pages[req.attrib["resumptionToken"]] = body

    def add_feed_entries(self, name: str) -> None:
        root = ET.fromstring(data(name))
        for entry in root.iter(f"{ATOM}entry"):
            eid = entry.findtext(f"{ATOM}id") or ""
            bare = eid.split("/abs/", 1)[1].rsplit("v", 1)[0]
            self.atom_entries[bare] = ET.tostring(entry, encoding="utf-8")


def _feed(entries: list[bytes]) -> bytes:
    ET.register_namespace("", ATOM[1:-1])
    head = (
        b'<?xml version="1.0" encoding="UTF-8"?>\n'
        b'<feed xmlns="http://www.w3.org/2005/Atom">'
        b'<title type="html">ArXiv Query</title><id>http://arxiv.org/api/local</id>'
        b"<updated>2026-06-30T00:00:00-04:00</updated>"
        b'<opensearch:totalResults xmlns:opensearch="http://a9.com/-/spec/opensearch/1.1/">'
        + str(len(entries)).encode()
        + b"</opensearch:totalResults>"
        b'<opensearch:startIndex xmlns:opensearch="http://a9.com/-/spec/opensearch/1.1/">0'
        b"</opensearch:startIndex>"
        b'<opensearch:itemsPerPage xmlns:opensearch="http://a9.com/-/spec/opensearch/1.1/">'
        + str(len(entries)).encode()
        + b"</opensearch:itemsPerPage>"
    )
    return head + b"".join(entries) + b"</feed>\n"


class RecordedDays:
    """`ListRecords` over records by day: from/until (inclusive days) and resumption
    tokens, page size 4. Tests can hold a day's first request (`hold`) and see that it
    arrived (`arrived`); `requests` and `times` log what came."""

    PAGE = 4

    def __init__(self, days: dict[str, list[bytes]]) -> None:

        self.days = days
        self.requests: list[dict[str, str]] = []
        #: when each request arrived (time.monotonic), for politeness tests
        self.times: list[float] = []
        #: from-date -> event: a ListRecords for that day waits until the event is set
        self.hold: dict[str, threading.Event] = {}
        self.arrived: dict[str, threading.Event] = {}

    def listing(self, from_: str, until: str) -> list[bytes]:
        return [r for day in sorted(self.days) if from_ <= day <= until for r in self.days[day]]

    def respond(self, params: dict[str, str]) -> bytes:
        import time
        from datetime import UTC, datetime

        self.times.append(time.monotonic())
        self.requests.append(params)
        now = datetime.now(tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        head = (
            f'<?xml version="1.0" encoding="UTF-8"?>\n<OAI-PMH xmlns="{OAI[1:-1]}">'
            f"<responseDate>{now}</responseDate>"
            '<request verb="ListRecords">http://127.0.0.1/oai</request>'
        )
        if params.get("verb") != "ListRecords":
            return (head + '<error code="badVerb">only ListRecords here</error></OAI-PMH>').encode()
        if "resumptionToken" in params:
            from_, until, offset = params["resumptionToken"].split("|")
            start = int(offset)
        else:
            from_, until, start = params["from"], params["until"], 0
            if from_ in self.arrived:
                self.arrived[from_].set()
            if from_ in self.hold:
                self.hold[from_].wait(30)
        records = self.listing(from_, until)
        if not records:
            return (head + '<error code="noRecordsMatch">empty list</error></OAI-PMH>').encode()
        page = records[start : start + self.PAGE]
        nxt = start + self.PAGE
        token = (
            f'<resumptionToken cursor="{start}" completeListSize="{len(records)}">'
            f"{from_}|{until}|{nxt}</resumptionToken>"
            if nxt < len(records)
            else f'<resumptionToken cursor="{start}" completeListSize="{len(records)}"/>'
        )
        return (
            head.encode() + b"<ListRecords>" + b"".join(page) + token.encode() + b"</ListRecords></OAI-PMH>"
        )

    def release(self) -> None:
        """Let every held request go (at the end of a test)."""
        for event in self.hold.values():
            event.set()


class FakeArxiv:
    """The server. Use as a context manager; `url` is `http://127.0.0.1:<port>`.

    With `listing`, OAI-PMH requests are answered from its records by day instead of
    the repository's recorded pages (the daily DAG and ingest tests).
    """

    def __init__(self, repo: Repository, *, listing: RecordedDays | None = None) -> None:
        self.repo = repo
        self.listing = listing
        self.log: list[Logged] = []
        self.faults: dict[str, list[Fault | Callable[[], Fault]]] = defaultdict(list)
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:  # quiet test output
                pass

            def do_GET(self) -> None:
                server._handle(self)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    @property
    def oai_url(self) -> str:
        return self.url + "/oai"

    @property
    def api_url(self) -> str:
        return self.url + "/api/query"

    def __enter__(self) -> FakeArxiv:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)

    def fail(self, key: str, *faults: Fault | Callable[[], Fault]) -> None:
        """Queue faults for a request key: a resumption token, FIRST, an OAI id, or 'api'."""
        self.faults[key].extend(faults)

    def requests_for(self, key: str) -> list[Logged]:
        return [r for r in self.log if _key(r.path, r.params) == key]

    # -- serving ---------------------------------------------------------------
    def _handle(self, h: BaseHTTPRequestHandler) -> None:
        parts = urlsplit(h.path)
        params = dict(parse_qsl(parts.query, keep_blank_values=True))
        with self._lock:
            self.log.append(Logged(time.monotonic(), parts.path, params, h.headers.get("User-Agent", "")))
            key = _key(parts.path, params)
            queued = self.faults.get(key)
            fault = queued.pop(0) if queued else None
        if callable(fault):
            fault = fault()
        if fault is not None:
            if fault.drop:
                h.close_connection = True
                h.connection.shutdown(2)
                return
            self._send(h, fault.status, fault.body, dict(fault.headers))
            return
        status, body, ctype = self._answer(parts.path, params)
        self._send(h, status, body, {"Content-Type": ctype})

    @staticmethod
    def _send(h: BaseHTTPRequestHandler, status: int, body: bytes, headers: dict[str, str]) -> None:
        h.send_response(status)
        for k, v in headers.items():
            h.send_header(k, v)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)

    def _answer(self, path: str, params: dict[str, str]) -> tuple[int, bytes, str]:
        xml = "text/xml; charset=utf-8"
        if path == "/oai" and self.listing is not None:
            return 200, self.listing.respond(params), xml
        if path == "/oai":
            verb = params.get("verb")
            if verb == "ListRecords":
                token = params.get("resumptionToken")
                if token is not None:
                    page = self.repo.pages.get(token)
                    return (200, page, xml) if page else (200, data("error-badResumptionToken.xml"), xml)
                first = self.repo.first_by_window.get((params.get("from"), params.get("until")))
                return (200, first, xml) if first else (200, data("error-noRecordsMatch.xml"), xml)
            if verb == "GetRecord":
                doc = self.repo.getrecord.get(params.get("identifier", ""))
                return (200, doc, xml) if doc else (200, data("error-idDoesNotExist.xml"), xml)
            return 400, b"bad verb", "text/plain"
        if path == "/api/query":
            atom = "application/atom+xml; charset=utf-8"
            ids = [i for i in params.get("id_list", "").split(",") if i]
            if ids:
                return (
                    200,
                    _feed([self.repo.atom_entries[i] for i in ids if i in self.repo.atom_entries]),
                    atom,
                )
            feed = self.repo.atom_query.get(params.get("search_query", ""))
            return 200, feed if feed is not None else _feed([]), atom
        return 404, b"not found", "text/plain"


def _key(path: str, params: dict[str, str]) -> str:
    if path == "/api/query":
        return "api"
    if params.get("verb") == "GetRecord":
        return params.get("identifier", "")
    return params.get("resumptionToken", FIRST)


def standard_repository() -> Repository:
    """The recorded window 2024-01-01..03 (three pages), 2024-01-10, two GetRecords, Atom."""
    repo = Repository()
    repo.add_window(
        "2024-01-01",
        "2024-01-03",
        "listrecords-2024-01-01-p1.xml",
        "listrecords-2024-01-01-p2.xml",
        "listrecords-2024-01-01-p3.xml",
    )
    repo.add_window("2024-01-10", "2024-01-10", "listrecords-2024-01-10-p1.xml")
    repo.getrecord["oai:arXiv.org:1909.11150"] = data("getrecord-1909.11150.xml")
    repo.getrecord["oai:arXiv.org:hep-th/9901001"] = data("getrecord-hep-th_9901001.xml")
    repo.getrecord["oai:arXiv.org:2606.18380"] = data("getrecord-2606.18380.xml")
    repo.add_feed_entries("atom-entry-1909.11150.xml")
    repo.add_feed_entries("atom-query-hep-th.xml")
    repo.atom_query["cat:hep-th AND submittedDate:[199901010000 TO 202612312359]"] = data(
        "atom-query-hep-th.xml"
    )
    return repo
