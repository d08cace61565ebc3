"""S3 publishing benchmark: papers/s and requests per new paper against a distant store.

moto's S3 server runs in its own process on 127.0.0.1; between it and the pipeline
sits a proxy written here that holds every HTTP request for `--latency` seconds
(default 0.1: a distant region) before forwarding it, and counts requests by kind.
Each mode publishes the same generated papers into a fresh prefix of one bucket, as
`build` does (writer lease, key document, papers, quarantine), then, with
`--index`, updates the index tables and writes the run manifest (`finish_run`):

  - `io-concurrency 1`: one request at a time (the baseline);
  - `io-concurrency N`: the loader's default on S3 (32), or `--io N`.

Printed per mode: papers/s while publishing (key document, papers, quarantine) and
with taking and releasing the writer lease (16 shard objects, a fixed cost per run),
requests per new paper (lease included; with the index and run manifest when
`--index`), and the ratios of the rates. The proxy runs in its own process, so it
shares no interpreter lock with the pipeline's threads.

    python benchmarks/s3_bench.py --papers 200
    python benchmarks/s3_bench.py --papers 200 --io 1 --io 32 --io 64 --index
    python benchmarks/s3_bench.py --papers 200 --io 32 --index --log

`--log` (with `--index`): the run keeps a transparency log, as every new store now does
by default, and its append is timed and counted apart from the index and manifest.

Figures are of this machine and its load; the proxy's latency dominates by design.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gen_records import generate

from pith_pipeline.core.keys import Ed25519Signer
from pith_pipeline.items import Item
from pith_pipeline.sources.jsonl import parse_line
from pith_pipeline.storage.concurrency import S3_IO_CONCURRENCY
from pith_pipeline.testing.moto_server import moto_server

COUNTS_PATH = "/__proxy_counts__"
HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "proxy-connection", "upgrade", "te"}


class LatencyProxy(ThreadingHTTPServer):
    """Forwards each HTTP request to `upstream` after `latency` seconds; counts them.

    One thread per client connection (boto3 keeps its connections open), each with
    its own connection upstream, so N requests in flight wait their latency together,
    as they would against a distant region.
    """

    daemon_threads = True

    def __init__(self, upstream: str, latency: float) -> None:
        super().__init__(("127.0.0.1", 0), _ProxyHandler)
        self.upstream = upstream.removeprefix("http://")
        self.latency = latency
        self.counts: Counter[str] = Counter()
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def count(self, kind: str) -> None:
        with self.lock:
            self.counts[kind] += 1

    def reset(self) -> Counter[str]:
        with self.lock:
            got, self.counts = self.counts, Counter()
        return got


class _ProxyHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: LatencyProxy

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _forward(self) -> None:
        if self.path == COUNTS_PATH:  # the benchmark reads (and resets) the counts
            data = json.dumps(dict(self.server.reset())).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        kind = self.command
        if self.command == "GET" and "list-type=2" in self.path:
            kind = "LIST"
        self.server.count(kind)
        time.sleep(self.server.latency)
        up = getattr(self, "_up", None)
        if up is None:
            up = self._up = http.client.HTTPConnection(self.server.upstream, timeout=60)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP | {"expect"}}
        try:
            up.request(self.command, self.path, body=body, headers=headers)
            resp = up.getresponse()
            data = resp.read()
        except (OSError, http.client.HTTPException):
            self._up = None
            raise
        self.send_response(resp.status, resp.reason)
        for k, v in resp.getheaders():
            if k.lower() not in HOP_BY_HOP | {"content-length"}:
                self.send_header(k, v)
        if self.command == "HEAD":
            self.send_header("Content-Length", resp.getheader("Content-Length") or "0")
        else:
            self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _forward


def serve_proxy(upstream: str, latency: float) -> None:
    """The proxy in a process of its own (`--proxy`): it then shares no interpreter
    lock with the pipeline's threads, as a real network would not. Prints its URL."""
    proxy = LatencyProxy(upstream, latency)
    print(proxy.url, flush=True)
    proxy.serve_forever()


