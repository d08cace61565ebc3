"""Group commit on the local store: writes are made durable together at a barrier.

Page-cache loss cannot be simulated without a virtual machine, so these tests check
the two things that make it safe:

- the order: every file written since the last barrier is fsynced (or covered by a
  syncfs(2)) before the transparency-log checkpoint, the run manifest, a lease
  release or the key document that claims it is written, seen through recording
  fakes of `os.fsync` and of syncfs;
- the crash path: a `build` killed with SIGKILL right before a barrier (or between
  a paper's writes) leaves a store that the rerun completes: `verify` passes and
  every paper is published.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from testclock import StepClock

from pith_pipeline.core.canonical_json import loads
from pith_pipeline.core.keys import Ed25519Signer
from pith_pipeline.core.layout import bundle_paths, is_run_manifest
from pith_pipeline.core.pith_record import PithNumber
from pith_pipeline.publish import BuildConfig, Publisher
from pith_pipeline.sources.jsonl import iter_jsonl
from pith_pipeline.storage import local
from pith_pipeline.storage.base import barrier
from pith_pipeline.storage.lease import writer_lease
from pith_pipeline.storage.local import TMP_DIR, LocalStore

SIGNER = Ed25519Signer(bytes(range(32)), "group-commit-test")

#: the claims: objects that say work before them is done
CLAIMS = ("log/checkpoint", "runs/", "pith-signing-key.json")


class Journal:
    """What reached the file system, in order: ("write", path) when a file or
    directory got its name, ("fsync", path) and ("syncfs", root) when made durable."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []

    def covered_before(self, index: int) -> set[str]:
        """Paths written before event `index` and made durable after their last write
        and before `index`."""
        last_write: dict[str, int] = {}
        for i, (kind, path) in enumerate(self.events[:index]):
            if kind == "write":
                last_write[path] = i
        durable: set[str] = set()
        for path, w in last_write.items():
            for kind, p in self.events[w + 1 : index]:
                if kind == "syncfs" or (kind == "fsync" and p == path):
                    durable.add(path)
                    break
        return durable

    def written_before(self, index: int) -> set[str]:
        return {p for kind, p in self.events[:index] if kind == "write"}


