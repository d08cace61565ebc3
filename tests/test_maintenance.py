"""The maintenance check finds what `verify STORE` finds, reading only what changed.

`verify_changes` audits every paper the run manifests since its last clean check
touched (and a drift sample), with the audit's own checks; these tests damage each
kind of derived object and assert the check names it, and that a second check reads
only the papers of the runs that came after the first.
"""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest
from store_doubles import counting_gets
from testclock import StepClock

from pith_pipeline.core.canonical_json import dumps_pretty, loads
from pith_pipeline.core.keys import Ed25519Signer
from pith_pipeline.errors import VerificationError
from pith_pipeline.maintenance import WATERMARK_KEY, verify_changes, verify_sample
from pith_pipeline.publish import BuildConfig, Publisher
from pith_pipeline.runs.manifest import finish_run
from pith_pipeline.sources.jsonl import iter_jsonl
from pith_pipeline.storage.local import LocalStore

SAMPLE = Path(__file__).parent / "data" / "arxiv-sample.jsonl"
SIGNER = Ed25519Signer(b"\x05" * 32, "pith-maintenance-test")


def publish(store: LocalStore, lines: list[str], tmp: Path, run_id: str, day: int) -> list[str]:
    """One finished run of `lines` (bundles, pointers, indexes, manifest); its record IDs."""
    path = tmp / f"{run_id}.jsonl"
    path.write_text("".join(lines))
    clock = StepClock(datetime(2026, 1, day, tzinfo=UTC))
    summary = Publisher(store, SIGNER, BuildConfig(), clock=clock, run_id=run_id).publish(iter_jsonl(path))
    finish_run(store, summary, {"input": path.name}, clock=clock)
    return sorted({pn.rsplit(":", 1)[-1] for pn in summary.pith_numbers})


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str], list[str]]:
    """A store of two runs: the first half of the sample, then the second half."""
    tmp = tmp_path_factory.mktemp("maintenance")
    store = LocalStore(tmp / "store")
    lines = SAMPLE.read_text().splitlines(keepends=True)
    first = publish(store, lines[:15], tmp, "run-a", 5)
    second = publish(store, lines[15:], tmp, "run-b", 6)
    return store.root, first, second


@pytest.fixture
def two_runs(
    built: tuple[Path, list[str], list[str]], tmp_path: Path
) -> tuple[LocalStore, list[str], list[str]]:
    """A private copy of the built store, to damage."""
    root, first, second = built
    shutil.copytree(root, tmp_path / "store")
    return LocalStore(tmp_path / "store"), first, second


def failure(store: LocalStore, **kw: object) -> str:
    with pytest.raises(VerificationError) as exc:
        verify_changes(None, store=store, sample_size=0, seed="s", **kw)  # type: ignore[arg-type]
    return exc.value.message if hasattr(exc.value, "message") else str(exc.value)


def test_a_sound_store_passes_and_records_what_it_checked(
    two_runs: tuple[LocalStore, list[str], list[str]],
) -> None:
    store, first, second = two_runs
    result = verify_changes(None, store=store, sample_size=0, seed="s")
    assert result == {
        "runs_checked": 2,
        "papers_changed": len(set(first) | set(second)),
        "papers_sampled": 0,
        "failures": 0,
    }
    mark = loads(store.get(WATERMARK_KEY) or b"")
    assert mark["checked_runs"] == ["runs/run-a/manifest.json", "runs/run-b/manifest.json"]


def test_a_deleted_bundle_with_its_events_left_is_named_with_the_fix(
    two_runs: tuple[LocalStore, list[str], list[str]],
) -> None:
    store, first, _second = two_runs
    body = first[0]
    store.delete(f"pith/{body}/bundle.json")
    message = failure(store)
    assert f"pith/{body}/bundle.json: missing, but events/{body}/ holds" in message
    assert f"pith-pipeline rebuild --store {store.url}" in message


def test_a_re_serialised_state_is_named(two_runs: tuple[LocalStore, list[str], list[str]]) -> None:
    store, first, _second = two_runs
    key = f"pith/{first[1]}/state.json"
    store.put(key, dumps_pretty(loads(store.get(key) or b"")))  # same content, other bytes
    assert f"{key}: re-serialised" in failure(store)


