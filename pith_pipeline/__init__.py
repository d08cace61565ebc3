"""pith-pipeline: arXiv metadata to signed, content-addressed Pith open-graph bundles.

The library's public surface (docs/pages/library.md):

- `Run`: one publishing run into a store (`with Run.open(settings, command=...) as run:
  run.publish(records)`), and `Settings`, what it is opened from;
- `open_store`, `open_signer`: a store or signer from its location or spec;
- `verify_bundle`: check a published bundle and its signatures;
- `iter_jsonl`: the records of a JSON-lines file in arXiv's snapshot layout;
- the stored documents' models, each with `parse(raw, key)` and `to_bytes()`:
  `Event`, `Bundle`, `State`, `KeyDocument`, `ArxivPointer`;
- the errors, all under `PithError`.

Everything else is the pipeline's own and may change between releases.
"""

from __future__ import annotations

import importlib
from typing import Any

from pith_pipeline.errors import (
    IncompleteRunError,
    InputError,
    IntegrityError,
    PithError,
    SigningError,
    StorageError,
    TerminalError,
    TransientError,
    VerificationError,
    WriteConflictError,
)

__version__ = "0.1.0"

# Type checkers read the exports' types from __init__.pyi: a static import here, even
# under TYPE_CHECKING, would make every module that imports `pith_pipeline.config`
# depend on `runs` in the layer contract.
# lazy: `Run` pulls pyarrow and the publisher, 356 ms (python -X importtime), and every
# `import pith_pipeline.<module>` (each CLI start, each DAG parse, each worker process)
# imports this package first; `import pith_pipeline` stays at about 4 ms
_LAZY = {
    "Run": "pith_pipeline.runs.run",
    "Settings": "pith_pipeline.config",
    "verify_bundle": "pith_pipeline.core.verify",
    "open_store": "pith_pipeline.storage.factory",
    "open_signer": "pith_pipeline.signing.factory",
    "iter_jsonl": "pith_pipeline.sources.jsonl",
    "Event": "pith_pipeline.core.documents",
    "Bundle": "pith_pipeline.core.documents",
    "State": "pith_pipeline.core.documents",
    "KeyDocument": "pith_pipeline.core.documents",
    "ArxivPointer": "pith_pipeline.core.arxiv_pointer",
}

__all__ = [
    "ArxivPointer",
    "Bundle",
    "Event",
    "IncompleteRunError",
    "InputError",
    "IntegrityError",
    "KeyDocument",
    "PithError",
    "Run",
    "Settings",
    "SigningError",
    "State",
    "StorageError",
    "TerminalError",
    "TransientError",
    "VerificationError",
    "WriteConflictError",
    "__version__",
    "iter_jsonl",
    "open_signer",
    "open_store",
    "verify_bundle",
]


def __getattr__(name: str) -> Any:
    """The public names imported when first asked for (see `_LAZY`)."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'pith_pipeline' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
