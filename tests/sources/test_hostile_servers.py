"""Hostile or broken servers: endless resumption lists, slow drips, huge bodies.

Each case used to hang a run or read a response whole. The servers bind 127.0.0.1
and are stopped by the test; limits are lowered through `InputLimits` so the tests
are fast.
"""

from __future__ import annotations

import re
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from oai_server import FIRST, FakeArxiv, Fault, Repository, data

from pith_pipeline.core.keys import Signer
from pith_pipeline.core.limits import InputLimits
from pith_pipeline.errors import ResponseTooLargeError, ResumptionLoopError, TerminalError, TransientError
from pith_pipeline.ingest import Ingest
from pith_pipeline.runs.windows import window_from_options
from pith_pipeline.signing.local import generate_key, load_signer
from pith_pipeline.sources.arxiv_api import ArxivAPI
from pith_pipeline.sources.oai_client import OAIClient
from pith_pipeline.sources.politeness import Gate, Politeness
from pith_pipeline.storage.local import LocalStore

W = window_from_options("2024-01-01", None, through="2024-01-03")
FAST = Politeness(min_interval=0.0, backoff_initial=0.01, max_retries=0, timeout=5.0)
P1 = data("listrecords-2024-01-01-p1.xml")  # 3 records, 1 deleted, token 7134892|4, completeListSize 9
P2 = data("listrecords-2024-01-01-p2.xml")  # token 7134892|7


@pytest.fixture
def signer(tmp_path: Path) -> Signer:
    return load_signer(generate_key(tmp_path / "keys", key_id="test-key")[0])


def serve(*pages: tuple[str, bytes]) -> FakeArxiv:
    repo = Repository()
    for token, body in pages:
        if token == FIRST:
            repo.first_by_window[(W.oai_from, W.oai_until)] = body
        else:
            repo.pages[token] = body
    return FakeArxiv(repo)


def test_a_token_that_comes_back_fails_the_window(tmp_path: Path, signer: Signer) -> None:
    looping = P2.replace(b">7134892|7<", b">7134892|4<")  # page 2 hands out page 2's own token
    with serve((FIRST, P1), ("7134892|4", looping)) as server:
        run = Ingest(LocalStore(tmp_path / "s"), signer)
        with pytest.raises(ResumptionLoopError) as err:
            run.windows([W], oai_url=server.oai_url, politeness=FAST)
        requests = len(server.log)
    msg = str(err.value)
    assert "7134892|4" in msg and "already used" in msg and "\n" not in msg
    assert requests == 2
    assert run.report.summary.built == 3  # page 1, before the loop, is published


def test_more_records_than_complete_list_size_fails_the_window(tmp_path: Path, signer: Signer) -> None:
    def small(page: bytes) -> bytes:
        return page.replace(b'completeListSize="9"', b'completeListSize="5"')

    with serve((FIRST, small(P1)), ("7134892|4", small(P2))) as server:
        run = Ingest(LocalStore(tmp_path / "s"), signer)
        with pytest.raises(ResumptionLoopError) as err:
            run.windows([W], oai_url=server.oai_url, politeness=FAST)
    assert "completeListSize of 5" in str(err.value)


class FreshTokens(dict[str, bytes]):
    """Resumption pages that never end: every token is answered with `page` (the same
    records) and a token never handed out before; `size` sets completeListSize
    (None: the attribute is left out)."""

    def __init__(self, page: bytes, size: int | None) -> None:
        super().__init__()
        self.page, self.size = page, size

    def get(self, token: str, default: bytes | None = None) -> bytes:  # type: ignore[override]
        body = self.page.replace(b">7134892|7<", b">" + token.encode() + b"+<")
        attr = b"" if self.size is None else b' completeListSize="%d"' % self.size
        return body.replace(b' completeListSize="9"', attr)


def endless(page: bytes, size: int | None) -> FakeArxiv:
    first = P1.replace(b' completeListSize="9"', b"" if size is None else b' completeListSize="%d"' % size)
    repo = Repository(pages=FreshTokens(page, size))
    repo.first_by_window[(W.oai_from, W.oai_until)] = first
    return FakeArxiv(repo)


