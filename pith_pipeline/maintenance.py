"""Maintenance of a published store: compact and vacuum indexes, rebuild, verify a sample.

The bodies of the `pith_maintenance` DAG's tasks; plain Python, testable without Airflow.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pith_pipeline.config import Settings
    from pith_pipeline.storage.base import Store

log = logging.getLogger(__name__)


def compact_indexes(
    settings: Settings, *, store: Store | None = None, retention_hours: float | None = None
) -> dict[str, Any]:
    """Compact each index table; vacuum files no version younger than `retention_hours` needs."""
    from pith_pipeline.index.writer import DEFAULT_RETENTION_HOURS, compact
    from pith_pipeline.runs.steps import _store
    from pith_pipeline.storage.lease import writer_lease

    store = store or _store(settings)
    hours = DEFAULT_RETENTION_HOURS if retention_hours is None else retention_hours
    with writer_lease(
        store, command="airflow compact", papers=False, index=True, wait=settings.lease_wait_seconds
    ):
        from pith_pipeline.storage.local import LocalStore

        if isinstance(store, LocalStore):  # a killed writer's leftovers, wherever they are
            store.sweep_temporary(published=True)
        update = compact(store, retention_hours=hours)
    return {
        "versions": dict(update.versions),
        "files_compacted": update.files_compacted,
        "rows": dict(update.rows),
        "deleted": len(update.deleted),
    }


def rebuild_from_events(
    settings: Settings, *, bundles: bool, indexes: bool, store: Store | None = None
) -> dict[str, Any]:
    """Re-derive bundles from the event store (when `bundles`), then the indexes."""
    from pith_pipeline.errors import IncompleteRunError
    from pith_pipeline.index.writer import reindex
    from pith_pipeline.pipeline import BuildConfig, rebuild
    from pith_pipeline.runs.steps import _signer, _store
    from pith_pipeline.storage.lease import writer_lease

    store = store or _store(settings)
    out: dict[str, Any] = {"bundles_rebuilt": 0, "reindexed": False}
    failures: list[str] = []
    with writer_lease(
        store, command="airflow rebuild", papers=bundles, index=True, wait=settings.lease_wait_seconds
    ) as lease:
        if bundles:
            out["bundles_rebuilt"] = sum(
                1
                for _ in rebuild(
                    store, _signer(settings), BuildConfig.of(settings), lease=lease, failures=failures
                )
            )
        if bundles or indexes:
            update = reindex(store)
            out.update(reindexed=True, versions=dict(update.versions), rows=dict(update.rows))
    if failures:
        for problem in failures:
            log.error("not rebuilt: %s", problem)
        raise IncompleteRunError(f"{len(failures)} papers not rebuilt: stored events failed their checks")
    return out


def published_bundle_keys(store: Store) -> list[str]:
    return [k for k in store.list("pith/") if k.endswith("/bundle.json") and k.count("/") == 2]


def verify_sample(settings: Settings, *, size: int, seed: str, store: Store | None = None) -> dict[str, Any]:
    """Verify a random sample of published bundles; raise naming every mismatch.

    Each sampled bundle must pass every check of the spec against the registry's
    key document, its `.well-known` copy must be byte-identical, and `state.json`
    must equal the bundle's state.
    """
    import random

    from pith_pipeline.core.canonical_json import loads
    from pith_pipeline.core.keys import read_key_document
    from pith_pipeline.core.layout import PUBLIC_KEY_FILE, bundle_paths
    from pith_pipeline.core.verify import verify_bundle
    from pith_pipeline.errors import VerificationError
    from pith_pipeline.runs.steps import _store

    store = store or _store(settings)
    keys = published_bundle_keys(store)
    sample = sorted(random.Random(seed).sample(keys, min(max(size, 0), len(keys))))
    trusted = None
    doc_raw = store.get(PUBLIC_KEY_FILE)
    if doc_raw is not None:
        trusted = read_key_document(doc_raw, f"{store.url}/{PUBLIC_KEY_FILE}")
    failures: list[str] = []
    for key in sample:
        body = key.split("/")[1]
        data = store.get(key)
        if data is None:
            failures.append(f"{key}: listed but unreadable")
            continue
        try:
            bundle = loads(data)
        except ValueError as exc:
            failures.append(f"{key}: not JSON ({exc})")
            continue
        report = verify_bundle(bundle, source=key, trusted_keys=trusted)
        failures.extend(f"{key}: {c.name}: {c.detail}" for c in report.failed)
        _bkey, skey, wkey = bundle_paths(body)
        if store.get(wkey) != data:
            failures.append(f"{wkey}: differs from {key}")
        state = store.get(skey)
        try:
            same = state is not None and isinstance(bundle, dict) and loads(state) == bundle.get("state")
        except ValueError:
            same = False
        if not same:
            failures.append(f"{skey}: differs from the state in {key}")
    if failures:
        shown = "\n  ".join(failures[:50])
        more = f"\n  ... and {len(failures) - 50} more" if len(failures) > 50 else ""
        raise VerificationError(
            f"{len(failures)} mismatches in {len(sample)} sampled bundles of {store.url}:\n  {shown}{more}"
        )
    return {"bundles": len(keys), "checked": len(sample), "failures": 0}