@pytest.fixture(params=["fsync", "syncfs"])
def journal(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[Journal]:
    """Record every rename, link, mkdir and fsync of the store; `syncfs`: the barrier
    uses one syncfs(2) (faked), `fsync`: it fsyncs file by file (no syncfs)."""
    j = Journal()
    real_replace, real_link, real_mkdir, real_fsync = os.replace, os.link, os.mkdir, os.fsync

    def placed(path: str | os.PathLike[str]) -> None:
        j.events.append(("write", str(path)))  # the file's bytes
        j.events.append(("write", os.path.dirname(str(path))))  # its name, in its directory

    def replace(src: str, dst: str | os.PathLike[str]) -> None:
        real_replace(src, dst)
        placed(dst)

    def link(src: str, dst: str | os.PathLike[str], **kw: object) -> None:
        real_link(src, dst)
        placed(dst)

    def mkdir(path: str | os.PathLike[str], mode: int = 0o777, **kw: object) -> None:
        real_mkdir(path, mode)
        if os.path.basename(str(path)) != TMP_DIR:  # a new name in its parent
            j.events.append(("write", os.path.dirname(str(path))))

    def fsync(fd: int) -> None:
        j.events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    monkeypatch.setattr(os, "replace", replace)
    monkeypatch.setattr(os, "link", link)
    monkeypatch.setattr(os, "mkdir", mkdir)
    monkeypatch.setattr(os, "fsync", fsync)
    if request.param == "syncfs":

        def syncfs(fd: int) -> int:
            j.events.append(("syncfs", os.readlink(f"/proc/self/fd/{fd}")))
            return 0

        monkeypatch.setattr(local, "_syncfs", syncfs)
    else:
        monkeypatch.setattr(local, "_syncfs", None)
    yield j


def _publish(store: LocalStore, lines: list[str], tmp_path: Path) -> Publisher:
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    pub = Publisher(store, SIGNER, BuildConfig(), clock=StepClock(datetime(2026, 7, 1, tzinfo=UTC)))
    pub.publish(iter_jsonl(path))
    return pub


def test_every_file_is_durable_before_the_checkpoint_and_manifest_that_claim_it(
    journal: Journal, tmp_path: Path, sample_lines: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from pith_pipeline.runs.manifest import finish_run
    from pith_pipeline.signing.local import generate_key

    priv, _pub, _doc = generate_key(tmp_path / "logkey")
    root = tmp_path / "store"
    store = LocalStore(root, fsync=True)
    pub = _publish(store, sample_lines[:8], tmp_path)
    key = finish_run(
        store, pub.summary, {"input": "in.jsonl"}, log_signer=f"file:{priv}", log_origin="registry.test/log"
    )

    claims = [
        i
        for i, (kind, p) in enumerate(journal.events)
        if kind == "write" and os.path.relpath(p, root).startswith(CLAIMS) and not os.path.isdir(p)
    ]
    names = {os.path.relpath(journal.events[i][1], root) for i in claims}
    assert {"log/checkpoint", key, "pith-signing-key.json"} <= names
    for i in claims:
        # every file written before a claim under the store (not its `.tmp/`), and
        # every directory that gained a name, was made durable after its last write
        must = {
            p
            for p in journal.written_before(i)
            if (p == str(root) or p.startswith(f"{root}/")) and TMP_DIR not in Path(p).parts
        }
        claim = journal.events[i][1]
        own = {str(d) for d in Path(claim).parents}  # the claim's own directories, made for it
        missing = must - own - journal.covered_before(i)
        assert not missing, f"not durable before {journal.events[i][1]}: {sorted(missing)[:5]}"
    # the manifest lists every paper's files; each of them was among what was covered
    manifest_at = next(i for i in claims if journal.events[i][1].endswith(key))
    listed = {str(root / o["key"]) for o in loads(store.get(key) or b"")["objects"]}
    assert listed and listed <= journal.covered_before(manifest_at)
    # and at the end (after the manifest), nothing is left unsynced
    assert not store._dirty


def test_a_lease_release_makes_the_writes_under_it_durable_first(journal: Journal, tmp_path: Path) -> None:
    root = tmp_path / "store"
    store = LocalStore(root, fsync=True)
    with writer_lease(store, command="test", run_id="r1", shards=None, wait=0):
        store.put_once("events/A/1.json", b"{}")
        store.put("pith/A/bundle.json", b"{}")
        before = len(journal.events)
    # the first durability event after the writes comes before the lease object goes
    after = journal.events[before:]
    assert after and after[0][0] in ("fsync", "syncfs")
    assert {str(root / "events/A/1.json"), str(root / "pith/A/bundle.json")} <= journal.covered_before(
        len(journal.events)
    )
    assert not (root / "locks").exists() or not any((root / "locks").rglob("*.json"))


def test_the_barrier_is_free_when_nothing_was_written(journal: Journal, tmp_path: Path) -> None:
    store = LocalStore(tmp_path, fsync=True)
    store.put("a/b.json", b"1")
    barrier(store)
    n = len(journal.events)
    barrier(store)
    store.get("a/b.json")
    barrier(store)
    assert journal.events[n:] == []


def test_no_fsync_at_all_with_pith_local_fsync_0(
    journal: Journal, tmp_path: Path, sample_lines: list[str]
) -> None:
    """The setting reaches the store the way every command opens one: resolved once
    into `Settings`, passed to `open_store`."""
    from pith_pipeline.config import load_settings
    from pith_pipeline.storage.factory import open_store

    settings = load_settings(env={"PITH_LOCAL_FSYNC": "0"})
    store = open_store(str(tmp_path / "store"), **settings.store_options)
    assert isinstance(store, LocalStore) and not store.fsync
    _publish(store, sample_lines[:3], tmp_path)
    barrier(store)
    assert [e for e in journal.events if e[0] != "write"] == []


def test_a_store_reads_no_setting_itself(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The environment is read once, at the edge: a store made below it is durable
    unless it is told otherwise, whatever PITH_LOCAL_FSYNC says."""
    monkeypatch.setenv("PITH_LOCAL_FSYNC", "0")
    assert LocalStore(tmp_path / "a").fsync
    assert not LocalStore(tmp_path / "b", fsync=False).fsync


def test_the_unsynced_list_stays_bounded(
    journal: Journal, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without syncfs the store syncs on its own every MAX_PENDING names; with it,
    it remembers no names at all (one syncfs covers them)."""
    monkeypatch.setattr(local, "MAX_PENDING", 8)
    store = LocalStore(tmp_path, fsync=True)
    for i in range(40):
        store.put_once(f"events/A/{i}.json", b"{}")
        assert len(store._pending_files) + len(store._pending_dirs) <= (8 if local._syncfs is None else 0)
    synced = [kind for kind, _ in journal.events if kind in ("fsync", "syncfs")]
    assert (len(synced) >= 40) if local._syncfs is None else (synced == [])
    assert store._dirty == (local._syncfs is not None or bool(store._pending_files))


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_published_files_are_0644_whatever_the_umask(
    tmp_path: Path, umask: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = os.umask(umask)
    try:
        store = LocalStore(tmp_path / oct(umask))
        chmods: list[int] = []
        real = os.fchmod

        def fchmod(fd: int, mode: int) -> None:
            chmods.append(mode)
            real(fd, mode)

        monkeypatch.setattr(os, "fchmod", fchmod)
        store.put("pith/A/bundle.json", b"{}")
        store.put_once("events/A/1.json", b"{}")
    finally:
        os.umask(old)
    for key in ("pith/A/bundle.json", "events/A/1.json"):
        assert (tmp_path / oct(umask) / key).stat().st_mode & 0o777 == 0o644
    # a umask that leaves 0644 alone costs no chmod per file
    assert chmods == ([] if umask & 0o644 == 0 else [0o644, 0o644])


def test_a_forked_child_commits_its_own_writes_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local, "_syncfs", None)
    store = LocalStore(tmp_path, fsync=True)
    store.put("parent.json", b"1")
    pid = os.fork()
    if pid == 0:  # the child: its first write starts its own group
        try:
            store.put("child.json", b"2")
            ok = store._pending_files == [str(tmp_path / "child.json")]
            store.sync()
            os._exit(0 if ok and not store._dirty else 1)
        finally:
            os._exit(2)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert store._pending_files == [str(tmp_path / "parent.json")]


# -- killed between write and commit, then rerun and verified --------------------
DRIVER = """
import os, signal, sys
from pith_pipeline.storage import local
what, nth = sys.argv[1], int(sys.argv[2])
seen = [0]
real = getattr(local.LocalStore, what)
def dying(self, *a, **k):
    if what != "sync" or self._dirty:  # a barrier with something to commit
        seen[0] += 1
        if seen[0] == nth:
            os.kill(os.getpid(), signal.SIGKILL)
    return real(self, *a, **k)
setattr(local.LocalStore, what, dying)
from pith_pipeline.cli import main
sys.argv = ["pith-pipeline", *sys.argv[3:]]
main()
"""


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PITH_")}
    return {**env, "PITH_WORKERS": "1", "TMPDIR": str(tmp_path)}


@pytest.mark.parametrize(
    ("what", "nth"),
    [
        ("sync", 1),  # the first barrier with work in it: before the key document, or the index
        ("sync", 2),
        ("sync", 3),
        ("put_once", 7),  # between a paper's events
        ("put", 9),  # between a paper's bundle, state and pointer
    ],
)
def test_a_build_killed_before_its_barrier_is_completed_by_the_rerun(
    tmp_path: Path, sample_lines: list[str], what: str, nth: int
) -> None:
    from pith_pipeline.signing.local import generate_key

    inp = tmp_path / "in.jsonl"
    inp.write_text("\n".join(sample_lines) + "\n", encoding="utf-8")
    priv, _pub, _doc = generate_key(tmp_path / "keys")
    store = tmp_path / "store"
    args = ["build", "--input", str(inp), "--store", str(store), "--key", str(priv)]
    killed = subprocess.run(
        [sys.executable, "-c", DRIVER, what, str(nth), *args],
        env=_env(tmp_path),
        capture_output=True,
        text=True,
    )
    assert killed.returncode == -9, killed.stderr[-2000:]
    assert not list(LocalStore(store).list("runs/"))  # nothing claimed the run yet
    rerun = subprocess.run(
        [sys.executable, "-m", "pith_pipeline", *args], env=_env(tmp_path), capture_output=True, text=True
    )
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    verify = subprocess.run(
        [sys.executable, "-m", "pith_pipeline", "verify", str(store)],
        env=_env(tmp_path),
        capture_output=True,
        text=True,
    )
    assert verify.returncode == 0, verify.stdout[-2000:] + verify.stderr[-2000:]
    st = LocalStore(store)
    ids = {loads(line)["id"] for line in sample_lines}
    subjects = set()
    for arxiv_id in ids:  # every paper: its pointer, and a bundle, state and copy per version
        pointer = loads(st.get(f"arxiv/{arxiv_id}.json") or b"null")
        assert pointer is not None, arxiv_id
        for rec in pointer["records"]:
            subjects.add(rec["pith_number"])
            for key in bundle_paths(PithNumber.parse(rec["pith_number"]).body):
                assert st.exists(key), key
    assert len(subjects) >= len(ids)
    # the rerun's manifest (beside it, the log's witness runs/log-checkpoint: a log by default)
    assert len([k for k in st.list("runs/") if is_run_manifest(k)]) == 1


@pytest.mark.parametrize("method", ["fsync", "syncfs"])
def test_a_failed_barrier_stops_before_the_manifest_and_is_tried_again(
    tmp_path: Path, sample_lines: list[str], monkeypatch: pytest.MonkeyPatch, method: str
) -> None:
    import errno

    from pith_pipeline.errors import StorageError
    from pith_pipeline.runs.manifest import write_manifest

    monkeypatch.delenv("PITH_LOG_SIGNER", raising=False)
    if method == "fsync":
        monkeypatch.setattr(local, "_syncfs", None)
    store = LocalStore(tmp_path / "store", fsync=True)
    pub = _publish(store, sample_lines[:3], tmp_path)

    def broken(fd: int) -> int:
        raise OSError(errno.EIO, "Input/output error")

    if method == "syncfs":
        monkeypatch.setattr(local, "_syncfs", broken)
    else:
        assert store._pending_files
        monkeypatch.setattr(os, "fsync", broken)
    with pytest.raises(StorageError, match=r"cannot make durable .*Input/output error"):
        write_manifest(store, pub.summary)
    assert list(store.list("runs/")) == []  # nothing claims the run
    assert store._dirty  # the group is kept for the next barrier
    monkeypatch.undo()
    key = write_manifest(store, pub.summary)
    assert store.exists(key) and not store._dirty


DROPPED = """
import gc, os, sys
from pith_pipeline.storage import local
local._syncfs = lambda fd: print("syncfs", os.readlink(f"/proc/self/fd/{fd}"), flush=True) or 0
for name in ("a", "b"):
    store = local.LocalStore(os.path.join(sys.argv[1], name), fsync=True)
    store.put("x.json", b"1")
del store
gc.collect()
print("exiting", flush=True)
"""


def test_stores_dropped_before_their_barrier_are_synced_at_exit_once_per_file_system(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-c", DROPPED, str(tmp_path)], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert out[0] == "exiting"  # nothing synced before exit: no barrier was reached
    assert len(out) == 2 and out[1].startswith("syncfs ")  # one flush for both stores (one file system)