EMPTY_P2 = re.sub(rb"<record>.*</record>", b"", P2, flags=re.DOTALL)


@pytest.mark.parametrize(
    ("page", "size"),
    [(P2, None), (P2, 10**9), (EMPTY_P2, None)],
    ids=["no-completeListSize", "completeListSize-too-large", "empty-pages"],
)
def test_new_tokens_for_the_same_page_fail_the_window(
    tmp_path: Path, signer: Signer, page: bytes, size: int | None
) -> None:
    """Tokens never seen before, but the list comes round again: the same records (or
    no records) page after page. Without a truthful completeListSize this looped."""
    with endless(page, size) as server:
        run = Ingest(LocalStore(tmp_path / "s"), signer)
        with pytest.raises(ResumptionLoopError) as err:
            run.windows([W], oai_url=server.oai_url, politeness=FAST)
        requests = len(server.log)
    msg = str(err.value)
    assert "page-00003" in msg and "\n" not in msg
    assert requests == 3  # page 3 repeats page 2: the window stops there


def test_a_loop_found_once_stops_the_window_on_every_rerun(tmp_path: Path, signer: Signer) -> None:
    """The tokens and pages seen are kept with the window's checkpoint: a rerun does not
    start a new round of the loop (it used to go one page further each time)."""

    def unsized(page: bytes) -> bytes:
        return page.replace(b' completeListSize="9"', b"")

    alternating = [  # A, B, A, on three different pages and no completeListSize
        (FIRST, unsized(P1).replace(b">7134892|4<", b">A<")),
        ("A", unsized(P2).replace(b">7134892|7<", b">B<")),
        ("B", unsized(P1).replace(b">7134892|4<", b">A<").replace(b"0704.0248", b"0704.0249")),
    ]
    store = LocalStore(tmp_path / "s")
    for _ in range(2):
        with serve(*alternating) as server:
            with pytest.raises(ResumptionLoopError) as err:
                Ingest(store, signer).windows([W], oai_url=server.oai_url, politeness=FAST)
            requests = len(server.log)
        assert "'A'" in str(err.value) and "already used" in str(err.value)
    assert requests == 0  # the stored page 3 is checked again, nothing is fetched


def test_no_records_match_for_a_resumption_token_fails_the_window(tmp_path: Path, signer: Signer) -> None:
    """`noRecordsMatch` answers a first request; for a token it means the list broke off.
    Taking it as the end marked the window complete with records missing for good."""
    with serve((FIRST, P1)) as server:  # the token 7134892|4 gets noRecordsMatch
        server.fail("7134892|4", Fault(200, (), data("error-noRecordsMatch.xml")))
        store = LocalStore(tmp_path / "s")
        with pytest.raises(TerminalError) as err:
            Ingest(store, signer).windows([W], oai_url=server.oai_url, politeness=FAST)
    assert "noRecordsMatch" in str(err.value) and "page-00002" in str(err.value)
    checkpoint = store.get(f"raw/oai/arXivRaw/{W.label}/checkpoint.json")
    assert checkpoint is not None and b'"complete": false' in checkpoint


class DripServer:
    """Answers every request slowly: one byte every `gap` s, of the body or (with
    `drip_head`) of the status line and headers too. Records how many bytes it got out
    before the client hung up (`hung_up` is set then), so a test can show the client
    stopped early without timing anything."""

    def __init__(
        self, body: bytes, gap: float, content_type: str = "text/xml", drip_head: bool = False
    ) -> None:
        self.body, self.gap, self.ctype, self.drip_head = body, gap, content_type, drip_head
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(4)
        self.sock.settimeout(0.1)
        self.stop = threading.Event()
        self.hung_up = threading.Event()
        self.total = 0
        self.sent = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}/oai"

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            with conn:
                conn.recv(65536)
                pad = f"X-Pad: {'p' * 300}\r\n" if self.drip_head else ""
                head = (
                    f"HTTP/1.1 200 OK\r\nContent-Type: {self.ctype}\r\n{pad}"
                    f"Content-Length: {len(self.body)}\r\nConnection: close\r\n\r\n"
                ).encode()
                data = head + self.body
                fast = 0 if self.drip_head else len(head)
                self.total, self.sent = len(data), fast
                try:
                    conn.sendall(data[:fast])
                    for i in range(fast, len(data)):
                        if self.stop.wait(self.gap):
                            return
                        conn.sendall(data[i : i + 1])
                        self.sent = i + 1
                except OSError:
                    self.hung_up.set()

    def __enter__(self) -> DripServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=5)
        self.sock.close()


