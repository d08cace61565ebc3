"""Building and publishing papers: records in; events, bundles, states, pages and arXiv
pointers out, through a `Store`.

The event store (`events/<ID>/<content_sha256>.json`) is the source of truth and is
write-once; bundles, states, pages and pointers are derived from it and replaced
atomically. Publishing order per record never exposes a half-written state: events
first, then bundle and state, then the arXiv pointer.

The parts: `summary` (a run's identity and counts), `context` (one paper's context and
the serializer), `keys` (the key document), `known` (what is known absent),
`reading` (checked reads), `writing` (fenced writes), `bundles` (signing and repair),
`supersession` (pointers and corrections), `build` (new records), `flow` (one record
through its paper), `rejects` (the quarantine), `publisher` (the coordinator) and
`rebuild`.
"""

from pith_pipeline.publish.build import EVENTS_THEN_BUNDLE, ONE_PASS, REFERENCE, RecordBuilder
from pith_pipeline.publish.context import CANONICAL, Codec, Paper
from pith_pipeline.publish.publisher import Publisher
from pith_pipeline.publish.rebuild import rebuild
from pith_pipeline.publish.summary import (
    DEFAULT_BASE_URL,
    MAX_PROBLEMS,
    BuildConfig,
    LeaseCheck,
    RunSummary,
    new_run_id,
)

__all__ = [
    "CANONICAL",
    "DEFAULT_BASE_URL",
    "EVENTS_THEN_BUNDLE",
    "MAX_PROBLEMS",
    "ONE_PASS",
    "REFERENCE",
    "BuildConfig",
    "Codec",
    "LeaseCheck",
    "Paper",
    "Publisher",
    "RecordBuilder",
    "RunSummary",
    "new_run_id",
    "rebuild",
]
