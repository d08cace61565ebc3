"""Worker processes publish exactly what one process publishes, and fail the same way."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
from click.testing import CliRunner
from testclock import StepClock

from pith_pipeline.cli import cli
from pith_pipeline.clock import system_clock
from pith_pipeline.errors import KeyFileError, StorageError
from pith_pipeline.ingest import Ingest
from pith_pipeline.parallel import ParallelPublisher, sequential_reason, worker_for
from pith_pipeline.publish import Publisher
from pith_pipeline.signing.local import generate_key, load_signer
from pith_pipeline.sources.jsonl import iter_jsonl
from pith_pipeline.storage.local import LocalStore

EPOCH = "1767225600"
CHUNK = 3


@pytest.fixture(autouse=True)
def _reproducible(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", EPOCH)  # inherited by spawned workers
    monkeypatch.setenv("PITH_LOCAL_FSYNC", "0")


@pytest.fixture()
def key(tmp_path: Path) -> Path:
    return generate_key(tmp_path / "keys", key_id="test-key")[0]


def _version(obj: dict[str, Any], n: int, title: str) -> dict[str, Any]:
    created = obj["versions"][0]["created"]
    return dict(
        obj, title=title, versions=[{"version": f"v{i}", "created": created} for i in range(1, n + 1)]
    )


@pytest.fixture()
def snapshot(tmp_path: Path, sample_lines: list[str]) -> Path:
    """The sample, a paper's v1 first and its v2 last, a duplicate and two bad lines."""
    last = json.loads(sample_lines[-1])  # 2606.00972, v1 only
    bad_field = dict(json.loads(sample_lines[3]), versions=[])
    lines = [
        sample_lines[-1],
        *sample_lines[:10],
        "{not json",
        *sample_lines[10:-1],
        json.dumps(bad_field),
        sample_lines[0],
        json.dumps(_version(last, 2, last["title"] + " (revised)")),
    ]
    path = tmp_path / "snap.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _tree(root: Path) -> dict[str, bytes]:
    """Every object of a store but the log's pending markers (named by a random token,
    one per publishing process: `tlog.pending`)."""
    files = {str(p.relative_to(root)): p for p in sorted(root.rglob("*")) if p.is_file()}
    return {k: p.read_bytes() for k, p in files.items() if not k.startswith("log/pending/")}


def _dangling_pointer(store: Path, arxiv_id: str) -> None:
    """A pointer to an earlier version whose events are gone: linking to it fails inside
    `publish_record`, so a worker reports that paper as failed, naming the object."""
    (store / "arxiv" / arxiv_id).parent.mkdir(parents=True, exist_ok=True)
    (store / "arxiv" / f"{arxiv_id}.json").write_text(
        json.dumps(
            {
                "arxiv_id": arxiv_id,
                "latest": "pith:1990:AAAAAAAAAAAAAAAAAAAAAAAAAA",
                "records": [
                    {
                        "version": 1,
                        "pith_number": "pith:1990:AAAAAAAAAAAAAAAAAAAAAAAAAA",
                        "record_created": "sha256:" + "0" * 64,
                        "created_at": "1990-01-01T00:00:00Z",
                        "canonical_sha256": "0" * 64,
                    }
                ],
            }
        )
    )


def _ingest(store: Path, key: Path, snapshot: Path, workers: int) -> Ingest:
    with Ingest(
        LocalStore(store),
        load_signer(key),
        run_id="run-1",
        workers=workers,
        signer_spec=f"file:{key}",
        chunk_size=CHUNK,
    ) as run:
        run.snapshot(snapshot)
    return run


