"""The command line as a user runs it (a real subprocess, real files)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

PIN = "8d4b5ee74e4693bcd1df2446408b0d54"


def run(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "pith_pipeline", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env=full_env,
        timeout=120,
    )


def test_verify_reference_bundle_with_pin(tmp_path: Path, asset) -> None:  # type: ignore[no-untyped-def]
    r = run("verify", str(asset("pith-bundle-1909.11150.json")), "--pin", PIN, cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "OK   state: state_sha256 f84bfa06" in r.stdout
    r = run("verify", str(asset("pith-bundle-1909.11150.json")), "--json", cwd=tmp_path)
    out = json.loads(r.stdout)
    assert out["ok"] and {c["name"] for c in out["bundles"][0]["checks"]} >= {"receipt", "state"}


def test_verify_exit_codes(tmp_path: Path, asset) -> None:  # type: ignore[no-untyped-def]
    text = asset("pith-bundle-1909.11150.json").read_text()
    bad = tmp_path / "bad.json"
    bad.write_text(text.replace('"built_at":"2026-08-17T16:31:38Z"', '"built_at":"2026-08-17T16:31:39Z"'))
    r = run("verify", str(bad), cwd=tmp_path)
    assert r.returncode == 1 and "FAIL bundle_hash" in r.stdout
    junk = tmp_path / "junk.json"
    junk.write_text("{ not json")
    r = run("verify", str(junk), cwd=tmp_path)
    assert r.returncode == 2 and "unreadable" in r.stderr
    assert run("verify", str(tmp_path / "missing.json"), cwd=tmp_path).returncode == 2


def test_state_recomputes_reference(tmp_path: Path, asset) -> None:  # type: ignore[no-untyped-def]
    r = run("state", str(asset("pith-bundle-1909.11150.json")), cwd=tmp_path)
    assert r.returncode == 0
    assert json.loads(r.stdout)["state_sha256"].startswith("f84bfa06")
    assert "matches" in r.stderr


def test_keys_build_verify_end_to_end_reproducibly(tmp_path: Path, asset) -> None:  # type: ignore[no-untyped-def]
    r = run("keys", "generate", "--out", "keys", "--key-id", "cli-test", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    key = tmp_path / "keys/pith-private-key.json"
    assert oct(key.stat().st_mode & 0o777) == "0o600"
    seed = json.loads(key.read_text())["seed_b64"]
    env = {"SOURCE_DATE_EPOCH": "1767225600"}
    trees = []
    for d in ("a", "b/deeper"):
        (tmp_path / d).mkdir(parents=True)
        r = run(
            "build",
            "--input",
            str(asset("arxiv-sample.jsonl")),
            "--store",
            "out",
            "--key",
            str(key),
            cwd=tmp_path / d,
            env=env,
        )
        assert r.returncode == 0, r.stderr
        assert "built 30" in r.stdout
        assert seed not in r.stdout + r.stderr
        root = tmp_path / d / "out"
        trees.append({str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()})
    # every published file is identical; the index tables' Delta logs carry wall-clock
    # times and random file names, so their rows are compared instead
    published = [{k: v for k, v in t.items() if not k.startswith("index/")} for t in trees]
    assert published[0] == published[1]
    from pith_pipeline.index import run_query
    from pith_pipeline.storage.local import LocalStore

    for table in ("records", "events", "aliases"):
        rows = [
            sorted(run_query(LocalStore(tmp_path / d / "out"), f"SELECT * FROM {table}").rows, key=str)
            for d in ("a", "b/deeper")
        ]
        assert rows[0] == rows[1] and rows[0]
    assert any(b'"built_at":"2026-01-01T00:00:00Z"' in v for v in trees[0].values())
    r = run(
        "verify",
        "a/out",
        "--pin",
        json.loads((tmp_path / "keys/pith-signing-key.json").read_text())["fingerprint_sha256_hex"],
        cwd=tmp_path,
    )
    assert r.returncode == 0 and "30 bundles, 30 verified, 0 failed" in r.stdout
    r = run(
        "build",
        "--input",
        str(asset("arxiv-sample.jsonl")),
        "--store",
        "out",
        "--key",
        str(key),
        cwd=tmp_path / "a",
        env=env,
    )
    assert "built 0, unchanged 30" in r.stdout


def test_world_readable_key_refused_with_clear_message(tmp_path: Path, asset) -> None:  # type: ignore[no-untyped-def]
    run("keys", "generate", "--out", "k", cwd=tmp_path)
    (tmp_path / "k/pith-private-key.json").chmod(0o644)
    r = run(
        "build",
        "--input",
        str(asset("arxiv-sample.jsonl")),
        "--store",
        "o",
        "--key",
        "k/pith-private-key.json",
        cwd=tmp_path,
    )
    assert r.returncode == 1
    assert "readable by others" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("cmd", [[], ["build"], ["verify"], ["keys", "generate"], ["state"]])
def test_help_teaches(tmp_path: Path, cmd: list[str]) -> None:
    r = run(*cmd, "--help", cwd=tmp_path)
    assert r.returncode == 0 and "Usage:" in r.stdout
