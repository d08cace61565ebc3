"""The pure core: canonical JSON, records, events, merge, bundles, verification.

Nothing in this package may import a network, cloud or Parquet library.
"""
