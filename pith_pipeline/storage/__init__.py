"""Storage back ends behind one small interface (`Store`)."""

from pith_pipeline.storage.base import Store, open_store

__all__ = ["Store", "open_store"]