def test_a_deleted_well_known_copy_is_named(two_runs: tuple[LocalStore, list[str], list[str]]) -> None:
    store, _first, second = two_runs
    key = f".well-known/pith/{second[0]}/bundle.json"
    store.delete(key)
    assert f"{key}: missing (the copy of pith/{second[0]}/bundle.json)" in failure(store)


def test_a_deleted_arxiv_pointer_is_named(two_runs: tuple[LocalStore, list[str], list[str]]) -> None:
    store, _first, _second = two_runs
    key = sorted(store.list("arxiv/"))[0]
    store.delete(key)
    assert f"{key}: missing, but bundles exist for" in failure(store)


def test_a_failed_check_keeps_reporting_until_fixed(
    two_runs: tuple[LocalStore, list[str], list[str]],
) -> None:
    store, first, _second = two_runs
    key = f"pith/{first[0]}/bundle.json"
    data = store.get(key) or b""
    store.delete(key)
    failure(store)
    assert store.get(WATERMARK_KEY) is None  # not advanced past the damaged paper
    assert f"{key}: missing" in failure(store)
    store.put(key, data)
    verify_changes(None, store=store, sample_size=0, seed="s")


def test_every_problem_is_counted_and_the_list_is_bounded(
    two_runs: tuple[LocalStore, list[str], list[str]],
) -> None:
    store, first, second = two_runs
    for body in first + second:
        store.delete(f".well-known/pith/{body}/bundle.json")
        store.delete(f"pith/{body}/state.json")
    n = 2 * len(set(first + second))
    message = failure(store)
    assert message.startswith(f"{n} problems in ")
    assert f"... and {n - 50} more" in message
    assert len(message.splitlines()) < 60


def test_a_second_check_reads_only_the_papers_of_the_new_runs(
    built: tuple[Path, list[str], list[str]], tmp_path: Path
) -> None:
    root, first, _second = built
    store = LocalStore(tmp_path / "store")
    lines = SAMPLE.read_text().splitlines(keepends=True)
    shutil.copytree(root, store.root)
    shutil.rmtree(store.root / "runs" / "run-b")  # only run-a is finished so far
    verify_changes(None, store=store, sample_size=0, seed="s")
    # damage an old paper no later run touches: only the drift sample may see it
    old = f".well-known/pith/{first[-1]}/bundle.json"
    store.delete(old)
    third = publish(store, lines[15:18], tmp_path, "run-c", 7)
    streamed: list[str] = []
    real_read_into = store.read_into
    store.read_into = lambda key, out: streamed.append(key) or real_read_into(key, out)  # type: ignore[method-assign]
    with counting_gets(store) as reads:
        result = verify_changes(None, store=store, sample_size=0, seed="s")
    del store.read_into
    papers = {k.split("/")[1] for k in reads if k.startswith("pith/")}
    assert papers - set(third) == set() and set(third) <= papers
    assert [k for k in reads + streamed if k.startswith("runs/")] == ["runs/run-c/manifest.json"]
    assert result["runs_checked"] == 1 and result["papers_changed"] == len(set(third))
    # the drift sample, drawn from the whole store, finds the old damage
    with pytest.raises(VerificationError, match=f"{old}: missing"):
        verify_changes(None, store=store, sample_size=100, seed="s")


def test_the_sample_is_drawn_from_events_so_a_deleted_bundle_can_be_drawn(
    two_runs: tuple[LocalStore, list[str], list[str]],
) -> None:
    store, first, _second = two_runs
    store.delete(f"pith/{first[0]}/bundle.json")
    with pytest.raises(VerificationError, match=f"pith/{first[0]}/bundle.json: missing"):
        verify_sample(None, size=1000, seed="s", store=store)  # type: ignore[arg-type]


def test_a_damaged_watermark_is_named(two_runs: tuple[LocalStore, list[str], list[str]]) -> None:
    from pith_pipeline.errors import IntegrityError

    store, _first, _second = two_runs
    store.put(WATERMARK_KEY, json.dumps({"format": "other"}).encode())
    with pytest.raises(IntegrityError, match="delete it to check every run again"):
        verify_changes(None, store=store, sample_size=0, seed="s")