def test_two_workers_write_the_same_bytes_as_one_process(
    tmp_path: Path, key: Path, snapshot: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    chunks: list[tuple[int, list[tuple[int, str]]]] = []  # (worker, [(input seq, id)])
    original = ParallelPublisher._submit

    def spy(self: ParallelPublisher, w: int) -> None:
        chunks.append((w, [(seq, rec.id) for seq, rec in self._buffers[w]]))
        original(self, w)

    monkeypatch.setattr(ParallelPublisher, "_submit", spy)
    early = json.loads(snapshot.read_text().splitlines()[2])["id"]  # line 3
    for store in ("one", "two"):
        _dangling_pointer(tmp_path / store, early)
    one = _ingest(tmp_path / "one", key, snapshot, 1)
    two = _ingest(tmp_path / "two", key, snapshot, 2)
    # every version and duplicate of a paper went to one worker, in input order
    per_paper: dict[str, list[tuple[int, int]]] = {}
    for w, chunk in chunks:
        for seq, arxiv_id in chunk:
            per_paper.setdefault(arxiv_id, []).append((w, seq))
    assert {w for w, _ in chunks} == {0, 1} and len(per_paper) == 30
    for arxiv_id, got in per_paper.items():
        assert len({w for w, _ in got}) == 1, arxiv_id
        assert [seq for _, seq in got] == sorted(seq for _, seq in got), arxiv_id
    assert sorted(len(v) for v in per_paper.values())[-3:] == [1, 2, 2]  # v1+v2, a duplicate
    assert one.parallel is None
    par = two.parallel
    assert par is not None and not par.started  # closed after the run
    assert len(par.worker_pids) == 2 and os.getpid() not in par.worker_pids
    assert par.chunks_dispatched >= 4

    a, b = one.report.summary, two.report.summary
    assert a.counts() == b.counts()
    assert (a.fetched, a.built, a.unchanged, a.superseded, a.quarantined) == (34, 30, 1, 1, 2)
    assert a.failed == 1 and "which is not a stored event of it" in a.problems[0]
    assert sorted(a.written.items()) == sorted(b.written.items())
    assert sorted(a.pith_numbers) == sorted(b.pith_numbers)
    assert sorted(a.seen) == sorted(b.seen)
    # one pending marker per process that wrote events, each travelling with its ledger
    assert len(a.log_pending) == 1 and len(b.log_pending) == 2
    assert sorted(p.name for p in (tmp_path / "two" / "log" / "pending").iterdir()) == sorted(
        k.rsplit("/", 1)[1] for k in b.log_pending
    )

    tree_one, tree_two = _tree(tmp_path / "one"), _tree(tmp_path / "two")
    assert tree_one.keys() == tree_two.keys()
    for top in ("pith", "events", "arxiv", "quarantine", ".well-known"):
        assert any(k.startswith(top + "/") for k in tree_one), top
    assert "pith-signing-key.json" in tree_one  # published once, by the parent
    assert tree_one == tree_two
    quarantine = [json.loads(x) for x in tree_two["quarantine/run-1.jsonl"].splitlines()]
    assert [q["where"] for q in quarantine] == [f"{snapshot.name}:12", f"{snapshot.name}:32"]
    assert early in b.problems[0] and b.problems == a.problems  # named alike by a worker


def test_a_new_version_in_the_next_chunk_supersedes_under_workers(
    tmp_path: Path, key: Path, sample_lines: list[str]
) -> None:
    # v1 and v2 on adjacent lines, one record per chunk: two chunks that only come out
    # right if one worker runs them in order
    last = json.loads(sample_lines[-1])
    paper = last["id"]
    v2 = json.dumps(_version(last, 2, last["title"] + " (revised)"))
    path = tmp_path / "snap.jsonl"
    path.write_text(
        "\n".join([*sample_lines[:6], sample_lines[-1], v2, *sample_lines[6:12]]) + "\n", encoding="utf-8"
    )
    store = tmp_path / "s"
    with Ingest(
        LocalStore(store), load_signer(key), workers=2, signer_spec=f"file:{key}", chunk_size=1
    ) as run:
        run.snapshot(path)
    assert run.parallel is not None and len(run.parallel.worker_pids) == 2
    assert run.report.summary.superseded == 1 and run.report.summary.built == 14
    pointer = json.loads((store / f"arxiv/{paper}.json").read_bytes())
    old_pn, new_pn = (r["pith_number"] for r in pointer["records"])
    assert [r["version"] for r in pointer["records"]] == [1, 2] and pointer["latest"] == new_pn
    old = json.loads((store / "pith" / old_pn.split(":")[2] / "bundle.json").read_bytes())
    new = json.loads((store / "pith" / new_pn.split(":")[2] / "bundle.json").read_bytes())
    assert new["events"][0]["supersedes"] == [old["events"][0]["event_id"]]
    assert old["state"]["current"]["corrections"][0]["payload"] == {
        "kind": "superseded",
        "pith_number": new_pn,
        "arxiv_version": f"{paper}v2",
    }


def test_a_worker_error_stops_the_run_with_its_type_and_message(
    tmp_path: Path, key: Path, snapshot: Path
) -> None:
    # a store failure (the store's temporary directory is a file, so no object can be
    # written; a worker must write the bundle the store lost): only store, signer and
    # lease errors stop a run, and one in a worker surfaces as itself. (A path of one
    # paper occupied by the wrong kind of thing stops only that paper.)
    import shutil

    _ingest(tmp_path / "ref", key, snapshot, 1)
    first = json.loads(snapshot.read_text().splitlines()[0])["id"]
    pointer = json.loads((tmp_path / f"ref/arxiv/{first}.json").read_bytes())
    body = pointer["records"][0]["pith_number"].split(":")[2]
    for name in ("seq", "par"):
        shutil.copytree(tmp_path / "ref", tmp_path / name)
        (tmp_path / name / "pith" / body / "bundle.json").unlink()
        shutil.rmtree(tmp_path / name / "quarantine")  # the reference run's
        shutil.rmtree(tmp_path / name / ".tmp", ignore_errors=True)
        (tmp_path / name / ".tmp").write_bytes(b"x")

    def run(name: str, workers: int) -> tuple[StorageError, Publisher, Any]:
        pub = Publisher(LocalStore(tmp_path / name), load_signer(key), run_id="run-1")
        par = ParallelPublisher(pub, workers=workers, signer_spec=f"file:{key}", chunk_size=2, in_flight=1)
        items = list(iter_jsonl(snapshot)) * 3  # more than the parent reads before it fails
        with pytest.raises(StorageError) as info:
            par.publish(items)
        return info.value, pub, par

    seq_err, _, _ = run("seq", 1)
    par_err, pub, par = run("par", 2)
    assert str(par_err) == str(seq_err).replace(str(tmp_path / "seq"), str(tmp_path / "par"))
    assert f"{tmp_path / 'par' / '.tmp'}" in str(par_err) and "\n" not in str(par_err)
    # it stopped early, and the workers are shut down
    assert par.chunks_dispatched > 0 and not par.started and pub.summary.fetched < 99
    assert not (tmp_path / "par/quarantine").exists()


def test_a_worker_that_cannot_open_the_signer_fails_the_run(
    tmp_path: Path, key: Path, snapshot: Path
) -> None:
    pub = Publisher(LocalStore(tmp_path / "s"), load_signer(key), run_id="run-1")
    missing = tmp_path / "nowhere" / "pith-private-key.json"
    with (
        ParallelPublisher(pub, workers=2, signer_spec=f"file:{missing}", chunk_size=CHUNK) as par,
        pytest.raises(KeyFileError) as info,
    ):
        par.publish(iter_jsonl(snapshot))
    assert str(missing) in str(info.value) and par.chunks_dispatched > 0


def test_small_runs_and_unsendable_parts_stay_in_one_process(
    tmp_path: Path, key: Path, snapshot: Path
) -> None:
    store = LocalStore(tmp_path / "s")
    spec = f"file:{key}"
    assert sequential_reason(store, spec, system_clock) is None
    assert sequential_reason(store, spec, StepClock()) is None  # pickles (each worker a copy)
    assert "spec" in (sequential_reason(store, None, system_clock) or "")
    assert "certified" in (sequential_reason(store, f"certified:{spec}", system_clock) or "")
    assert "clock" in (sequential_reason(store, spec, lambda: StepClock()()) or "")

    class Elsewhere:
        url = "memory://"

    assert "reopened" in (
        sequential_reason(Elsewhere(), spec, system_clock)  # type: ignore[arg-type]
        or ""
    )
    no_spec = ParallelPublisher(Publisher(store, load_signer(key)), workers=2, signer_spec=None)
    assert no_spec.workers == 1

    # a paper's worker does not depend on the process (Python's hash() would)
    ids = [json.loads(x)["id"] for x in snapshot.read_text().splitlines() if x[:2] == '{"']
    code = (
        "import json, sys; from pith_pipeline.parallel import worker_for; "
        "print(json.dumps([worker_for(i, 2) for i in json.load(sys.stdin)]))"
    )
    other = subprocess.run(
        [sys.executable, "-c", code],
        input=json.dumps(ids),
        text=True,
        capture_output=True,
        check=True,
        env={**os.environ, "PYTHONHASHSEED": "12345"},
    )
    assert json.loads(other.stdout) == [worker_for(i, 2) for i in ids]
    assert set(json.loads(other.stdout)) == {0, 1}

    # fewer records than a chunk: published here, no process started
    small = ParallelPublisher(
        Publisher(store, load_signer(key)), workers=2, signer_spec=spec, chunk_size=1000
    )
    summary = small.publish(iter_jsonl(snapshot))
    assert summary.built == 31 and not small.started and small.chunks_dispatched == 0


def _cli_with_1_and_2_workers(
    tmp_path: Path, key: Path, command: str, option: str, source: Path
) -> list[str]:
    """Run `command` into stores tmp_path/1 and tmp_path/2 (chunks of CHUNK records)."""
    outputs = []
    for workers in ("1", "2"):
        result = CliRunner().invoke(
            cli,
            [
                command,
                option,
                str(source),
                "--store",
                str(tmp_path / workers),
                "--key",
                str(key),
                "--workers",
                workers,
            ],
            env={"PITH_WORKER_CHUNK": str(CHUNK)},
        )
        assert result.exit_code == 0, result.output
        outputs.append(result.output)
    return outputs


def test_cli_workers_2_publishes_the_same_bytes_as_workers_1(
    tmp_path: Path, key: Path, snapshot: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    starts: list[int] = []
    original = ParallelPublisher._start

    def spy(self: ParallelPublisher) -> None:
        starts.append(self.workers)
        original(self)

    monkeypatch.setattr(ParallelPublisher, "_start", spy)
    for output in _cli_with_1_and_2_workers(tmp_path, key, "ingest", "--snapshot", snapshot):
        assert "fetched 34, built 31, unchanged 1, superseded 1, quarantined 2" in output
    assert starts == [2]
    published = ("pith/", "events/", "arxiv/", "pith-signing-key.json", ".well-known/")
    one = {k: v for k, v in _tree(tmp_path / "1").items() if k.startswith(published)}
    two = {k: v for k, v in _tree(tmp_path / "2").items() if k.startswith(published)}
    assert one and one == two
    quarantined = [
        next((tmp_path / w / "quarantine").iterdir()).read_bytes().splitlines() for w in ("1", "2")
    ]
    strip = [[{k: v for k, v in json.loads(x).items() if k != "run_id"} for x in q] for q in quarantined]
    assert strip[0] == strip[1] and len(strip[0]) == 2
    shutil.rmtree(tmp_path / "1")


def test_a_certified_run_signs_with_one_key_in_every_worker(
    tmp_path: Path, key: Path, snapshot: Path
) -> None:
    from pith_pipeline.core.verify import verify_bundle
    from pith_pipeline.signing.factory import open_signer

    # SOURCE_DATE_EPOCH is set (autouse fixture): the certificate's window is on the
    # run's clock too, so the reproducible run's signatures fall inside it

    spec = f"certified:file:{key}"
    signer = open_signer(spec)
    handoff = signer.handoff(url="u")  # type: ignore[attr-defined]
    assert "seed" not in repr(handoff) and signer.key_id in repr(handoff)
    store = tmp_path / "s"
    with Ingest(
        LocalStore(store), signer, run_id="run-c", workers=2, signer_spec=spec, chunk_size=CHUNK
    ) as run:
        run.snapshot(snapshot)
    par = run.parallel
    assert par is not None and par.workers == 2 and len(par.worker_pids) == 2
    assert run.report.summary.built == 31  # 30 papers, one of them in two versions
    # one short-lived key for the whole run: the parent's, listed once beside its root
    doc = json.loads((store / "pith-signing-key.json").read_text())
    root = load_signer(key)
    assert [k["key_id"] for k in doc["keys"]] == [root.key_id, signer.key_id]
    events = [json.loads(p.read_bytes()) for p in (store / "events").rglob("*.json")]
    assert len(events) >= 60
    assert {e["signature"]["key_id"] for e in events} == {signer.key_id}
    bundles = sorted((store / "pith").glob("*/bundle.json"))
    assert len(bundles) == 31
    for path in bundles:
        report = verify_bundle(
            json.loads(path.read_bytes()), pinned_fingerprint=root.public_key_doc().fingerprint
        )
        assert report.ok, (path, report.failed)


def test_cli_build_with_workers_writes_the_same_store_as_one_process(
    tmp_path: Path, key: Path, snapshot: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pids: list[set[int]] = []
    original = ParallelPublisher.close

    def spy(self: ParallelPublisher) -> None:
        pids.append(set(self.worker_pids))
        original(self)

    monkeypatch.setattr(ParallelPublisher, "close", spy)
    for output in _cli_with_1_and_2_workers(tmp_path, key, "build", "--input", snapshot):
        assert "built 31" in output
    one, two = _tree(tmp_path / "1"), _tree(tmp_path / "2")
    # under SOURCE_DATE_EPOCH the run id is reproducible: every file is the same, the
    # quarantine and the run manifest listing every object included; the index tables'
    # Delta logs carry wall-clock times and random file names, so their rows are compared
    assert any(k.startswith("runs/") for k in one) and any(k.startswith("index/") for k in one)
    assert any(k.startswith("quarantine/") for k in one)
    assert {k: v for k, v in one.items() if not k.startswith("index/")} == {
        k: v for k, v in two.items() if not k.startswith("index/")
    }
    from pith_pipeline.index import run_query
    from pith_pipeline.storage.local import LocalStore

    for table in ("records", "events", "aliases"):
        rows = [
            sorted(run_query(LocalStore(tmp_path / n), f"SELECT * FROM {table}").rows, key=str)
            for n in ("1", "2")
        ]
        assert rows[0] == rows[1] and rows[0]
    assert set() in pids and any(len(p) == 2 for p in pids)  # two worker processes ran


def _alive(proc: psutil.Process) -> bool:
    """Running, as opposed to gone or a zombie waiting for a reaper that may never come
    (a container's PID 1 need not reap orphans)."""
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_workers_exit_when_the_parent_is_killed(tmp_path: Path, key: Path, sample_lines: list[str]) -> None:
    """Issue 16 item 10: after `kill -9` of the parent, its workers used to publish what
    they had queued and then block forever on the pool's pipe. They must exit soon: no
    writer may outlive the run that holds the lease. The bound below is generous (it
    is a liveness check, not a speed test)."""
    template = json.loads(sample_lines[0])
    records = [
        dict(
            template,
            id=f"2601.{n:05d}",
            title=f"Paper number {n}",
            versions=[{"version": "v1", "created": "Thu, 1 Jan 2026 00:00:00 GMT"}],
        )
        for n in range(1, 3001)
    ]
    snap = tmp_path / "many.jsonl"
    snap.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    store = tmp_path / "store"
    cmd = [sys.executable, "-m", "pith_pipeline", "build", "--input", str(snap), "--store", str(store)]
    cmd += ["--key", str(key), "--workers", "2", "--worker-chunk", "1"]
    with (tmp_path / "out.txt").open("wb") as out:
        parent = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    workers: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + 300
        # with one record per chunk, every bundle is a worker's: once one exists, the
        # workers are up and publishing
        while not any((store / "pith").glob("*/bundle.json")):
            assert parent.poll() is None, (tmp_path / "out.txt").read_text()
            assert time.monotonic() < deadline, "no worker published anything"
            time.sleep(0.1)
        workers = psutil.Process(parent.pid).children(recursive=True)
        assert workers  # the workers (and multiprocessing's resource tracker)
        parent.kill()
        parent.wait()
        gone_by = time.monotonic() + 60
        while any(_alive(w) for w in workers) and time.monotonic() < gone_by:
            time.sleep(0.2)
        left = [(w.pid, w.cmdline()) for w in workers if _alive(w)]
        assert not left, f"processes outlived their killed parent: {left}"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        for w in workers:  # only the processes this test started, by pid
            if _alive(w):
                w.kill()


class _RunOutLease:
    """The parent's lease as its workers must see it after the machine was suspended
    past the lease's TTL: the parent has not checked yet, but its time is up."""

    def check(self) -> None:
        pass

    def valid_until(self) -> float:
        return time.time() - 1.0


def test_workers_stop_once_the_parents_lease_has_run_out(tmp_path: Path, key: Path, snapshot: Path) -> None:
    """Issue 16 item 4: worker processes published without any lease check, so after
    a suspension past the TTL each went on with up to `IN_FLIGHT` chunks of papers
    beside the writer that took the lease over. They check the parent's lease
    (shared with them) before every write, as the parent does."""
    from pith_pipeline.storage.lease import LeaseLostError

    store = tmp_path / "s"
    pub = Publisher(LocalStore(store), load_signer(key), run_id="run-1", lease=_RunOutLease())
    with (
        ParallelPublisher(pub, workers=2, signer_spec=f"file:{key}", chunk_size=1) as par,
        pytest.raises(LeaseLostError, match="lease"),
    ):
        par.publish(iter_jsonl(snapshot))
    assert par.chunks_dispatched  # the papers went to the workers
    assert not (store / "events").exists() and not (store / "pith").exists()


def test_worker_processes_start_with_the_pool_not_with_their_first_chunk(
    tmp_path: Path, key: Path, snapshot: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a process starting (imports, store, signer) overlaps with the parent reading the
    # records meant for it: when its first chunk is handed over, it is already running
    running_at_first_chunk: dict[int, int] = {}
    original = ParallelPublisher._submit

    def spy(self: ParallelPublisher, w: int) -> None:
        assert self._pools is not None
        running_at_first_chunk.setdefault(w, len(self._pools[w]._processes))  # type: ignore[attr-defined]
        original(self, w)

    monkeypatch.setattr(ParallelPublisher, "_submit", spy)
    spec = f"file:{key}"
    par = ParallelPublisher(
        Publisher(LocalStore(tmp_path / "s"), load_signer(key)), workers=2, signer_spec=spec, chunk_size=10
    )
    with par:
        summary = par.publish(iter_jsonl(snapshot))
    assert summary.built == 31
    assert running_at_first_chunk == {0: 1, 1: 1}