@contextmanager
def proxy_process(upstream: str, latency: float) -> Iterator[str]:
    proc = subprocess.Popen(
        [sys.executable, __file__, "--proxy", upstream, "--latency", str(latency)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        yield proc.stdout.readline().strip()
    finally:
        proc.terminate()
        proc.wait(10)


def proxy_counts(url: str) -> Counter[str]:
    """The requests the proxy forwarded since the last call (and reset them)."""
    with urllib.request.urlopen(url + COUNTS_PATH, timeout=30) as resp:
        return Counter(json.loads(resp.read()))


def papers(n: int) -> list[Item]:
    return [parse_line(line, f"bench:{i}") for i, line in enumerate(generate(n), 1)]


def run_mode(
    bucket: str, items: list[Item], io: int, proxy: str, *, index: bool, log_key: str | None = None
) -> dict[str, Any]:
    """Publish `items` into a fresh prefix as `build` does; time and count requests."""
    from pith_pipeline.loader import Loader
    from pith_pipeline.publish import BuildConfig, Publisher
    from pith_pipeline.runs.manifest import finish_run
    from pith_pipeline.storage.lease import writer_lease
    from pith_pipeline.storage.s3 import S3Store

    store = S3Store(bucket, f"io-{io}-{uuid.uuid4().hex[:6]}")
    signer = Ed25519Signer(bytes(range(32)), "bench-key")
    proxy_counts(proxy)
    start = time.perf_counter()
    from pith_pipeline.index.sink import RowSink

    # with the log: as the commands run, the bundles' rows and the log's entries are
    # taken from the run (`RowSink`), not read back from the store
    rows = RowSink() if log_key else None
    pub = Publisher(
        store, signer, BuildConfig(), io_concurrency=io, on_bundle=rows.add_bundle if rows else None
    )
    with writer_lease(store, command="bench", run_id=pub.summary.run_id) as lease:
        pub.lease = lease
        t0 = time.perf_counter()
        summary = Loader(pub).publish(items)
        publish_s = time.perf_counter() - t0
    if rows is not None:
        rows.flush()
    total_s = time.perf_counter() - start
    publish_requests = proxy_counts(proxy)
    out: dict[str, Any] = {
        "io": io,
        "built": summary.built,
        "seconds": publish_s,
        "papers_per_s": summary.built / publish_s,
        # with taking and releasing the writer lease (16 shard objects, one at a time)
        "total_seconds": total_s,
        "papers_per_s_with_lease": summary.built / total_s,
        "requests": dict(publish_requests),
        "per_paper": sum(publish_requests.values()) / max(1, summary.built),
    }
    if index:
        import pith_pipeline.tlog.pipeline as tlog

        real_log_run = tlog.log_run
        logged: dict[str, Any] = {}

        def log_run(*a: Any, **k: Any) -> Any:  # the log's own requests and seconds
            before = proxy_counts(proxy)
            t = time.perf_counter()
            got = real_log_run(*a, **k)
            logged["seconds"] = time.perf_counter() - t
            logged["requests"] = proxy_counts(proxy)
            logged["before"] = before
            return got

        tlog.log_run = log_run  # type: ignore[assignment]
        t1 = time.perf_counter()
        try:
            finish_run(store, summary, {"bench": "s3"}, rows=rows, log_signer=log_key)
        finally:
            tlog.log_run = real_log_run  # type: ignore[assignment]
            if rows is not None:
                rows.close()
        out["index_seconds"] = time.perf_counter() - t1
        index_requests = (
            proxy_counts(proxy) + logged.get("before", Counter()) + logged.get("requests", Counter())
        )
        out["log_seconds"] = logged.get("seconds", 0.0)
        out["log_requests"] = sum(logged.get("requests", Counter()).values())
        out["log_kinds"] = ", ".join(f"{k} {v}" for k, v in sorted(logged.get("requests", Counter()).items()))
        out["index_requests"] = dict(index_requests)
        out["per_paper_with_index"] = (sum(publish_requests.values()) + sum(index_requests.values())) / max(
            1, summary.built
        )
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--papers", type=int, default=200, help="new papers per mode (default 200)")
    ap.add_argument("--latency", type=float, default=0.1, help="seconds added per request (default 0.1)")
    ap.add_argument(
        "--io",
        type=int,
        action="append",
        help=f"io-concurrency of a mode (repeatable; default: 1 and {S3_IO_CONCURRENCY})",
    )
    ap.add_argument("--index", action="store_true", help="also update the index and write the run manifest")
    ap.add_argument("--log", action="store_true", help="with --index: keep a transparency log (the default)")
    ap.add_argument("--proxy", metavar="UPSTREAM", help=argparse.SUPPRESS)  # the proxy's own process
    args = ap.parse_args(argv)
    if args.proxy:
        serve_proxy(args.proxy, args.latency)
        return 0
    modes = args.io or [1, S3_IO_CONCURRENCY]
    items = papers(args.papers)
    with moto_server() as upstream, proxy_process(upstream, args.latency) as proxy:
        os.environ.update(
            AWS_ACCESS_KEY_ID="bench",
            AWS_SECRET_ACCESS_KEY="bench",
            AWS_DEFAULT_REGION="us-east-1",
            AWS_ENDPOINT_URL=proxy,
            AWS_CONFIG_FILE="/dev/null",
            AWS_SHARED_CREDENTIALS_FILE="/dev/null",
        )
        for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3"):
            os.environ.pop(name, None)
        import boto3

        bucket = f"pith-bench-{uuid.uuid4().hex[:8]}"
        boto3.client("s3", endpoint_url=upstream).create_bucket(Bucket=bucket)
        print(f"{args.papers} new papers per mode, {args.latency * 1000:.0f} ms added per request")
        results = []
        log_key = None
        if args.log:
            import tempfile

            from pith_pipeline.signing.local import generate_key

            log_key = f"file:{generate_key(Path(tempfile.mkdtemp(prefix='pith-bench-log-')) / 'k')[0]}"
        for io in modes:
            r = run_mode(bucket, items, io, proxy, index=args.index, log_key=log_key)
            results.append(r)
            reqs = ", ".join(f"{k} {v}" for k, v in sorted(r["requests"].items()))
            line = (
                f"io-concurrency {io:>3}: {r['papers_per_s']:7.2f} papers/s "
                f"({r['seconds']:.1f} s; {r['papers_per_s_with_lease']:.2f}/s, {r['total_seconds']:.1f} s "
                f"with the writer lease), {r['per_paper']:.2f} requests per new paper ({reqs})"
            )
            if args.index:
                line += (
                    f"; with index and run manifest {r['per_paper_with_index']:.2f} "
                    f"(index {r['index_seconds']:.1f} s)"
                )
            if args.log:
                whole = r["total_seconds"] + r["index_seconds"]
                line += (
                    f"; the log: {r['log_requests']} requests ({r['log_requests'] / max(1, r['built']):.2f} "
                    f"per paper: {r['log_kinds']}), {r['log_seconds']:.1f} s, "
                    f"{100 * r['log_seconds'] / whole:.1f} % of the run"
                )
            print(line, flush=True)
    first = results[0]
    for r in results[1:]:
        ratio = r["papers_per_s"] / first["papers_per_s"]
        with_lease = r["papers_per_s_with_lease"] / first["papers_per_s_with_lease"]
        print(
            f"io-concurrency {r['io']} / io-concurrency {first['io']}: {ratio:.1f}x "
            f"({with_lease:.1f}x with the writer lease)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
