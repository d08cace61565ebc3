"""What a record's page says, how it says hostile text, and that it says it the same
way every time (the page is checked by rendering its bundle again)."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from pages_store import KEY, STORE, bodies, cli, here_fixture, page, sample_dir_fixture
from testclock import StepClock

from pith_pipeline.core.canonical_json import loads
from pith_pipeline.core.keys import Ed25519Signer
from pith_pipeline.core.layout import page_key
from pith_pipeline.pages.render import record_page
from pith_pipeline.publish import BuildConfig, Publisher
from pith_pipeline.sources.jsonl import parse_line
from pith_pipeline.storage.memory import MemoryStore

__all__ = ["here_fixture", "sample_dir_fixture"]

SIGNER = Ed25519Signer(b"\x07" * 32, "pith-pages-test")

HOSTILE_TITLE = (
    "</title><script>window.__pwned=1</script> $\\alpha < \\beta$ & \"q\" 'a' &amp; "
    "\u202egnp.exe \U0001f600 e\u0301 \u200d\ufeff \u0634\u0643\u0631\u0627"
)
HOSTILE_AUTHORS = (
    'Ann <img src=x onerror="window.__pwned=1">, "Bob" \'O\'Neil, \u202eevil\u202c, \u05e9\u05dc\u05d5\u05dd'
)
HOSTILE_ABSTRACT = (
    '<a href="javascript:window.__pwned=1">x</a> ]]> <!-- --> </textarea></bdi><style>*{}</style> '
    "<svg onload=window.__pwned=1>"
)


def record(arxiv_id: str = "2101.00001", versions: int = 1, **fields: Any) -> dict[str, Any]:
    rec: dict[str, Any] = {
        "id": arxiv_id,
        "submitter": "x",
        "authors": "Ann Author, Bob Author",
        "title": "A title",
        "comments": None,
        "journal-ref": None,
        "doi": None,
        "report-no": None,
        "categories": "cs.LG stat.ML",
        "license": "http://creativecommons.org/licenses/by/4.0/",
        "abstract": "An abstract.",
        "versions": [
            {"version": f"v{n}", "created": f"Fri, {7 * n - 6} Jan 2021 01:01:10 GMT"}
            for n in range(1, versions + 1)
        ],
        "update_date": None,
        "authors_parsed": [],
    }
    rec.update(fields)
    return rec


def publish(store: MemoryStore, *records: dict[str, Any]) -> None:
    clock = StepClock(datetime(2026, 1, 5, tzinfo=UTC))
    items = [parse_line(json.dumps(r).encode(), f"in:{n}") for n, r in enumerate(records, 1)]
    summary = Publisher(store, SIGNER, BuildConfig(), clock=clock).publish(items)
    assert summary.quarantined == 0


def bundles(store: MemoryStore) -> dict[str, dict[str, Any]]:
    """arXiv version (`id` v `n`) -> its bundle."""
    out = {}
    for key, data in store.objects.items():
        if key.startswith("pith/") and key.endswith("/bundle.json"):
            b = loads(data)
            out[f"{b['source']['id']}v{b['source']['version']}"] = b
    return out


class Parsed(HTMLParser):
    """Every start tag with its attributes, and the text of each element by tag."""

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: dict[str, list[str]] = {}
        self._open: list[str] = []
        self.feed(html)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        if tag not in ("meta", "link", "br", "input"):
            self._open.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if tag in self._open:
            while self._open.pop() != tag:
                pass

    def handle_data(self, data: str) -> None:
        for tag in self._open:
            self.text.setdefault(tag, []).append(data)

    def all_text(self, tag: str) -> str:
        return "".join(self.text.get(tag, []))


def test_hostile_text_is_shown_as_text(tmp_path: Path) -> None:
    store = MemoryStore()
    publish(
        store,
        record(
            title=HOSTILE_TITLE,
            authors=HOSTILE_AUTHORS,
            abstract=HOSTILE_ABSTRACT,
            license="javascript:window.__pwned=1",
        ),
    )
    (bundle,) = bundles(store).values()
    html = record_page(bundle, log_prefix=None).decode("utf-8")
    parsed = Parsed(html)
    scripts = [a for tag, a in parsed.tags if tag == "script"]
    assert scripts == [{"type": "module", "src": "../../assets/pith-verify.js"}]
    assert not [t for t, a in parsed.tags if t in ("img", "svg", "style", "a") and "javascript" in str(a)]
    assert not [(t, n) for t, a in parsed.tags for n in a if n.startswith("on")]
    hrefs = [str(a.get("href")) for t, a in parsed.tags if "href" in a]
    assert all(h.startswith("https://arxiv.org/abs/") or "://" not in h for h in hrefs), hrefs
    assert not [h for h in hrefs if h.lower().startswith("javascript")]
    # the hostile strings are there, as text (as the snapshot holds them)
    paper = bundle["state"]["current"]["graph_snapshots"][-1]["payload"]["graph_snapshot"]["paper"]
    assert paper["title"] in parsed.all_text("h1")
    assert "<script>window.__pwned=1</script>" in parsed.all_text("h1")
    assert paper["authors_text"] in parsed.all_text("p")
    assert "javascript:window.__pwned=1" in parsed.all_text("dd")  # the licence, not a link
    assert paper["title"] in parsed.all_text("title")
    # right-to-left runs are isolated, each in its own element
    assert "<bdi>" in html and html.count("<bdi>") == html.count("</bdi>")


def test_the_page_holds_the_record_and_links_relative(sample_dir: Path) -> None:
    store = sample_dir / STORE
    for body in bodies(store):
        bundle = json.loads((store / "pith" / body / "bundle.json").read_bytes())
        html = page(store, body).read_text(encoding="utf-8")
        parsed = Parsed(html)
        paper = bundle["state"]["current"]["graph_snapshots"][-1]["payload"]["graph_snapshot"]["paper"]
        meta = bundle["canonical_record"]["metadata"]
        src = bundle["source"]
        assert paper["title"] in parsed.all_text("h1")
        assert paper["authors_text"] in parsed.all_text("p")
        text = parsed.all_text("main")
        for n in range(1, src["version"] + 1):
            assert f'href="https://arxiv.org/abs/{src["id"]}v{n}"' in html
        assert bundle["pith_number"] in text and bundle["short_pith_number"] in text
        assert meta["submitted_at"] in text
        for cat in [meta["primary_cat"], *meta["cross_cats_sorted"]]:
            assert f"<code>{cat}</code>" in html
        assert ("not stated" if not meta.get("license") else meta["license"]) in text
        sig = bundle["bundle_signature"]
        assert sig["key_id"] in text and sig["public_key_fingerprint"] in text
        for ev in bundle["events"]:
            assert ev["event_id"] in text
        for alias in bundle["source_aliases"]:
            assert alias["alias_value"] in text
        hrefs = {str(a["href"]) for t, a in parsed.tags if t == "a" and "href" in a}
        want = {
            "bundle.json",
            "state.json",
            f"../../.well-known/pith/{body}/bundle.json",
            "../../pith-signing-key.json",
            "../../index.html",
        }
        assert want <= hrefs
        assert all(
            h.startswith(("https://arxiv.org/abs/", "http", "../", "bundle.json", "state.json"))
            for h in hrefs
        )
        assert not [h for h in hrefs if h.startswith("/")]  # nothing absolute to the host


def test_versions_link_each_other(tmp_path: Path) -> None:
    """v1's page names v2's record (superseded by) and links both arXiv versions; v2's
    links both and says it supersedes an earlier record."""
    store = MemoryStore()
    publish(store, record(versions=1))
    publish(store, record(versions=2))
    got = bundles(store)
    v1, v2 = got["2101.00001v1"], got["2101.00001v2"]
    body1, body2 = (b["pith_number"].rsplit(":", 1)[-1] for b in (v1, v2))
    page1 = store.objects[page_key(body1)].decode()
    page2 = store.objects[page_key(body2)].decode()
    assert page1 == record_page(v1, log_prefix=None).decode()  # written with its new bundle
    assert f'Superseded by <a href="../{body2}/"><code>{v2["pith_number"]}</code></a>' in page1
    for html in (page1, page2):
        assert 'href="https://arxiv.org/abs/2101.00001v1"' in html
        assert 'href="https://arxiv.org/abs/2101.00001v2"' in html
    assert "(supersedes an earlier version" in page2


def test_the_same_bundle_renders_the_same_bytes(sample_dir: Path) -> None:
    store = sample_dir / STORE
    for body in bodies(store)[:5]:
        bundle = json.loads((store / "pith" / body / "bundle.json").read_bytes())
        first = record_page(bundle, log_prefix="log/")  # the sample store keeps a log
        assert record_page(copy.deepcopy(bundle), log_prefix="log/") == first
        assert first == page(store, body).read_bytes()


def test_the_log_is_named_only_where_the_store_keeps_one(sample_dir: Path) -> None:
    body = bodies(sample_dir / STORE)[0]
    bundle = json.loads((sample_dir / STORE / "pith" / body / "bundle.json").read_bytes())
    without = record_page(bundle, log_prefix=None).decode()
    with_log = record_page(bundle, log_prefix="log/").decode()
    assert "data-pith-log" not in without
    head = with_log.split(">", 2)[1]
    assert head == (
        '\n<html lang="en" data-pith-verdict="pending" data-pith-bundle="bundle.json" '
        'data-pith-keys="../../pith-signing-key.json" data-pith-log="../../log/"'
    )
    assert 'href="../../log/checkpoint"' in with_log


def test_a_run_with_a_log_writes_pages_that_name_it(here: Path) -> None:
    """A store made without a log (`--no-log`): a run given a log key renders its pages
    naming the log, which exists once the run ends, and brings the pages of the papers
    it touches up to date, so `verify STORE` finds every page right."""
    code, out = cli("ingest", "--sample", "--workers", "1", "--key", KEY, "--no-log", "--store", "nolog")
    assert code == 0, out
    assert 'data-pith-log="' not in page(here / "nolog", bodies(here / "nolog")[0]).read_text(
        encoding="utf-8"
    )
    code, out = cli("keys", "generate", "--out", "logkey")
    assert code == 0, out
    log_key = ("--log-signer", "logkey/pith-private-key.json")
    code, out = cli("ingest", "--sample", "--workers", "1", "--key", KEY, *log_key, "--store", "nolog")
    assert code == 0, out
    assert (here / "nolog" / "log" / "checkpoint").is_file()
    for body in bodies(here / "nolog"):
        assert 'data-pith-log="../../log/"' in page(here / "nolog", body).read_text(encoding="utf-8")
    code, out = cli("verify", "nolog", "--quiet")
    assert code == 0, out


def test_a_store_that_starts_a_log_has_its_pages_name_it(here: Path) -> None:
    """A log started by `log sync` touches no paper, but the pages written before did
    not name a log: the command that starts it writes them again, so the store
    verifies right after it."""
    code, out = cli("ingest", "--sample", "--workers", "1", "--key", KEY, "--no-log", "--store", "nolog")
    assert code == 0, out
    code, out = cli("keys", "generate", "--out", "logkey")
    assert code == 0, out
    code, out = cli("log", "sync", "--store", "nolog", "--log-signer", "logkey/pith-private-key.json")
    assert code == 0, out
    assert "record pages: 30 written (they name the new log)" in out, out
    first = bodies(here / "nolog")[0]
    assert 'data-pith-log="../../log/"' in page(here / "nolog", first).read_text(encoding="utf-8")
    code, out = cli("verify", "nolog", "--quiet")
    assert code == 0, out
    # the log's later syncs leave the pages alone
    code, out = cli("log", "sync", "--store", "nolog", "--log-signer", "logkey/pith-private-key.json")
    assert code == 0 and "record pages" not in out, out


@pytest.mark.parametrize(
    "shape",
    [
        {},
        {"pith_number": 7},
        {"events": "x", "state": []},
        {  # a correction naming a version in digits int() refuses
            "source": {"kind": "arxiv", "id": "2101.00001", "version": 1},
            "events": [
                {
                    "event_type": "correction",
                    "payload": {"kind": "superseded", "arxiv_version": "2101.00001v\u00b2", "pith_number": 5},
                }
            ],
        },
    ],
)
def test_a_bundle_of_another_shape_renders_without_error(shape: dict[str, Any]) -> None:
    assert record_page(shape, log_prefix=None).startswith(b"<!DOCTYPE html>")


@pytest.mark.parametrize(
    "tuning",
    [
        ("--workers", "2", "--worker-chunk", "4"),  # worker processes (spawned: no flags of their own)
        ("--workers", "1", "--io-concurrency", "4"),  # papers in flight on threads (no flags either)
    ],
)
def test_pages_name_the_log_given_by_flag_whatever_publishes_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tuning: tuple[str, ...]
) -> None:
    """`--log-signer` is a flag of the command's thread: the worker processes and the
    loader's threads that write pages must render them as the command decided."""
    from pages_store import clean_env

    clean_env(monkeypatch)
    monkeypatch.chdir(tmp_path)
    for d in ("keys", "logkey"):
        assert cli("keys", "generate", "--out", d)[0] == 0
    sample = Path(__file__).resolve().parent.parent / "data" / "arxiv-sample.jsonl"
    code, out = cli(
        "build", "--input", str(sample), "--store", "st", "--key", "keys/pith-private-key.json",
        "--log-signer", "logkey/pith-private-key.json", *tuning,
    )  # fmt: skip
    assert code == 0, out
    assert (tmp_path / "st" / "log" / "checkpoint").is_file()
    code, out = cli("verify", "st", "--quiet")
    assert code == 0, out


