"""`pith-pipeline report`: the page a real browser (headless Chromium) shows agrees with
`pith-pipeline query` over the same store, and the page fetches nothing.

Chromium is installed by `.ci/run` (Debian's `chromium` package); a machine without it
fails here with how to install it, never skips: the page is meant for a browser.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from tests.cli_in_process import run_cli

SAMPLE = Path(__file__).parent / "data" / "arxiv-sample.jsonl"


def _cli(cwd: Path, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "pith_pipeline", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The README's store (`ingest --sample`), then a run with a new version of one
    paper (a superseded row) and a run with three rejected lines (a quarantine)."""
    work = tmp_path_factory.mktemp("report")
    _cli(work, "ingest", "--sample")
    first = json.loads(SAMPLE.read_text(encoding="utf-8").splitlines()[0])
    first["versions"].append(
        {"version": f"v{len(first['versions']) + 1}", "created": "Mon, 1 Jan 2024 00:00:00 GMT"}
    )
    (work / "v-next.jsonl").write_text(json.dumps(first) + "\n", encoding="utf-8")
    key = "pith-keys/pith-private-key.json"
    _cli(work, "build", "--input", "v-next.jsonl", "--store", "pith-store", "--key", key)
    (work / "bad.jsonl").write_text(
        '{not json\n{"id": "2001.00001", "title": "t"}\n{"id": "2001.00002", "title": "u"}\n',
        encoding="utf-8",
    )
    _cli(work, "build", "--input", "bad.jsonl", "--store", "pith-store", "--key", key)
    return work / "pith-store"


