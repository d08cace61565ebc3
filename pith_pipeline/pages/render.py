"""HTML of a record's page and of the store's home page, from data alone.

Pure: a bundle (a parsed `pith/<ID>/bundle.json`) in, bytes out; no store, no
clock, no environment. Why: a page is a derived object like the `.well-known`
copy, and `verify STORE` checks it by rendering the bundle again and comparing
bytes (`pages.site.page_problem`), so the same bundle must always give the same bytes, and
the page can say nothing the bundle does not.

Safety: every value taken from a bundle is text, escaped for where it goes
(element content or a quoted attribute), with controls and lone surrogates
replaced and right-to-left runs isolated in `<bdi>`; link targets are built here
(arXiv, relative store paths), never copied from the bundle, except a licence
URL, which is linked only when it is `http(s)://` and is escaped like any value.

Every link and fetch is relative (`../../pith-signing-key.json` from
`pith/<ID>/index.html`), so the pages work wherever the store is served: a
bucket's root, a sub-path, `python -m http.server` in the store directory.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from pith_pipeline.core.arxiv_record import is_arxiv_id
from pith_pipeline.core.layout import (
    HOME_PAGE,
    PUBLIC_KEY_FILE,
    asset_key,
    bundle_paths,
    page_key,
    pointer_key,
)

__all__ = ["CSS", "LOOKUP_SCRIPT", "VERIFY_SCRIPT", "StoreFigures", "home_page", "record_page"]

#: The stylesheet and scripts the pages load (files of `pith_pipeline/pages/assets/`).
CSS = "pith.css"
VERIFY_SCRIPT = "pith-verify.js"
LOOKUP_SCRIPT = "pith-lookup.js"

_BODY = re.compile(r"[A-Z2-7]{26}")
#: what `_text` replaces: markup characters by their references, as `html.escape`
#: does; C0 and C1 controls (but tab and newline), DEL and lone surrogates, which are
#: not text, by U+FFFD
_ESCAPES: dict[int, str] = {
    **{
        c: "\ufffd"
        for c in [*range(0x00, 0x09), *range(0x0B, 0x20), *range(0x7F, 0xA0), *range(0xD800, 0xE000)]
    },
    **{ord(k): v for k, v in {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#x27;"}.items()},
}
_NEEDS_ESCAPE = re.compile("[&<>\"'\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")
_MAX_VERSIONS = 100


def _text(value: Any) -> str:
    """`value` as text safe in element content and in a double-quoted attribute
    (`html.escape(quote=True)`, and controls and lone surrogates replaced), in one pass."""
    s = value if isinstance(value, str) else "" if value is None else str(value)
    return s.translate(_ESCAPES) if _NEEDS_ESCAPE.search(s) else s


def _bdi(value: Any) -> str:
    """Text from the record, isolated so a right-to-left run cannot reorder the page."""
    return f"<bdi>{_text(value)}</bdi>"


def _rel(from_key: str, to_key: str) -> str:
    """The relative URL of `to_key` (a key, or a prefix ending in `/`) seen from the
    page at `from_key`. Keys are plain relative paths (no `.` or `..` segments), so
    this is string work only (`posixpath.relpath` asks the OS for the working
    directory, twice a call)."""
    base = from_key.split("/")[:-1]
    parts = to_key.split("/")
    i = 0
    while i < len(base) and i < len(parts) - 1 and base[i] == parts[i]:
        i += 1
    return "../" * (len(base) - i) + "/".join(parts[i:]) or "./"


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _body_of(pith_number: Any) -> str | None:
    body = _str(pith_number).rsplit(":", 1)[-1]
    return body if _BODY.fullmatch(body) else None


def _time(value: Any) -> str:
    s = _str(value)
    return f'<time datetime="{_text(s)}">{_text(s)}</time>' if s else "unknown"


def _paper(bundle: dict[str, Any]) -> dict[str, Any]:
    """The paper's text (title, authors, abstract excerpt) of the newest applied graph
    snapshot in the merged state, else of the newest in the bundle's events."""
    current = _dict(_dict(bundle.get("state")).get("current"))
    for snap in reversed(_list(current.get("graph_snapshots"))):
        paper = _dict(_dict(_dict(_dict(snap).get("payload")).get("graph_snapshot")).get("paper"))
        if paper:
            return paper
    for ev in reversed(_list(bundle.get("events"))):
        ev = _dict(ev)
        if ev.get("event_type") == "graph_snapshot":
            paper = _dict(_dict(_dict(ev.get("payload")).get("graph_snapshot")).get("paper"))
            if paper:
                return paper
    return {}