@pytest.mark.parametrize(
    "tuning",
    [
        ("--workers", "2", "--worker-chunk", "4"),
        ("--workers", "1", "--io-concurrency", "4"),
    ],
)
def test_pages_name_the_default_log_whatever_publishes_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tuning: tuple[str, ...]
) -> None:
    """No `--log-signer`: a new store keeps a log by default (its key made beside the
    registry key), and every page, whoever writes it, names that log."""
    from pages_store import clean_env

    clean_env(monkeypatch)
    monkeypatch.chdir(tmp_path)
    assert cli("keys", "generate", "--out", "keys")[0] == 0
    sample = Path(__file__).resolve().parent.parent / "data" / "arxiv-sample.jsonl"
    code, out = cli(
        "build", "--input", str(sample), "--store", "st", "--key", "keys/pith-private-key.json", *tuning
    )
    assert code == 0, out
    assert (tmp_path / "st" / "log" / "checkpoint").is_file()
    pages = sorted((tmp_path / "st" / "pith").glob("*/index.html"))
    assert pages and all(b'data-pith-log="../../log/"' in p.read_bytes() for p in pages)
    code, out = cli("verify", "st", "--quiet")
    assert code == 0, out


def test_a_publisher_with_a_log_key_names_the_log_on_a_new_store() -> None:
    """The run's log key is decided before its first write: the pages name the log even
    while the store itself shows none yet (nothing of the log is written before the end)."""
    store = MemoryStore()
    pub = Publisher(store, Ed25519Signer.generate("k"), BuildConfig())
    pub.log_key = {"origin": "example.org/log", "vkey": "v"}
    assert pub.writer.page_log_prefix() == ("log/",)
