"""The local directory store: temporaries, stale files of dead writers, OS errors."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pith_pipeline.errors import StorageError
from pith_pipeline.storage.local import TMP_DIR, LocalStore


def test_published_directories_never_hold_temporary_files(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    store.put("pith/A/bundle.json", b"{}")
    store.put_once("events/A/1.json", b"{}")
    store.put_if_match("pith-signing-key.json", b"{}", None)
    stray = [p for p in tmp_path.rglob("*") if p.is_file() and TMP_DIR not in p.relative_to(tmp_path).parts]
    assert sorted(str(p.relative_to(tmp_path)) for p in stray) == [
        "events/A/1.json",
        "pith-signing-key.json",
        "pith/A/bundle.json",
    ]
    assert list(store.list("")) == ["events/A/1.json", "pith-signing-key.json", "pith/A/bundle.json"]
    with pytest.raises(StorageError, match="invalid storage key"):
        store.put(f"{TMP_DIR}/x", b"")


KILLED = """
import os, sys
from pith_pipeline.storage import local
store = local.LocalStore(sys.argv[1])
real = os.replace
def die(*a, **k):
    os.kill(os.getpid(), 9)  # SIGKILL between writing the temporary file and renaming it
local.os.replace = die
store.put("pith/A/bundle.json", b"half")
"""


def test_a_killed_writers_temporary_file_is_swept_by_the_next_writer(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-c", KILLED, str(tmp_path)], check=False)
    assert proc.returncode == -9
    left = list((tmp_path / TMP_DIR).iterdir())
    assert len(left) == 1 and not (tmp_path / "pith/A/bundle.json").exists()
    store = LocalStore(tmp_path)
    live = store._write_tmp(b"in flight")  # a live writer's file (this process) is kept
    assert store.sweep_temporary() == (left[0].name,)
    assert [p.name for p in (tmp_path / TMP_DIR).iterdir()] == [os.path.basename(live)]
    os.utime(live, (0, 0))  # anything older than an hour is stale, whoever wrote it
    assert store.sweep_temporary() == (os.path.basename(live),)


@pytest.mark.parametrize(
    ("err", "hint"),
    [
        (errno.EROFS, "read-only"),
        (errno.ENOSPC, "disk is full"),
        (errno.EACCES, "permission denied"),
    ],
)
def test_operating_system_failures_are_one_line_naming_the_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, err: int, hint: str
) -> None:
    store = LocalStore(tmp_path)

    def fail(*_a: object, **_k: object) -> None:
        raise OSError(err, os.strerror(err))

    monkeypatch.setattr("pith_pipeline.storage.local.os.replace", fail)
    monkeypatch.setattr("pith_pipeline.storage.local.os.link", fail)
    for write in (
        lambda: store.put("pith/A/bundle.json", b"{}"),
        lambda: store.put_once("events/A/1.json", b"{}"),
    ):
        with pytest.raises(StorageError) as info:
            write()
        message = str(info.value)
        assert hint in message.lower() and str(tmp_path) in message and "\n" not in message
        assert not info.value.transient
    assert list((tmp_path / TMP_DIR).iterdir()) == []  # nothing left behind


def test_deleting_the_last_object_leaves_no_empty_directories(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store")
    store.put("staging/run-1/chunk-0000.jsonl", b"{}")
    store.put("runs/backfill/run-1/chunk-0000.json", b"{}")
    store.put("runs/run-1/manifest.json", b"{}")
    for key in ("staging/run-1/chunk-0000.jsonl", "runs/backfill/run-1/chunk-0000.json"):
        store.delete(key)
    assert not (tmp_path / "store" / "staging").exists()
    assert not (tmp_path / "store" / "runs" / "backfill").exists()
    assert (tmp_path / "store" / "runs" / "run-1" / "manifest.json").exists()
    assert (tmp_path / "store").is_dir()
    store.put("staging/run-2/chunk-0000.jsonl", b"{}")  # and writing there again works
    assert store.get("staging/run-2/chunk-0000.jsonl") == b"{}"


def test_a_copy_in_a_directory_store_is_a_second_name_of_one_file(tmp_path: Path) -> None:
    """Issue 13, point 5: the `.well-known` bundle costs no second file (no inode, no
    bytes) in a directory store: a hard link to the bundle, replaced atomically."""
    from pith_pipeline.storage.base import put_copy
    from pith_pipeline.storage.local import LocalStore

    store = LocalStore(tmp_path)
    store.put("pith/A/bundle.json", b'{"a":1}')
    put_copy(store, ".well-known/pith/A/bundle.json", b'{"a":1}', of="pith/A/bundle.json")
    bundle, copy = tmp_path / "pith/A/bundle.json", tmp_path / ".well-known/pith/A/bundle.json"
    assert bundle.stat().st_ino == copy.stat().st_ino
    assert list((tmp_path / ".tmp").iterdir()) == []
    store.put("pith/A/bundle.json", b'{"a":2}')  # a rewrite is a new file: the copy is untouched
    assert copy.read_bytes() == b'{"a":1}'
    put_copy(store, ".well-known/pith/A/bundle.json", b'{"a":2}', of="pith/A/bundle.json")
    assert bundle.stat().st_ino == copy.stat().st_ino
    assert copy.read_bytes() == b'{"a":2}'


def _build(store: Path, tmp_path: Path, *extra: str) -> None:
    from click.testing import CliRunner

    from pith_pipeline.cli import cli
    from pith_pipeline.signing.local import generate_key

    key = tmp_path / "keys" / "pith-private-key.json"
    if not key.exists():
        generate_key(tmp_path / "keys", key_id="sweep-test")
    sample = Path(__file__).parents[1] / "data" / "arxiv-sample.jsonl"
    args = ["build", "--input", str(sample), "--store", str(store), "--key", str(key), *extra]
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output


def test_the_next_writing_command_sweeps_a_killed_writers_temporary_files(tmp_path: Path) -> None:
    """Issue 16 item 11: only `compact` swept `.tmp/`, though the next run must too.
    Every command that writes sweeps once it holds its lease; a live writer's file
    (a running process of this host) is kept."""
    from pith_pipeline.storage.local_fs import host_tag as _host_tag

    store = tmp_path / "store"
    proc = subprocess.run([sys.executable, "-c", KILLED, str(store)], check=False)
    assert proc.returncode == -9
    (dead,) = (store / TMP_DIR).iterdir()
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        live = store / TMP_DIR / f".tmp-{_host_tag()}-{sleeper.pid}-abcdef-0"
        live.write_bytes(b"in flight")
        _build(store, tmp_path)
        assert not dead.exists()
        assert live.exists()
    finally:
        sleeper.kill()
        sleeper.wait()


def test_compact_removes_temporary_files_left_in_published_directories(tmp_path: Path) -> None:
    """Issue 16 item 11: versions before `.tmp/` wrote temporaries (and lock files)
    beside the objects they replaced; a kill left them in published directories, where
    nothing removed them. `compact` does; the published objects stay as they are."""
    from click.testing import CliRunner

    from pith_pipeline.cli import cli

    store = tmp_path / "store"
    _build(store, tmp_path)
    bundle = next((store / "pith").glob("*/bundle.json"))
    before = {p: p.read_bytes() for p in store.rglob("*") if p.is_file() and TMP_DIR not in p.parts}
    stray = [
        bundle.parent / ".tmp-k2j3h4x_",
        store / "arxiv" / ".tmp-lock-2101.00001.json",
        store / ".tmp-9q8w7e6r",
    ]
    for p in stray:
        p.write_bytes(b"half")
    result = CliRunner().invoke(cli, ["compact", "--store", str(store)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert [p for p in stray if p.exists()] == []
    assert all(p.read_bytes() == data for p, data in before.items() if not p.is_relative_to(store / "index"))


def test_a_directory_that_cannot_be_listed_is_an_error_not_an_empty_listing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An unreadable `events/<ID>/` listed as empty made `verify`, `status --deep` and
    the log report every event there as deleted, and a rebuild would drop them: a
    listing either sees every object or fails naming the directory."""
    store = LocalStore(tmp_path)
    store.put("events/A/1.json", b"{}")
    store.put("events/B/2.json", b"{}")
    hidden = tmp_path / "events" / "B"
    real_scandir = os.scandir

    def scandir(path: object = ".") -> object:
        if Path(str(path)) == hidden:
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_scandir(path)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "scandir", scandir)
    for prefix in ("events/", "events/B/", ""):
        with pytest.raises(StorageError) as caught:
            list(store.list(prefix))
        assert str(hidden) in str(caught.value) and "Permission denied" in str(caught.value)


@pytest.mark.parametrize("err", [errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EPERM])
def test_the_store_gives_the_one_table_of_advice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, err: int
) -> None:
    """The advice for an OS failure comes from `_internal/error_text.OS_ERROR_HINTS`, the
    table the CLI boundary and the index use: a second copy here had drifted from it."""
    from pith_pipeline._internal import error_text

    monkeypatch.setitem(error_text.OS_ERROR_HINTS, err, "the one table's advice")
    store = LocalStore(tmp_path)

    def fail(*_a: object, **_k: object) -> None:
        raise OSError(err, os.strerror(err))

    monkeypatch.setattr("pith_pipeline.storage.local.os.replace", fail)
    monkeypatch.setattr("pith_pipeline.storage.local.os.link", fail)
    with pytest.raises(StorageError) as info:
        store.put("pith/A/bundle.json", b"{}")
    assert "(the one table's advice)" in str(info.value)
