"""The index layout before Delta tables (`index/_manifest.json` and its part files).

Every reader and writer of the tables refuses a store in that layout
(`refuse_legacy`); `reindex` migrates it once, removing its files
(`remove_legacy_files`) and then the manifest.
"""

from __future__ import annotations

import re

from pith_pipeline.errors import StorageError
from pith_pipeline.index.delta import unwrap
from pith_pipeline.storage.base import Store
from pith_pipeline.storage.lease import check_writes

#: The index layout before Delta tables: a manifest of our own, migrated by `reindex`.
LEGACY_MANIFEST_KEY = "index/_manifest.json"
# `search`ed in store keys: ASCII digits and `\Z` (`$` admits a trailing newline)
_LEGACY_FILE = re.compile(r"/part-g[0-9]+-[0-9]{8}T[0-9]{6}Z-[0-9a-f]+\.parquet\Z")


def legacy_present(store: Store) -> bool:
    return unwrap(store).get(LEGACY_MANIFEST_KEY) is not None


def refuse_legacy(store: Store) -> None:
    """`StorageError` when the store's index is in the layout before Delta tables
    (`index/_manifest.json`): every reader and writer of the tables refuses it, and
    says to run `reindex` once, rather than read or write half of two layouts."""
    if legacy_present(store):
        raise StorageError(
            f"{store.url}/{LEGACY_MANIFEST_KEY}: this store's index is in the old layout; "
            "run `pith-pipeline reindex` once to turn it into Delta tables"
        )


def remove_legacy_files(real: Store, prefix: str) -> list[str]:
    gone = []
    for key in list(real.list(prefix)):
        if _LEGACY_FILE.search(key):
            check_writes(real)
            real.delete(key)
            gone.append(key)
    return gone
