"""Every size and range limit on input, in one place (documented in docs/pages/input-limits.md).

Why limits at all: one hostile or broken record must not make a run read hundreds of
megabytes, sign a bundle nobody can index, or overflow an index column. Each limit is
far above anything arXiv has published (so real records are never refused) and far
below what hurts the pipeline. A record over a limit is quarantined with its reason;
an HTTP response over its limit stops that request with a one-line error.

Sizes are in bytes of UTF-8, because that is what is stored, hashed and indexed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date
from types import MappingProxyType
from typing import Final

KIB: Final = 1024
MIB: Final = 1024 * KIB

_FIELD_BYTES = {
    "id": 64,
    "submitter": 4 * KIB,
    "authors": 1 * MIB,  # large collaborations list thousands of names
    "title": 8 * KIB,
    "comments": 16 * KIB,
    "journal-ref": 4 * KIB,
    "doi": 1 * KIB,
    "report-no": 4 * KIB,
    "categories": 1 * KIB,
    "license": 1 * KIB,
    "abstract": 64 * KIB,
    "update_date": 32,
    "version": 16,  # one version label, `v1` .. `v9999`
    "created": 64,  # one version's date text
    "resumptionToken": 4 * KIB,  # sent back in a URL; arXiv's are a few dozen bytes
}


@dataclass(frozen=True, slots=True, kw_only=True)
class InputLimits:
    """The limits of one run; the defaults are the documented ones."""

    #: per text field of a record (snapshot key names), UTF-8 bytes
    field_bytes: MappingProxyType[str, int] = field(default_factory=lambda: MappingProxyType(_FIELD_BYTES))
    #: all text of one record together (fields, versions, authors_parsed), UTF-8 bytes
    record_bytes: int = 4 * MIB
    #: one line of a JSON-lines snapshot (JSON escapes make a line longer than its record)
    line_bytes: int = 8 * MIB
    #: rejected input of one input file held for the run's quarantine (which is written
    #: at the end of the run): each reject counts its raw text plus `REJECT_OVERHEAD`
    rejected_bytes: int = 256 * MIB
    #: version labels are `v1` .. `v<max_version>`; the index column is int32
    max_version: int = 9999
    #: one HTTP response body (an OAI-PMH page of 1000 arXivRaw records is a few MB)
    response_bytes: int = 64 * MIB
    #: markup (`<`: tags, comments, processing instructions) in one response, so that a
    #: response of tiny elements cannot build a tree (and rejects) many times its size;
    #: a page of 1,000 arXivRaw records has about 40,000
    response_markup: int = 1_000_000
    #: records in one OAI-PMH page (arXiv sends 1,000 at most)
    page_records: int = 20_000
    #: wall-clock seconds for one HTTP request, body included (the read timeout alone
    #: never fires for a server that sends one byte just before each timeout)
    request_deadline: float = 300.0
    #: version dates and datestamps before this day are refused (arXiv began in August 1991)
    earliest_date: date = date(1991, 1, 1)
    #: ... and after the run's today plus this many days
    future_days: int = 1

    def field_limit(self, name: str) -> int:
        return self.field_bytes.get(name, self.record_bytes)


DEFAULT_LIMITS: Final = InputLimits()

#: what holding one quarantine entry costs beyond its raw text (measured: 300,000
#: rejects of `{}` took 387 MB)
REJECT_OVERHEAD: Final = 1 * KIB


def utf8_size(text: str) -> int:
    """UTF-8 length of `text`; a lone surrogate (not encodable) raises UnicodeEncodeError."""
    if text.isascii():
        return len(text)
    return len(text.encode("utf-8"))
