"""The pages in a store: which to write, when, and the one rule `verify` holds them to.

A record's page (`pith/<ID>/index.html`) is derived from its bundle like the
`.well-known` copy: the publisher writes it with the bundle, `rebuild` writes it
again when it is missing or differs, and the audit (`verify STORE`) names a page
that is missing or is not what its bundle renders to (`page_problem`, used by all
three, so they agree). The store-wide files (`assets/<file>`: stylesheet, scripts)
are the package's `pith_pipeline/pages/assets/` directory, written at the start of
each run when their bytes differ; the home page (`index.html`) at the end of each
run, with the store's figures.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from pith_pipeline.core.arxiv_record import is_arxiv_id
from pith_pipeline.core.canonical_json import loads
from pith_pipeline.core.layout import (
    BUNDLES,
    HOME_PAGE,
    POINTERS,
    WELL_KNOWN,
    asset_key,
    bundle_paths,
    page_key,
)
from pith_pipeline.pages.render import StoreFigures, home_page, record_page
from pith_pipeline.storage.base import Store, iter_unsorted
from pith_pipeline.storage.concurrency import default_io_concurrency, reserve_connections
from pith_pipeline.tlog.log import LOG_PREFIX
from pith_pipeline.tlog.pipeline import has_had_log

__all__ = [
    "ASSET_DIR",
    "PAGE_CONTENT_TYPE",
    "asset_files",
    "content_type_of",
    "log_prefix",
    "page_problem",
    "publish_assets",
    "publish_home_page",
    "refresh_pages",
    "run_log_prefix",
    "store_figures",
    "store_log_prefix",
]

#: The package directory whose every file is served as `assets/<file name>`.
ASSET_DIR = Path(__file__).resolve().parent / "assets"
PAGE_CONTENT_TYPE = "text/html; charset=utf-8"
_CONTENT_TYPES = {
    ".css": "text/css; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".mjs": "text/javascript; charset=utf-8",
    ".html": PAGE_CONTENT_TYPE,
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".json": "application/json",
}


def content_type_of(name: str) -> str:
    """The Content-Type a static host must send for a page or asset named `name`."""
    return _CONTENT_TYPES.get(Path(name).suffix, "application/octet-stream")


def asset_files() -> list[tuple[str, bytes]]:
    """(store key, bytes) of every asset, in key order."""
    return [
        (asset_key(p.name), p.read_bytes())
        for p in sorted(ASSET_DIR.iterdir())
        if p.is_file() and not p.name.startswith(".") and p.suffix != ".py"
    ]


def log_prefix() -> str:
    """Where a store keeps its transparency log (`tlog.log.LOG_PREFIX`)."""
    return LOG_PREFIX


def store_log_prefix(store: Store) -> str | None:
    """The log's prefix (`log/`) when the store keeps, or has kept, a transparency log;
    else None. What `verify STORE` renders pages with."""
    return log_prefix() if has_had_log(store) else None


def run_log_prefix(store: Store, log_signer: str | None) -> str | None:
    """What a run renders pages with: the log's prefix when the store will keep a log
    once the run ends (the run's log key `log_signer` is given, so the run appends; or
    the store has one), so the pages it writes are what `verify STORE` expects after
    the run."""
    if log_signer:
        return log_prefix()
    return store_log_prefix(store)


def page_problem(raw: bytes | None, bundle: dict[str, Any], log_prefix: str | None) -> str | None:
    """Why the stored page `raw` is not the page of `bundle`, or None when it is.

    The one rule for pages: byte for byte what `record_page` renders from the bundle
    (the page says nothing its bundle does not, so a changed page is a changed claim)."""
    bkey = bundle_paths(_body(bundle))[0]
    if raw is None:
        return f"missing (the page of {bkey}); `rebuild` writes it"
    if raw != record_page(bundle, log_prefix=log_prefix):
        return f"differs from the page {bkey} renders to; `rebuild` writes it again"
    return None


def _body(bundle: dict[str, Any]) -> str:
    pn = bundle.get("pith_number")
    return pn.rsplit(":", 1)[-1] if isinstance(pn, str) else "_"


def page_of(bundle: dict[str, Any], log_prefix: str | None) -> tuple[str, bytes]:
    """(store key, bytes) of the page of `bundle`."""
    return page_key(_body(bundle)), record_page(bundle, log_prefix=log_prefix)


def publish_assets(store: Store, on_write: Callable[[str, bytes], None] | None = None) -> list[str]:
    """Write every asset whose stored bytes differ from the package's; their keys.

    One GET per asset per run, a PUT only when a new version of the package changed
    it, so a run leaves unchanged assets (and their caches) alone."""
    written = []
    for key, data in asset_files():
        if store.get(key) != data:
            store.put(key, data, content_type=content_type_of(key))
            written.append(key)
            if on_write is not None:
                on_write(key, data)
    return written


#: the first character of every record's ID (base32), and of every arXiv id (a digit
#: of a new-style id, a lower-case letter of an archive's name)
_BODY_FIRST = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
_ARXIV_FIRST = "0123456789abcdefghijklmnopqrstuvwxyz"
_RECORD = re.compile(re.escape(bundle_paths("@")[2]).replace("@", "[A-Z2-7]{26}"))


def _is_record(key: str) -> bool:
    return _RECORD.fullmatch(key) is not None


def _is_pointer(key: str) -> bool:
    """An arXiv id's pointer (`arxiv/<id>.json`, the id as arXiv spells it)."""
    return key.endswith(".json") and is_arxiv_id(key[len(POINTERS) : -len(".json")])