def _corrections(bundle: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        _dict(ev.get("payload"))
        for ev in map(_dict, _list(bundle.get("events")))
        if ev.get("event_type") == "correction" and _dict(ev.get("payload")).get("kind") == "superseded"
    ]


def _version_of(arxiv_version: Any, arxiv_id: str) -> int | None:
    s = _str(arxiv_version)
    if not s.startswith(arxiv_id + "v"):
        return None
    n = s[len(arxiv_id) + 1 :]
    return int(n) if n.isascii() and n.isdigit() and 0 < len(n) <= 4 else None


def _arxiv_versions(bundle: dict[str, Any], here: str) -> str:
    """Every arXiv version the bundle knows of, each linked to arXiv: versions 1 to
    this record's (arXiv numbers versions from 1 without gaps) and each newer one a
    correction names, with the Pith number of the record it names."""
    source = _dict(bundle.get("source"))
    arxiv_id, version = _str(source.get("id")), source.get("version")
    if source.get("kind") != "arxiv" or not is_arxiv_id(arxiv_id) or type(version) is not int:
        return _text(arxiv_id) or "none"
    newer: dict[int, str] = {}
    for corr in _corrections(bundle):
        n = _version_of(corr.get("arxiv_version"), arxiv_id)
        if n is not None and n > version:
            newer.setdefault(n, _str(corr.get("pith_number")))
    last = min(max([version, *newer]), _MAX_VERSIONS)
    quoted = urllib.parse.quote(arxiv_id, safe="/.")
    items = []
    for n in range(1, last + 1):
        link = f'<a href="https://arxiv.org/abs/{quoted}v{n}">{_text(arxiv_id)}v{n}</a>'
        if n == version:
            link += " (this record)"
        elif n in newer:
            link += f" (newer record: {_record_link(newer[n], here)})"
        items.append(f"<li>{link}</li>")
    return f'<ul class="versions">{"".join(items)}</ul>'


def _record_link(pith_number: str, here: str) -> str:
    """Another record's Pith number, linked to its page when it is a Pith number."""
    body = _body_of(pith_number)
    if body is None:
        return f"<code>{_text(pith_number)}</code>"
    href = _rel(here, page_key(body).rsplit("/", 1)[0] + "/")
    return f'<a href="{_text(href)}"><code>{_text(pith_number)}</code></a>'


def _history(bundle: dict[str, Any], here: str) -> Iterator[str]:
    for ev in map(_dict, _list(bundle.get("events"))):
        kind = _str(ev.get("event_type"))
        signer = _dict(ev.get("signer"))
        payload = _dict(ev.get("payload"))
        if kind == "record_created":
            what = "Record created"
            if _list(ev.get("supersedes")):
                what += (
                    " (supersedes an earlier version's record: "
                    + ", ".join(f"<code>{_text(s)}</code>" for s in _list(ev.get("supersedes")))
                    + ")"
                )
        elif kind == "correction" and payload.get("kind") == "superseded":
            what = f"Superseded by {_record_link(_str(payload.get('pith_number')), here)}" + (
                f" ({_bdi(payload.get('arxiv_version'))})" if payload.get("arxiv_version") else ""
            )
        elif kind == "correction":
            what = f"Corrected ({_bdi(payload.get('kind'))})"
        elif kind == "graph_snapshot":
            what = "Paper metadata recorded"
        else:
            what = f"Event {_bdi(kind)}"
        yield (
            f"<li>{_time(ev.get('created_at'))}: {what}; signed by {_bdi(signer.get('signer_id'))} "
            f"(key <code>{_text(signer.get('key_id'))}</code>); "
            f'<code class="event-id">{_text(ev.get("event_id"))}</code></li>'
        )


