"""What a record that parsed but could not be built becomes: a quarantine entry
(`build_failure`), like a record that did not parse.
"""

from __future__ import annotations

import json
from datetime import UTC, date, datetime

from pith_pipeline.core.arxiv_record import ArxivRecord
from pith_pipeline.errors import InputError
from pith_pipeline.items import Rejected


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