# 400 bytes at 20 ms each take 8 s, each byte far inside the 5 s read timeout; with
# dripped headers, the headers alone take 8 s and there is no body
@pytest.fixture(params=[False, True], ids=["body", "headers"])
def drip(request: pytest.FixtureRequest) -> Iterator[DripServer]:
    body = b"" if request.param else P1[:400]
    with DripServer(body, 0.02, drip_head=request.param) as server:
        yield server


def stopped_early(server: DripServer) -> bool:
    """The client hung up before the server got everything out."""
    return server.hung_up.wait(10) and server.sent < server.total


def test_oai_request_has_a_total_deadline(drip: DripServer) -> None:
    limits = InputLimits(request_deadline=0.5)
    client = OAIClient(drip.url, gate=Gate(FAST), limits=limits)
    with client, pytest.raises(TransientError) as err:
        client.request(W.params())
    assert "deadline of 0.5 s" in str(err.value)
    assert stopped_early(drip)


def test_search_api_request_has_a_total_deadline(drip: DripServer) -> None:
    api = ArxivAPI(
        Gate(FAST), drip.url.replace("/oai", "/api/query"), limits=InputLimits(request_deadline=0.5)
    )
    with pytest.raises(TransientError) as err:
        api.ids_for_query("cat:hep-th", max_results=5)
    assert "deadline of 0.5 s" in str(err.value)
    assert stopped_early(drip)


def test_oversized_response_is_not_read_whole(tmp_path: Path, signer: Signer) -> None:
    title = b"<title>" + b"x" * 3_000_000 + b"</title>"
    huge = P1.replace(b"<title>", title.replace(b"</title>", b""), 1)
    with serve((FIRST, huge)) as server:
        run = Ingest(LocalStore(tmp_path / "s"), signer, limits=InputLimits(response_bytes=1_000_000))
        with pytest.raises(ResponseTooLargeError) as err:
            run.windows([W], oai_url=server.oai_url, politeness=FAST)
    assert "limit of 1000000 bytes" in str(err.value) and "\n" not in str(err.value)
    assert run.report.summary.built == 0


def test_search_api_response_is_capped() -> None:
    body = b"<feed xmlns='http://www.w3.org/2005/Atom'>" + b" " * 200_000 + b"</feed>"
    with DripServer(body, 0.0, "application/atom+xml") as server:
        api = ArxivAPI(Gate(FAST), server.url, limits=InputLimits(response_bytes=50_000))
        with pytest.raises(ResponseTooLargeError):
            api.ids_for_query("cat:hep-th", max_results=5)


def test_a_title_over_its_limit_is_one_quarantined_record(tmp_path: Path, signer: Signer) -> None:
    long_title = P1.replace(b"<title>", b"<title>" + b"x" * 9000, 1)
    with serve((FIRST, long_title), ("7134892|4", P2.replace(b">7134892|7<", b"><"))) as server:
        run = Ingest(LocalStore(tmp_path / "s"), signer)
        run.windows([W], oai_url=server.oai_url, politeness=FAST)
    s = run.report.summary
    assert s.quarantined == 2 and s.built == 4  # the long title and page 2's broken date