def _aliases(bundle: dict[str, Any]) -> Iterator[str]:
    for a in map(_dict, _list(bundle.get("source_aliases"))):
        yield (
            f"<li>{_text(a.get('alias_kind'))}: <code>{_bdi(a.get('alias_value'))}</code> "
            f"(since {_time(a.get('created_at'))})</li>"
        )


def _licence(value: Any) -> str:
    s = _str(value)
    if not s:
        return "not stated"
    if re.fullmatch(r"https?://[^\s\"'<>]+", s):
        return f'<a href="{_text(s)}" rel="license">{_text(s)}</a>'
    return _bdi(s)


def _signature(bundle: dict[str, Any]) -> str:
    sig = _dict(bundle.get("bundle_signature"))
    key_id = _str(sig.get("key_id"))
    key = next((_dict(k) for k in _list(bundle.get("public_keys")) if _dict(k).get("key_id") == key_id), {})
    signers = sorted(
        {
            _str(_dict(ev.get("signer")).get("signer_id"))
            for ev in map(_dict, _list(bundle.get("events")))
            if _str(_dict(ev.get("signer")).get("signer_id"))
        }
    )
    rows = [
        ("Signed by", ", ".join(_bdi(s) for s in signers) or "unknown"),
        ("Key", f"<code>{_text(key_id)}</code>"),
        ("Key fingerprint (SHA-256, hex)", f"<code>{_text(sig.get('public_key_fingerprint'))}</code>"),
        (
            "Key fingerprint (base32)",
            f"<code>{_text(key.get('fingerprint_sha256_b32_first128bits'))}</code>",
        ),
        ("Bundle signed at", _time(sig.get("signed_at"))),
        ("Bundle SHA-256", f"<code>{_text(sig.get('bundle_sha256'))}</code>"),
        ("Record SHA-256 (RFC 8785)", f"<code>{_text(bundle.get('canonical_sha256'))}</code>"),
    ]
    return _dl(rows)


def _dl(rows: Iterable[tuple[str, str]]) -> str:
    return "<dl>" + "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in rows) + "</dl>"


def _facts(bundle: dict[str, Any], metadata: dict[str, Any], here: str) -> list[tuple[str, str]]:
    """The record's facts: its numbers, arXiv versions, dates, categories, licence."""
    pith_number = _str(bundle.get("pith_number"))
    cats = [_str(metadata.get("primary_cat"))] + [
        _str(c) for c in _list(metadata.get("cross_cats_sorted")) if _str(c)
    ]
    return [
        ("Pith number", f"<code>{_text(pith_number)}</code>"),
        ("Short number", f"<code>{_text(bundle.get('short_pith_number'))}</code>"),
        ("arXiv", _arxiv_versions(bundle, here)),
        ("Submitted", _time(metadata.get("submitted_at"))),
        (
            "Categories",
            ", ".join(
                f"<code>{_text(c)}</code>" + (" (primary)" if i == 0 else "") for i, c in enumerate(cats) if c
            )
            or "none",
        ),
        ("Licence", _licence(metadata.get("license"))),
    ]


