"""The pages in a real browser (headless Chromium), served as `python -m http.server`
serves them, under a sub-path: the look-up box, the record page's relative links, and
hostile text that stays text."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from browser import served
from pages_browser import Browser, browser
from pages_store import STORE, bodies, sample_dir_fixture
from test_record_page import HOSTILE_ABSTRACT, HOSTILE_AUTHORS, HOSTILE_TITLE, publish, record

from pith_pipeline.storage.memory import MemoryStore

__all__ = ["sample_dir_fixture"]

SUB = "mirrors/pith"  # the store is served below this path, not at the host's root


@pytest.fixture(scope="module")
def site(sample_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """(URL of the store's root, the store directory), served on 127.0.0.1."""
    root = tmp_path_factory.mktemp("served")
    store = root / SUB / STORE
    shutil.copytree(sample_dir / STORE, store)
    with served(root) as url:
        yield f"{url}/{SUB}/{STORE}/", store


@pytest.fixture
def tab(tmp_path: Path) -> Iterator[Browser]:
    with browser(tmp_path / "profile") as b:
        yield b


def _pointer(store: Path, arxiv_id: str) -> dict[str, object]:
    data: dict[str, object] = json.loads((store / "arxiv" / f"{arxiv_id}.json").read_bytes())
    return data


def _arrives_at(tab: Browser, page: str) -> None:
    tab.wait_for(f"location.pathname.endsWith({json.dumps(page)}) && document.readyState === 'complete'")


def _verdict(tab: Browser) -> str:
    """The page's verdict once its script gave one (`data-pith-verdict` on <html>)."""
    verdict: str = tab.wait_for(
        "document.readyState === 'complete' && document.documentElement.dataset.pithVerdict !== 'pending'"
        " && document.documentElement.dataset.pithVerdict"
    )
    return verdict


def _looks_up(tab: Browser, home: str, query: str) -> None:
    tab.open(home)
    tab.wait_for("document.readyState === 'complete' && !!document.getElementById('pith-q')")
    tab.evaluate(
        f"document.getElementById('pith-q').value = {json.dumps(query)};"
        "document.getElementById('pith-lookup').requestSubmit(); true"
    )


def test_the_look_up_box_finds_a_record_by_arxiv_id_or_pith_number(
    site: tuple[str, Path], tab: Browser
) -> None:
    home, store = site
    pointers = sorted(p for p in store.glob("arxiv/**/*.json"))
    old_style = next(p for p in pointers if p.parent.name != "arxiv")  # archive/number
    new_style = next(p for p in pointers if p.parent.name == "arxiv")
    for path in (old_style, new_style):
        arxiv_id = str(path.relative_to(store / "arxiv"))[: -len(".json")]
        pointer = _pointer(store, arxiv_id)
        latest = str(pointer["latest"]).rsplit(":", 1)[-1]
        _looks_up(tab, home, arxiv_id)
        _arrives_at(tab, f"/{SUB}/{STORE}/pith/{latest}/")
        assert tab.evaluate("document.querySelector('h1').textContent")
        records = pointer["records"]
        assert isinstance(records, list)
        first = records[0]
        # with a version, through the form's own URL (?q=...), as a link would
        tab.open(f"{home}?q={arxiv_id}v{first['version']}")
        _arrives_at(tab, f"/{SUB}/{STORE}/pith/{first['pith_number'].rsplit(':', 1)[-1]}/")
    body = bodies(store)[5]
    year_number = json.loads((store / "pith" / body / "bundle.json").read_bytes())["pith_number"]
    for query in (year_number, body, body.lower(), f"pith:{body}"):
        _looks_up(tab, home, query)
        _arrives_at(tab, f"/{SUB}/{STORE}/pith/{body}/")


def test_the_look_up_box_says_what_it_cannot_find(site: tuple[str, Path], tab: Browser) -> None:
    home, _store = site
    said = "document.getElementById('pith-lookup-status').textContent"
    for query, answer in (
        ("2912.99999", "This store holds no record of arXiv 2912.99999."),
        ("not an id", "Not an arXiv id"),
        ("pith:ABCDEFGH", "A short Pith number cannot be looked up here"),
    ):
        _looks_up(tab, home, query)
        got = tab.wait_for(f"{said}.includes({json.dumps(answer)}) && {said}")
        assert answer in got
        assert tab.evaluate("location.pathname") == f"/{SUB}/{STORE}/"


def test_a_record_page_without_its_slash_resolves_and_links_relative(
    site: tuple[str, Path], tab: Browser
) -> None:
    """`/pith/<ID>` is redirected to `/pith/<ID>/` (an index document), and from there
    the page's bundle, key document and stylesheet are found under the sub-path."""
    home, store = site
    body = bodies(store)[0]
    tab.open(f"{home}pith/{body}")
    _arrives_at(tab, f"/{SUB}/{STORE}/pith/{body}/")
    statuses = tab.wait_for(
        "document.readyState === 'complete' && Promise.all(["
        "document.documentElement.dataset.pithBundle, document.documentElement.dataset.pithKeys,"
        "'../../assets/pith.css', '../../index.html']"
        ".map(u => fetch(new URL(u, document.baseURI)).then(r => r.status)))"
    )
    assert statuses == [200, 200, 200, 200]
    assert tab.evaluate("getComputedStyle(document.body).maxWidth") == "768px"  # pith.css applied


def test_hostile_text_stays_text_in_the_browser(tmp_path: Path, tab: Browser) -> None:
    store = MemoryStore()
    publish(store, record(title=HOSTILE_TITLE, authors=HOSTILE_AUTHORS, abstract=HOSTILE_ABSTRACT))
    root = tmp_path / "site"
    for key, data in store.objects.items():
        (root / key).parent.mkdir(parents=True, exist_ok=True)
        (root / key).write_bytes(data)
    body = next(k.split("/")[1] for k in store.objects if k.startswith("pith/"))
    with served(root) as url:
        tab.open(f"{url}/pith/{body}/")
        tab.wait_for("document.readyState === 'complete'")
        assert tab.evaluate("typeof window.__pwned") == "undefined"
        assert tab.evaluate("document.scripts.length") == 1
        assert tab.evaluate("document.querySelectorAll('img, svg, style, iframe').length") == 0
        assert "<script>window.__pwned=1</script>" in tab.evaluate("document.querySelector('h1').textContent")
        assert "<script>" in tab.evaluate("document.title")


def test_every_sample_page_verifies_in_the_browser(site: tuple[str, Path], tab: Browser) -> None:
    """What `ingest --sample` leaves, served as it is: each record's page shows its
    paper and its script (assets/pith-verify.js) verifies the bundle."""
    home, store = site
    for body in bodies(store):
        bundle = json.loads((store / "pith" / body / "bundle.json").read_bytes())
        tab.open(f"{home}pith/{body}/")
        verdict = _verdict(tab)
        assert verdict == "verified", (
            body,
            verdict,
            tab.evaluate("document.getElementById('pith-verdict').textContent"),
        )
        assert bundle["pith_number"] in tab.evaluate("document.body.textContent")


def test_pages_of_a_logged_store_verify_their_events_in_the_log(
    sample_dir: Path, tmp_path: Path, tab: Browser, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The README's first command keeps a log by default and its pages name it; in the
    browser each page proves its events are in the log under its signed checkpoint."""
    store = sample_dir / STORE
    assert (store / "log" / "checkpoint").is_file()
    with served(store) as url:
        for body in bodies(store)[:3]:
            tab.open(f"{url}/pith/{body}/")
            verdict = _verdict(tab)
            assert verdict == "verified", (body, verdict)
            assert tab.evaluate("document.documentElement.dataset.pithLog") == "../../log/"
            assert tab.evaluate("document.documentElement.dataset.pithLogReads")  # the log was read
