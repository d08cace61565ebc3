"""Ad-hoc selection through arXiv's search API (the `arxiv` package): ids only.

The Atom API has no licence and no version dates, so it is used only to *discover*
ids (`--query "cat:cs.LG AND submittedDate:[...]"`) or to check and normalise given ones
(`--ids 1909.11150v2,hep-lat/0305021`); the records themselves come from OAI-PMH
`GetRecord` in `arXivRaw`. The package's own HTTP has no timeout and ignores
`Retry-After`, so its session is replaced by one whose every request goes through
the run's politeness `Gate` (with a timeout); the package's own delay and retries are
switched off so they do not stack on ours.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import arxiv
import requests

from pith_pipeline.core.model import is_arxiv_id
from pith_pipeline.errors import InputError, TerminalError, TransientError
from pith_pipeline.sources.politeness import Gate

DEFAULT_API_URL = "https://export.arxiv.org/api/query"
API_URL_ENV = "PITH_ARXIV_API_URL"
_VERSIONED = re.compile(r"^(.+?)(v\d+)?$")
_ABS_URL = re.compile(r"^https?://[^/]+/abs/")


class _GatedSession(requests.Session):
    """A requests session that asks the gate before every request and sets a timeout."""

    def __init__(self, gate: Gate) -> None:
        super().__init__()
        self.gate = gate
        self.headers["User-Agent"] = gate.policy.user_agent

    def request(self, method: str | bytes, url: str | bytes, *args: Any, **kwargs: Any) -> requests.Response:
        verb = method.decode("ascii") if isinstance(method, bytes) else method
        target = url.decode("utf-8") if isinstance(url, bytes) else url
        kwargs.setdefault("timeout", self.gate.policy.timeout)
        kwargs["allow_redirects"] = False  # a followed redirect would be an unspaced request
        headers = dict(kwargs.pop("headers", None) or {})
        headers["User-Agent"] = self.gate.policy.user_agent  # ours, not the package's
        kwargs["headers"] = headers
        send = super().request
        try:
            response = self.gate.send(
                lambda: send(verb, target, *args, **kwargs),
                what=f"arXiv API {target}",
                retry_on=(requests.Timeout, requests.ConnectionError),
                endpoint=target,
            )
        except requests.RequestException as exc:
            raise TransientError(f"arXiv API: {type(exc).__name__}: {exc}") from None
        if response.is_redirect:
            raise TerminalError(
                f"arXiv API {target}: redirected to "
                f"{response.headers.get('location')}; set --api-url (or "
                f"{API_URL_ENV}) to that address"
            )
        return response


def normalise_id(text: str) -> str:
    """`1909.11150v2`, `arXiv:1909.11150`, `https://arxiv.org/abs/hep-lat/0305021v1` -> bare id."""
    t = text.strip()
    t = _ABS_URL.sub("", t)
    if t.lower().startswith("arxiv:"):
        t = t[6:]
    m = _VERSIONED.match(t)
    bare = m.group(1) if m else t
    if not is_arxiv_id(bare):
        raise InputError(f"not an arXiv identifier: {text!r} (expected e.g. 1909.11150 or hep-lat/0305021)")
    return bare


class ArxivAPI:
    """Id discovery through `arxiv.Client`, politely."""

    def __init__(self, gate: Gate, api_url: str = DEFAULT_API_URL, *, page_size: int = 100) -> None:
        self.gate = gate
        self.api_url = api_url
        client = arxiv.Client(page_size=page_size, delay_seconds=0.0, num_retries=0)
        # instance attributes shadow the class defaults: this client only
        client.query_url_format = api_url + "?{}"
        client._session = _GatedSession(gate)
        self.client = client

    def _results(self, search: arxiv.Search) -> Iterator[arxiv.Result]:
        try:
            yield from self.client.results(search)
        except arxiv.HTTPError as exc:
            raise TransientError(f"arXiv API at {self.api_url}: HTTP {exc.status} for {exc.url}") from None
        except arxiv.ArxivError as exc:
            raise TransientError(f"arXiv API at {self.api_url}: {exc}") from None

    def ids_for_query(self, query: str, *, max_results: int | None = 1000) -> list[str]:
        """Ids matching an API query, de-duplicated, in the API's order."""
        if not query.strip():
            raise InputError("--query is empty")
        search = arxiv.Search(
            query=query,
            max_results=max_results,
            sort_by=arxiv.SortCriterion.SubmittedDate,
            sort_order=arxiv.SortOrder.Ascending,
        )
        return _unique(normalise_id(r.get_short_id()) for r in self._results(search))

    def check_ids(self, ids: list[str]) -> tuple[list[str], list[str]]:
        """(ids the API knows, ids it returned nothing for), both bare and in input order."""
        wanted = _unique(normalise_id(i) for i in ids)
        if not wanted:
            raise InputError("--ids is empty")
        found: set[str] = set()
        for start in range(0, len(wanted), 100):
            chunk = wanted[start : start + 100]
            search = arxiv.Search(id_list=chunk, max_results=len(chunk))
            for r in self._results(search):
                try:
                    found.add(normalise_id(r.get_short_id()))
                except InputError:
                    continue  # the API's error entries are not ids
        return [i for i in wanted if i in found], [i for i in wanted if i not in found]


def _unique(ids: Iterator[str] | list[str]) -> list[str]:
    seen: dict[str, None] = {}
    for i in ids:
        seen.setdefault(i, None)
    return list(seen)
