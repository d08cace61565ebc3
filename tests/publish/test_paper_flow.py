"""One record through its paper (`publish.flow.PaperFlow`): a new paper is built by the
run's builder, a published one is repaired and never built again, and a paper that
lost its events is refused; each counted once in the paper's summary."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from pith_pipeline.core.arxiv_record import ArxivRecord
from pith_pipeline.core.builder import Identity
from pith_pipeline.core.keys import Ed25519Signer
from pith_pipeline.core.layout import bundle_paths
from pith_pipeline.errors import IntegrityError
from pith_pipeline.publish import ONE_PASS, BuildConfig, Paper, Publisher, RunSummary
from pith_pipeline.publish.build import BuildParts
from pith_pipeline.sources.jsonl import parse_line
from pith_pipeline.storage.memory import MemoryStore

SIGNER = Ed25519Signer(bytes(range(32)), "flow-test")
NOW = datetime(2026, 7, 1, tzinfo=UTC)


class RecordingBuilder:
    """The run's builder (`build.ONE_PASS`), noting each subject it was asked to build."""

    def __init__(self) -> None:
        self.built: list[str] = []

    def __call__(
        self, parts: BuildParts, paper: Paper, ident: Identity, now: datetime, supersedes: list[str]
    ) -> list[dict[str, Any]]:
        self.built.append(ident.subject)
        return ONE_PASS(parts, paper, ident, now, supersedes)


def record(sample_lines: list[str]) -> ArxivRecord:
    rec = parse_line(sample_lines[0].encode(), "sample.jsonl:1")
    assert isinstance(rec, ArxivRecord)
    return rec


def publisher(store: MemoryStore, builder: RecordingBuilder) -> Publisher:
    return Publisher(store, SIGNER, BuildConfig(), clock=lambda: NOW, run_id="run-f", builder=builder)


def test_a_new_paper_is_built_once_and_then_only_repaired(sample_lines: list[str]) -> None:
    store, builder = MemoryStore(), RecordingBuilder()
    pub = publisher(store, builder)
    rec = record(sample_lines)
    first = RunSummary.part("run-f")
    ident = pub.flow.publish(Paper.caching(first), rec)
    assert builder.built == [ident.subject]
    assert (first.built, first.unchanged, list(first.seen)) == (1, 0, [ident.subject])
    bkey = bundle_paths(ident.body)[0]
    published = store.objects[bkey]
    del store.objects[bkey]  # a killed run's, or a lost bundle: its events are stored

    again = RunSummary.part("run-f")
    pub.flow.publish(Paper.caching(again), rec)
    assert builder.built == [ident.subject]  # not built a second time
    assert (again.built, again.unchanged, list(again.seen)) == (0, 1, [ident.subject])
    assert store.objects[bkey] == published  # re-derived from its events, same bytes


def test_a_published_paper_without_events_is_refused_not_built_anew(sample_lines: list[str]) -> None:
    store, builder = MemoryStore(), RecordingBuilder()
    pub = publisher(store, builder)
    ident = pub.flow.publish(Paper.caching(RunSummary.part("run-f")), record(sample_lines))
    for key in [k for k in store.objects if k.startswith("events/")]:
        del store.objects[key]

    summary = RunSummary.part("run-f")
    with pytest.raises(IntegrityError, match="holds no event"):
        publisher(store, builder).flow.publish(Paper.caching(summary), record(sample_lines))
    assert builder.built == [ident.subject]
    assert (summary.built, summary.unchanged) == (0, 0)
