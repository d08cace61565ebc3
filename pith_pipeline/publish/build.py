"""Building and writing a record the store has no `record_created` of yet.

The ways give the same bytes, and a `Publisher` is given one (`builder=`):
- `ONE_PASS` (every run): a paper with no stored event is built, hashed and signed
  in one pass by the core's `FreshBuilder`, its per-run parts made once per run;
- `EVENTS_THEN_BUNDLE`: the record's events are built, then its bundle is merged
  from them and the stored ones, trusting the events it just signed; a paper with
  stored events always goes this way;
- `REFERENCE`: the same, trusting nothing (every event re-hashed and re-verified in
  the merge, the bundle hashed on the slow path). Tests and
  `benchmarks/build_bench.py` run it to check the others, with a `Codec` whose
  `canon` is `canonical_json.REFERENCE` (rfc8785 for every hash, from the record's
  identity to its bundle) and whose output is `json.dumps`'s.

How everything is hashed is the writer's codec's `canon` (`BuildParts.canon`), handed
to every core builder called here, so one injected strategy reaches the whole run.

Either way the signer's first signature is verified and the bundle's index rows are
checked before any object of the record is written.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from pith_pipeline.core.builder import FreshBuilder, Identity, build_record_events
from pith_pipeline.core.bundle import Site
from pith_pipeline.core.canonical_json import CanonicalJSON
from pith_pipeline.core.keys import Signer
from pith_pipeline.core.layout import bundle_paths, event_key
from pith_pipeline.core.timeutil import Clock
from pith_pipeline.publish.bundles import Bundles
from pith_pipeline.publish.context import Paper
from pith_pipeline.publish.keys import KeyBook
from pith_pipeline.publish.summary import BuildConfig
from pith_pipeline.publish.writing import Writer


def check_index_rows(bundle: dict[str, Any]) -> Any:
    """The bundle's index rows fit the index tables' schemas, or `InputError` (the
    record is quarantined): found later, in the index update, such a row would fail
    every update and every `reindex` after it."""
    # lazy: pyarrow (index.rows) adds 140-200 ms to every CLI start (python -X importtime)
    from pith_pipeline.index.rows import check_bundle

    return check_bundle(bundle)


@dataclass(slots=True)
class BuildParts:
    """What building a record needs of its run: the signer and identity, the clock,
    the known keys, and where it is written."""

    signer: Signer
    config: BuildConfig
    site: Site
    clock: Clock
    keys: KeyBook
    writer: Writer
    bundles: Bundles
    #: one `FreshBuilder` per key set: the per-run parts of every bundle are made once
    fresh: dict[tuple[str, ...], FreshBuilder] = field(default_factory=dict)

    @property
    def canon(self) -> CanonicalJSON:
        """How the run's records, events, states and bundles are hashed (its codec's)."""
        return self.writer.codec.canon

    def fresh_builder(self) -> FreshBuilder:
        """The run's `FreshBuilder` for the keys its bundles list now."""
        keys = self.keys.keys_for({self.signer.key_id})
        ids = tuple(k.key_id for k in keys)
        fb = self.fresh.get(ids)
        if fb is None:
            fb = self.fresh[ids] = FreshBuilder(
                self.signer,
                self.config.signer_id,
                self.site,
                keys,
                builder_version=self.config.builder_version,
                canon=self.canon,
            )
        return fb


class RecordBuilder(Protocol):
    """Builds a new record of a paper with no stored event, writes its events, bundle,
    state, `.well-known` copy and page, and returns the events it wrote."""

    def __call__(
        self, parts: BuildParts, paper: Paper, ident: Identity, now: datetime, supersedes: list[str]
    ) -> list[dict[str, Any]]: ...


def one_pass(
    parts: BuildParts, paper: Paper, ident: Identity, now: datetime, supersedes: list[str]
) -> list[dict[str, Any]]:
    """`RecordBuilder` of every run: one pass builds and serialises the whole record.
    No stored event: whatever a bundle there holds, it is not these bytes, so the
    bundle and state are written without reading them first."""
    fresh = parts.fresh_builder().build(ident, now, parts.clock(), supersedes=supersedes)
    parts.keys.check_signer(fresh.events[0])
    # before anything of the record is published
    parts.writer.remember_checked_rows(fresh.bundle, check_index_rows(fresh.bundle))
    w = parts.writer
    for ev, data in zip(fresh.events, fresh.event_bytes, strict=True):
        w.put_event(paper, event_key(ident.body, ev["content_sha256"]), data)
    bkey, skey, wkey = bundle_paths(ident.body)
    w.put(paper, bkey, fresh.bundle_bytes, changed=True)
    w.put(paper, skey, fresh.state_bytes, changed=True)
    w.put_copy(paper, wkey, fresh.bundle_bytes, of=bkey)
    w.put_page(paper, ident.body, fresh.bundle, changed=True)
    w.bundle_written(bkey, fresh.bundle, fresh.bundle_bytes)
    events: list[dict[str, Any]] = fresh.events
    return events


def events_then_bundle(
    parts: BuildParts,
    paper: Paper,
    ident: Identity,
    now: datetime,
    supersedes: list[str],
    existing: list[dict[str, Any]] | None = None,
    *,
    trust_own: bool = True,
) -> list[dict[str, Any]]:
    """`RecordBuilder` of a paper with stored events (`existing`): the record's events
    are built, its bundle merged from them and the stored ones, and its index rows
    checked before any of its events is written. `trust_own`: the merge skips
    re-hashing and re-verifying the events just signed (False: the reference)."""
    built = build_record_events(
        ident,
        parts.signer,
        parts.config.signer_id,
        now,
        supersedes=supersedes,
        builder_version=parts.config.builder_version,
        canon=parts.canon,
    )
    parts.keys.check_signer(built.events[0])
    trusted = built.events if trust_own else None
    bundle = parts.bundles.signed(
        ident.subject, (existing or []) + built.events, built.aliases, trusted=trusted
    )
    parts.writer.remember_checked_rows(bundle, check_index_rows(bundle))
    for ev in built.events:
        data = parts.writer.codec.compact(ev)
        parts.writer.put_event(paper, event_key(ident.body, ev["content_sha256"]), data)
    parts.writer.bundle_objects(paper, ident.body, bundle)
    return built.events


def reference(
    parts: BuildParts, paper: Paper, ident: Identity, now: datetime, supersedes: list[str]
) -> list[dict[str, Any]]:
    """`RecordBuilder` of the straightforward reference: events then bundle, nothing
    trusted (hashed with the codec's `canon`, `canonical_json.REFERENCE` in the tests)."""
    return events_then_bundle(parts, paper, ident, now, supersedes, trust_own=False)


#: the builder of every run
ONE_PASS: RecordBuilder = one_pass
#: events, then the bundle merged from them (as for a paper with stored events)
EVENTS_THEN_BUNDLE: RecordBuilder = events_then_bundle
#: the straightforward reference (tests and benchmarks compare it with the others)
REFERENCE: RecordBuilder = reference
