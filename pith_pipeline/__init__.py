"""pith-pipeline: arXiv metadata to signed, content-addressed Pith open-graph bundles."""

__version__ = "0.1.0"
