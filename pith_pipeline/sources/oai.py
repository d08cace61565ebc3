"""OAI-PMH harvesting of arXiv (`ListRecords`, `GetRecord`), resumable and replayable.

Why a small harvester around `oaipmh-scythe` rather than its iterators: scythe's
`list_records()` fetches, parses and follows resumption tokens in one generator, so
there is no point at which the raw page can be stored before it is parsed, no
checkpoint between pages, and its retries read `Retry-After` only as seconds. We
keep scythe for what it does well — the endpoint, the HTTP configuration and its
`httpx2` client (pinned here to one connection) — and drive the protocol ourselves:

1. every request goes through the run's politeness `Gate` (one place for the 3 s
   interval, `Retry-After` in both forms and jittered backoff);
2. each response is stored gzip-compressed (deterministic: `mtime=0`) under the
   store's `raw/` prefix, write-once, before any record is built from it;
3. after the caller has published a page's records, a checkpoint records the pages
   done and the next resumption token, so a killed harvest resumes where it stopped;
4. a refused token (`badResumptionToken`, tokens expire) restarts the window from its
   start as a new *attempt*; earlier attempts' pages stay stored (their records are
   already published, and republishing them is a no-op), so nothing is lost or doubled.

Raw layout (`<root>` is `raw/oai`, or `raw/sample` for the bundled sample):

    <root>/arXivRaw/<from>_<until>[_<set>]/checkpoint.json
    <root>/arXivRaw/<from>_<until>[_<set>]/attempt-001/page-00001.xml.gz
    <root>/arXivRaw/<from>_<until>[_<set>]/attempt-001/page-00002.malformed-01.xml.gz
    <root>/arXivRaw/<from>_<until>[_<set>]/attempt-001/page-00003.refused.xml.gz
    <root>/arXivRaw/getrecord/<run id>/00001-<id>.xml.gz

Only `page-NNNNN.xml.gz` files are replayed; the others are kept as evidence.
A page whose bytes were stored but whose records were not yet committed (the run
died in between) is taken from the store on resume, not fetched again.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from typing import Any

from pith_pipeline.clock import system_clock
from pith_pipeline.core.arxiv_record import ArxivRecord
from pith_pipeline.core.canonical_json import dumps_pretty, loads
from pith_pipeline.core.limits import DEFAULT_LIMITS, InputLimits
from pith_pipeline.core.timeutil import Clock, iso_seconds
from pith_pipeline.errors import (
    ResumptionLoopError,
    TerminalError,
    TransientError,
)
from pith_pipeline.items import Rejected
from pith_pipeline.sources.arxivraw import MalformedPageError, Page, oai_identifier, parse_page
from pith_pipeline.sources.oai_client import DEFAULT_OAI_URL as DEFAULT_OAI_URL
from pith_pipeline.sources.oai_client import OAI_URL_ENV as OAI_URL_ENV
from pith_pipeline.sources.oai_client import OAIClient as OAIClient
from pith_pipeline.sources.oai_pages import (
    OUTSIDE_WINDOW_LISTED as OUTSIDE_WINDOW_LISTED,
)
from pith_pipeline.sources.oai_pages import (
    Checkpoint,
    HarvestedPage,
    HarvestStats,
    gz,
    outside_window,
    page_digest,
    public_url,
    short_digest,
    weekdays,
)
from pith_pipeline.sources.oai_pages import (
    OutsideWindow as OutsideWindow,
)
from pith_pipeline.sources.oai_pages import gunzip as gunzip
from pith_pipeline.storage.base import Store
from pith_pipeline.window import METADATA_PREFIX, Window

#: the harvester, and what the other modules take from here beside it
__all__ = [
    "DEFAULT_OAI_URL",
    "MAX_RESTARTS",
    "OAI_URL_ENV",
    "OUTSIDE_WINDOW_LISTED",
    "RAW_ROOT",
    "HarvestStats",
    "HarvestedPage",
    "Harvester",
    "OAIClient",
    "OutsideWindow",
    "gunzip",
    "public_url",
]

log = logging.getLogger(__name__)

RAW_ROOT = "raw/oai"
# store keys can be planted by anyone who can write the store: ASCII digits, no `$`
_PAGE = re.compile(r"/attempt-([0-9]+)/page-([0-9]+)\.xml\.gz\Z")
_GETRECORD = re.compile(r"/getrecord/[^/]+/[0-9]+-[^/]+\.xml\.gz\Z")
MAX_RESTARTS = 3


class _TokenRefused(Exception):
    pass


class Harvester:
    """Harvests windows and single records into a store's raw area, and replays them."""

    def __init__(
        self,
        store: Store,
        client: OAIClient | None,
        *,
        raw_root: str = RAW_ROOT,
        metadata_prefix: str = METADATA_PREFIX,
        clock: Clock = system_clock,
        limits: InputLimits = DEFAULT_LIMITS,
    ) -> None:
        self.store = store
        self.limits = limits
        self.client = client
        self.raw_root = raw_root.rstrip("/")
        self.prefix = metadata_prefix
        self.clock = clock
        self.stats = HarvestStats()
        #: findings go to `stats` only, not the log (`findings`: already logged once)
        self.quiet = False

    # -- keys --------------------------------------------------------------
    def window_prefix(self, window: Window) -> str:
        return f"{self.raw_root}/{window.metadata_prefix}/{window.label}"

    def checkpoint_key(self, window: Window) -> str:
        return f"{self.window_prefix(window)}/checkpoint.json"

    def page_key(self, window: Window, attempt: int, number: int, suffix: str = "") -> str:
        return f"{self.window_prefix(window)}/attempt-{attempt:03d}/page-{number:05d}{suffix}.xml.gz"

    # -- checkpoints ---------------------------------------------------------
    def load_checkpoint(self, window: Window) -> Checkpoint | None:
        raw = self.store.get(self.checkpoint_key(window))
        if raw is None:
            return None
        try:
            return Checkpoint.from_json(window, loads(raw))
        except (ValueError, TypeError, AttributeError) as exc:
            raise TerminalError(
                f"{self.checkpoint_key(window)} in {self.store.url} is "
                f"unreadable ({exc}); move it away to start the window "
                "again"
            ) from None

    def _save(self, cp: Checkpoint) -> None:
        cp.updated_at = iso_seconds(self.clock())
        if self.client is not None:
            cp.oai_url = self.client.base_url
        self.store.put(self.checkpoint_key(cp.window), dumps_pretty(cp.to_json()) + b"\n")

    # -- fetching ------------------------------------------------------------
    def _need_client(self) -> OAIClient:
        if self.client is None:
            raise TerminalError("this harvester replays stored pages only (no OAI-PMH URL)")
        return self.client

    def _fetch(self, params: dict[str, str], where: str, malformed_key: Any) -> tuple[bytes, Page]:
        """One OAI response that is an OAI-PMH document; malformed ones are kept and retried."""
        client = self._need_client()
        policy = client.gate.policy
        for attempt in range(policy.max_retries + 1):
            sent = client.gate.requests
            response = client.request(params)
            self.stats.requests += client.gate.requests - sent  # retries included
            body = response.content
            status = response.status_code
            try:
                # OAI-PMH answers 200 and reports its errors in the body: any other status
                # (429 and 5xx were retried by the gate) is not a page, whatever the body
                if status != 200:
                    raise MalformedPageError(f"HTTP {status} from {client.base_url}", where=where)
                page = parse_page(body, where, limits=self.limits)
            except MalformedPageError as exc:
                self.stats.malformed_pages += 1
                key = self._free_key(malformed_key)
                self.store.put_once(key, gz(body), content_type="application/gzip")
                self.stats.malformed_keys.append(key)
                log.warning("%s (HTTP %s); kept as %s", exc, status, key)
                if status != 200:
                    raise TerminalError(
                        f"{where}: HTTP {status} from {client.base_url}; response kept as {key}"
                    ) from None
                if attempt >= policy.max_retries:
                    raise TransientError(
                        f"{where}: {exc.message}; gave up after "
                        f"{attempt + 1} tries; responses kept under "
                        f"{key.rsplit('/', 1)[0]}; rerun to resume"
                    ) from None
                client.gate.penalize(attempt)
                continue
            return body, page
        raise AssertionError("unreachable")

    def _free_key(self, make: Any) -> str:
        k = 1
        while self.store.exists(make(k)):
            k += 1
        key: str = make(k)
        return key

    # -- ListRecords windows ----------------------------------------------------
    def harvest(self, window: Window, *, refresh: bool = False) -> Iterator[HarvestedPage]:
        """Pages of one window, resuming from its checkpoint.

        The checkpoint advances when the consumer asks for the next page, i.e. after it
        has published the previous one. A complete window yields nothing unless
        `refresh`, which harvests it again as a new attempt.
        """
        cp = self.load_checkpoint(window) or Checkpoint(window)
        if cp.complete:
            if not refresh:
                self.stats.windows_already_complete += 1
                return
            cp = Checkpoint(window, attempt=cp.attempt + 1, restarts=cp.restarts)
            self._save(cp)
        # per run, not per window: a window that used up its restarts once must still
        # be able to start again later (its stored token has expired by then)
        restarts_left = MAX_RESTARTS
        while True:
            n = cp.pages_done + 1
            key = where = self.page_key(window, cp.attempt, n)
            stored = self.store.get(key)
            try:
                if stored is not None:
                    body = gunzip(stored, key, self.limits.response_bytes)
                    page = parse_page(body, where, limits=self.limits)
                    self.stats.pages_from_store += 1
                else:
                    page = self._fetch_page(window, cp, n, key)
                from_store = stored is not None
            except _TokenRefused as exc:
                self.stats.refused_tokens += 1
                if restarts_left <= 0:
                    raise TransientError(
                        f"{self.window_prefix(window)}: resumption token refused again "
                        f"({exc}); restarted {MAX_RESTARTS} times in this run already; try later"
                    ) from None
                restarts_left -= 1
                log.warning(
                    "%s: resumption token refused (%s); restarting the window from its start", where, exc
                )
                self.stats.restarts += 1
                cp = Checkpoint(window, attempt=cp.attempt + 1, restarts=cp.restarts + 1)
                self._save(cp)
                continue
            self._check_progress(window, cp, page, where)
            self.stats.pages += 1
            server = cp.oai_url if from_store and cp.oai_url else self._need_client().base_url
            self._note_outside(window, page, key, server, self._request_for(window, cp, n))
            if page.complete_list_size is not None:
                cp.complete_list_size = page.complete_list_size
            yield HarvestedPage(key, page, n, cp.attempt, from_store, cp.complete_list_size)
            cp.pages_done = n
            cp.resumption_token = page.resumption_token
            cp.records += len(page.items)
            cp.deleted += len(page.deleted)
            cp.complete = page.resumption_token is None
            self._save(cp)
            if cp.complete:
                if cp.records + cp.deleted == 0:
                    self._note_empty(window, self._need_client().base_url, window.params())
                return

    def _request_for(self, window: Window, cp: Checkpoint, n: int) -> dict[str, str]:
        """The request of page `n` of the window's attempt: the window's own first,
        then the resumption token the page before gave."""
        if n == 1:
            return window.params()
        return {"verb": "ListRecords", "resumptionToken": str(cp.resumption_token)}

    def _fetch_page(self, window: Window, cp: Checkpoint, n: int, key: str) -> Page:
        """Page `n` of the window's attempt, fetched and stored write-once under `key`.

        A refused token raises `_TokenRefused` (the response kept as `.refused`); any
        other OAI-PMH error a `TerminalError` naming the request (the response kept as
        `.error-NN`), except `noRecordsMatch` to the first request: an empty window."""
        if n > 1 and not cp.resumption_token:
            raise TerminalError(
                f"{self.checkpoint_key(window)}: page {n} is due but no resumption token is recorded"
            )
        params = self._request_for(window, cp, n)
        body, page = self._fetch(
            params, key, lambda k, a=cp.attempt, m=n: self.page_key(window, a, m, f".malformed-{k:02d}")
        )
        if page.error_code == "badResumptionToken":
            refused = self.page_key(window, cp.attempt, n, ".refused")
            self.store.put_once(refused, gz(body), content_type="application/gzip")
            raise _TokenRefused(page.error_message)
        # `noRecordsMatch` is an empty window only as the answer to its first request; to
        # a token it means the list broke off, records missing
        if page.error_code is not None and (page.error_code != "noRecordsMatch" or n > 1):
            bad = self._free_key(lambda k, a=cp.attempt, m=n: self.page_key(window, a, m, f".error-{k:02d}"))
            self.store.put_once(bad, gz(body), content_type="application/gzip")
            broke_off = " to a resumption token: the list broke off" if n > 1 else ""
            raise TerminalError(
                f"{key}: arXiv's OAI-PMH answered {page.error_code}{broke_off}: "
                f"{page.error_message} (request {params}; response kept as {bad})"
            )
        self.store.put_once(key, gz(body), content_type="application/gzip")
        return page

    def _note_outside(
        self, window: Window, page: Page, key: str, server: str, request: dict[str, str]
    ) -> None:
        """Count, list and warn of the page's records outside `window` (`HarvestStats.note_outside`)."""
        found = outside_window(page, window, key)
        if found:
            line = self.stats.note_outside(window, found, key, server, request)
            (log.debug if self.quiet else log.warning)("%s", line)

    def _note_empty(self, window: Window, server: str, request: dict[str, str]) -> None:
        """Warn of a window with a weekday that listed nothing: arXiv announces every
        weekday, so it is a holiday or a server that wrongly answers with nothing."""
        # the wall clock, not `self.clock`: SOURCE_DATE_EPOCH must not hide a day that is over
        days = weekdays(window, datetime.now(tz=UTC).date())
        if days:
            (log.debug if self.quiet else log.warning)(
                "%s", self.stats.note_empty(window, days, server, request)
            )

    def _check_progress(self, window: Window, cp: Checkpoint, page: Page, where: str) -> None:
        """Stop a list that does not end, before its page is published.

        Why: a server that hands back a token already used, or new tokens for pages
        already seen (the same records again, or empty pages), or pages beyond its own
        `completeListSize`, would be followed forever, republishing the same records.
        The token and the page are recorded in `cp` (saved with the next commit).
        """
        stop = f"{self.window_prefix(window)}: "
        why = "; window stopped (the server's list does not end; try again later)"
        total = cp.records + cp.deleted + len(page.items) + len(page.deleted)
        size = page.complete_list_size if page.complete_list_size is not None else cp.complete_list_size
        if size is not None and total > size:
            raise ResumptionLoopError(
                f"{stop}{total} records by {where}, more than the completeListSize of {size} "
                f"the server announced{why}"
            )
        token = page.resumption_token
        if token is not None:
            token_digest = short_digest(token)
            if token_digest in cp.seen_tokens:
                raise ResumptionLoopError(
                    f"{stop}resumption token {token[:200]!r} in {where} was already used in this window{why}"
                )
            cp.seen_tokens.append(token_digest)
        listed = page_digest(page)
        if listed in cp.seen_pages:
            what = "lists the same records as" if page.items or page.deleted else "is empty, like"
            raise ResumptionLoopError(f"{stop}{where} {what} an earlier page of this window{why}")
        cp.seen_pages.append(listed)

    def findings(self, window: Window, keys: Iterable[str]) -> HarvestStats:
        """What `harvest` warns of (records outside `window`, an empty weekday) for the
        stored pages `keys` of one complete attempt, from the store, without logging.

        For a harvest whose pages are built later (the Airflow tasks): a rerun of a
        complete window fetches nothing, yet its run manifest must say the same."""
        cp = self.load_checkpoint(window)
        server = (cp.oai_url if cp is not None else "") or "the stored pages"
        found = Harvester(self.store, None, raw_root=self.raw_root, limits=self.limits)
        found.quiet = True
        listed = 0
        for key in keys:
            data = self.store.get(key)
            if data is None:
                continue
            page = parse_page(gunzip(data, key, self.limits.response_bytes), key, limits=self.limits)
            listed += len(page.items) + len(page.deleted)
            found._note_outside(window, page, key, server, window.params())
        if listed == 0:
            found._note_empty(window, server, window.params())
        return found.stats

    # -- GetRecord -----------------------------------------------------------
    def get_records(self, ids: Iterable[str], run_id: str) -> Iterator[HarvestedPage]:
        """`GetRecord` for each id, each response stored before it is parsed."""
        base = f"{self.raw_root}/{self.prefix}/getrecord/{run_id}"
        for n, arxiv_id in enumerate(ids, start=1):
            safe = arxiv_id.replace("/", "_")
            key = f"{base}/{n:05d}-{safe}.xml.gz"
            params = {
                "verb": "GetRecord",
                "identifier": oai_identifier(arxiv_id),
                "metadataPrefix": self.prefix,
            }
            body, page = self._fetch(
                params, key, lambda k, b=base, m=n, s=safe: f"{b}/{m:05d}-{s}.malformed-{k:02d}.xml.gz"
            )
            self.store.put_once(key, gz(body), content_type="application/gzip")
            self.stats.pages += 1
            _explain_getrecord_error(page, arxiv_id, body)
            yield HarvestedPage(key, page, n)

    def last_harvested_until(self, set_spec: str | None = None) -> str | None:
        """The latest `until` of a complete window (same set) in the store, if any."""
        best: str | None = None
        for key in self.store.list(f"{self.raw_root}/{self.prefix}/"):
            if not key.endswith("/checkpoint.json"):
                continue
            raw = self.store.get(key)
            try:
                obj = loads(raw) if raw else {}
                w = obj["window"]
            except (ValueError, KeyError, TypeError):
                continue
            if obj.get("complete") and w.get("set") == set_spec and w.get("until"):
                best = max(best or "", str(w["until"]))
        return best

    # -- replay --------------------------------------------------------------
    def stored_pages(self, window: Window | None = None) -> list[str]:
        """Keys of stored pages in replay order: attempt, then page number."""
        prefix = (self.window_prefix(window) + "/") if window else f"{self.raw_root}/{self.prefix}/"
        keys = []
        for k in self.store.list(prefix):
            m = _PAGE.search(k)
            if m:
                keys.append((k[: m.start()], int(m.group(1)), int(m.group(2)), k))
            elif _GETRECORD.search(k) and ".malformed-" not in k:
                keys.append((k.rsplit("/", 1)[0], 0, 0, k))
            elif ".malformed-" in k:
                self.stats.malformed_pages += 1
        keys.sort()
        return [k for *_, k in keys]

    def replay(self, window: Window | None = None) -> Iterator[HarvestedPage]:
        """Stored pages parsed again, with no network: the run, minus arXiv."""
        cp = self.load_checkpoint(window) if window is not None else None
        server = (cp.oai_url if cp is not None else "") or "the stored pages"
        listed = 0
        for n, key in enumerate(self.stored_pages(window), start=1):
            data = self.store.get(key)
            if data is None:
                continue
            body = gunzip(data, key, self.limits.response_bytes)
            page = parse_page(body, key, limits=self.limits)
            if "/getrecord/" in key:
                ident = key.rsplit("/", 1)[1].split("-", 1)[1][: -len(".xml.gz")]
                _explain_getrecord_error(page, ident.replace("_", "/"), body)
            self.stats.pages += 1
            self.stats.pages_from_store += 1
            listed += len(page.items) + len(page.deleted)
            if window is not None:
                self._note_outside(window, page, key, server, {"replay": key})
            yield HarvestedPage(key, page, n, from_store=True)
        if window is not None and listed == 0:
            self._note_empty(window, server, {"replay": self.window_prefix(window)})


