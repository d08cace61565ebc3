"""A transparency log of every published event (C2SP tlog-tiles in the store).

The log's format, checked against Go's sumdb code (tests/tlog/test_go_interop.py):
- `merkle`: RFC 6962/9162 hashing, inclusion and consistency proofs.
- `tiles`, `note`: the tile layout and the signed-note checkpoint format.
- `log`: reading tiles (from a store or a URL), proving, appending.
- `entry`: an entry's form (inline, or hash-committed when too large).

The pipeline's side, from the bottom up:
- `stored_events`: which stored objects are events, and the entry each is logged as.
- `log_key`: the log's key, named in the store's key document.
- `checkpoints`: the signed checkpoint and the ones recorded outside `log/`.
- `lookup`: the event-id lookup objects, and which events the log holds.
- `pending`: markers of runs whose events may not be logged yet.
- `append`: appending stored events in order under the `log` lease.
- `recovery`: rebuilding a lost or rolled-back log without signing a fork.
- `check`: the log against the event store (`verify STORE`).
- `pipeline`: a run's one call at its end (`log_run`) and `log sync` (`sync_log`).
- `run_log`, `client`, `monitor`: a run's choice of log key; a client's proofs; a monitor.
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