def test_on_a_store_that_lists_from_a_key_the_sample_finds_old_damage(
    two_runs: tuple[LocalStore, list[str], list[str]],
) -> None:
    from pith_pipeline.maintenance import drift_sample
    from pith_pipeline.storage.memory import MemoryStore

    local, first, second = two_runs
    store = MemoryStore()
    for key in local.list(""):
        store.put(key, local.get(key) or b"")
    verify_changes(None, store=store, sample_size=0, seed="s")
    sample = drift_sample(store, 10, "s")
    assert len(sample) == 10 and set(sample) <= set(first) | set(second)
    store.delete(f"pith/{first[0]}/bundle.json")
    with pytest.raises(VerificationError, match=f"pith/{first[0]}/bundle.json: missing"):
        verify_changes(None, store=store, sample_size=200, seed="s")


def test_a_large_store_is_sampled_by_short_listings_not_listed_whole(
    two_runs: tuple[LocalStore, list[str], list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    from pith_pipeline import maintenance
    from pith_pipeline.storage.memory import MemoryStore

    local, first, second = two_runs
    store = MemoryStore()
    for key in local.list(""):
        store.put(key, local.get(key) or b"")
    assert maintenance.drift_sample(store, 1000, "s") == sorted(set(first) | set(second))  # small: all
    monkeypatch.setattr(maintenance, "_PAGE", 4)  # as if each prefix held more than a listing
    calls: list[int] = []
    real = store.list_after
    monkeypatch.setattr(store, "list_after", lambda p, a, n: calls.append(n) or real(p, a, n))
    monkeypatch.setattr(store, "list", lambda p: pytest.fail(f"listed {p} whole"))
    sample = maintenance.drift_sample(store, 5, "s")
    assert len(sample) == 5 and set(sample) <= set(first) | set(second)
    assert len(calls) <= 2 + 2 * 5


def test_the_rebuild_command_the_error_names_fixes_every_derived_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import re

    from cli_in_process import run_cli

    key = tmp_path / "k" / "pith-private-key.json"
    store_dir = tmp_path / "store"
    assert run_cli(capsys, "keys", "generate", "--out", str(key.parent)).code == 0
    built = run_cli(capsys, "build", "--input", str(SAMPLE), "--store", str(store_dir), "--signer", str(key))
    assert built.code == 0, built.err
    store = LocalStore(store_dir)
    bodies = sorted({k.split("/")[1] for k in store.list("pith/")})
    store.delete(f"pith/{bodies[0]}/bundle.json")
    state = f"pith/{bodies[1]}/state.json"
    store.put(state, dumps_pretty(loads(store.get(state) or b"")))
    store.delete(f".well-known/pith/{bodies[2]}/bundle.json")
    store.delete(sorted(store.list("arxiv/"))[-1])
    message = failure(store)
    # the deleted bundle leaves its state, copy and page orphaned
    assert message.startswith("7 problems in ")
    command = re.search(r"`pith-pipeline (rebuild [^`]*)`", message)
    assert command is not None
    args = command.group(1).replace("<private key>", str(key)).split()
    assert run_cli(capsys, *args).code == 0
    assert verify_changes(None, store=store, sample_size=0, seed="s")["failures"] == 0
    assert run_cli(capsys, "verify", str(store_dir)).code == 0


def test_a_large_run_manifest_is_scanned_to_the_same_scope_as_parsed(
    two_runs: tuple[LocalStore, list[str], list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    from pith_pipeline import maintenance

    store, first, _second = two_runs
    key = "runs/run-a/manifest.json"
    parsed = maintenance.manifest_scope(loads(store.get(key) or b""), key)
    assert parsed.bodies == set(parsed.events) == set(first) and parsed.arxiv_ids  # papers, pointers
    monkeypatch.setattr(maintenance, "MANIFEST_PARSE_BYTES", 0)
    assert maintenance._stored_manifest_scope(store, key, maintenance.Scope()) == parsed


def test_an_empty_store_passes(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "empty")
    assert verify_changes(None, store=store, sample_size=10, seed="s")["failures"] == 0


def test_a_paper_deleted_whole_is_named_from_the_manifest_that_published_it(
    two_runs: tuple[LocalStore, list[str], list[str]],
) -> None:
    store, first, _second = two_runs
    body = first[0]
    for prefix in (f"events/{body}/", f"pith/{body}/", f".well-known/pith/{body}/"):
        for key in list(store.list(prefix)):
            store.delete(key)
    message = failure(store)
    assert f"events/{body}/: missing: runs/run-a/manifest.json lists its events, and none is left" in message
    assert "are not derived (events, key document): rebuild cannot fix them" in message