def _files(bundle: dict[str, Any], body: str, log_prefix: str | None) -> list[tuple[str, str]]:
    """The store objects the page links to: the bundle, its copies, keys, log, pointer."""
    bkey, skey, wkey = bundle_paths(body)
    files = [
        (bkey, "the bundle (record, events, signatures, merged state)"),
        (skey, "the merged state"),
        (wkey, "the bundle where mirrors look"),
        (PUBLIC_KEY_FILE, "the registry's key document"),
    ]
    if log_prefix is not None:
        files.append((log_prefix + "checkpoint", "the transparency log's signed checkpoint"))
    source = _dict(bundle.get("source"))
    if source.get("kind") == "arxiv" and is_arxiv_id(_str(source.get("id"))):
        files.append((pointer_key(_str(source.get("id"))), "every record of this arXiv paper"))
    return files


def _head(
    pith_number: str, body: str, title: str, abstract: str, metadata: dict[str, Any], log_prefix: str | None
) -> list[str]:
    """The document's start: the `<html>` element (what the page's script checks
    against) and the `<head>`."""
    here, bkey = page_key(body), bundle_paths(body)[0]
    attrs = {
        "lang": "en",
        "data-pith-verdict": "pending",
        "data-pith-bundle": _rel(here, bkey),
        "data-pith-keys": _rel(here, PUBLIC_KEY_FILE),
    }
    if log_prefix is not None:
        attrs["data-pith-log"] = _rel(here, log_prefix)
    return [
        "<!DOCTYPE html>",
        "<html " + " ".join(f'{k}="{_text(v)}"' for k, v in attrs.items()) + ">",
        "<head>",
        '<meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_text(title)} ({_text(pith_number)})</title>",
        f'<meta name="description" content="{_text(abstract[:300])}">',
        f'<meta name="citation_title" content="{_text(title)}">',
        f'<meta name="citation_publication_date" content="{_text(_str(metadata.get("submitted_at"))[:10])}">',
        f'<link rel="stylesheet" href="{_text(_rel(here, asset_key(CSS)))}">',
        f'<link rel="alternate" type="application/json" href="{_text(_rel(here, bkey))}">',
        f'<script type="module" src="{_text(_rel(here, asset_key(VERIFY_SCRIPT)))}"></script>',
        "</head>",
    ]


def record_page(bundle: dict[str, Any], *, log_prefix: str | None) -> bytes:
    """The page of the record whose bundle is `bundle` (the dict of its bundle.json).

    `log_prefix`: the store key prefix of its transparency log (`log/`), named on the
    page for the browser's checks, or None when the store keeps no log. The bytes
    depend on nothing else. A bundle of unexpected shape renders what it has (the
    audit checks the bundle itself; the page is checked against what it holds).
    """
    pith_number = _str(bundle.get("pith_number"))
    body = _body_of(pith_number) or "_"
    here = page_key(body)
    metadata = _dict(_dict(bundle.get("canonical_record")).get("metadata"))
    paper = _paper(bundle)
    title = _str(paper.get("title")) or pith_number
    authors = _str(paper.get("authors_text"))
    abstract = _str(paper.get("abstract_excerpt"))
    superseded = [
        f'<p class="notice">A newer version of this paper has its own record: '
        f"{_record_link(_str(c.get('pith_number')), here)}.</p>"
        for c in _corrections(bundle)[-1:]
    ]
    out = [
        *_head(pith_number, body, title, abstract, metadata, log_prefix),
        "<body>",
        f'<header><a href="{_text(_rel(here, HOME_PAGE))}">Home</a> · Pith record</header>',
        "<main>",
        f"<h1>{_bdi(title)}</h1>",
        f'<p class="authors">{_bdi(authors)}</p>' if authors else "",
        *superseded,
        '<section id="verification" aria-labelledby="verification-h">',
        '<h2 id="verification-h">Verification</h2>',
        '<p id="pith-verdict" role="status">Checking in your browser…</p>',
        "<noscript><p>JavaScript is off: nothing was checked on this page. Check the "
        "bundle yourself with <code>pith-pipeline verify bundle.json</code>.</p></noscript>",
        '<ol id="pith-checks"></ol>',
        "</section>",
        '<section aria-labelledby="record-h"><h2 id="record-h">Record</h2>',
        _dl(_facts(bundle, metadata, here)),
        "</section>",
    ]
    if abstract:
        out.append(
            f'<section aria-labelledby="abstract-h"><h2 id="abstract-h">Abstract (excerpt)</h2>'
            f"<p>{_bdi(abstract)}</p></section>"
        )
    out += [
        '<section aria-labelledby="history-h"><h2 id="history-h">History</h2>',
        '<ol class="history">' + "".join(_history(bundle, here)) + "</ol>",
        '<h3>Aliases</h3><ul class="aliases">' + "".join(_aliases(bundle)) + "</ul>",
        "</section>",
        '<section aria-labelledby="signature-h"><h2 id="signature-h">Signature</h2>',
        _signature(bundle),
        "</section>",
        '<section aria-labelledby="files-h"><h2 id="files-h">Files</h2><ul>',
        *(
            f'<li><a href="{_text(_rel(here, key))}"><code>{_text(key)}</code></a>: {what}</li>'
            for key, what in _files(bundle, body, log_prefix)
        ),
        "</ul></section>",
        "</main>",
        "</body>",
        "</html>",
        "",
    ]
    return "\n".join(line for line in out if line).encode("utf-8") + b"\n"


