"""The README's first command, as a new user runs it: `pith-pipeline ingest --sample`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PITH_")}
    return subprocess.run(
        [sys.executable, "-m", "pith_pipeline", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


def published(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in root.rglob("*")
        if p.is_file() and not str(p.relative_to(root)).startswith("runs/")
    }


def test_sample_ingest_end_to_end_offline(tmp_path: Path) -> None:
    first = run("ingest", "--sample", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert "built 30" in first.stdout and "quarantined 0" in first.stdout
    key = tmp_path / "pith-keys/pith-private-key.json"
    assert oct(key.stat().st_mode & 0o777) == "0o600"
    store = tmp_path / "pith-store"
    fingerprint = json.loads((store / "pith-signing-key.json").read_text())["fingerprint_sha256_hex"]
    verify = run("verify", "pith-store", "--pin", fingerprint, cwd=tmp_path)
    assert verify.returncode == 0 and "30 bundles, 30 verified, 0 failed" in verify.stdout
    manifests = sorted(store.glob("runs/*/manifest.json"))
    assert len(manifests) == 1
    manifest = json.loads(manifests[0].read_text())
    assert manifest["counts"]["built"] == 30
    query = run(
        "query",
        "select count(*) as n from records",
        "--store",
        "pith-store",
        "--format",
        "json",
        cwd=tmp_path,
    )
    assert query.returncode == 0, query.stderr
    assert json.loads(query.stdout)[0]["n"] == 30
    before = published(store)
    again = run("ingest", "--sample", cwd=tmp_path)
    assert again.returncode == 0 and "unchanged 30" in again.stdout
    assert published(store) == before
    seed = json.loads(key.read_text())["seed_b64"]
    assert seed not in first.stdout + first.stderr + again.stdout + again.stderr
