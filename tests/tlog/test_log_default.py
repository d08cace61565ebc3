"""The transparency log on by default: a new store keeps a log, signed by a key made
beside the registry key on the first run; an existing store without a log is told
how to start one; `--no-log` opts out; `verify STORE` fails when a log goes missing."""

from __future__ import annotations

import base64
import json
import re
import shutil
import stat
from pathlib import Path
from typing import Any

import pytest
from cli_in_process import CliResult, run_cli

from pith_pipeline.core.canonical_json import loads
from pith_pipeline.errors import KeyFileError
from pith_pipeline.signing.local import LOG_KEY_FILE, generate_key
from pith_pipeline.storage.factory import open_store
from pith_pipeline.storage.local import LocalStore
from pith_pipeline.tlog.pipeline import (
    LogNotConfiguredError,
    check_log_matches_event_store,
    event_store_keys,
    open_log_signer,
)
from pith_pipeline.tlog.run_log import LogChoiceError, prepare_run_log

SAMPLE = Path(__file__).parent.parent / "data" / "arxiv-sample.jsonl"


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty working directory, with no PITH_* setting (a newcomer's shell)."""
    import os

    for name in [k for k in os.environ if k.startswith("PITH_") or k == "SOURCE_DATE_EPOCH"]:
        monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> CliResult:
    return run_cli(capsys, *args)


def seed_of(key_file: Path) -> str:
    return str(json.loads(key_file.read_text())["seed_b64"])


def all_bytes(root: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file())


def half_inputs(tmp_path: Path) -> tuple[Path, Path]:
    lines = [ln for ln in SAMPLE.read_text(encoding="utf-8").splitlines() if ln.strip()]
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text("\n".join(lines[:12]) + "\n", encoding="utf-8")
    b.write_text("\n".join(lines[12:]) + "\n", encoding="utf-8")
    return a, b


def test_ingest_sample_leaves_a_store_with_a_log_signed_by_a_secret_key_beside_the_registry_key(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    r = cli(capsys, "ingest", "--sample", "--workers", "1")
    assert r.code == 0, r.err
    key = here / "pith-keys" / LOG_KEY_FILE
    assert key.is_file()
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert stat.S_IMODE((here / "pith-keys").stat().st_mode) == 0o700
    # said once, naming the file; its secret is nowhere: output, store, manifests
    assert sum(LOG_KEY_FILE in line and "generated" in line for line in r.err.splitlines()) == 1
    seed = seed_of(key)
    assert seed not in r.out + r.err
    assert seed.encode() not in all_bytes(here / "pith-store")
    assert base64.b64decode(seed) not in all_bytes(here / "pith-store")
    # the store keeps a log holding every event, and its key document names the log key
    store = LocalStore(here / "pith-store")
    doc = loads(store.get("pith-signing-key.json") or b"")
    assert doc["log"]["vkey"] == open_log_signer(f"file:{key}", store).verifier.vkey
    assert check_log_matches_event_store(store) == []
    manifest = next(k for k in store.list("runs/") if k.endswith("/manifest.json"))
    assert loads(store.get(manifest) or b"")["log"]["size"] == sum(1 for _ in event_store_keys(store))
    # the README's audit commands work on it as written
    assert cli(capsys, "verify", "pith-store").code == 0
    assert cli(capsys, "log", "status", "pith-store").code == 0
    assert cli(capsys, "log", "monitor", "pith-store", "--state", "monitor-state.json").code == 0
    # a second run keeps the key (no second one), and appends to the same log
    before = key.read_bytes()
    again = cli(capsys, "ingest", "--sample", "--workers", "1")
    assert again.code == 0, again.err
    assert "generated" not in again.err and key.read_bytes() == before
    assert check_log_matches_event_store(store) == []


def test_build_with_a_key_file_makes_the_log_key_beside_it(
    here: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    generate_key(here / "k")
    r = cli(
        capsys, "build", "--input", str(SAMPLE), "--store", "s", "--signer", "file:k/pith-private-key.json"
    )
    assert r.code == 0, r.err
    assert (here / "k" / LOG_KEY_FILE).is_file() and not (here / "pith-keys").exists()
    assert check_log_matches_event_store(LocalStore(here / "s")) == []
    # log sync finds the same key beside the registry key (PITH_SIGNER), with no --log-signer
    r = cli(capsys, "log", "sync", "--store", "s")
    assert r.code == 1 and "none at pith-keys/" in r.err  # not told where the registry key is
    monkeypatch.setenv("PITH_SIGNER", "file:k/pith-private-key.json")
    r = cli(capsys, "log", "sync", "--store", "s")
    assert r.code == 0, r.err
    assert "0 entries appended" in r.out


def test_no_log_makes_a_store_without_one_and_an_existing_store_is_told_how_to_start_one(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    r = cli(capsys, "ingest", "--sample", "--workers", "1", "--no-log")
    assert r.code == 0, r.err
    assert not (here / "pith-store" / "log").exists()
    assert not (here / "pith-keys" / LOG_KEY_FILE).exists()
    assert "transparency log" not in r.err
    assert "log" not in loads((here / "pith-store/pith-signing-key.json").read_bytes())
    # a later run without --no-log succeeds, starts nothing, and says in one line how to start one
    again = cli(capsys, "ingest", "--sample", "--workers", "1")
    assert again.code == 0, again.err
    told = [line for line in again.err.splitlines() if "keeps no transparency log" in line]
    assert len(told) == 1, again.err
    assert not (here / "pith-store" / "log").exists()
    assert not (here / "pith-keys" / LOG_KEY_FILE).exists()
    # the command it names works as written, and the store then verifies with its log
    command = re.search(r"`pith-pipeline ([^`]+)`", told[0])
    assert command is not None, told[0]
    started = cli(capsys, *command.group(1).split())
    assert started.code == 0, started.err
    assert (here / "pith-keys" / LOG_KEY_FILE).is_file()
    assert seed_of(here / "pith-keys" / LOG_KEY_FILE) not in started.out + started.err
    assert check_log_matches_event_store(LocalStore(here / "pith-store")) == []
    assert cli(capsys, "verify", "pith-store").code == 0
    # from then on runs use that key by default
    third = cli(capsys, "ingest", "--sample", "--workers", "1")
    assert third.code == 0 and "keeps no transparency log" not in third.err


def test_keep_log_0_runs_an_existing_store_without_a_log_quietly(
    here: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert cli(capsys, "ingest", "--sample", "--workers", "1", "--no-log").code == 0
    monkeypatch.setenv("PITH_KEEP_LOG", "0")
    r = cli(capsys, "ingest", "--sample", "--workers", "1")
    assert r.code == 0 and "transparency log" not in r.err, r.err
    monkeypatch.setenv("PITH_KEEP_LOG", "maybe")
    bad = cli(capsys, "ingest", "--sample", "--workers", "1")
    assert bad.code != 0 and "PITH_KEEP_LOG='maybe'" in bad.err and len(bad.err.strip().splitlines()) == 1


def test_no_log_is_refused_for_a_store_that_keeps_a_log(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = half_inputs(here)
    assert cli(capsys, "ingest", "--sample", "--workers", "1").code == 0
    events = sorted(event_store_keys(LocalStore(here / "pith-store")))
    r = cli(
        capsys,
        "build",
        "--input",
        str(b),
        "--store",
        "pith-store",
        "--signer",
        "pith-keys/pith-private-key.json",
    )
    assert r.code == 0  # (all already there) the default key is found beside the registry key
    r = cli(
        capsys,
        "build",
        "--input",
        str(a),
        "--store",
        "pith-store",
        "--signer",
        "pith-keys/pith-private-key.json",
        "--no-log",
    )
    assert r.code == 2 and "keeps a transparency log" in r.err and len(r.err.strip().splitlines()) == 1
    assert sorted(event_store_keys(LocalStore(here / "pith-store"))) == events


def test_a_store_whose_log_key_is_missing_stops_before_publishing_and_says_where(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    generate_key(here / "k")
    a, b = half_inputs(here)
    assert (
        cli(capsys, "build", "--input", str(a), "--store", "s", "--signer", "k/pith-private-key.json").code
        == 0
    )
    (here / "k" / LOG_KEY_FILE).rename(here / "elsewhere.json")
    store = LocalStore(here / "s")
    events = sorted(event_store_keys(store))
    r = cli(capsys, "build", "--input", str(b), "--store", "s", "--signer", "k/pith-private-key.json")
    assert r.code == 1, r.err
    line = r.err.strip()
    assert len(line.splitlines()) == 1, line
    assert "keeps a transparency log" in line and f"k/{LOG_KEY_FILE}" in line and "--log-signer" in line
    assert "nothing was published" in line
    assert sorted(event_store_keys(store)) == events  # nothing published unlogged
    # given where it is, the run goes on, and the log holds every event
    r = cli(
        capsys,
        "build",
        "--input",
        str(b),
        "--store",
        "s",
        "--signer",
        "k/pith-private-key.json",
        "--log-signer",
        "file:elsewhere.json",
    )
    assert r.code == 0, r.err
    assert check_log_matches_event_store(store) == []
    # and another log key is refused before anything is published
    generate_key(here / "other")
    events = sorted(event_store_keys(store))
    (here / "c.jsonl").write_text(a.read_text().replace('"id": "', '"id": "9', 1), encoding="utf-8")
    r = cli(
        capsys,
        "build",
        "--input",
        str(here / "c.jsonl"),
        "--store",
        "s",
        "--signer",
        "k/pith-private-key.json",
        "--log-signer",
        "file:other/pith-private-key.json",
    )
    assert r.code == 1 and "a log keeps its key" in r.err, r.err
    assert sorted(event_store_keys(store)) == events


def test_a_new_store_signed_in_kms_needs_a_log_key_or_no_log(tmp_path: Path) -> None:
    """A registry key with no file has no directory for a log key: the run says what
    to do before anything is written (no plaintext key made on a task's machine)."""
    store = open_store(str(tmp_path / "s"))
    with pytest.raises(LogNotConfiguredError) as exc:
        prepare_run_log(store, "kms:alias/pith", base_url="https://pith.example.org")
    said = str(exc.value)
    assert "--log-signer" in said and "kms:" in said and "--no-log" in said and "\n" not in said
    assert list(tmp_path.iterdir()) == []
    assert prepare_run_log(store, "kms:alias/pith", keep=False).spec is None
    with pytest.raises(LogChoiceError, match="contradict"):
        prepare_run_log(store, "kms:alias/pith", explicit="file:x", keep=False)
    # an explicit key is used as it is (a KMS key, or a file)
    priv = generate_key(tmp_path / "logkey")[0]
    chosen = prepare_run_log(store, "kms:alias/pith", explicit=f"file:{priv}", base_url="https://h.test")
    assert chosen.spec == f"file:{priv}" and chosen.member is not None
    assert chosen.member["origin"] == "h.test/log"


def test_concurrent_first_runs_make_one_log_key(tmp_path: Path) -> None:
    """Mapped build tasks of a new store's first window each make the key if absent:
    one file results, whole, and every task uses it."""
    from concurrent.futures import ThreadPoolExecutor

    from pith_pipeline.signing.local import create_key_file_once

    path = tmp_path / "keys" / LOG_KEY_FILE
    with ThreadPoolExecutor(8) as pool:
        made = list(pool.map(lambda _i: create_key_file_once(path, "pith-log"), range(16)))
    assert made.count(True) == 1
    assert [p.name for p in path.parent.iterdir()] == [LOG_KEY_FILE]  # no temporary left
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    with pytest.raises(KeyFileError, match="writable by"):
        create_key_file_once(shared / LOG_KEY_FILE, "pith-log")


def _logged_store(here: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    assert cli(capsys, "ingest", "--sample", "--workers", "1").code == 0
    assert cli(capsys, "verify", "pith-store").code == 0
    return here / "pith-store"


def _drop_log_records(store: Path) -> None:
    """Remove every record of the log outside log/: the witness and the manifests' `log`."""
    (store / "runs" / "log-checkpoint").unlink()
    for m in store.glob("runs/*/manifest.json"):
        doc: dict[str, Any] = json.loads(m.read_text())
        doc.pop("log", None)
        m.write_text(json.dumps(doc))


@pytest.mark.parametrize(
    ("damage", "said"),
    [
        (lambda s: shutil.rmtree(s / "log"), "the log was lost"),
        (lambda s: (s / "log" / "checkpoint").unlink(), "the log was lost"),
        (lambda s: (shutil.rmtree(s / "log"), _drop_log_records(s)), "names this store's log"),
    ],
    ids=["log-dir-deleted", "checkpoint-deleted", "key-document-names-an-absent-log"],
)
def test_verify_store_fails_when_the_log_of_a_store_is_gone(
    here: Path, capsys: pytest.CaptureFixture[str], damage: Any, said: str
) -> None:
    store = _logged_store(here, capsys)
    damage(store)
    r = cli(capsys, "verify", "pith-store")
    assert r.code == 1, r.out
    failed = [line for line in r.out.splitlines() if line.startswith("FAIL log:")]
    assert len(failed) == 1 and said in failed[0], r.out
    assert "start one" not in failed[0]  # not taken for a store that never had a log
    # and a run with the log key stops before publishing onto it (never signs a fork)
    if said == "the log was lost":
        run = cli(capsys, "ingest", "--sample", "--workers", "1")
        assert run.code == 1 and "the log was lost" in run.err, run.err


def test_backfill_steps_keep_a_log_by_default_on_a_local_store(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`backfill` runs the Airflow tasks' steps (`runs/steps.py`): the build step makes
    the key, the finishing step appends with it."""
    generate_key(here / "keys")
    args = ["backfill", "--from", "1990-01-01", "--until", "2030-01-01", "--source", "snapshot"]
    r = cli(
        capsys,
        *args,
        "--snapshot",
        str(SAMPLE),
        "--store",
        "s",
        "--signer",
        "file:keys/pith-private-key.json",
    )
    assert r.code == 0, r.err
    assert (here / "keys" / LOG_KEY_FILE).is_file()
    store = LocalStore(here / "s")
    assert sum(1 for _ in event_store_keys(store)) > 0
    assert check_log_matches_event_store(store) == []
    # --no-log makes a store without one; --log-signer and --no-log together are refused
    signer = ["--signer", "file:keys/pith-private-key.json"]
    r = cli(capsys, *args, "--snapshot", str(SAMPLE), "--store", "t", *signer, "--no-log")
    assert r.code == 0 and not (here / "t" / "log").exists(), r.err
    both = ["--no-log", "--log-signer", f"file:keys/{LOG_KEY_FILE}"]
    r = cli(capsys, *args, "--snapshot", str(SAMPLE), "--store", "u", *signer, *both)
    assert r.code == 2 and "contradict" in r.err and not (here / "u").exists(), r.err


def test_build_keeps_a_log_by_default_on_s3(
    here: Path, capsys: pytest.CaptureFixture[str], s3_store_url: str
) -> None:
    generate_key(here / "keys")
    r = cli(
        capsys,
        "build",
        "--input",
        str(SAMPLE),
        "--store",
        s3_store_url,
        "--signer",
        "file:keys/pith-private-key.json",
        "--workers",
        "1",
    )
    assert r.code == 0, r.err
    assert (here / "keys" / LOG_KEY_FILE).is_file()
    store = open_store(s3_store_url)
    assert "log" in loads(store.get("pith-signing-key.json") or b"")
    assert check_log_matches_event_store(store) == []
    assert cli(capsys, "verify", s3_store_url).code == 0


def test_a_first_run_that_publishes_nothing_leaves_a_store_that_verifies_and_runs_on(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An empty window on a new store: the key document names the log, the run
    manifest records an empty tree, and no checkpoint is signed. That is no lost log:
    `verify STORE` passes, and the next run publishes and starts the log."""
    generate_key(here / "k")
    (here / "empty.jsonl").write_text("", encoding="utf-8")
    build = ["build", "--store", "s", "--signer", "k/pith-private-key.json"]
    assert cli(capsys, *build, "--input", "empty.jsonl").code == 0
    assert "log" in loads((here / "s" / "pith-signing-key.json").read_bytes())
    assert check_log_matches_event_store(LocalStore(here / "s")) == []  # (verify: "no bundles")
    r = cli(capsys, *build, "--input", str(SAMPLE))
    assert r.code == 0, r.err
    assert check_log_matches_event_store(LocalStore(here / "s")) == []
    assert cli(capsys, "verify", "s").code == 0


def test_lookup_objects_are_written_several_at_once_on_s3_and_errors_are_not_lost() -> None:
    """A small run's log append on S3 was its lookup objects' GET and PUT one at a time
    (83 % of a 200-paper run behind 100 ms a request): now `limit` at once, every item
    done, the first error raised."""
    import threading

    from pith_pipeline.tlog.lookup import in_flight as _in_flight

    barrier = threading.Barrier(4, timeout=30)  # passes only with 4 in flight at once
    done: list[int] = []
    lock = threading.Lock()

    def work(item: list[str]) -> None:
        if int(item[0]) < 4:
            barrier.wait()
        with lock:
            done.append(int(item[0]))

    _in_flight(work, ([str(i)] for i in range(40)), 4)
    assert sorted(done) == list(range(40))

    def failing(item: list[str]) -> None:
        if item[0] == "7":
            raise KeyFileError("seven")

    with pytest.raises(KeyFileError, match="seven"):
        _in_flight(failing, ([str(i)] for i in range(40)), 4)
    seen: list[str] = []
    _in_flight(lambda item: seen.extend(item), ([str(i)] for i in range(5)), 1)
    assert seen == ["0", "1", "2", "3", "4"]  # a directory: in order, one at a time
