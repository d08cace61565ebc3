"""Storage back ends behind one small interface (`Store`)."""

from pith_pipeline.storage.base import Store
from pith_pipeline.storage.factory import MissingStoreError, open_existing_store, open_store

__all__ = ["MissingStoreError", "Store", "open_existing_store", "open_store"]
