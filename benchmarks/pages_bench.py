"""What record pages cost, and where they belong: inside the publish step or after it.

Against moto's S3 server behind the latency proxy of `s3_bench.py` (100 ms added per
request by default), the same generated papers are published into fresh prefixes
three ways, at the S3 default io-concurrency (32), each as `build` does (writer
lease, key document, papers, quarantine):

  - `none`: pages switched off (the publisher's page write and assets made no-ops):
    the cost of the store without pages;
  - `inside`: what the pipeline does: each paper's page is rendered from the bundle
    already in memory and written with it (one more PUT per new paper), the assets
    checked once per run;
  - `after`: `none`, then a following step as a separate command or Airflow task
    would run it: for every paper the run touched, read its bundle back (the step
    does not hold it), read the stored page, write the page when it differs, the
    papers in flight as in the publish loop.

Printed per mode: requests per new paper by kind, seconds publishing (and in the
following step), papers/s; and the objects and bytes a page adds per paper.

    python benchmarks/pages_bench.py --papers 200
    python benchmarks/pages_bench.py --papers 200 --latency 0.05

Figures are of this machine and its load; the proxy's latency dominates by design.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from s3_bench import papers, proxy_counts, proxy_process, serve_proxy

from pith_pipeline.core.keys import Ed25519Signer
from pith_pipeline.items import Item
from pith_pipeline.storage.concurrency import S3_IO_CONCURRENCY
from pith_pipeline.testing.moto_server import moto_server

MODES = ("none", "inside", "after")


def _following_step(store: Any, subjects: list[str], io: int) -> int:
    """Render the pages of `subjects` from their stored bundles; pages written."""
    from pith_pipeline.core.canonical_json import loads
    from pith_pipeline.core.layout import bundle_key, page_key
    from pith_pipeline.pages.render import record_page
    from pith_pipeline.pages.site import PAGE_CONTENT_TYPE, run_log_prefix

    log = run_log_prefix(store)

    def one(subject: str) -> int:
        body = subject.rsplit(":", 1)[-1]
        data = store.get(bundle_key(subject))
        page = record_page(loads(data), log_prefix=log)
        if store.get(page_key(body)) == page:
            return 0
        store.put(page_key(body), page, content_type=PAGE_CONTENT_TYPE)
        return 1

    with ThreadPoolExecutor(io) as pool:
        return sum(pool.map(one, subjects))


def run_mode(bucket: str, items: list[Item], io: int, proxy: str, mode: str) -> dict[str, Any]:
    from pith_pipeline.loader import Loader
    from pith_pipeline.publish import BuildConfig, Publisher
    from pith_pipeline.storage.concurrency import reserve_connections
    from pith_pipeline.storage.lease import writer_lease
    from pith_pipeline.storage.s3 import S3Store

    store = S3Store(bucket, f"{mode}-{uuid.uuid4().hex[:6]}")
    signer = Ed25519Signer(bytes(range(32)), "bench-key")
    pub = Publisher(store, signer, BuildConfig(), io_concurrency=io)
    if mode != "inside":  # the store without pages
        pub.writer.put_page = lambda *a, **k: None  # type: ignore[method-assign]
        pub.writer.ensure_page = lambda *a, **k: False  # type: ignore[method-assign]
        pub.publish_assets = lambda: None  # type: ignore[method-assign]
    proxy_counts(proxy)
    with writer_lease(store, command="bench", run_id=pub.summary.run_id) as lease:
        pub.lease = lease
        t0 = time.perf_counter()
        summary = Loader(pub).publish(items)
        publish_s = time.perf_counter() - t0
        step_s = 0.0
        if mode == "after":
            reserve_connections(store, io + 2)
            t1 = time.perf_counter()
            lease.check()
            _following_step(store, list(summary.seen), io)
            step_s = time.perf_counter() - t1
    counts: Counter[str] = proxy_counts(proxy)
    lease_requests = 0  # the lease's 16 shard objects, taken and released: counted alike in every mode
    pages = [k for k in store.list("pith/") if k.endswith("/index.html")]
    page_bytes = sum(len(store.get(k) or b"") for k in pages)
    bundle_bytes = sum(len(store.get(k) or b"") for k in store.list("pith/") if k.endswith("/bundle.json"))
    n = max(1, summary.built)
    return {
        "mode": mode,
        "built": summary.built,
        "publish_s": publish_s,
        "step_s": step_s,
        "papers_per_s": summary.built / (publish_s + step_s),
        "requests": dict(counts),
        "per_paper": (sum(counts.values()) - lease_requests) / n,
        "pages": len(pages),
        "page_bytes_per_paper": page_bytes / n,
        "bundle_bytes_per_paper": bundle_bytes / n,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--papers", type=int, default=200, help="new papers per mode (default 200)")
    ap.add_argument("--latency", type=float, default=0.1, help="seconds added per request (default 0.1)")
    ap.add_argument("--io", type=int, default=S3_IO_CONCURRENCY, help="io-concurrency (default: S3's)")
    ap.add_argument("--proxy", metavar="UPSTREAM", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.proxy:
        serve_proxy(args.proxy, args.latency)
        return 0
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
        for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3", "PITH_LOG_SIGNER"):
            os.environ.pop(name, None)
        import boto3

        bucket = f"pith-bench-{uuid.uuid4().hex[:8]}"
        boto3.client("s3", endpoint_url=upstream).create_bucket(Bucket=bucket)
        print(
            f"{args.papers} new papers per mode, io-concurrency {args.io}, "
            f"{args.latency * 1000:.0f} ms added per request"
        )
        for mode in MODES:
            r = run_mode(bucket, items, args.io, proxy, mode)
            reqs = ", ".join(f"{k} {v}" for k, v in sorted(r["requests"].items()))
            print(
                f"{mode:>6}: {r['per_paper']:.2f} requests per new paper ({reqs}); "
                f"publish {r['publish_s']:.1f} s + following step {r['step_s']:.1f} s = "
                f"{r['papers_per_s']:.2f} papers/s; pages {r['pages']}, "
                f"{r['page_bytes_per_paper']:.0f} page bytes per paper "
                f"(bundle {r['bundle_bytes_per_paper']:.0f})",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
