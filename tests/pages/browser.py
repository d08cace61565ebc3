"""Serve a directory on 127.0.0.1 and read pages in headless Chromium (Debian's `chromium`).

Why a real browser: the record pages check bundles with the browser's own WebCrypto,
`fetch` and module loader; nothing short of one shows what a reader sees. Why http:
module scripts and `fetch` refuse `file://`. Chromium is installed by `.ci/run`; a
machine without it fails with the line that installs it, never skips.

`verdicts` reads many record pages in one Chromium process: a harness page at the
served root opens them in iframes a few at a time and, as each page writes its verdict
(`data-pith-verdict`), copies the verdict and its checks (`#pith-checks li`) into
its own DOM, which `--dump-dom` prints. It waits on events, never on timers, so the
virtual time budget is only a bound.
"""

from __future__ import annotations

import functools
import html
import json
import shutil
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

#: the script every record page loads, as the package ships it
VERIFY_SCRIPT = Path(__file__).resolve().parents[2] / "pith_pipeline" / "pages" / "assets" / "pith-verify.js"


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.fail(
            "headless Chromium is needed to check pages in a browser: apt-get install -y chromium "
            "(.ci/run installs it)"
        )
    return found


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextmanager
def served(root: Path) -> Iterator[str]:
    """`http://127.0.0.1:<port>` serving `root` (an ephemeral port), stopped on exit."""
    handler = functools.partial(_QuietHandler, directory=str(root))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, name="pages-http", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=30)


def dump_dom(url: str, profile: Path, *, budget_ms: int = 120_000) -> str:
    """The DOM of `url` once its virtual time budget has run out, as Chromium prints it."""
    done = subprocess.run(
        [
            chromium(),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            # nothing leaves the machine: every host name fails, the loopback server answers
            "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
            f"--user-data-dir={profile}",
            "--dump-dom",
            f"--virtual-time-budget={budget_ms}",
            url,
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


@dataclass(frozen=True, slots=True)
class PageResult:
    """What one record page said: its verdict and each check's status and detail."""

    verdict: str | None
    checks: list[dict[str, str]]
    log_reads: str | None = None
    #: what `#pith-verdict` says to people
    words: str | None = None

    def status(self) -> dict[str, str]:
        return {c["name"]: c["status"] for c in self.checks}


_HARNESS = """<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>pages</title></head><body>
<pre id="results"></pre>
<script>
const pages = %(pages)s;
const results = {};
let next = 0;
function final(v) { return v === "verified" || (v || "").startsWith("failed: "); }
function collect(url, frame) {
  const root = frame.contentDocument.documentElement;
  results[url] = {
    verdict: root.getAttribute("data-pith-verdict"),
    log_reads: root.getAttribute("data-pith-log-reads"),
    words: (frame.contentDocument.getElementById("pith-verdict") || {}).textContent || null,
    checks: Array.from(frame.contentDocument.querySelectorAll("#pith-checks li"), (li) => ({
      name: li.dataset.check, status: li.dataset.status, detail: li.textContent })),
  };
  document.getElementById("results").textContent = JSON.stringify(results);
  frame.remove();
  open1();
}
function open1() {
  if (next >= pages.length) return;
  const url = pages[next++];
  const frame = document.createElement("iframe");
  frame.addEventListener("load", () => {
    const root = frame.contentDocument.documentElement;
    if (final(root.getAttribute("data-pith-verdict"))) return collect(url, frame);
    new MutationObserver((_m, obs) => {
      if (final(root.getAttribute("data-pith-verdict"))) { obs.disconnect(); collect(url, frame); }
    }).observe(root, { attributes: true, attributeFilter: ["data-pith-verdict"] });
  }, { once: true });
  frame.src = url;
  document.body.appendChild(frame);
}
for (let i = 0; i < %(parallel)d; i++) open1();
</script></body></html>
"""


def verdicts(
    root: Path, pages: list[str], *, parallel: int = 4, budget_ms: int = 300_000
) -> dict[str, PageResult]:
    """Open every page (URL paths relative to `root`, fragments allowed) in one Chromium
    process and return what each said; a page that never gave a verdict is absent."""
    harness = root / "harness.html"
    harness.write_text(_HARNESS % {"pages": json.dumps(pages), "parallel": parallel}, encoding="utf-8")
    with served(root) as base:
        dom = dump_dom(
            f"{base}/harness.html", root.parent / f"{root.name}-chromium-profile", budget_ms=budget_ms
        )
    start = dom.index('<pre id="results">') + len('<pre id="results">')
    text = html.unescape(dom[start : dom.index("</pre>", start)])
    raw: dict[str, Any] = json.loads(text) if text else {}
    return {url: PageResult(r["verdict"], r["checks"], r["log_reads"], r["words"]) for url, r in raw.items()}


def install_script(store: Path) -> None:
    """The script where a store serves it (`assets/pith-verify.js`)."""
    (store / "assets").mkdir(parents=True, exist_ok=True)
    shutil.copyfile(VERIFY_SCRIPT, store / "assets" / "pith-verify.js")
