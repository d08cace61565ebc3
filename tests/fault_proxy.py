"""A fault-injecting HTTP proxy on 127.0.0.1 in front of moto's S3 server.

`drop(substring, n)`: the next `n` PUT requests whose path contains `substring` are
forwarded to the server (which applies them) and then the connection is closed
without a response: the lost response of a write that S3 made. `drop_randomly(seed,
rate, limit)`: each write (PUT, POST, DELETE) is applied and its response then dropped
with probability `rate`, drawn from an RNG seeded with `seed`, at most `limit` times in
all. Everything else is passed through as it is. Bounded: each upstream request times
out after 30 s.
"""

from __future__ import annotations

import http.client
import random
import socket
import threading
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

_HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "upgrade"}


class FaultProxy:
    def __init__(self, upstream: str) -> None:
        parsed = urllib.parse.urlsplit(upstream)
        self.host, self.port = parsed.hostname or "127.0.0.1", parsed.port or 80
        self._rules: list[list[object]] = []
        self._lock = threading.Lock()
        self.dropped: list[str] = []
        self.url = ""
        self._random: tuple[random.Random, float, int] | None = None

    def drop_randomly(self, seed: str, rate: float, limit: int) -> None:
        """Drop the responses of applied writes at random (seeded), `limit` at most."""
        with self._lock:
            self._random = (random.Random(seed), rate, limit)

    def drop(self, substring: str, n: int = 1) -> None:
        with self._lock:
            self._rules.append([substring, n])

    def _should_drop(self, method: str, path: str) -> bool:
        if method not in ("PUT", "POST", "DELETE"):
            return False
        with self._lock:
            if self._random is not None:
                rng, rate, left = self._random
                if left > 0 and rng.random() < rate:
                    self._random = (rng, rate, left - 1)
                    self.dropped.append(f"{method} {path}")
                    return True
            if method != "PUT":
                return False
            for rule in self._rules:
                if isinstance(rule[0], str) and rule[0] in path and isinstance(rule[1], int) and rule[1] > 0:
                    rule[1] -= 1
                    self.dropped.append(path)
                    return True
        return False

    def handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:  # quiet
                return

            def _forward(self) -> None:
                body = self._body()
                if body is None:  # the client went away mid-body: S3 would apply nothing
                    self.close_connection = True
                    return
                headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
                headers["Content-Length"] = str(len(body))
                up = http.client.HTTPConnection(proxy.host, proxy.port, timeout=30)
                try:
                    up.request(self.command, self.path, body=body, headers=headers)
                    resp = up.getresponse()
                    data = resp.read()
                finally:
                    up.close()
                if proxy._should_drop(self.command, self.path):
                    self.close_connection = True
                    with suppress(OSError):
                        self.connection.shutdown(socket.SHUT_RDWR)
                    return
                self.send_response(resp.status, resp.reason)
                for k, v in resp.getheaders():
                    if k.lower() not in _HOP and k.lower() != "content-length":
                        self.send_header(k, v)
                # a HEAD's length is the object's, which the response does not carry
                length = resp.getheader("Content-Length") if self.command == "HEAD" else None
                self.send_header("Content-Length", length or str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            def _body(self) -> bytes | None:
                """The request's body, whole: by its Content-Length, or de-chunked (a
                client streaming a PUT sends `Transfer-Encoding: chunked`; forwarding
                that as an empty body would store an empty object). None when the
                client went away before sending it all (killed mid-upload): forwarding
                the part received would make moto store a truncated object, which S3,
                checking the length, never does."""
                if "chunked" not in (self.headers.get("Transfer-Encoding") or "").lower():
                    length = int(self.headers.get("Content-Length") or 0)
                    body = self.rfile.read(length) if length else b""
                    return body if len(body) == length else None
                parts = []
                while True:
                    line = self.rfile.readline()
                    if not line.endswith(b"\n"):
                        return None
                    size = int(line.split(b";", 1)[0].strip() or b"0", 16)
                    if size == 0:
                        while self.rfile.readline() not in (b"\r\n", b"\n", b""):  # trailers
                            pass
                        return b"".join(parts)
                    parts.append(self.rfile.read(size))
                    if len(parts[-1]) != size:
                        return None
                    self.rfile.readline()  # the CRLF after the chunk

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _forward

        return Handler


@contextmanager
def fault_proxy(upstream: str) -> Iterator[FaultProxy]:
    proxy = FaultProxy(upstream)
    server = ThreadingHTTPServer(("127.0.0.1", 0), proxy.handler())
    server.daemon_threads = True
    proxy.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield proxy
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