def _query(store: Path, sql: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = json.loads(
        _cli(store.parent, "query", "--store", str(store), "--format", "json", sql)
    )
    return rows


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.fail(
            "headless Chromium is needed to check the report page: apt-get install -y chromium "
            "(.ci/run installs it)"
        )
    return found


def _browser(page: Path, *args: str) -> str:
    """Run headless Chromium on `page` with no network, no profile of its own."""
    profile = page.parent / "chromium-profile"
    done = subprocess.run(
        [
            _chromium(),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            "--host-resolver-rules=MAP * ~NOTFOUND",  # a fetch could not leave the machine
            f"--user-data-dir={profile}",
            *args,
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


class _Figures(HTMLParser):
    """The numbers of each figure (`data-figure` tables), the totals, the SVGs, and every
    attribute that could make a browser fetch something."""

    def __init__(self) -> None:
        super().__init__()
        self.figures: dict[str, list[tuple[str, int]]] = {}
        self.totals: dict[str, int] = {}
        self.runs: dict[str, dict[str, int]] = {}
        self.svgs = 0
        self.fetching: list[str] = []
        self._figure: str | None = None
        self._run: str | None = None
        self._tags: Counter[str] = Counter()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        self._tags[tag] += 1
        if tag == "svg":
            self.svgs += 1
        if tag in ("script", "link", "iframe", "img", "object", "embed", "image"):
            self.fetching.append(f"<{tag}>")
        for name in ("src", "href", "xlink:href"):
            if a.get(name) and not str(a[name]).startswith("#"):
                self.fetching.append(f"{tag} {name}={a[name]}")
        if "style" in a and "url(" in str(a["style"]):
            self.fetching.append(f"{tag} style url()")
        if tag == "table" and a.get("data-figure"):
            self._figure = a["data-figure"]
            self.figures[self._figure or ""] = []
        if tag == "tr" and self._figure and a.get("data-key") is not None:
            self.figures[self._figure].append((a["data-key"] or "", int(a["data-count"] or "x")))
        if tag == "span" and a.get("data-total"):
            self._total = a["data-total"]
        if tag == "tr" and a.get("data-run"):
            self._run = a["data-run"]
            self.runs[self._run or ""] = {}
        if tag == "td" and self._run:
            for k, v in a.items():
                if k.startswith("data-") and v is not None:
                    self.runs[self._run][k[len("data-") :]] = int(v)

    def handle_endtag(self, tag: str) -> None:
        if tag == "table":
            self._figure = None
            self._run = None

    def handle_data(self, data: str) -> None:
        total = getattr(self, "_total", None)
        if total:
            self.totals[total] = int(data)
            self._total = None


def _pairs(rows: list[dict[str, Any]], *, by_count: bool) -> list[tuple[str, int]]:
    """(label, count) as the page shows them: a missing or empty value is "(none)";
    in query's order, or most frequent first."""
    out: Counter[str] = Counter()
    for r in rows:
        out["(none)" if r["k"] in (None, "") else str(r["k"])] += int(r["n"])
    pairs = list(out.items())
    return sorted(pairs, key=lambda kv: (-kv[1], kv[0])) if by_count else pairs


def test_the_page_a_browser_shows_agrees_with_query(store: Path, tmp_path: Path) -> None:
    page = tmp_path / "report.html"
    _cli(store.parent, "report", "--store", str(store), "--out", str(page))
    dom = _Figures()
    dom.feed(_browser(page, "--dump-dom"))

    latest = "FROM records WHERE superseded_by IS NULL"
    by_key = {  # figure: the column it counts papers by, in the order of that column
        "papers_per_month": "submitted_month",
        "papers_per_day": "CAST(timezone('UTC', submitted_at) AS DATE)",
        "versions_per_paper": "version",
    }
    by_count = {"primary_archive": "primary_archive", "primary_cat": "primary_cat", "license": "license"}
    for fid, column in by_key.items():
        rows = _query(store, f"SELECT {column} k, count(*) n {latest} GROUP BY 1 ORDER BY 1")
        assert dom.figures[fid] == _pairs(rows, by_count=False), fid
    for fid, column in by_count.items():
        rows = _query(store, f"SELECT {column} k, count(*) n {latest} GROUP BY 1")
        assert dom.figures[fid] == _pairs(rows, by_count=True), fid
    papers = _query(store, f"SELECT count(*) n {latest}")[0]["n"]
    versions = _query(store, "SELECT count(*) n FROM records")[0]["n"]
    assert dom.totals == {"papers": papers, "versions": versions, "runs": 3}
    assert papers == 30 and versions == 31  # the store the fixture built: one paper has two versions
    assert sum(n for _, n in dom.figures["versions_per_paper"]) == papers

    manifests = [json.loads(p.read_bytes()) for p in (store / "runs").glob("*/manifest.json")]
    assert {m["run_id"]: m["counts"] for m in manifests} == dom.runs
    assert sorted(dom.figures["runs"]) == sorted((m["run_id"], m["counts"]["built"]) for m in manifests)

    reasons: Counter[str] = Counter()
    for q in (store / "quarantine").glob("*.jsonl"):
        reasons.update(json.loads(line)["reason"] for line in q.read_text(encoding="utf-8").splitlines())
    assert dict(dom.figures["quarantine_reasons"]) == dict(reasons)
    assert sum(reasons.values()) == 3

    # every figure with rows is drawn, and nothing in the page can fetch anything
    assert dom.svgs == sum(1 for rows in dom.figures.values() if rows) == 8
    assert dom.fetching == []


def test_the_page_renders_in_a_browser_with_its_figures_in_view(store: Path, tmp_path: Path) -> None:
    page = tmp_path / "report.html"
    _cli(store.parent, "report", "--store", str(store), "--out", str(page))
    shot = tmp_path / "report.png"
    _browser(page, f"--screenshot={shot}", "--window-size=1000,1400", "--hide-scrollbars")
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data) > 20_000  # a blank page of this size is a few kilobytes
    if os.environ.get("PITH_REPORT_SCREENSHOT"):  # docs/pages/img/report.png is made so
        shutil.copyfile(shot, os.environ["PITH_REPORT_SCREENSHOT"])


def test_errors_are_one_line(store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = run_cli(
        capsys, "report", "--store", str(tmp_path / "nothing"), "--out", str(tmp_path / "r.html")
    )
    assert missing.code != 0 and "no store here" in missing.err and "Traceback" not in missing.err
    assert not (tmp_path / "r.html").exists()
    bad_out = run_cli(capsys, "report", "--store", str(store), "--out", str(tmp_path / "no-dir" / "r.html"))
    assert bad_out.code == 2 and "does not exist" in bad_out.err and "Traceback" not in bad_out.err


def test_an_existing_page_is_replaced_whole(
    store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "r.html"
    out.write_text("old", encoding="utf-8")
    done = run_cli(capsys, "report", "--store", str(store), "--out", str(out))
    assert done.code == 0, done.err
    text = out.read_text(encoding="utf-8")
    assert text.startswith("<!DOCTYPE html>") and text.rstrip().endswith("</html>")
    assert [p.name for p in tmp_path.iterdir()] == ["r.html"]  # no temporary file left


def test_runs_are_read_from_a_manifest_head_or_whole(tmp_path: Path) -> None:
    """A pretty manifest gives its counts from its first bytes (the objects after them
    can be millions); one laid out otherwise is read whole, with the same result."""
    from pith_pipeline.report import MANIFEST_HEAD, runs
    from pith_pipeline.storage.factory import open_existing_store

    objects = [{"key": f"pith/{i:026d}/bundle.json", "sha256": "0" * 64} for i in range(MANIFEST_HEAD // 50)]
    doc: dict[str, Any] = {
        "format": "pith-run-manifest-v1",
        "run_id": "run-a",
        "window": None,
        "counts": {"fetched": 5, "built": 4, "quarantined": 1},
        "objects": objects,
        "finished_at": "2026-01-02T03:04:05Z",
    }
    (tmp_path / "runs" / "run-a").mkdir(parents=True)
    (tmp_path / "runs" / "run-a" / "manifest.json").write_text(json.dumps(doc, indent=2), encoding="utf-8")
    one_line = {**doc, "run_id": "run-b", "counts": {"built": 7}, "finished_at": "2026-01-03T00:00:00Z"}
    (tmp_path / "runs" / "run-b").mkdir()
    (tmp_path / "runs" / "run-b" / "manifest.json").write_text(json.dumps(one_line), encoding="utf-8")
    got = runs(open_existing_store(str(tmp_path)))
    assert [(r.run_id, r.finished_at, r.counts) for r in got] == [
        ("run-a", "2026-01-02T03:04:05Z", {"fetched": 5, "built": 4, "quarantined": 1}),
        ("run-b", "2026-01-03T00:00:00Z", {"built": 7}),
    ]
