"""Harvest one run's window of OAI-PMH pages into the store's `raw/` (resumable)."""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING, Any

from pith_pipeline.errors import StorageError
from pith_pipeline.runs.steps import run_store
from pith_pipeline.runs.windows import run_id_for
from pith_pipeline.sources.politeness import Gate, Politeness
from pith_pipeline.storage.lease import WriterLease, default_owner
from pith_pipeline.window import Window

if TYPE_CHECKING:
    from pith_pipeline.config import Settings
    from pith_pipeline.storage.base import Store

log = logging.getLogger(__name__)
# store keys: ASCII digits and `\Z`, as `sources.oai` reads them
_ATTEMPT = re.compile(r"/attempt-([0-9]+)/page-[0-9]+\.xml\.gz\Z")


def harvest_window(settings: Settings, window: Window, *, store: Store | None = None) -> dict[str, Any]:
    """Harvest the window's raw pages (resuming from the harvester's checkpoint).

    A window harvested before costs no request. Returns the run id, the window, the
    keys of the pages to build from (the latest complete attempt: a refused
    resumption token restarts a window, and the restart lists every record again)
    and counts: no records. Also what the pages hold that the run manifest must
    report (`Harvester.findings`): `outside_window` (a count),
    `outside_window_records` and `warnings`.

    Under the window's harvest lease: two runs can own one day at once (a
    `pith_ingest` backfill run and a `pith_backfill` window), and both would write
    the same write-once raw pages with different bytes (each response has its own
    `responseDate`). The second waits, then replays the first's complete harvest.
    """

    store = store or run_store(settings)
    with WriterLease(
        store,
        [harvest_lease(window)],
        owner=default_owner(run_id_for("ingest", window), "airflow harvest"),
        ttl=settings.lease_ttl,
        wait=settings.lease_wait_seconds,
        on_wait=log.warning,
    ):
        return _harvest_window(settings, window, store)


def harvest_lease(window: Window) -> str:
    """The lease a harvest of `window` holds (see `harvest_window`)."""
    return f"harvest-{window.id}"


def _harvest_window(settings: Settings, window: Window, store: Store) -> dict[str, Any]:
    # lazy: httpx2, lxml, oaipmh_scythe, 91 ms at import
    from pith_pipeline.sources.oai import Harvester, OAIClient

    gate = Gate(Politeness.of(settings))  # the settings' interval, User-Agent and turn directory
    with OAIClient(settings.oai_url, gate=gate) as client:
        harvester = Harvester(store, client)
        for _page in harvester.harvest(window):
            pass  # stored write-once as they arrive; the build reads them back
        checkpoint = harvester.load_checkpoint(window)
    if checkpoint is None or not checkpoint.complete:
        raise StorageError(
            f"harvest of {window.id} ended without a complete checkpoint in {store.url}", transient=True
        )
    pages = [
        k
        for k in harvester.stored_pages(window)
        if (m := _ATTEMPT.search(k)) and int(m.group(1)) == checkpoint.attempt
    ]
    found = harvester.findings(window, pages)  # the run manifest's warnings (finish_window)
    return {
        "run_id": run_id_for("ingest", window),
        "window": window.to_json(),
        "source": "oai",
        "pages": pages,
        "records": checkpoint.records,
        "deleted": checkpoint.deleted,
        "requests": harvester.stats.requests,
        "outside_window": found.outside_window,
        "outside_window_records": [o.to_json() for o in found.outside_listed],
        "warnings": found.warnings,
    }
