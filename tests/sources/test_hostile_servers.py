"""Hostile or broken servers: endless resumption lists, slow drips, huge bodies.

Each case used to hang a run or read a response whole. The servers bind 127.0.0.1
and are stopped by the test; limits are lowered through `InputLimits` so the tests
are fast.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from oai_server import FIRST, FakeArxiv, Repository, data

from pith_pipeline.core.keys import Signer
from pith_pipeline.core.limits import InputLimits
from pith_pipeline.errors import ResponseTooLargeError, ResumptionLoopError, TransientError
from pith_pipeline.ingest import Ingest
from pith_pipeline.runs.windows import window_from_options
from pith_pipeline.signing.local import generate_key, load_signer
from pith_pipeline.sources.arxiv_api import ArxivAPI
from pith_pipeline.sources.oai import OAIClient
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
