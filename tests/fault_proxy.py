"""A fault-injecting HTTP proxy on 127.0.0.1 in front of moto's S3 server.

`drop(substring, n)`: the next `n` PUT requests whose path contains `substring` are
forwarded to the server (which applies them) and then the connection is closed
without a response: the lost response of a write that S3 made. Everything else is
passed through as it is. Bounded: each upstream request times out after 30 s.
"""

from __future__ import annotations

import http.client
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

    def drop(self, substring: str, n: int = 1) -> None:
        with self._lock:
            self._rules.append([substring, n])

    def _should_drop(self, method: str, path: str) -> bool:
        if method != "PUT":
            return False
        with self._lock:
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
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
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
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

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
