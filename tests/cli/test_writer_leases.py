"""Writer leases as users meet them: concurrent commands on one store, real processes.

Why processes: the defects these tests pin (two builds of one input giving a paper
two `record_created` events; a builder silently taking over another's papers) only
show when two independent writers interleave, as two `build` commands or two Airflow
tasks do.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from pith_pipeline.storage.lease import shard_of, writer_lease
from pith_pipeline.storage.local import LocalStore

ROOT = Path(__file__).resolve().parents[2]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PITH_")}
    return {**env, "PITH_WORKERS": "1"}


def start(*args: str, cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "pith_pipeline", *args],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
    )


def finish(p: subprocess.Popen[str]) -> tuple[int, str, str]:
    out, err = p.communicate(timeout=600)
    return p.returncode, out, err


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("leases")
    records = d / "records.jsonl"
    subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "gen_records.py"), "--n", "300", "--out", str(records)],
        check=True,
    )
    r = subprocess.run(
        [sys.executable, "-m", "pith_pipeline", "keys", "generate", "--out", str(d / "keys")],
        capture_output=True,
        text=True,
        env=_env(),
    )
    assert r.returncode == 0, r.stderr
    return {"records": records, "key": d / "keys" / "pith-private-key.json"}


def build_args(inputs: dict[str, Path], store: Path, *extra: str) -> list[str]:
    return [
        "build",
        "--input",
        str(inputs["records"]),
        "--store",
        str(store),
        "--key",
        str(inputs["key"]),
        *extra,
    ]


def created_per_paper(store: Path) -> dict[str, int]:
    counts: dict[str, int] = {}
    for path in (store / "events").glob("*/*.json"):
        event: dict[str, Any] = orjson.loads(path.read_bytes())
        if event["event_type"] == "record_created":
            counts[path.parent.name] = counts.get(path.parent.name, 0) + 1
    return counts


def papers_in(records: Path) -> int:
    """A snapshot line is one paper at its latest version: one record_created each."""
    return sum(1 for line in records.read_bytes().splitlines() if line.strip())


def test_two_builds_of_the_same_papers_take_turns(tmp_path: Path, inputs: dict[str, Path]) -> None:
    store = tmp_path / "store"
    a = start(*build_args(inputs, store, "--wait", "300"), cwd=tmp_path)
    b = start(*build_args(inputs, store, "--wait", "300"), cwd=tmp_path)
    (ra, _oa, ea), (rb, _ob, eb) = finish(a), finish(b)
    assert (ra, rb) == (0, 0), ea + eb
    created = created_per_paper(store)
    assert len(created) == papers_in(inputs["records"])
    assert set(created.values()) == {1}, {k: v for k, v in created.items() if v != 1}
    assert not list((store / "leases").glob("*.json")), "leases are released at the end"


def test_a_busy_store_is_named_and_fails_with_exit_75(tmp_path: Path, inputs: dict[str, Path]) -> None:
    store = tmp_path / "store"
    with writer_lease(LocalStore(store), command="test holder", run_id="held-by-test"):
        code, _out, err = finish(start(*build_args(inputs, store), cwd=tmp_path))
    assert code == 75, err
    assert "held-by-test" in err and f"pid {os.getpid()}" in err and "--wait" in err
    assert "Traceback" not in err
    assert not (store / "pith").exists(), "nothing was published without the lease"


def test_writers_of_disjoint_shards_proceed_together(tmp_path: Path, inputs: dict[str, Path]) -> None:
    store = tmp_path / "store"
    # another writer holds shard 3 for the whole test: the builders never need it
    with writer_lease(LocalStore(store), command="test holder", shards=[3]):
        a = start(*build_args(inputs, store, "--shards", "0-2,4-7"), cwd=tmp_path)
        b = start(*build_args(inputs, store, "--shards", "8-15"), cwd=tmp_path)
        (ra, oa, ea), (rb, ob, eb) = finish(a), finish(b)
    assert (ra, rb) == (0, 0), ea + eb
    assert "skipped" in oa and "skipped" in ob
    ids = [orjson.loads(line)["id"] for line in inputs["records"].read_bytes().splitlines() if line]
    expected = {i for i in ids if shard_of(i) != 3}
    published = {
        p.relative_to(store / "arxiv").as_posix().removesuffix(".json")
        for p in (store / "arxiv").rglob("*.json")
    }
    assert published == expected
    assert set(created_per_paper(store).values()) == {1}


def test_a_paper_whose_events_were_all_deleted_is_not_rebuilt_as_new_and_exits_3(
    tmp_path: Path, inputs: dict[str, Path]
) -> None:
    """Every event of a paper (and its pointer) deleted, its bundle left: the build
    does not take the paper for new (a fresh record_created replacing the bundle that
    lists the lost events); it names the bundle and exits 3, the bundle unchanged."""
    import shutil

    store = tmp_path / "store"
    code, _out, err = finish(start(*build_args(inputs, store), cwd=tmp_path))
    assert code == 0, err
    pointer = next(
        p
        for p in sorted((store / "arxiv").rglob("*.json"))
        if len(orjson.loads(p.read_bytes())["records"]) == 1
    )
    body = orjson.loads(pointer.read_bytes())["latest"].split(":")[-1]
    bundle = store / "pith" / body / "bundle.json"
    before = bundle.read_bytes()
    shutil.rmtree(store / "events" / body)
    pointer.unlink()
    code, out, err = finish(start(*build_args(inputs, store), cwd=tmp_path))
    assert code == 3, out + err
    assert f"pith/{body}/" in err and "holds no event" in err
    assert bundle.read_bytes() == before
    assert not (store / "events" / body).exists()


def test_a_damaged_stored_event_stops_only_its_paper_and_exits_3(
    tmp_path: Path, inputs: dict[str, Path]
) -> None:
    store = tmp_path / "store"
    code, _out, err = finish(start(*build_args(inputs, store), cwd=tmp_path))
    assert code == 0, err
    victim = sorted((store / "events").glob("*/*.json"))[0]
    victim.write_bytes(b"not json at all")
    code, out, err = finish(start(*build_args(inputs, store), cwd=tmp_path))
    assert code == 3, out + err
    rel = victim.relative_to(store).as_posix()
    assert rel in err and "verify" in err
    assert "Traceback" not in err
    assert "failed 1" in out and "run manifest:" in out


def backfill_args(inputs: dict[str, Path], store: Path, *extra: str) -> list[str]:
    return [
        "backfill",
        "--from",
        "1990-01-01",
        "--until",
        "2030-01-01",
        "--source",
        "snapshot",
        "--snapshot",
        str(inputs["records"]),
        "--store",
        str(store),
        "--key",
        str(inputs["key"]),
        "--no-progress",
        *extra,
    ]


def test_backfill_takes_wait_as_every_writing_command_does(tmp_path: Path, inputs: dict[str, Path]) -> None:
    """`backfill` had no `--wait`: it took the DAG tasks' default, 30 minutes, so a busy
    store kept an operator's command waiting where `build` fails at once naming the
    holder. It fails at once too (exit 75), and with `--wait` it waits, saying so."""
    store = tmp_path / "store"
    with writer_lease(LocalStore(store), command="test holder", run_id="held-by-test"):
        code, _out, err = finish(start(*backfill_args(inputs, store), cwd=tmp_path))
        assert code == 75, err
        assert "held-by-test" in err and "--wait" in err and "Traceback" not in err
        code, _out, err = finish(start(*backfill_args(inputs, store, "--wait", "1"), cwd=tmp_path))
        assert code == 75, err
        assert "waiting for lease" in err and "held-by-test" in err, err
    assert not (store / "pith").exists(), "nothing was published without the lease"
    code, out, err = finish(start(*backfill_args(inputs, store, "--wait", "5"), cwd=tmp_path))
    assert code == 0, err
    assert "windows" in out
