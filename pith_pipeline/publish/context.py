"""What one paper's publishing carries (`Paper`), and the serializer of what is written
(`Codec`).

Why a context object: several papers are published at once (the `Loader`'s threads),
each counted in a summary of its own and each reading its events and arXiv pointer
once. That state belongs to the paper, so it is handed down explicitly instead of
living in the publisher (or in a thread-local), and two papers never share it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pith_pipeline.core.canonical_json import FAST, CanonicalJSON, dumps_compact, dumps_pretty
from pith_pipeline.publish.summary import RunSummary

if TYPE_CHECKING:
    from pith_pipeline.audit import SubjectEvents


@dataclass(slots=True)
class Paper:
    """One unit of publishing: where its writes are counted, and what it read.

    `summary`: the summary its writes and counts go to (a paper's own part, added to
    the run's by the loop; or the run's, for store-wide writes). `events`: the checked
    events of each subject read so far (None: not cached); a write of one of its
    events forgets that subject's. `pointers`: the arXiv pointers read so far, kept
    as they are written (None: not cached); sound because the paper is published by
    one thread, under the run's lease.
    """

    summary: RunSummary
    events: dict[str, SubjectEvents] | None = None
    pointers: dict[str, dict[str, Any]] | None = None

    @classmethod
    def caching(cls, summary: RunSummary) -> Paper:
        """A paper that reads each subject's events and each pointer once."""
        return cls(summary, {}, {})


@dataclass(frozen=True, slots=True)
class Codec:
    """The bytes of what the publisher writes: `compact` for events, bundles and
    states, `pretty` for the key document and arXiv pointers; and `canon`, the
    canonical JSON whose SHA-256 names the records, events, states and bundles it
    builds (handed to every core builder the publisher calls).

    The default is the project's canonical JSON; a test or benchmark injects a
    straightforward reference (`json.dumps`, `canonical_json.REFERENCE`) to check that
    both give the same bytes.
    """

    compact: Callable[[Any], bytes] = dumps_compact
    pretty: Callable[[Any], bytes] = dumps_pretty
    canon: CanonicalJSON = FAST


#: The serializer every run uses.
CANONICAL = Codec()
