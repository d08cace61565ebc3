"""A property of the log (issue 26): whatever random sequence of runs, kills and lost
derived objects a store goes through, the documented reruns leave a store and log
that verify.

Each example is a fresh local store with the log on (`build --log-signer`, run in this
process through the real entry point). Its steps are drawn at random:

- a build over a random subset of the sample's records, each either with its last
  version held back or whole (so a later run supersedes an earlier one's state), and
  optionally a collaboration paper whose graph snapshot exceeds a tile entry (a
  hash-committed entry);
- such a build killed (SIGKILL, in process: `DyingStore`) at a random write, of the
  whole store or of the log only; the dead run's leases then expire (they are deleted);
- the loss of one derived object: a lookup object (`log/index/*`), a tile or entry
  bundle past every checkpoint seen (what a killed append left), a pending marker
  (`log/pending/*`), a bundle, a state or a `.well-known` copy;
- `log sync`.

Then the documented reruns: `rebuild` (when a bundle, state or copy was lost), each
killed run again (its rerun completes the store), the last run again, and `log sync`.
And then: `verify STORE` passes; every event in the event store is in the log exactly
once and nothing else is; every checkpoint seen during the sequence (even one a killed
run wrote) is consistent with the final one (an RFC 6962 consistency proof,
`tlog.merkle`), so the pipeline signed no fork; every tile and entry bundle such a
checkpoint named still holds the bytes it held then. Go's `golang.org/x/mod/sumdb/tlog`
checks the last example's final log once.

Pauses (a writer stopped past its lease while another proceeds) are not drawn here:
they need the lease code and real processes; `tests/test_chaos.py` covers them.

CI runs a fixed, derandomized handful of examples; `PITH_PROPERTY_EXAMPLES=N` runs N
(e.g. 200, locally).
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import tempfile
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from cli_in_process import run_cli
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from store_doubles import DyingStore, Killed
from test_go_interop import check_with_go, interop  # noqa: F401  (the fixture)
from test_large_entries import collaboration

from pith_pipeline.storage.local import LocalStore
from pith_pipeline.tlog.check import check_log_matches_event_store
from pith_pipeline.tlog.entry import entry_event_hex
from pith_pipeline.tlog.log import TileReader, iter_entries, read_checkpoint, store_fetch
from pith_pipeline.tlog.log_key import store_verifier
from pith_pipeline.tlog.merkle import verify_consistency
from pith_pipeline.tlog.stored_events import event_store_keys
from pith_pipeline.tlog.tiles import entries_path, tile_path, tiles_for_size

SAMPLE = Path(__file__).parent.parent / "data" / "arxiv-sample.jsonl"
EXAMPLES = int(os.environ.get("PITH_PROPERTY_EXAMPLES", "6"))
MAX_STEPS = 5
BIG = 3  # the sample line the collaboration paper is made from
DERIVED = ("lookup", "tile past checkpoint", "pending marker", "bundle", "state", "well-known")


# -- steps -----------------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    records: tuple[tuple[int, bool], ...]  # (sample line, whole: False holds the last version back)
    big: bool = False
    kill_at: int | None = None  # the write (0-based) the process dies at
    log_only: bool = False  # count only the log's writes


@dataclass(frozen=True)
class Lose:
    kind: str
    pick: int


@dataclass(frozen=True)
class Sync:
    pass


Step = Run | Lose | Sync


def _runs(lines: int) -> st.SearchStrategy[Run]:
    records = st.lists(st.tuples(st.integers(0, lines - 1), st.booleans()), min_size=1, max_size=6)
    return st.builds(
        Run,
        records=records.map(lambda rs: tuple(dict(rs).items())),  # one state per paper per run
        big=st.booleans(),
        kill_at=st.none() | st.integers(0, 120),
        log_only=st.booleans(),
    )


def _steps(lines: int) -> st.SearchStrategy[list[Step]]:
    step: st.SearchStrategy[Step] = st.one_of(
        _runs(lines),
        st.builds(Lose, st.sampled_from(DERIVED), st.integers(0, 10**6)),
        st.just(Sync()),
    )
    return st.lists(step, min_size=1, max_size=MAX_STEPS)


# -- one store -------------------------------------------------------------------


@dataclass
class World:
    root: Path
    keys: Path
    lines: list[str]
    cli: Any
    monkeypatch: pytest.MonkeyPatch
    checkpoints: list[bytes] = field(default_factory=list)
    named: dict[str, bytes] = field(default_factory=dict)  # what the checkpoints seen name
    last_run: Run | None = None
    killed: list[Run] = field(default_factory=list)
    lost_published: bool = False
    n: int = 0
    tally: Counter[str] = field(default_factory=Counter)  # what the sequences did, over examples

    @property
    def store(self) -> Path:
        return self.root / "store"

    def seen(self) -> None:
        cp = self.store / "log" / "checkpoint"
        if cp.is_file():
            data = cp.read_bytes()
            if not self.checkpoints or self.checkpoints[-1] != data:
                self.checkpoints.append(data)
                for key in named_tiles(int(data.split(b"\n")[1])):
                    self.named.setdefault(key, (self.store / key).read_bytes())

    def input_for(self, run: Run) -> Path:
        out = []
        for i, whole in run.records:
            if run.big and i == BIG:
                continue
            rec = json.loads(self.lines[i])
            if not whole and len(rec["versions"]) > 1:
                rec["versions"] = rec["versions"][:-1]
            out.append(json.dumps(rec))
        if run.big:
            self.tally["collaboration paper"] += 1
            out.append(json.dumps(collaboration(json.loads(self.lines[BIG]), 3000)))
        self.n += 1
        path = self.root / f"in{self.n}.jsonl"
        path.write_text("\n".join(out) + "\n", encoding="utf-8")
        return path

    def build(self, run: Run) -> None:
        path = self.input_for(run)
        argv = (
            "build",
            "--input",
            str(path),
            "--store",
            str(self.store),
            "--key",
            str(self.keys / "keys" / "pith-private-key.json"),
            "--log-signer",
            str(self.keys / "logkey" / "pith-private-key.json"),
            "--workers",
            "1",
        )
        if run.kill_at is None:
            r = self.cli(*argv)
            assert r.code == 0, f"{run}: {r.err}"
            self.last_run = run
            return
        with dying(self.monkeypatch, run.kill_at, ("log/",) if run.log_only else ("",)):
            try:
                r = self.cli(*argv)
            except Killed:
                event("a run killed")
                self.tally["killed"] += 1
                self.seen()
                self.expire_leases()
                self.killed.append(run)
                self.last_run = run
                return
        assert r.code == 0, f"{run} (past its last write): {r.err}"  # it outlived its kill point
        self.last_run = run

    def expire_leases(self) -> None:
        """What a killed writer's leases come to once their TTL passes."""
        shutil.rmtree(self.store / "leases", ignore_errors=True)

    def lose(self, step: Lose) -> None:
        store = LocalStore(str(self.store))
        keys = sorted(self._candidates(store, step.kind))
        if not keys:
            return
        store.delete(keys[step.pick % len(keys)])
        event(f"lost a {step.kind}")
        self.tally[step.kind] += 1
        if step.kind in ("bundle", "state", "well-known"):
            self.lost_published = True

    def _candidates(self, store: LocalStore, kind: str) -> Iterator[str]:
        if kind == "lookup":
            yield from store.list("log/index/")
        elif kind == "pending marker":
            yield from store.list("log/pending/")
        elif kind == "tile past checkpoint":
            self.seen()  # past every checkpoint signed so far: left by a killed append
            yield from (k for k in store.list("log/tile/") if k not in self.named)
        elif kind == "bundle":
            yield from (k for k in store.list("pith/") if k.endswith("/bundle.json"))
        elif kind == "state":
            yield from (k for k in store.list("pith/") if k.endswith("/state.json"))
        else:
            yield from store.list(".well-known/pith/")

    def sync(self) -> None:
        r = self.cli(
            "log",
            "sync",
            "--store",
            str(self.store),
            "--log-signer",
            str(self.keys / "logkey" / "pith-private-key.json"),
        )
        assert r.code == 0, r.err

    def finish(self) -> None:
        """The documented reruns."""
        if self.lost_published:
            r = self.cli(
                "rebuild",
                "--store",
                str(self.store),
                "--key",
                str(self.keys / "keys" / "pith-private-key.json"),
            )
            assert r.code == 0, r.out + r.err
        for run in [*self.killed, self.last_run]:  # a killed run's rerun completes it
            if run is not None:
                self.build(Run(run.records, run.big))
        self.seen()
        self.sync()
        self.seen()


