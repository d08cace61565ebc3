"""`verify STORE` and `status --deep` as a user runs them, on a directory and on S3."""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from cli_in_process import run_cli
from testclock import StepClock

from pith_pipeline.core.canonical_json import dumps_compact
from pith_pipeline.core.keys import Ed25519Signer
from pith_pipeline.publish import BuildConfig, Publisher
from pith_pipeline.sources.jsonl import iter_jsonl
from pith_pipeline.storage.base import Store
from pith_pipeline.storage.factory import open_store

SAMPLE = Path(__file__).parent.parent / "data" / "arxiv-sample.jsonl"
SIGNER = Ed25519Signer(b"\x06" * 32, "pith-cli-verify")


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Any:
    return partial(run_cli, capsys)


def publish(store: Store) -> None:
    """A store as a run leaves it: bundles, then the index and the run manifest."""
    from pith_pipeline.runs.manifest import finish_run

    clock = StepClock(datetime(2026, 1, 5, tzinfo=UTC))
    summary = Publisher(store, SIGNER, BuildConfig(), clock=clock).publish(iter_jsonl(SAMPLE))
    finish_run(store, summary, {"input": "sample"}, clock=clock)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("verify-cli") / "store"
    publish(open_store(str(root)))
    return root


@pytest.fixture
def root(built: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "store"
    shutil.copytree(built, copy)
    return copy


def first_event(root: Path, kind: str = "graph_snapshot") -> tuple[Path, dict[str, Any]]:
    for path in sorted(root.glob("events/*/*.json")):
        ev = json.loads(path.read_bytes())
        if ev["event_type"] == kind:
            return path, ev
    raise AssertionError(kind)


def test_a_sound_store_verifies(root: Path, cli: Any) -> None:
    r = cli("verify", str(root), "-q")
    assert r.code == 0, r.out + r.err
    assert r.out.strip().endswith("30 bundles, 30 verified, 0 failed, 0 damaged stored objects")


def test_a_tampered_event_fails_verify_naming_the_object(root: Path, cli: Any) -> None:
    path, ev = first_event(root)
    ev["payload"]["graph_snapshot"]["paper"]["title"] = "Not the title"
    path.write_bytes(dumps_compact(ev))
    r = cli("verify", str(root), "-q")
    assert r.code == 1
    lines = [line for line in r.out.splitlines() if line.startswith("FAIL ")]
    assert lines == [f"FAIL {path}: content_sha256 does not recompute (the content was changed)"]
    assert "30 bundles, 30 verified, 0 failed, 1 damaged stored objects" in r.out
    out = json.loads(cli("verify", str(root), "--json").out)
    assert not out["ok"] and [f["key"] for f in out["findings"]] == [str(path.relative_to(root))]


def test_deleted_and_non_json_events_fail_verify(root: Path, cli: Any) -> None:
    gone, ev = first_event(root)
    gone.unlink()
    junk, _ = first_event(root, "record_created")
    junk.write_bytes(b"not json at all")
    r = cli("verify", str(root), "-q")
    assert r.code == 1
    fails = [line for line in r.out.splitlines() if line.startswith("FAIL ")]
    assert len(fails) == 2
    assert any(f"{gone.parent.name}/bundle.json: lists event {ev['event_id']}" in line for line in fails)
    assert any(line.startswith(f"FAIL {junk}: not valid JSON") for line in fails)
    assert "Traceback" not in r.out + r.err


def test_one_hostile_bundle_does_not_stop_the_others(root: Path, cli: Any) -> None:
    bundles = sorted(root.glob("pith/*/bundle.json"))
    doc = json.loads(bundles[0].read_bytes())
    doc["canonical_record"]["metadata"]["primary_cat"] = 1.5
    bundles[0].write_bytes(json.dumps(doc).encode())
    doc = json.loads(bundles[1].read_bytes())
    doc["state"]["event_count"] = 2**70
    bundles[1].write_bytes(json.dumps(doc).encode())
    bundles[2].write_bytes(b"[1, 2")
    r = cli("verify", str(root), "-q")
    assert r.code == 1, r.out + r.err
    assert f"{bundles[0]}: pith:" in r.out and f"{bundles[1]}: pith:" in r.out  # FAIL reports name them
    assert f"FAIL {bundles[2]}: unreadable bundle" in r.out
    assert "29 bundles, 27 verified, 2 failed" in r.out
    assert "Traceback" not in r.out + r.err


def test_status_deep_reports_damage(root: Path, cli: Any) -> None:
    assert cli("status", "--store", str(root), "--deep").code == 0
    path, ev = first_event(root)
    ev["created_at"] = "2026-01-01T00:00:00Z"
    path.write_bytes(dumps_compact(ev))
    r = cli("status", "--store", str(root), "--deep")
    assert r.code == 1
    assert "integrity: 1 damaged stored objects" in r.out
    assert f"FAIL {path}: content_sha256 does not recompute" in r.out


def test_verify_an_s3_store(s3_store_url: str, cli: Any) -> None:
    import boto3

    store = open_store(s3_store_url)
    publish(store)
    r = cli("verify", s3_store_url, "-q")
    assert r.code == 0, r.out + r.err
    assert "30 bundles, 30 verified, 0 failed, 0 damaged stored objects" in r.out
    key = next(k for k in store.list("events/") if k.endswith(".json"))
    bucket, prefix = s3_store_url[len("s3://") :].split("/", 1)
    boto3.client("s3").put_object(Bucket=bucket, Key=f"{prefix}/{key}", Body=b'{"a": 1, "a": 2}')
    r = cli("verify", s3_store_url, "-q")
    assert r.code == 1
    assert f"FAIL {s3_store_url}/{key}: not valid JSON (duplicate key 'a'" in r.out
    assert cli("status", "--store", s3_store_url, "--deep").code == 1


def test_a_self_equivocation_republished_by_the_next_run_fails_verify(
    root: Path, cli: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 16 item 4: a writer suspended past its lease once wrote a second
    `record_created` for a version beside the next writer's. Events are write-once,
    so the next run republishes the bundle with both (its state lists the
    equivocation, as the spec's merge does), and says so; `verify STORE` and `status
    --deep` must name it: one FAIL line naming the paper's two event objects."""
    from pith_pipeline.core.events import finalize_event, sign_event

    path, ev = first_event(root, "record_created")
    ev["created_at"] = "2026-01-05T00:10:00Z"  # the suspended writer's own moment
    finalize_event(ev)
    sign_event(ev, SIGNER, "2026-01-05T00:10:00.000000Z")
    second = path.parent / f"{ev['content_sha256']}.json"
    second.write_bytes(dumps_compact(ev))
    body = path.parent.name
    with caplog.at_level("WARNING"):
        publish(open_store(str(root)))  # the next run: republishes the paper with both
    named = [r.getMessage() for r in caplog.records if "self-equivocation" in r.getMessage()]
    assert named and str(path.relative_to(root)) in named[0] and str(second.relative_to(root)) in named[0]
    bundle = json.loads((root / "pith" / body / "bundle.json").read_bytes())
    assert bundle["state"]["equivocation_count"] == 1
    r = cli("verify", str(root), "-q")
    assert r.code == 1, r.out + r.err
    lines = [line for line in r.out.splitlines() if line.startswith("FAIL ")]
    assert len(lines) == 1 and "self-equivocation" in lines[0], r.out
    assert str(path.relative_to(root)) in lines[0] and str(second.relative_to(root)) in lines[0]
    deep = cli("status", "--store", str(root), "--deep")
    assert deep.code == 1 and "self-equivocation" in deep.out, deep.out
    one = cli("verify", str(root / "pith" / body / "bundle.json"))
    assert "WARN state" in one.out and "conflicting_record" in one.out, one.out


def test_stored_json_with_duplicate_keys_is_one_line_naming_it(root: Path, cli: Any, tmp_path: Path) -> None:
    """Every reader of stored JSON refuses duplicate keys the same way: one line naming
    the object, never a traceback (status reads the last run manifest, receipts
    reissue each bundle, and replaces a damaged one)."""
    (manifest,) = root.glob("runs/*/manifest.json")
    manifest.write_bytes(b'{"format": "x",' + manifest.read_bytes().lstrip()[1:])
    r = cli("status", "--store", str(root))
    assert r.code != 0 and "Traceback" not in r.out + r.err
    assert f"{manifest.relative_to(root)}: not valid JSON (duplicate key 'format'" in r.err
    bundle = sorted(root.glob("pith/*/bundle.json"))[0]
    data = bundle.read_bytes()
    bundle.unlink()
    bundle.write_bytes(b'{"bundle_signature": {},' + data[1:])
    from pith_pipeline.signing.local import write_key_file

    key = tmp_path / "keys" / "k.json"
    key.parent.mkdir(mode=0o700)
    write_key_file(key, b"\x06" * 32, "pith-cli-verify")
    r = cli("receipts", "reissue", "--store", str(root), "--key", str(key))
    assert r.code == 0 and "Traceback" not in r.out + r.err  # rebuilt from the verified events
    assert b'"bundle_signature": {},' not in bundle.read_bytes()
