"""`pith-pipeline ingest --sample`: the README's first command, offline, end to end."""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from pith_pipeline.cli import cli

# Pith numbers the public registry publishes for three of the sample's records
REGISTRY = {
    "2606.18380": "pith:2026:SG6QNWFIOVZEMA3A2RIEOEVPD6",
    "2606.02226": "pith:2026:FB7EI2ZX4R67OX2UW4ZBVAEDPX",
    "2606.00972": "pith:2026:QFNLYXY3A3MFRS4IYJABHRTBHK",
}


def test_sample_with_embedded_defaults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for var in ("PITH_STORE", "PITH_KEY", "PITH_SIGNER", "PITH_OAI_URL"):
        monkeypatch.delenv(var, raising=False)
    runner = CliRunner()
    waits: list[float] = []
    real_sleep = time.sleep

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        real_sleep(min(seconds, 0.01))

    monkeypatch.setattr(time, "sleep", sleep)
    result = runner.invoke(cli, ["ingest", "--sample"], catch_exceptions=False)
    assert max(waits, default=0) < 1  # no 3 s per page for a local copy (counted, not timed)
    assert result.exit_code == 0, result.output
    assert "fetched 30, built 30, unchanged 0, superseded 0, quarantined 0, deleted 0" in result.stdout
    assert "generated a local Ed25519 key" in result.stderr
    key = tmp_path / "pith-keys" / "pith-private-key.json"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    seed = json.loads(key.read_text())["seed_b64"]
    assert seed not in result.output
    store = tmp_path / "pith-store"
    for arxiv_id, pith in REGISTRY.items():
        assert json.loads((store / "arxiv" / f"{arxiv_id}.json").read_text())["latest"] == pith
    raw = sorted(p.name for p in (store / "raw/sample").rglob("page-*.xml.gz"))
    assert raw == ["page-00001.xml.gz", "page-00002.xml.gz", "page-00003.xml.gz"]

    again = runner.invoke(cli, ["ingest", "--sample"], catch_exceptions=False)
    assert again.exit_code == 0 and "generated" not in again.stderr
    assert "fetched 30, built 0, unchanged 30" in again.stdout

    verify = runner.invoke(cli, ["verify", "pith-store", "-q"])
    assert verify.exit_code == 0 and "30 bundles, 30 verified, 0 failed" in verify.stdout


def test_s3_store_needs_an_explicit_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pith_pipeline.errors import InputError

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PITH_KEY", raising=False)
    monkeypatch.delenv("PITH_SIGNER", raising=False)
    result = CliRunner().invoke(cli, ["ingest", "--sample", "--store", "s3://bucket/p"])
    assert isinstance(result.exception, InputError)
    assert "needs an explicit key" in str(result.exception)
    assert not os.path.exists(tmp_path / "pith-keys")


def test_the_index_update_takes_its_rows_from_the_run_not_from_the_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 13: index rows come from what the run built; no bundle is read back."""
    from pith_pipeline.index import bundles

    def no_read_back(store: object, key: str) -> object:
        raise AssertionError(f"the index update read {key} back from the store")

    monkeypatch.setattr(bundles, "_read_bundle", no_read_back)
    monkeypatch.chdir(tmp_path)
    for var in ("PITH_STORE", "PITH_KEY", "PITH_SIGNER", "PITH_OAI_URL"):
        monkeypatch.delenv(var, raising=False)
    result = CliRunner().invoke(cli, ["ingest", "--sample"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    out = CliRunner().invoke(cli, ["query", "SELECT count(*) AS n FROM records"], catch_exceptions=False)
    assert out.exit_code == 0, out.output
    assert "30" in out.output
