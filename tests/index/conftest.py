"""Fixtures for index tests: a key, a fixed clock, stores and a run helper."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from index_helpers import Runner, fixed_clock

from pith_pipeline.core.keys import Ed25519Signer
from pith_pipeline.publish import Publisher, RunSummary
from pith_pipeline.runs.manifest import finish_run
from pith_pipeline.sources.jsonl import iter_jsonl
from pith_pipeline.storage.base import Store
from pith_pipeline.storage.factory import open_store

DATA = Path(__file__).parent.parent / "data"


@pytest.fixture(scope="session")
def signer() -> Ed25519Signer:
    return Ed25519Signer.generate("test-key")


@pytest.fixture
def sample() -> list[str]:
    return (DATA / "arxiv-sample.jsonl").read_text(encoding="utf-8").splitlines()


@pytest.fixture
def s3_store(s3_store_url: str) -> Store:
    return open_store(s3_store_url)


@pytest.fixture(params=["local", "s3"])
def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    if request.param == "local":
        return open_store(str(tmp_path / "store"))
    return open_store(request.getfixturevalue("s3_store_url"))


@pytest.fixture
def run(tmp_path: Path, signer: Ed25519Signer) -> Iterator[Runner]:
    """`run(store, lines, window=...)`: publish the lines, then finish the run."""
    counter = iter(range(1_000_000))

    def _run(
        store: Store, lines: list[str], window: dict[str, Any] | None = None, *, finish: bool = True
    ) -> tuple[RunSummary, str]:
        n = next(counter)
        path = tmp_path / f"input-{n}.jsonl"
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        pub = Publisher(store, signer, clock=fixed_clock, run_id=f"20260304T050607Z-run{n:03d}")
        summary = pub.publish(iter_jsonl(path))
        key = finish_run(store, summary, window or {"input": path.name}, clock=fixed_clock) if finish else ""
        return summary, key

    yield _run
