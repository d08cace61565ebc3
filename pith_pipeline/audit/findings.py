"""What the audit reports and the limits it reads within.

Every read is capped (`storage.base.get_capped`): a huge hostile object is a
finding, not an out-of-memory.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from pith_pipeline.core.canonical_json import dumps_compact
from pith_pipeline.errors import CanonicalJSONError

#: Largest event object read (a record_created carries the whole canonical record).
MAX_EVENT_BYTES = 8 << 20
#: Largest bundle or state read (a record, its events and the merged state).
MAX_BUNDLE_BYTES = 64 << 20
#: Largest key document or arXiv pointer read.
MAX_SMALL_BYTES = 4 << 20

_T = TypeVar("_T")
_R = TypeVar("_R")


@dataclass(frozen=True, slots=True)
class Finding:
    """One damaged or inconsistent object: its store key and why, one line.

    `check`: set when the finding is a failed check of `verify_bundle` (the
    bundle's report, given to `on_report`, says the same at more length).
    """

    key: str
    reason: str
    check: str | None = None

    def line(self, store_url: str = "") -> str:
        where = f"{store_url.rstrip('/')}/{self.key}" if store_url else self.key
        return f"{where}: {self.reason}"

    def to_json(self) -> dict[str, str | None]:
        return {"key": self.key, "reason": self.reason, "check": self.check}


def publisher_bytes(value: Any) -> bytes | None:
    """The bytes the publisher writes for `value` (None when it cannot be written)."""
    try:
        return dumps_compact(value)
    except CanonicalJSONError:
        return None


def in_order(fn: Callable[[_T], _R], items: Iterable[_T], n: int) -> Iterator[_R]:
    """`fn` of each item, in the items' order; with `n` > 1, `n` at once in threads.

    Why: auditing a subject or reading a pointer is a few GETs, each waiting on the
    network; one at a time, `verify s3://...` of a store of 2,000 papers spent
    minutes waiting. At most `2 * n` items are in flight, so memory does not grow
    with the store, and the output is the same whatever `n` is."""
    if n <= 1:
        yield from map(fn, items)
        return
    with ThreadPoolExecutor(n, thread_name_prefix="pith-audit") as pool:
        pending: deque[Future[_R]] = deque()
        for item in items:
            pending.append(pool.submit(fn, item))
            if len(pending) >= 2 * n:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