def _count(store: Store, prefix: str, first: str, counts: Callable[[str], bool]) -> int:
    """Keys under `prefix` that `counts`, listed in one stream, or on a store with many
    requests in flight (S3) in one stream per first character after `prefix` (every
    key `counts` accepts starts with one of `first`), so a store of millions is counted
    in seconds, not minutes."""
    n = min(default_io_concurrency(store), len(first))
    if n <= 1:
        return sum(1 for k in iter_unsorted(store, prefix) if counts(k))
    reserve_connections(store, n)
    with ThreadPoolExecutor(n, thread_name_prefix="pith-count") as pool:
        return sum(pool.map(lambda c: sum(1 for k in iter_unsorted(store, prefix + c) if counts(k)), first))


def store_figures(store: Store, updated: str) -> StoreFigures:
    """The store's counts, by listing: records (one `.well-known` copy each) and arXiv
    papers (one pointer each): (records + papers) / 1,000 LIST requests on S3, up to
    32 at once."""
    records = _count(store, WELL_KNOWN, _BODY_FIRST, _is_record)
    papers = _count(store, POINTERS, _ARXIV_FIRST, _is_pointer)
    return StoreFigures(records=records, papers=papers, updated=updated, log_prefix=store_log_prefix(store))


#: the time a home page says its store last changed (as `home_page` writes it)
_UPDATED = re.compile(rb'Last updated <time datetime="(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)">')


def publish_home_page(store: Store, updated: str, *, changed: bool = True) -> bool:
    """Write the home page with the store's figures as of now; True when its bytes
    changed. `updated`: when the finishing run ended (ISO 8601 seconds).

    `changed`: whether the finishing run wrote anything. A run that wrote nothing
    keeps the time the stored page gives (the store did not change then), so running
    the same input again rewrites nothing; the figures are recounted all the same."""
    old = store.get(HOME_PAGE)
    if not changed and old is not None:
        said = _UPDATED.search(old)
        if said is not None:
            updated = said.group(1).decode()
    data = home_page(store_figures(store, updated))
    if old == data:
        return False
    store.put(HOME_PAGE, data, content_type=PAGE_CONTENT_TYPE)
    return True


def refresh_pages(store: Store) -> int:
    """Write again every record page that differs from what its bundle renders to with
    the store's log as it now is; how many were written.

    For a store that has just started a log without publishing (`log sync`, `log
    rebuild`): its pages, written before, do not name the log, and the command that
    started it brings them up to date so that `verify STORE` passes right after it.
    Each page is read once, and only the differing ones are written."""
    prefix = store_log_prefix(store)
    keys = [k for k in iter_unsorted(store, BUNDLES) if k.endswith("/bundle.json")]

    def one(key: str) -> bool:
        raw = store.get(key)
        if raw is None:
            return False
        bundle = loads(raw)
        if not isinstance(bundle, dict):
            return False
        pkey, page = page_of(bundle, prefix)
        if store.get(pkey) == page:
            return False
        store.put(pkey, page, content_type=content_type_of(pkey))
        return True

    with ThreadPoolExecutor(max_workers=8) as pool:
        return sum(pool.map(one, keys))
