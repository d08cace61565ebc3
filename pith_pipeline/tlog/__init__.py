"""A transparency log of every published event (C2SP tlog-tiles in the store).

- `merkle`: RFC 6962/9162 hashing, inclusion and consistency proofs.
- `tiles`, `note`: the tile layout and the signed-note checkpoint format.
- `log`: reading tiles (from a store or a URL), proving, appending.
- `events`: the pipeline's side: which events go in, in which order, and checks
  that the log and the event store hold the same events.
"""

from pith_pipeline.tlog.log import (
    AppendResult,
    LogSigner,
    TileReader,
    append_entries,
    open_fetch,
    read_checkpoint,
    store_fetch,
)
from pith_pipeline.tlog.note import Checkpoint, Verifier, verifier_key

__all__ = [
    "AppendResult",
    "Checkpoint",
    "LogSigner",
    "TileReader",
    "Verifier",
    "append_entries",
    "open_fetch",
    "read_checkpoint",
    "store_fetch",
    "verifier_key",
]