def named_tiles(size: int) -> Iterator[str]:
    """The keys of the hash tiles and entry bundles a checkpoint of `size` names."""
    for level, index, width in tiles_for_size(size):
        yield "log/" + tile_path(level, index, width)
        if level == 0:
            yield "log/" + entries_path(index, width)


@contextmanager
def dying(monkeypatch: pytest.MonkeyPatch, at: int, only: tuple[str, ...]) -> Iterator[None]:
    """`build` opens its store as a `DyingStore` killed at its `at`-th write under `only`."""
    from pith_pipeline.storage.factory import open_store

    with monkeypatch.context() as m:
        m.setattr(
            "pith_pipeline.cli.options.open_store",
            lambda loc, **kw: DyingStore(open_store(loc, **kw), at, only),
        )
        yield


# -- the invariants ----------------------------------------------------------------


def assert_whole(world: World) -> None:
    r = world.cli("verify", str(world.store), "-q")
    assert r.code == 0, r.out + r.err
    store = LocalStore(str(world.store))
    assert check_log_matches_event_store(store) == []
    cp = read_checkpoint(store_fetch(store), store_verifier(store))
    assert cp is not None
    reader = TileReader(store_fetch(store), cp.size)
    logged = Counter(entry_event_hex(e) for _i, e in iter_entries(reader))
    events = Counter(k.rsplit("/", 1)[1].split(".")[0] for k in event_store_keys(store))
    assert logged == events  # each published event exactly once, and nothing else
    assert list(store.list("log/pending/")) == []
    for key, data in world.named.items():  # nothing a signed checkpoint names changed
        assert (world.store / key).is_file() and (world.store / key).read_bytes() == data, key
    root = reader.root()
    for old in world.checkpoints:  # no fork: the final tree extends every head seen
        _origin, size, old_root = old.decode().split("\n")[:3]
        n, was = int(size), base64.b64decode(old_root)
        assert n <= cp.size, f"the log shrank from {n} to {cp.size}"
        if n == cp.size:
            assert was == root, "two checkpoints of one size with different roots"
        elif n:
            proof = reader.consistency_proof(n)
            assert verify_consistency(n, cp.size, was, root, proof), f"checkpoint of size {n} is not extended"