@dataclass(frozen=True, slots=True)
class StoreFigures:
    """What the home page says of its store."""

    records: int
    papers: int
    #: when the store last changed (the finishing run's time, ISO 8601)
    updated: str
    #: the transparency log's key prefix (`log/`), or None without a log
    log_prefix: str | None = None


def home_page(fig: StoreFigures) -> bytes:
    """The store's home page: its figures, and a look-up box (arXiv id or Pith number
    to the record's page, by `assets/pith-lookup.js`, relative to the page)."""
    here = HOME_PAGE
    machine = [(PUBLIC_KEY_FILE, "the registry's key document (every signing key)")]
    if fig.log_prefix is not None:
        machine.append((fig.log_prefix + "checkpoint", "the transparency log's signed checkpoint"))
    papers = "paper" if fig.papers == 1 else "papers"
    records = "record" if fig.records == 1 else "records"
    out = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        "<title>Pith records</title>",
        f'<link rel="stylesheet" href="{_text(_rel(here, asset_key(CSS)))}">',
        f'<script defer src="{_text(_rel(here, asset_key(LOOKUP_SCRIPT)))}"></script>',
        "</head>",
        "<body>",
        "<main>",
        "<h1>Pith records</h1>",
        '<p id="pith-figures">This store holds '
        f'<strong data-pith-records="{fig.records}">{fig.records}</strong> '
        f'{records} of <strong data-pith-papers="{fig.papers}">{fig.papers}</strong> arXiv {papers}, each '
        f"signed and checkable in your browser. Last updated {_time(fig.updated)}.</p>",
        '<form id="pith-lookup" method="get" action="">',
        '<label for="pith-q">arXiv id or Pith number</label>',
        '<input id="pith-q" name="q" type="search" required autocomplete="off" spellcheck="false" '
        'placeholder="2101.00001, 2101.00001v2 or pith:2021:…">',
        '<button type="submit">Look up</button>',
        "</form>",
        '<p id="pith-lookup-status" role="status"></p>',
        "<noscript><p>The look-up needs JavaScript. Without it, a record is at "
        "<code>pith/&lt;ID&gt;/</code> and an arXiv paper's records are listed in "
        "<code>arxiv/&lt;arXiv id&gt;.json</code>.</p></noscript>",
        '<section aria-labelledby="machines-h"><h2 id="machines-h">For machines</h2><ul>',
        *(
            f'<li><a href="{_text(_rel(here, key))}"><code>{_text(key)}</code></a>: {what}</li>'
            for key, what in machine
        ),
        "</ul></section>",
        "</main>",
        "</body>",
        "</html>",
        "",
    ]
    return "\n".join(out).encode("utf-8")
