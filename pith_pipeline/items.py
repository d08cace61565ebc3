"""What a source yields: a parsed record, or a `Rejected` input kept for the quarantine.

Every source (the snapshot reader, OAI-PMH, arXivRaw, the sample) and the loader
speak these two types, so they live on their own rather than in one of the
sources: a source depends on them, not on another source.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass

from pith_pipeline.core.arxiv_record import ArxivRecord
from pith_pipeline.errors import InputError


@dataclass(frozen=True, slots=True)
class Rejected:
    """Input that could not become a record: kept whole, with the reason."""

    where: str
    reason: str
    raw: str
    record_id: str | None = None
    field: str | None = None
    #: "utf-8" when `raw` is the input text, "base64" when the input bytes were not
    #: UTF-8 (so they are kept exactly rather than with replacement characters)
    raw_encoding: str = "utf-8"

    @classmethod
    def of_bytes(
        cls, where: str, reason: str, raw: bytes, record_id: str | None = None, field: str | None = None
    ) -> Rejected:
        """A reject whose raw input is bytes: kept as text when it is UTF-8, else base64."""
        try:
            return cls(where, reason, raw.decode("utf-8"), record_id, field)
        except UnicodeDecodeError:
            return cls(where, reason, base64.b64encode(raw).decode("ascii"), record_id, field, "base64")

    @classmethod
    def of_error(cls, exc: InputError, record_id: str) -> Rejected:
        """A record that parsed but could not be built (the raw input is the caller's)."""
        return cls(exc.where or "", exc.message, "", record_id, exc.field)

    def to_json(self) -> dict[str, str | None]:
        return {
            "where": self.where,
            "record_id": self.record_id,
            "field": self.field,
            "reason": self.reason,
            "raw": self.raw,
            "raw_encoding": self.raw_encoding,
        }


Item = ArxivRecord | Rejected