def _explain_getrecord_error(page: Page, arxiv_id: str, body: bytes) -> None:
    """A `GetRecord` error becomes a quarantined item: the id was asked for and not built.

    So does an answer holding another paper's record (or its deletion): a look-up builds
    only what was asked for, never what a server chose to send instead."""
    others = [i for i in page.items if isinstance(i, ArxivRecord) and i.id != arxiv_id]
    others_deleted = [d for d in page.deleted if d.arxiv_id != arxiv_id]
    if others or others_deleted:
        named = sorted({r.id for r in others} | {d.arxiv_id for d in others_deleted})
        reason = f"GetRecord for {oai_identifier(arxiv_id)} answered with another record: {', '.join(named)}"
        page.items = [i for i in page.items if not isinstance(i, ArxivRecord)]
        page.deleted = []
        page.items.append(Rejected.of_bytes(page.where, reason, body, arxiv_id, "id"))
        return
    if page.error_code is None:
        return
    reason = {"idDoesNotExist": f"arXiv's OAI-PMH has no record {oai_identifier(arxiv_id)}"}.get(
        page.error_code, f"OAI-PMH error {page.error_code}"
    )
    if page.error_message:
        reason += f" ({page.error_message})"
    page.items.append(Rejected.of_bytes(page.where, reason, body, arxiv_id, "id"))
