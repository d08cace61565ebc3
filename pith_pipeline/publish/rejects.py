"""What a run does with a record it cannot publish: a quarantine entry, counted
(`quarantine_entry`; `build_failure` for a record that parsed but could not be
built, like one that did not parse), and the run's quarantine, stored once at its end
(`RunQuarantine`).
"""

from __future__ import annotations

import json
from datetime import UTC, date, datetime
from typing import Any

from pith_pipeline._internal.quarantine_spool import QuarantineSpool
from pith_pipeline.core.arxiv_record import ArxivRecord
from pith_pipeline.core.layout import quarantine_key
from pith_pipeline.errors import InputError
from pith_pipeline.items import Rejected
from pith_pipeline.publish.summary import RunSummary
from pith_pipeline.publish.writing import Writer
from pith_pipeline.storage.base import file_sha256, put_once_file


def utc_today() -> date:
    """The real date in UTC (not the build clock, which SOURCE_DATE_EPOCH pins)."""
    return datetime.now(tz=UTC).date()


def build_failure(rec: ArxivRecord, exc: BaseException) -> Rejected:
    """The quarantine entry of a record that parsed but could not be built: with the
    input as read (bytes kept exactly, base64 when not UTF-8) and where it was read,
    like a parse failure; a re-serialisation only for a record made in code."""
    if isinstance(exc, InputError):
        reason, fld, where = exc.message, exc.field, exc.where or rec.source_where or ""
    else:
        reason, fld, where = (
            f"could not build the record: {type(exc).__name__}: {exc}",
            None,
            rec.source_where or "",
        )
    if isinstance(rec.source_raw, bytes):
        return Rejected.of_bytes(where, reason, rec.source_raw, rec.id, fld)
    if isinstance(rec.source_raw, str):
        return Rejected(where, reason, rec.source_raw, rec.id, fld)
    try:
        raw = json.dumps(rec.to_json(), ensure_ascii=False, sort_keys=True)
    except (TypeError, ValueError):
        raw = repr(rec)
    return Rejected(where, reason, raw, rec.id, fld)


def quarantine_entry(item: Rejected, summary: RunSummary) -> dict[str, Any]:
    """Count a reject in `summary` and return its quarantine entry (named by the run)."""
    summary.quarantined += 1
    return {"run_id": summary.run_id, **item.to_json()}


class RunQuarantine:
    """A run's rejects, spilled to disk as they come (`spool`), and stored as
    `quarantine/<run_id>.jsonl` under the run's lease (`store`).

    Write-once: `store` is called at the end of the run; called again with no new
    reject, it does nothing. Streamed from the spill file: entries keep their raw
    input, so a hostile input makes a quarantine far larger than memory.
    """

    def __init__(self, writer: Writer) -> None:
        self.writer = writer
        self.spool = QuarantineSpool()
        self._stored = 0

    def store(self, summary: RunSummary) -> None:
        """Store every reject so far, entered in `summary`'s ledger."""
        if len(self.spool) == self._stored:
            return
        key = quarantine_key(summary.run_id)
        with self.spool.ordered_file() as path:
            self.writer.fence()
            if put_once_file(self.writer.store, key, path, content_type="application/x-ndjson"):
                summary.written[key] = file_sha256(path)
        self._stored = len(self.spool)
