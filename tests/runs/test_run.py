"""`Run`: one lifecycle for every publishing run, and one way to end it."""

from __future__ import annotations

from itertools import islice
from pathlib import Path
from typing import Any

import pytest

from pith_pipeline.config import Settings
from pith_pipeline.core.layout import run_manifest_key
from pith_pipeline.runs.run import Run
from pith_pipeline.signing.local import generate_key
from pith_pipeline.sources.jsonl import iter_jsonl
from pith_pipeline.storage.local import LocalStore

DATA = Path(__file__).resolve().parents[1] / "data"


def _records() -> list[Any]:
    return list(islice(iter_jsonl(DATA / "arxiv-sample.jsonl"), 3))


def _settings(tmp_path: Path) -> Settings:
    key = generate_key(tmp_path / "keys", key_id="run-test")[0]
    return Settings(store=str(tmp_path / "store"), signer=str(key), workers=1)


def _manifests(store: LocalStore) -> list[str]:
    return [k for k in store.list("runs/") if k.endswith("/manifest.json")]


def test_a_run_that_succeeds_indexes_and_writes_its_manifest(tmp_path: Path) -> None:
    with Run.open(_settings(tmp_path), command="build", notes={"input": "sample"}) as run:
        summary = run.publish(_records())
    assert summary.built == 3
    assert run.manifest_key == run_manifest_key(run.run_id)
    assert _manifests(LocalStore(tmp_path / "store")) == [run.manifest_key]


@pytest.mark.parametrize("fault", [RuntimeError("disk full"), KeyboardInterrupt()])
def test_a_failed_or_interrupted_run_writes_no_manifest_and_frees_its_leases(
    tmp_path: Path, fault: BaseException
) -> None:
    settings = _settings(tmp_path)
    with pytest.raises(type(fault)), Run.open(settings, command="build") as run:
        run.publish(_records())
        raise fault
    store = LocalStore(tmp_path / "store")
    assert _manifests(store) == []
    assert run.manifest_key is None
    # the leases were released: the next run (waiting for nobody) takes them at once
    with Run.open(settings, command="build", lease_wait=0) as again:
        assert again.publish(_records()).unchanged == 3
    assert _manifests(store) == [again.manifest_key]
