"""`cas_update`: the one read-modify-write loop for a small object several writers
share (the key document, which every run and the transparency log update).

Why one loop: each writer reads the object with its tag, derives the new bytes, and
writes them only if the tag still holds (`Store.put_if_match`); a writer that lost
the race reads again and merges what the other wrote, so no writer's change is ever
silently lost. Written once, the loop cannot differ between its users (how many
tries, what "nothing to change" means, what a writer that never wins is told).
"""

from __future__ import annotations

from collections.abc import Callable

from pith_pipeline.errors import IntegrityError
from pith_pipeline.storage.base import Store

#: Tries before giving up: each lost try means another writer's update went in, so
#: this many in a row means the object changes faster than one writer can read it.
CAS_ATTEMPTS = 50


def cas_update(
    store: Store,
    key: str,
    update: Callable[[bytes | None], bytes | None],
    *,
    before_write: Callable[[], None] | None = None,
    attempts: int = CAS_ATTEMPTS,
) -> bytes | None:
    """Replace the object at `key` with `update(current)` by compare-and-swap, again
    on the newest bytes until no other writer changed it in between.

    `update` gets the stored bytes (None when absent) and returns the new bytes, or
    None (or the same bytes) when there is nothing to change; it may raise to refuse.
    It may be called more than once, so it must not have effects of its own.
    `before_write` runs before each write (a durability barrier for what the object
    names). Returns the bytes written, or None when nothing was written; after
    `attempts` lost races, an `IntegrityError` naming the key.
    """
    for _attempt in range(attempts):
        got = store.get_tagged(key)
        current = got[0] if got is not None else None
        new = update(current)
        if new is None or new == current:
            return None
        if before_write is not None:
            before_write()
        if store.put_if_match(key, new, got[1] if got is not None else None):
            return new
    raise IntegrityError("kept changing under concurrent writers; run again", key=key)
