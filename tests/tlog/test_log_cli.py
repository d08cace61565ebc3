"""The log commands as a user and an auditor run them (real subprocesses, files)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from pith_pipeline.core.canonical_json import loads


def run(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pith_pipeline", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={**os.environ, "PITH_LOG_SIGNER": "", **(env or {})},
        timeout=180,
    )


@pytest.fixture
def logged_store(tmp_path: Path, asset) -> Path:  # type: ignore[no-untyped-def]
    for d in ("keys", "logkey"):
        assert run("keys", "generate", "--out", d, cwd=tmp_path).returncode == 0
    r = run(
        "build",
        "--input",
        str(asset("arxiv-sample.jsonl")),
        "--store",
        "out",
        "--key",
        "keys/pith-private-key.json",
        "--log-signer",
        "logkey/pith-private-key.json",
        "--workers",
        "1",
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    return tmp_path


def test_build_logs_its_events_and_the_commands_prove_them(logged_store: Path) -> None:
    cwd = logged_store
    manifest = next((cwd / "out/runs").glob("*/manifest.json"))
    logged = json.loads(manifest.read_text())["log"]
    assert logged["origin"] == "pith.example.org/log" and logged["size"] == logged["appended"] > 30
    status = run("log", "status", "out", cwd=cwd)
    assert status.returncode == 0, status.stderr
    assert f"size:       {logged['size']}" in status.stdout and logged["root_hash_b64"] in status.stdout
    assert "pending:    none" in status.stdout  # the run settled its marker
    marker = cwd / "out/log/pending/20260101T000000Z-abcdef.0123456789ab.json"
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text("{}")  # a run that died before appending its events
    status = run("log", "status", "out", cwd=cwd)
    assert "pending:    1 run (20260101T000000Z-abcdef) may have events the log lacks" in status.stdout
    marker.unlink()
    # a bundle's events are in the log, proven against the checkpoint
    bundle = next((cwd / "out/pith").glob("*/bundle.json"))
    r = run("verify", str(bundle), "--log", "out", cwd=cwd)
    assert r.returncode == 0, r.stdout + r.stderr
    proof = run("log", "prove", str(bundle), "--log", "out", cwd=cwd)
    assert proof.returncode == 0, proof.stderr
    proofs = json.loads(proof.stdout)["proofs"]
    ids = [e["event_id"] for e in loads(bundle.read_bytes())["events"]]
    assert [p["event_id"] for p in proofs] == ids
    # verify STORE checks the log against the event store
    assert run("verify", "out", "-q", cwd=cwd).returncode == 0
    assert run("log", "verify", "out", cwd=cwd).returncode == 0
    # an event the log does not hold is named, and fails
    other = dict(json.loads(bundle.read_text()))
    other["events"] = [*other["events"], {**other["events"][0], "event_id": "sha256:" + "0" * 64}]
    fake = cwd / "fake.json"
    fake.write_text(json.dumps(other))
    r = run("log", "prove", str(fake), "--log", "out", cwd=cwd)
    assert r.returncode == 1 and "0000000000000000" in r.stdout
    r = run("verify", str(fake), "--log", "out", cwd=cwd)
    assert r.returncode == 1 and "is not in the log" in r.stdout
    # log rebuild refuses to rewrite an existing log
    r = run("log", "rebuild", "--store", "out", "--log-signer", "logkey/pith-private-key.json", cwd=cwd)
    assert r.returncode == 1 and "never rewritten" in r.stderr
    # a later build without the log key refuses to finish unlogged
    r = run("build", "--input", str(bundle), "--store", "out", "--key", "keys/pith-private-key.json", cwd=cwd)
    assert r.returncode != 0


def test_consistency_with_an_old_checkpoint_and_a_forked_one(logged_store: Path, asset) -> None:  # type: ignore[no-untyped-def]
    cwd = logged_store
    old = cwd / "old-checkpoint"
    shutil.copy(cwd / "out/log/checkpoint", old)
    # grow the log: a new version of a paper adds events
    line = json.loads(asset("arxiv-sample.jsonl").read_text().splitlines()[0])
    line["versions"] = [
        *line["versions"],
        {"version": f"v{len(line['versions']) + 1}", "created": "Mon, 1 Jun 2026 00:00:00 GMT"},
    ]
    (cwd / "new.jsonl").write_text(json.dumps(line) + "\n")
    r = run(
        "build", "--input", "new.jsonl", "--store", "out", "--key", "keys/pith-private-key.json",
        "--log-signer", "logkey/pith-private-key.json", "--workers", "1", cwd=cwd,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    r = run("log", "consistency", str(old), "--log", "out", cwd=cwd)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["consistent"] and out["size"] > out["old_size"] and out["proof_b64"]
    # a checkpoint by another key is refused
    (cwd / "forged").write_text(old.read_text().replace("\n\n", "\n\n", 1)[:-10] + "AAAAAAAA=\n")
    r = run("log", "consistency", str(cwd / "forged"), "--log", "out", cwd=cwd)
    assert r.returncode == 1 and "error:" in r.stderr


@pytest.fixture
def http_server(logged_store: Path) -> Iterator[str]:
    handler = partial(SimpleHTTPRequestHandler, directory=str(logged_store / "out"))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/log"
    finally:
        server.shutdown()
        server.server_close()


def test_monitor_over_http_trusts_then_checks_growth(logged_store: Path, http_server: str) -> None:
    cwd = logged_store
    r = run("log", "monitor", http_server, "--state", "state.json", cwd=cwd)
    assert r.returncode == 0, r.stdout + r.stderr
    state = json.loads((cwd / "state.json").read_text())
    assert "new entries verified" in r.stdout and state["size"] > 30
    r = run("verify", str(next((cwd / "out/pith").glob("*/bundle.json"))), "--log", http_server, cwd=cwd)
    assert r.returncode == 0, r.stdout + r.stderr
    # nothing new: still fine, nothing re-checked
    r = run("log", "monitor", http_server, "--state", "state.json", cwd=cwd)
    assert r.returncode == 0 and "0 new entries verified" in r.stdout


def test_receipts_reissue_logs_its_correction_events(logged_store: Path) -> None:
    cwd = logged_store
    assert run("keys", "generate", "--out", "keys2", "--key-id", "pith-v2", cwd=cwd).returncode == 0
    before = int((cwd / "out/log/checkpoint").read_text().split("\n")[1])
    r = run(
        "receipts", "reissue", "--store", "out", "--signer", "keys2/pith-private-key.json",
        "--log-signer", "logkey/pith-private-key.json", cwd=cwd,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert int((cwd / "out/log/checkpoint").read_text().split("\n")[1]) > before
    r = run("log", "verify", "out", cwd=cwd)
    assert r.returncode == 0, r.stdout


def test_verify_of_a_bucket_checks_its_log_too(tmp_path: Path, asset, s3_store_url: str) -> None:  # type: ignore[no-untyped-def]
    """`verify s3://…` holds a bucket's log to its event store, as for a directory."""
    from pith_pipeline.storage.factory import open_store

    cwd = tmp_path
    assert run("keys", "generate", "--out", "keys", cwd=cwd).returncode == 0
    assert run("keys", "generate", "--out", "logkey", "--key-id", "pith-log", cwd=cwd).returncode == 0
    r = run(
        "build", "--input", str(asset("arxiv-sample.jsonl")), "--store", s3_store_url,
        "--key", "keys/pith-private-key.json", "--log-signer", "logkey/pith-private-key.json",
        "--workers", "1", cwd=cwd,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert run("verify", s3_store_url, "-q", cwd=cwd).returncode == 0
    store = open_store(s3_store_url)
    entries = [k for k in store.list("log/tile/entries/")]
    assert entries
    store.delete(entries[0])  # the log no longer holds what the event store holds
    r = run("verify", s3_store_url, "-q", cwd=cwd)
    assert r.returncode == 1 and "log:" in r.stdout, r.stdout + r.stderr


@pytest.mark.parametrize(
    "command",
    [
        ("log", "status", "out"),
        ("log", "verify", "out"),
        ("log", "prove", "--log", "out", "sha256:" + "0" * 64),
        ("log", "consistency", "--log", "out", "old-checkpoint"),
        ("log", "monitor", "--state", "monitor.json", "out"),
    ],
    ids=lambda c: c[1],
)
def test_log_commands_on_a_store_without_a_log_say_so_in_one_line(
    tmp_path: Path, asset, command: tuple[str, ...]
) -> None:  # type: ignore[no-untyped-def]
    """A store that keeps no transparency log: one line saying so and how to start
    one (it was `error: .../pith-signing-key.json: 'log'`, a raw KeyError). The store
    is made with --no-log: a new store keeps a log by default."""
    assert run("keys", "generate", "--out", "keys", cwd=tmp_path).returncode == 0
    built = run(
        "build",
        "--input",
        str(asset("arxiv-sample.jsonl")),
        "--store",
        "out",
        "--key",
        "keys/pith-private-key.json",
        "--workers",
        "1",
        "--no-log",
        cwd=tmp_path,
    )
    assert built.returncode == 0, built.stderr
    (tmp_path / "old-checkpoint").write_text("not a checkpoint\n")
    r = run(*command, cwd=tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr
    said = (r.stdout + r.stderr).strip()
    assert "no transparency log" in said and "--log-signer" in said, said
    assert "'log'" not in said and "Traceback" not in said
    assert len(r.stderr.strip().splitlines()) <= 1


# -- the `log` writer lease, as every writer lease: named holder, --wait, exit 75 ------


def test_a_busy_log_lease_names_its_holder_and_waits_when_told(logged_store: Path) -> None:
    from pith_pipeline.storage.lease import WriterLease, default_owner
    from pith_pipeline.storage.local import LocalStore

    cwd = logged_store
    sync = ("log", "sync", "--store", "out", "--log-signer", "logkey/pith-private-key.json")
    holder = WriterLease(LocalStore(cwd / "out"), ["log"], owner=default_owner("run-xyz", "build"), ttl=120)
    with holder:
        busy = run(*sync, "--wait", "0", cwd=cwd)
        assert busy.returncode == 75, busy.stderr
        assert "leases/log.json" in busy.stderr and "build, run run-xyz" in busy.stderr, busy.stderr
        assert "Traceback" not in busy.stderr
        waited = run(*sync, "--wait", "1", cwd=cwd)
        assert waited.returncode == 75, waited.stderr
        assert "waiting for lease" in waited.stderr and "run-xyz" in waited.stderr, waited.stderr
        from_env = run(*sync, cwd=cwd, env={"PITH_LEASE_WAIT": "1"})
        assert from_env.returncode == 75 and "waiting for lease" in from_env.stderr, from_env.stderr
        shutil.rmtree(cwd / "out" / "log")  # a lost log: `log rebuild` is its recovery
        rebuild = run("log", "rebuild", *sync[2:], cwd=cwd)
        assert rebuild.returncode == 75 and "run-xyz" in rebuild.stderr, rebuild.stderr
    lost = run(*sync, cwd=cwd)  # released: but a lost log is named, never started anew
    assert lost.returncode == 1 and "the log was lost" in lost.stderr and "log rebuild" in lost.stderr
    assert len(lost.stderr.strip().splitlines()) == 1, lost.stderr
    assert run("verify", "out", cwd=cwd).returncode != 0
    assert run("log", "rebuild", *sync[2:], cwd=cwd).returncode == 0  # the same tree again
    assert run(*sync, cwd=cwd).returncode == 0
    assert run("verify", "out", cwd=cwd).returncode == 0


def test_the_log_lease_names_the_command_and_run_that_hold_it(
    logged_store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The holder another writer is told about: `log sync`, or the run appending its events."""
    from click.testing import CliRunner

    from pith_pipeline.cli import cli
    from pith_pipeline.storage.local import LocalStore
    from pith_pipeline.tlog import append
    from pith_pipeline.tlog.log_key import open_log_signer
    from pith_pipeline.tlog.pipeline import log_run

    store = LocalStore(logged_store / "out")
    owners: list[dict[str, object]] = []
    current = append.current_checkpoint

    def spy(st, verifier):  # type: ignore[no-untyped-def]
        owners.append(loads(store.get("leases/log.json") or b"{}")["owner"])
        return current(st, verifier)

    monkeypatch.setattr(append, "current_checkpoint", spy)
    monkeypatch.chdir(logged_store)
    argv = ["log", "sync", "--store", "out", "--log-signer", "logkey/pith-private-key.json"]
    r = CliRunner().invoke(cli, argv)
    assert r.exit_code == 0, r.output
    assert owners and {o["command"] for o in owners} == {"log sync"}
    owners.clear()
    signer = open_log_signer("file:logkey/pith-private-key.json", store)
    log_run(store, [], signer, run_id="build-20261203T000000Z-abc")
    assert owners and {o["run_id"] for o in owners} == {"build-20261203T000000Z-abc"}