@pytest.mark.parametrize("value", ["20240101", "2024-01-01\n", "\uff12024-01-01", "2024-W01-1"])
def test_window_and_snapshot_dates_are_strict(value: str, tmp_path: Path, signer: Signer) -> None:
    from pith_pipeline.errors import InputError

    with pytest.raises(InputError, match="YYYY-MM-DD"):
        window_from_options(value, "2024-01-03")
    with pytest.raises(InputError, match="YYYY-MM-DD"):
        Ingest(LocalStore(tmp_path / "s"), signer).snapshot(tmp_path / "none.jsonl", from_=value)


def test_a_record_with_bytes_that_are_not_utf8_does_not_stop_the_window(
    tmp_path: Path, signer: Signer
) -> None:
    """A byte that is not UTF-8 in one record made the whole page malformed: the window
    stopped there, on every rerun. Now it is one quarantined record, kept byte for byte."""
    import base64
    import json

    bad = P1.replace(b"<title>", b"<title>\xff", 1)
    last = P2.replace(b">7134892|7<", b"><")
    with serve((FIRST, bad), ("7134892|4", last)) as server:
        store = LocalStore(tmp_path / "s")
        run = Ingest(store, signer)
        run.windows([W], oai_url=server.oai_url, politeness=FAST)
    s = run.report.summary
    assert s.built == 4 and s.quarantined == 2  # page 2's broken date, and this record
    (qkey,) = store.list("quarantine/")
    entries = [json.loads(x) for x in (store.get(qkey) or b"").splitlines()]
    (entry,) = [e for e in entries if e["raw_encoding"] == "base64"]
    raw = base64.b64decode(entry["raw"])
    assert raw.startswith(b"<record") and b"<title>\xff" in raw and raw in bad
    assert entry["where"].endswith("page-00001.xml.gz record 1")


ATOM_OPEN = b'<?xml version="1.0" encoding="UTF-8"?><feed xmlns="http://www.w3.org/2005/Atom">'


@pytest.mark.parametrize(
    "body",
    [
        b"<html><body>Service temporarily unavailable</body></html>",
        ATOM_OPEN + b"<entry><id>http://arxiv.org/abs/1909.11150v2</id>",  # cut short
        b'<?xml version="1.0"?><!DOCTYPE feed [<!ENTITY x SYSTEM "file:///etc/hostname">]>'
        b'<feed xmlns="http://www.w3.org/2005/Atom"><title>&x;</title></feed>',
        ATOM_OPEN.replace(b"UTF-8", b"ISO-8859-1") + b"</feed>",
    ],
    ids=["html", "truncated", "dtd", "not-utf8"],
)
def test_search_api_answer_that_is_not_an_atom_feed_fails(body: bytes) -> None:
    """The `arxiv` package's feed parser is lenient: an HTML page or a cut feed read as
    a feed with no entries, so `--query` found nothing and every `--ids` id was
    quarantined as unknown to arXiv. The answer is checked as OAI pages are."""
    with DripServer(body, 0.0, "application/atom+xml") as server:
        api = ArxivAPI(Gate(FAST), server.url.replace("/oai", "/api/query"))
        with pytest.raises(TransientError) as err:
            api.check_ids(["1909.11150"])
    msg = str(err.value)
    assert "arXiv API" in msg and "\n" not in msg


def test_a_server_error_message_is_one_short_line(tmp_path: Path, signer: Signer) -> None:
    """The text of an OAI `<error>` went into the run's error as served: a server could
    print any number of lines (or megabytes) in place of one line naming the problem."""
    noise = "line\r\n" * 50_000 + "\u2028\u0085\tcleared"
    body = (
        '<?xml version="1.0" encoding="UTF-8"?><OAI-PMH xmlns="http://www.openarchives.org/OAI/2.0/">'
        f'<error code="badArgument\nX">{noise}</error></OAI-PMH>'
    ).encode()
    with serve((FIRST, body)) as server, pytest.raises(TerminalError) as err:
        Ingest(LocalStore(tmp_path / "s"), signer).windows([W], oai_url=server.oai_url, politeness=FAST)
    msg = str(err.value)
    assert "badArgument" in msg and len(msg) < 1000
    assert not any(c in msg for c in "\r\n\t\u2028\u0085")
