"""Reading published bundles back into index rows.

A bundle that is missing or that the index cannot read is a `StorageError` naming
its key: the index never skips a record it was asked to index.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor

from pith_pipeline.core.canonical_json import loads
from pith_pipeline.errors import StorageError
from pith_pipeline.index.outcome import Progress
from pith_pipeline.index.rows import Rows, rows_from_bundle
from pith_pipeline.storage.base import Store


def _read_bundle(store: Store, key: str) -> Rows:
    data = store.get(key)
    if data is None:
        raise StorageError(
            f"{store.url}/{key} is missing; it was expected to be published "
            "(re-run the window, or `pith-pipeline rebuild`)"
        )
    try:
        bundle = loads(data)
    except ValueError as exc:
        raise StorageError(f"{store.url}/{key} is not valid JSON: {exc}") from None
    try:
        return rows_from_bundle(bundle, bundle_key=key, bundle_sha256=hashlib.sha256(data).hexdigest())
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise StorageError(
            f"{store.url}/{key}: not a bundle the index can read ({type(exc).__name__}: {exc})"
        ) from None


def read_bundles(
    store: Store, keys: Iterable[str], *, workers: int = 16, progress: Progress | None = None
) -> Iterator[tuple[str, Rows]]:
    """Index rows per bundle key; reads run in parallel (object stores are latency-bound)."""
    keys = list(keys)
    if not keys:
        return
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(keys)))) as pool:
        for key, rows in zip(keys, pool.map(lambda k: _read_bundle(store, k), keys), strict=True):
            if progress:
                progress(1)
            yield key, rows


def all_bundle_keys(store: Store) -> list[str]:
    return [k for k in store.list("pith/") if k.endswith("/bundle.json") and k.count("/") == 2]