def test_any_sequence_of_runs_kills_and_lost_objects_ends_in_a_store_and_log_that_verify(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    interop: Path,  # noqa: F811
) -> None:
    lines = SAMPLE.read_text(encoding="utf-8").splitlines()
    cli = lambda *a: run_cli(capsys, *a)  # noqa: E731
    keys = Path(tempfile.mkdtemp(prefix="pith-prop-keys-"))
    for d in ("keys", "logkey"):
        assert cli("keys", "generate", "--out", str(keys / d)).code == 0
    monkeypatch.delenv("PITH_LOG_SIGNER", raising=False)
    last: list[Path] = []
    tally: Counter[str] = Counter()

    @settings(
        max_examples=EXAMPLES,
        database=None,
        derandomize=True,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(steps=_steps(len(lines)))
    def sequence(steps: list[Step]) -> None:
        root = Path(tempfile.mkdtemp(prefix="pith-prop-"))
        world = World(root, keys, lines, cli, monkeypatch, tally=tally)
        try:
            world.build(Run(((0, False), (1, True))))  # a store with a log to start from
            world.seen()
            for step in steps:
                if isinstance(step, Run):
                    world.build(step)
                elif isinstance(step, Lose):
                    world.lose(step)
                else:
                    world.sync()
                world.seen()
            world.finish()
            try:
                assert_whole(world)
            except AssertionError as exc:
                raise AssertionError(f"steps {steps}: {exc}") from None
        except BaseException:
            shutil.rmtree(root, ignore_errors=True)
            raise
        for old in last:
            shutil.rmtree(old, ignore_errors=True)
        last[:] = [root]

    try:
        sequence()
        if EXAMPLES >= 6:  # the fixed examples CI runs do kill runs and lose objects
            assert tally["killed"] and tally["collaboration paper"], tally
            assert sum(tally.values()) > tally["killed"] + tally["collaboration paper"], tally
        # an independent implementation reads the last example's final log
        store = LocalStore(str(last[0] / "store"))
        cp = read_checkpoint(store_fetch(store), store_verifier(store))
        assert cp is not None
        got = check_with_go(
            interop,
            {
                "dir": str(last[0] / "store" / "log"),
                "vkey": store_verifier(store).vkey,
                "inclusion": [],
                "consistency": [],
            },
        )
        assert got.returncode == 0, got.stdout + got.stderr
        assert "ok tiles hash to the signed root" in got.stdout
    finally:
        for p in (*last, keys):
            shutil.rmtree(p, ignore_errors=True)


def test_a_run_after_a_lost_lookup_object_does_not_log_its_stored_events_twice(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Found by the property above: a run that writes events the store (and the log)
    already hold, after their lookup object was lost, appended them again."""
    lines = SAMPLE.read_text(encoding="utf-8").splitlines()
    for d in ("keys", "logkey"):
        assert run_cli(capsys, "keys", "generate", "--out", str(tmp_path / d)).code == 0
    world = World(tmp_path, tmp_path, lines, lambda *a: run_cli(capsys, *a), pytest.MonkeyPatch())
    world.build(Run(((0, False), (1, True))))
    for key in (world.store / "log" / "index").iterdir():
        key.unlink()
    world.build(Run(((0, True),)))  # its first versions' events are stored and logged
    world.sync()
    assert_whole(world)
