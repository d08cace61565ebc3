"""A subject's stored events, each checked (`core.stored_events.check_stored_event`),
and the key document that decides whose signatures count.

The publisher (`build`, `ingest`, `rebuild`) reads a subject's events through
`subject_events` and does not publish from a subject with problems; the store
audit reads them the same way, so both agree on what is damaged.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from pith_pipeline.audit.findings import MAX_EVENT_BYTES, MAX_SMALL_BYTES, Finding, publisher_bytes
from pith_pipeline.core.documents import KeyDocument
from pith_pipeline.core.layout import EVENT_OBJECT, PUBLIC_KEY_FILE, event_prefix
from pith_pipeline.core.stored_events import KeyRing, check_stored_event
from pith_pipeline.errors import IntegrityError
from pith_pipeline.storage.base import Store, get_capped


@dataclass(slots=True)
class SubjectEvents:
    """A subject's stored events after their checks.

    `events`: the objects that passed (in store order; several copies of one id
    when an event was re-signed). `problems`: `(object key, reason)` of every
    object that did not. `ids`: the event ids any stored object claims, passed or
    not, so a caller can tell a damaged event from a missing one.
    """

    body: str
    events: list[dict[str, Any]] = field(default_factory=list)
    problems: list[tuple[str, str]] = field(default_factory=list)
    #: every object key read, and the key of each of `events`
    keys: list[str] = field(default_factory=list)
    event_keys: list[str] = field(default_factory=list)
    ids: set[str] = field(default_factory=set)

    @property
    def ok(self) -> bool:
        return not self.problems

    def describe(self) -> str:
        """One line: the count, or the first damaged object and how many more."""
        if self.ok:
            return f"{event_prefix(self.body)}: {len(self.events)} stored events verified"
        key, reason = self.problems[0]
        more = len(self.problems) - 1
        return f"{key}: {reason}" + (f" (and {more} more damaged event objects)" if more else "")

    def error(self) -> IntegrityError:
        """The IntegrityError a publisher raises to stop this subject (first object named)."""
        key, reason = self.problems[0]
        more = len(self.problems) - 1
        tail = f" (and {more} more damaged event objects)" if more else ""
        return IntegrityError(f"stored event {reason}{tail}; run `verify` on the store", key=key)

    def raise_for_problems(self) -> None:
        if self.problems:
            raise self.error()

    def equivocation(self) -> str | None:
        """One line naming this subject's self-equivocation, or None.

        Every verified stored event is signed by a key of the registry's own key
        document, so two distinct `record_created` ids for one subject (or two events
        of one signer continuing the same `prev_event`) are the registry equivocating
        with itself: a writer suspended past its lease's TTL could write its own
        `record_created` beside the next writer's. The merge handles it (the first
        applies, the state lists the `conflicting_record`), but it is ours and
        permanent (events are write-once), so the audit reports it and the publisher
        names it (docs/pages/guarantees.md).
        """
        by_id: dict[str, str] = {}
        for key, ev in zip(self.event_keys, self.events, strict=True):
            by_id.setdefault(ev["event_id"], key)
        created = sorted({e["event_id"] for e in self.events if e["event_type"] == "record_created"})
        forks: dict[tuple[str, str], set[str]] = {}
        for e in self.events:
            signer, prev = e.get("signer"), e.get("prev_event")
            if isinstance(prev, str) and isinstance(signer, dict):
                forks.setdefault((str(signer.get("signer_id")), prev), set()).add(e["event_id"])
        groups = [("record_created events for one record", created)] if len(created) > 1 else []
        for (_signer, prev), ids in sorted(forks.items()):
            if len(ids) > 1:
                groups.append((f"events continuing {prev}", sorted(ids)))
        if not groups:
            return None
        return "self-equivocation: " + "; ".join(
            f"{len(ids)} {what}, signed by the registry's own keys: " + ", ".join(by_id[i] for i in ids)
            for what, ids in groups
        )


def read_events(
    store: Store, body: str, keys: Iterable[str], keyring: KeyRing, max_bytes: int
) -> SubjectEvents:
    out = SubjectEvents(body)
    for key in keys:
        out.keys.append(key)
        # the id its name claims, and below the one its content claims: a damaged
        # object is reported once, as itself, not again as a missing event
        named = EVENT_OBJECT.fullmatch(key)
        if named is not None:
            out.ids.add("sha256:" + named.group(2))
        try:
            data = get_capped(store, key, max_bytes)
        except IntegrityError as exc:
            out.problems.append((key, exc.message))
            continue
        if data is None:
            continue  # deleted between listing and reading
        event, problem = check_stored_event(key, data, keyring)
        if event is not None and isinstance(event.get("event_id"), str):
            out.ids.add(event["event_id"])
        if problem is not None:
            out.problems.append((key, problem))
        elif event is not None:
            out.events.append(event)
            out.event_keys.append(key)
    return out


def subject_events(
    store: Store, body: str, keyring: KeyRing, *, max_bytes: int = MAX_EVENT_BYTES
) -> SubjectEvents:
    """Every stored event of the subject `body`, each checked against `keyring`.

    Store errors propagate (they stop a run); damaged objects are `problems`.
    """
    return read_events(store, body, store.list(event_prefix(body)), keyring, max_bytes)


def reordered_events(evs: SubjectEvents, listed: Any, bkey: str) -> Iterator[tuple[str, str]]:
    """`(object key, reason)` of each stored event whose bundle copy (in `listed`, the
    bundle's `events`) has its content in another key order.

    Why: the publisher writes an event's object and its bundle copy from one value,
    so one of them was re-serialised; compact bytes with the keys reordered pass the
    per-object checks (hash and signature cover content). `verify STORE` and the
    publisher (which then stops the paper) share this check.
    """
    if not isinstance(listed, list):
        return
    copies: dict[str, list[dict[str, Any]]] = {}
    for ev in listed:
        if isinstance(ev, dict) and isinstance(ev.get("event_id"), str):
            copies.setdefault(ev["event_id"], []).append(ev)
    for key, ev in zip(evs.event_keys, evs.events, strict=True):
        same = [c for c in copies.get(ev["event_id"], []) if c == ev]
        if same and not any(publisher_bytes(c) == publisher_bytes(ev) for c in same):
            yield key, f"re-serialised: its keys are in another order than its copy in {bkey}"


def keyring_of_store(store: Store) -> tuple[KeyRing, list[Finding]]:
    """The keys the store's key document lists, and findings about that document."""
    try:
        raw = get_capped(store, PUBLIC_KEY_FILE, MAX_SMALL_BYTES)
    except IntegrityError as exc:
        return KeyRing([]), [Finding(PUBLIC_KEY_FILE, exc.message)]
    if raw is None:
        return KeyRing([]), [Finding(PUBLIC_KEY_FILE, "missing: no event signature can be checked")]
    try:
        return KeyRing(KeyDocument.parse(raw, PUBLIC_KEY_FILE).keys), []
    except IntegrityError as exc:  # the parse reason; a finding, not a stop
        return KeyRing([]), [Finding(PUBLIC_KEY_FILE, exc.message)]
