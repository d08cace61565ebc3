"""Record pages as a newcomer's store holds them: `ingest --sample`, a second run,
`rebuild`, and `verify STORE` on pages that were changed or lost."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from pages_store import KEY, STORE, bodies, cli, here_fixture, page, sample_dir_fixture

from pith_pipeline.core.layout import HOME_PAGE, asset_key
from pith_pipeline.pages.site import asset_files

__all__ = ["here_fixture", "sample_dir_fixture"]  # the fixtures, used by name

SAMPLE_PAPERS = 30


def _stats(store: Path) -> dict[str, tuple[int, int]]:
    """(inode, mtime in ns) of every page: a rewrite replaces the file (a new inode)."""
    return {
        str(p.relative_to(store)): (p.stat().st_ino, p.stat().st_mtime_ns)
        for p in sorted(store.glob("pith/*/index.html"))
    }


def test_ingest_sample_writes_a_page_for_every_paper(sample_dir: Path) -> None:
    store = sample_dir / STORE
    ids = bodies(store)
    assert len(ids) == SAMPLE_PAPERS
    for body in ids:
        html = page(store, body).read_text(encoding="utf-8")
        bundle = json.loads((store / "pith" / body / "bundle.json").read_bytes())
        assert f"<code>{bundle['pith_number']}</code>" in html
        assert 'data-pith-bundle="bundle.json"' in html
        assert 'data-pith-keys="../../pith-signing-key.json"' in html
        assert '<script type="module" src="../../assets/pith-verify.js"></script>' in html
    for key, data in asset_files():
        assert (store / key).read_bytes() == data
    assert (store / asset_key("pith.css")).is_file()
    assert (store / asset_key("pith-lookup.js")).is_file()


def test_the_home_page_counts_what_the_store_holds(sample_dir: Path) -> None:
    home = (sample_dir / STORE / HOME_PAGE).read_text(encoding="utf-8")
    papers = len(list((sample_dir / STORE).glob("arxiv/**/*.json")))
    assert f'data-pith-records="{SAMPLE_PAPERS}">{SAMPLE_PAPERS}</strong> records' in home
    assert f'data-pith-papers="{papers}">{papers}</strong> arXiv papers' in home
    assert re.search(r'Last updated <time datetime="\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ">', home)
    assert 'src="assets/pith-lookup.js"' in home


def test_a_second_run_rewrites_no_page(here: Path) -> None:
    store = here / STORE
    before = _stats(store)
    assets = {key: os.stat(store / key).st_ino for key, _ in asset_files()}
    code, out = cli("ingest", "--sample", "--workers", "1", "--key", KEY)
    assert code == 0, out
    assert "unchanged 30" in out
    assert _stats(store) == before
    assert {key: os.stat(store / key).st_ino for key, _ in asset_files()} == assets


def test_a_run_writes_a_page_lost_on_its_own_again(here: Path) -> None:
    """A paper whose page alone was lost (killed before it, or deleted) gets it back
    from the next run that touches the paper; other pages stay as they are."""
    store = here / STORE
    lost = bodies(store)[3]
    before = _stats(store)
    page(store, lost).unlink()
    code, out = cli("ingest", "--sample", "--workers", "1", "--key", KEY)
    assert code == 0, out
    after = _stats(store)
    assert set(after) == set(before)
    changed = {k for k in after if after[k] != before[k]}
    assert changed == {f"pith/{lost}/index.html"}


def test_rebuild_regenerates_a_deleted_page(here: Path) -> None:
    store = here / STORE
    lost = bodies(store)[0]
    want = page(store, lost).read_bytes()
    page(store, lost).unlink()
    (store / asset_key("pith.css")).unlink()
    code, out = cli("rebuild", "--store", STORE, "--signer", KEY)
    assert code == 0, out
    assert "record pages: 1 written" in out
    assert page(store, lost).read_bytes() == want
    assert (store / asset_key("pith.css")).is_file()
    code, out = cli("verify", STORE, "--quiet")
    assert code == 0, out


def test_verify_names_a_tampered_page_and_a_missing_page(here: Path) -> None:
    store = here / STORE
    tampered, missing = bodies(store)[1], bodies(store)[2]
    path = page(store, tampered)
    html = path.read_text(encoding="utf-8")
    path.write_text(html.replace("<h1><bdi>", "<h1><bdi>Retracted: "), encoding="utf-8")
    page(store, missing).unlink()
    code, out = cli("verify", STORE, "--quiet")
    assert code == 1, out
    fails = [line for line in out.splitlines() if line.startswith("FAIL")]
    assert any(f"pith/{tampered}/index.html: differs from the page" in line for line in fails), out
    assert any(f"pith/{missing}/index.html: missing (the page of" in line for line in fails), out
    assert len(fails) == 2, out


def test_verify_names_a_page_without_its_bundle_and_a_changed_asset(here: Path) -> None:
    store = here / STORE
    body = bodies(store)[4]
    for name in ("bundle.json", "state.json"):
        (store / "pith" / body / name).unlink()
    (store / asset_key("pith-lookup.js")).write_text("alert(1)\n", encoding="utf-8")
    code, out = cli("verify", STORE, "--quiet")
    assert code == 1, out
    assert f"pith/{body}/index.html: present without pith/{body}/bundle.json" in out
    assert "assets/pith-lookup.js: differs from this version's" in out


def test_the_home_page_changes_with_the_store_only(here: Path) -> None:
    """A run that changes nothing leaves the home page as it is; one that adds a paper
    counts it and says when."""
    from test_record_page import record

    home = here / STORE / HOME_PAGE
    before = home.read_bytes()
    code, out = cli("ingest", "--sample", "--workers", "1", "--key", KEY)
    assert code == 0, out
    assert home.read_bytes() == before
    (here / "new.jsonl").write_text(json.dumps(record("2101.00042")) + "\n", encoding="utf-8")
    code, out = cli("build", "--input", "new.jsonl", "--store", STORE, "--key", KEY)
    assert code == 0, out
    after = home.read_text(encoding="utf-8")
    papers = len(list((here / STORE).glob("arxiv/**/*.json")))
    assert f'data-pith-records="{SAMPLE_PAPERS + 1}">' in after
    assert f'data-pith-papers="{papers}">' in after
    assert after != before.decode("utf-8")
