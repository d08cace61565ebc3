"""Publishing through a store: idempotent, reproducible, superseding, quarantining."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from testclock import StepClock

from pith_pipeline.core.canonical_json import dumps_compact
from pith_pipeline.core.keys import Ed25519Signer
from pith_pipeline.core.verify import verify_bundle
from pith_pipeline.publish import EVENTS_THEN_BUNDLE, ONE_PASS, BuildConfig, Publisher, RecordBuilder
from pith_pipeline.sources.jsonl import iter_jsonl
from pith_pipeline.storage.local import LocalStore

SIGNER = Ed25519Signer(bytes(range(32)), "pipeline-test")


def snapshot(root: Path) -> dict[str, tuple[bytes, int]]:
    return {
        str(p.relative_to(root)): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def publish(root: Path, path: Path, start: datetime | None = None, builder: RecordBuilder = ONE_PASS) -> Any:
    pub = Publisher(
        LocalStore(root),
        SIGNER,
        BuildConfig(),
        clock=StepClock(start or datetime(2026, 7, 1, tzinfo=UTC)),
        run_id="run-1",
        builder=builder,
    )
    return pub.publish(iter_jsonl(path))


def test_second_run_changes_no_published_file(tmp_path: Path, asset) -> None:  # type: ignore[no-untyped-def]
    store = tmp_path / "store"
    first = publish(store, asset("arxiv-sample.jsonl"))
    assert (first.built, first.unchanged, first.quarantined) == (30, 0, 0)
    before = snapshot(store)
    second = publish(store, asset("arxiv-sample.jsonl"), datetime(2026, 8, 1, tzinfo=UTC))
    assert (second.built, second.unchanged) == (0, 30)
    assert snapshot(store) == before
    assert second.written == {}


def test_everything_published_verifies(tmp_path: Path, asset) -> None:  # type: ignore[no-untyped-def]
    publish(tmp_path, asset("arxiv-sample.jsonl"))
    bundles = sorted(tmp_path.glob("pith/*/bundle.json"))
    assert len(bundles) == 30
    for b in bundles:
        bundle = json.loads(b.read_bytes())
        assert verify_bundle(bundle, pinned_fingerprint=SIGNER.fingerprint).ok, b
        body = b.parent.name
        assert (tmp_path / ".well-known/pith" / body / "bundle.json").read_bytes() == b.read_bytes()
        assert json.loads((b.parent / "state.json").read_bytes()) == bundle["state"]
        assert len(list((tmp_path / "events" / body).glob("*.json"))) == 2
    keydoc = json.loads((tmp_path / "pith-signing-key.json").read_bytes())
    assert keydoc["key_id"] == "pipeline-test" and keydoc["fingerprint_sha256_hex"] == SIGNER.fingerprint


def _version(obj: dict[str, Any], n: int, title: str | None = None) -> dict[str, Any]:
    out = dict(
        obj,
        versions=[{"version": f"v{i}", "created": obj["versions"][0]["created"]} for i in range(1, n + 1)],
    )
    if title:
        out["title"] = title
    return out


def test_new_version_supersedes_previous(tmp_path: Path, sample_lines: list[str]) -> None:
    obj = json.loads(sample_lines[-1])  # 2606.00972 v1
    v1 = tmp_path / "v1.jsonl"
    v2 = tmp_path / "v2.jsonl"
    v1.write_text(json.dumps(obj) + "\n")
    v2.write_text(json.dumps(_version(obj, 2, obj["title"] + " (revised)")) + "\n")
    store = tmp_path / "store"
    s1 = publish(store, v1)
    s2 = publish(store, v2, datetime(2026, 9, 1, tzinfo=UTC))
    assert (s2.built, s2.superseded) == (1, 1)
    old_body = s1.pith_numbers[0].split(":")[2]
    new_body = s2.pith_numbers[0].split(":")[2]
    old = json.loads((store / "pith" / old_body / "bundle.json").read_bytes())
    new = json.loads((store / "pith" / new_body / "bundle.json").read_bytes())
    assert new["events"][0]["supersedes"] == [old["events"][0]["event_id"]]
    corrections = old["state"]["current"]["corrections"]
    assert corrections[0]["payload"] == {
        "kind": "superseded",
        "pith_number": s2.pith_numbers[0],
        "arxiv_version": "2606.00972v2",
    }
    pointer = json.loads((store / "arxiv/2606.00972.json").read_bytes())
    assert pointer["latest"] == s2.pith_numbers[0]
    assert verify_bundle(old).ok and verify_bundle(new).ok
    # replaying v1 later does not un-supersede anything
    s3 = publish(store, v1, datetime(2026, 10, 1, tzinfo=UTC))
    assert s3.unchanged == 1 and s3.built == 0


def test_first_computed_at_is_kept(tmp_path: Path, asset) -> None:  # type: ignore[no-untyped-def]
    publish(tmp_path, asset("arxiv-1909.11150.jsonl"))
    b = next(tmp_path.glob("pith/*/bundle.json"))
    before = json.loads(b.read_bytes())["events"][0]["payload"]["receipt"]["first_computed_at"]
    (b).unlink()  # a run that died after the events were written
    s = publish(tmp_path, asset("arxiv-1909.11150.jsonl"), datetime(2027, 1, 1, tzinfo=UTC))
    assert s.unchanged == 1
    after = json.loads(b.read_bytes())["events"][0]["payload"]["receipt"]["first_computed_at"]
    assert before == after


def test_bad_records_are_quarantined_and_the_rest_built(tmp_path: Path, sample_lines: list[str]) -> None:
    good = [json.loads(x) for x in sample_lines[:3]]
    no_title = dict(json.loads(sample_lines[3]), title=None)
    bad_date = dict(json.loads(sample_lines[4]), versions=[{"version": "v1", "created": "yesterday-ish"}])
    bad_cats = dict(json.loads(sample_lines[5]), categories="physics.acc-ph, hep/th")
    lines = [
        json.dumps(good[0]),
        json.dumps(no_title),
        "{not json",
        json.dumps(good[1]),
        json.dumps(bad_date),
        json.dumps(bad_cats),
        json.dumps(good[2]),
    ]
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join(lines) + "\n")
    summary = publish(tmp_path / "store", path)
    assert (summary.fetched, summary.built, summary.quarantined) == (7, 3, 4)
    q = [json.loads(x) for x in (tmp_path / "store/quarantine/run-1.jsonl").read_text().splitlines()]
    assert [(e["where"], e["record_id"], e["field"]) for e in q] == [
        ("in.jsonl:2", no_title["id"], "title"),
        ("in.jsonl:3", None, None),
        ("in.jsonl:5", bad_date["id"], "versions[v1].created"),
        ("in.jsonl:6", bad_cats["id"], "categories"),
    ]
    assert "invalid JSON" in q[1]["reason"] and q[1]["raw"] == "{not json"
    assert all(e["reason"] and e["raw"] for e in q)


class DiesOnCorrection(LocalStore):
    """A store whose process 'dies' when the superseded record's correction is written."""

    def __init__(self, root: Path, old_body: str) -> None:
        super().__init__(root)
        self.old_body = old_body

    def put_once(self, key: str, data: bytes, *, content_type: str = "application/json") -> bool:
        if key.startswith(f"events/{self.old_body}/"):
            raise KeyboardInterrupt("killed")
        return super().put_once(key, data, content_type=content_type)


def test_supersede_interrupted_before_the_correction_is_finished_on_rerun(
    tmp_path: Path, sample_lines: list[str]
) -> None:
    import pytest

    obj = json.loads(sample_lines[-1])
    v1, v2 = tmp_path / "v1.jsonl", tmp_path / "v2.jsonl"
    v1.write_text(json.dumps(obj) + "\n")
    v2.write_text(json.dumps(_version(obj, 2)) + "\n")
    store = tmp_path / "store"
    old = publish(store, v1).pith_numbers[0]
    old_body = old.split(":")[2]
    pub = Publisher(
        DiesOnCorrection(store, old_body),
        SIGNER,
        BuildConfig(),
        clock=StepClock(datetime(2026, 9, 1, tzinfo=UTC)),
        run_id="dies",
    )
    with pytest.raises(KeyboardInterrupt):
        pub.publish(iter_jsonl(v2))
    stale = json.loads((store / "pith" / old_body / "bundle.json").read_bytes())
    assert stale["state"]["current"]["corrections"] == []
    again = publish(store, v2, datetime(2026, 9, 2, tzinfo=UTC))
    assert (again.unchanged, again.superseded) == (1, 1)
    fixed = json.loads((store / "pith" / old_body / "bundle.json").read_bytes())
    new = json.loads((store / "arxiv/2606.00972.json").read_bytes())["latest"]
    assert [c["payload"]["pith_number"] for c in fixed["state"]["current"]["corrections"]] == [new]
    assert verify_bundle(fixed).ok
    assert publish(store, v2, datetime(2026, 9, 3, tzinfo=UTC)).superseded == 0


def _corrections(store: Path, pith_number: str) -> list[str]:
    body = pith_number.split(":")[2]
    bundle = json.loads((store / "pith" / body / "bundle.json").read_bytes())
    return [c["payload"]["pith_number"] for c in bundle["state"]["current"]["corrections"]]


def test_a_newer_version_built_first_is_still_linked_when_the_older_arrives(
    tmp_path: Path, sample_lines: list[str]
) -> None:
    obj = json.loads(sample_lines[-1])
    v1, v2, v3 = (tmp_path / f"v{n}.jsonl" for n in (1, 2, 3))
    v1.write_text(json.dumps(obj) + "\n")
    v2.write_text(json.dumps(_version(obj, 2, obj["title"] + " (revised)")) + "\n")
    v3.write_text(json.dumps(_version(obj, 3, obj["title"] + " (again)")) + "\n")
    store = tmp_path / "store"
    new = publish(store, v3).pith_numbers[0]  # v3 first, then v1, then v2: any order
    old = publish(store, v1, datetime(2026, 8, 1, tzinfo=UTC)).pith_numbers[0]
    mid = publish(store, v2, datetime(2026, 9, 1, tzinfo=UTC)).pith_numbers[0]
    assert new in _corrections(store, old) and mid in _corrections(store, old)
    assert _corrections(store, mid) == [new] and _corrections(store, new) == []
    pointer = json.loads((store / "arxiv/2606.00972.json").read_bytes())
    assert pointer["latest"] == new
    again = publish(store, v1, datetime(2026, 10, 1, tzinfo=UTC))
    assert (again.unchanged, again.superseded, again.written) == (1, 0, {})  # nothing left to repair
    for b in store.glob("pith/*/bundle.json"):
        assert verify_bundle(json.loads(b.read_bytes())).ok, b


def test_an_unexpected_error_in_one_record_quarantines_it_and_builds_the_rest(
    tmp_path: Path, sample_lines: list[str], monkeypatch: Any
) -> None:
    from pith_pipeline.core.builder import Identity

    victim = json.loads(sample_lines[1])["id"]
    real = Identity.of

    def hostile(rec: Any) -> Any:
        if rec.id == victim:
            raise OverflowError("integer beyond what the canonical form allows")
        return real(rec)

    monkeypatch.setattr(Identity, "of", staticmethod(hostile))
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join(sample_lines[:3]) + "\n")
    summary = publish(tmp_path / "store", path)
    assert (summary.fetched, summary.built, summary.quarantined) == (3, 2, 1)
    (entry,) = [json.loads(x) for x in (tmp_path / "store/quarantine/run-1.jsonl").read_text().splitlines()]
    assert entry["record_id"] == victim and "OverflowError" in entry["reason"]
    assert json.loads(entry["raw"])["id"] == victim  # the record as parsed, kept whole


def test_a_damaged_stored_event_stops_that_paper_only_and_names_the_object(
    tmp_path: Path, sample_lines: list[str]
) -> None:
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join(sample_lines[:3]) + "\n")
    store = tmp_path / "store"
    first = publish(store, path)
    body = first.pith_numbers[0].split(":")[2]
    damaged = sorted((store / "events" / body).iterdir())[0]
    damaged.write_bytes(b"\x00 not json")
    bundle_before = (store / "pith" / body / "bundle.json").read_bytes()
    again = publish(store, path, datetime(2026, 8, 1, tzinfo=UTC))
    assert (again.failed, again.unchanged) == (1, 2)
    assert f"events/{body}/{damaged.name}" in again.problems[0] and "not valid JSON" in again.problems[0]
    assert (store / "pith" / body / "bundle.json").read_bytes() == bundle_before  # not re-derived


def test_concurrent_writers_keep_each_others_keys_in_the_key_document(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    other = Ed25519Signer(bytes(range(1, 33)), "pipeline-test-2")
    a = Publisher(store, SIGNER, run_id="a")
    b = Publisher(store, other, run_id="b")  # both read the (empty) document first
    a.publish_key_document()
    b.publish_key_document()
    doc = json.loads((tmp_path / "pith-signing-key.json").read_bytes())
    assert sorted(k["key_id"] for k in doc["keys"]) == ["pipeline-test", "pipeline-test-2"]


def test_a_rerun_restores_a_state_or_well_known_copy_a_killed_run_left_out(
    tmp_path: Path, asset: Any
) -> None:
    """A kill between the bundle and its copies must not leave the paper short for good."""
    store = tmp_path / "store"
    publish(store, asset("arxiv-sample.jsonl"))
    bundles = sorted(store.glob("pith/*/bundle.json"))
    state = bundles[0].parent / "state.json"
    well_known = store / ".well-known/pith" / bundles[1].parent.name / "bundle.json"
    expected = {state: state.read_bytes(), well_known: well_known.read_bytes()}
    state.unlink()
    well_known.unlink()
    second = publish(store, asset("arxiv-sample.jsonl"), datetime(2026, 8, 1, tzinfo=UTC))
    assert second.unchanged == 30
    assert {p: p.read_bytes() for p in expected} == expected


class DiesOnOldBundle(LocalStore):
    """Dies after the correction event is stored, before the old bundle lists it."""

    def __init__(self, root: Path, old_body: str) -> None:
        super().__init__(root)
        self.old_body = old_body

    def put(self, key: str, data: bytes, *, content_type: str = "application/json") -> None:
        if key == f"pith/{self.old_body}/bundle.json":
            raise KeyboardInterrupt("killed")
        super().put(key, data, content_type=content_type)


def test_a_correction_stored_but_not_yet_in_its_bundle_is_added_on_rerun(
    tmp_path: Path, sample_lines: list[str]
) -> None:
    """Found by the chaos test: the correction event exists, so nothing rewrote the old
    bundle, which never listed it (verify STORE: 'bundle does not list it')."""
    import pytest

    obj = json.loads(sample_lines[-1])
    v1, v2 = tmp_path / "v1.jsonl", tmp_path / "v2.jsonl"
    v1.write_text(json.dumps(obj) + "\n")
    v2.write_text(json.dumps(_version(obj, 2)) + "\n")
    store = tmp_path / "store"
    old = publish(store, v1).pith_numbers[0]
    old_body = old.split(":")[2]
    pub = Publisher(
        DiesOnOldBundle(store, old_body),
        SIGNER,
        BuildConfig(),
        clock=StepClock(datetime(2026, 9, 1, tzinfo=UTC)),
        run_id="dies",
    )
    with pytest.raises(KeyboardInterrupt):
        pub.publish(iter_jsonl(v2))
    assert _corrections(store, old) == []  # the event is stored, the bundle is stale
    publish(store, v2, datetime(2026, 9, 2, tzinfo=UTC))  # only the new version again
    new = json.loads((store / "arxiv/2606.00972.json").read_bytes())["latest"]
    assert _corrections(store, old) == [new]
    assert verify_bundle(json.loads((store / "pith" / old_body / "bundle.json").read_bytes())).ok


@pytest.mark.parametrize("builder", [ONE_PASS, EVENTS_THEN_BUNDLE], ids=["one-pass", "events-then-bundle"])
def test_a_record_whose_index_row_does_not_fit_is_quarantined_before_publishing(
    tmp_path: Path, asset: Any, monkeypatch: Any, builder: RecordBuilder
) -> None:
    """Index rows are checked against the schemas before anything of a record is
    published, on either way of building it: one record can never make the index
    unbuildable."""
    from pith_pipeline.errors import InputError
    from pith_pipeline.index import rows

    real = rows.check_bundle

    def check(bundle: dict[str, Any]) -> Any:
        if bundle["pith_number"] == victim[0]:
            raise InputError("value out of range for int32", field="version")
        return real(bundle)

    first = publish(tmp_path / "probe", asset("arxiv-sample.jsonl"), builder=builder)
    victim = [sorted(first.pith_numbers)[3]]
    monkeypatch.setattr(rows, "check_bundle", check)
    store = tmp_path / "store"
    summary = publish(store, asset("arxiv-sample.jsonl"), builder=builder)
    assert (summary.built, summary.quarantined) == (29, 1)
    body = victim[0].split(":")[2]
    assert not (store / "events" / body).exists() and not (store / "pith" / body).exists()
    entry = json.loads((store / "quarantine/run-1.jsonl").read_text().splitlines()[0])
    assert "int32" in json.dumps(entry)


def test_a_paper_killed_between_its_two_events_gets_its_graph_snapshot_on_rerun(
    tmp_path: Path, asset: Any
) -> None:
    """A kill after `record_created` but before `graph_snapshot` must not leave the paper
    with one event for good: the rerun completes it with the same snapshot."""
    store = tmp_path / "store"
    publish(store, asset("arxiv-sample.jsonl"))
    bundle_path = sorted(store.glob("pith/*/bundle.json"))[0]
    body = bundle_path.parent.name
    original = json.loads(bundle_path.read_text())
    snapshot_event = next(e for e in original["events"] if e["event_type"] == "graph_snapshot")
    (store / "events" / body / f"{snapshot_event['content_sha256']}.json").unlink()
    for p in (
        bundle_path,
        bundle_path.parent / "state.json",
        store / ".well-known/pith" / body / "bundle.json",
    ):
        p.unlink()
    second = publish(store, asset("arxiv-sample.jsonl"), datetime(2026, 8, 1, tzinfo=UTC))
    assert second.unchanged == 30
    rebuilt = json.loads(bundle_path.read_text())
    assert verify_bundle(rebuilt).ok
    assert [e["event_id"] for e in rebuilt["events"]] == [e["event_id"] for e in original["events"]]
    assert rebuilt["state"] == original["state"]


def test_a_rerun_replaces_a_stale_state_or_well_known_copy_a_killed_run_left_behind(
    tmp_path: Path, asset: Any
) -> None:
    """Killed between a bundle's rewrite and its copies: the copies hold the old bytes."""
    store = tmp_path / "store"
    publish(store, asset("arxiv-sample.jsonl"))
    bundles = sorted(store.glob("pith/*/bundle.json"))
    state = bundles[0].parent / "state.json"
    well_known = store / ".well-known/pith" / bundles[1].parent.name / "bundle.json"
    expected = {state: state.read_bytes(), well_known: well_known.read_bytes()}
    state.write_bytes(b'{"stale": true}')
    # another paper's bundle: not this one (a new file, as the store writes: in a
    # directory store the copy is a hard link to the bundle, so writing into it in
    # place would change the bundle too)
    well_known.unlink()
    well_known.write_bytes(bundles[0].read_bytes())
    second = publish(store, asset("arxiv-sample.jsonl"), datetime(2026, 8, 1, tzinfo=UTC))
    assert second.unchanged == 30
    assert {p: p.read_bytes() for p in expected} == expected


class _LostAfter:
    """A writer lease that is lost after `n` checks pass: a run suspended (a paused VM,
    SIGSTOP) past its lease's TTL while it was building a paper, then resumed."""

    def __init__(self, n: int) -> None:
        self.n = n

    def check(self) -> None:
        self.n -= 1
        if self.n < 0:
            from pith_pipeline.storage.lease import LeaseLostError

            raise LeaseLostError("lease lost")


def test_a_lease_lost_while_a_paper_is_built_stops_before_the_paper_writes_anything(
    tmp_path: Path, asset: Any
) -> None:
    """Issue 16 item 4: the lease used to be checked once per paper, so a writer
    resumed after losing its lease still wrote the paper it was building: its own
    `record_created` beside the next writer's (two for one version, found by a
    SIGSTOP test). Each write checks it now."""
    import pytest

    from pith_pipeline.storage.lease import LeaseLostError

    pub = Publisher(LocalStore(tmp_path), SIGNER, BuildConfig(), run_id="run-1", lease=_LostAfter(1))
    with pytest.raises(LeaseLostError):
        pub.publish(iter_jsonl(asset("arxiv-sample.jsonl")))
    assert not (tmp_path / "events").exists() and not (tmp_path / "pith").exists()


def test_a_pointer_listing_another_papers_record_stops_that_paper(
    tmp_path: Path, sample_lines: list[str]
) -> None:
    """A tampered pointer naming another paper's genuine record is never trusted: no
    correction is signed across papers, and the paper is named as not published."""
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join(sample_lines[:3]) + "\n")
    store = tmp_path / "store"
    publish(store, path)
    first, second = sorted((store / "arxiv").rglob("*.json"))[:2]
    doc, other = json.loads(first.read_bytes()), json.loads(second.read_bytes())
    doc["records"], doc["latest"] = other["records"], other["latest"]
    first.write_bytes(json.dumps(doc).encode())
    before = snapshot(store / "events")
    again = publish(store, path, datetime(2026, 8, 1, tzinfo=UTC))
    assert again.failed == 1 and f"arxiv/{doc['arxiv_id']}.json" in again.problems[0]
    assert snapshot(store / "events") == before  # nothing signed from it


def _event_of(store: Path, kind: str) -> Path:
    for p in sorted(store.glob("events/*/*.json")):
        if json.loads(p.read_bytes())["event_type"] == kind:
            return p
    raise AssertionError(kind)


def _published_then_lost(tmp_path: Path, sample_lines: list[str], kind: str) -> tuple[Path, Path, Path]:
    """A store of three sample papers, one of whose `kind` events is then deleted:
    (store, input, the deleted event's path)."""
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join(sample_lines[:3]) + "\n")
    store = tmp_path / "store"
    publish(store, path)
    gone = _event_of(store, kind)
    gone.unlink()
    return store, path, gone


def test_a_deleted_stored_event_is_never_dropped_by_a_rebuild(
    tmp_path: Path, sample_lines: list[str]
) -> None:
    """The published bundle lists an event the store lost: `rebuild` stops that paper,
    names the bundle, and re-signs nothing without the event."""
    from pith_pipeline.publish import rebuild

    store, _path, gone = _published_then_lost(tmp_path, sample_lines, "graph_snapshot")
    body = gone.parent.name
    before = snapshot(store / "pith")
    failures: list[str] = []
    rebuilt = list(rebuild(LocalStore(store), SIGNER, BuildConfig(), failures=failures))
    assert rebuilt == [] and len(failures) == 1
    assert f"pith/{body}/bundle.json" in failures[0] and gone.stem in failures[0]
    assert snapshot(store / "pith") == before


def test_a_deleted_record_created_is_not_replaced_by_a_new_one(
    tmp_path: Path, sample_lines: list[str]
) -> None:
    """A build must not sign a second `record_created` for a paper whose first one was
    deleted from the store: the paper is named as not published."""
    store, path, gone = _published_then_lost(tmp_path, sample_lines, "record_created")
    body = gone.parent.name
    before = snapshot(store / "events")
    again = publish(store, path, datetime(2026, 8, 1, tzinfo=UTC))
    assert again.failed == 1 and gone.stem in again.problems[0] and body in again.problems[0]
    assert snapshot(store / "events") == before


def test_a_re_serialised_event_stops_its_paper_and_a_re_serialised_bundle_is_rebuilt(
    tmp_path: Path, sample_lines: list[str]
) -> None:
    """Bytes the publisher did not write: an event (the source of truth) stops its
    paper; a bundle, derived, is re-derived from the verified events."""
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join(sample_lines[:3]) + "\n")
    store = tmp_path / "store"
    publish(store, path)
    event = _event_of(store, "graph_snapshot")
    event.write_bytes(json.dumps(json.loads(event.read_bytes()), indent=1).encode())
    other = next(p for p in sorted((store / "pith").iterdir()) if p.name != event.parent.name)
    bundle, well = other / "bundle.json", store / ".well-known" / "pith" / other.name / "bundle.json"
    pretty = json.dumps(json.loads(bundle.read_bytes()), indent=1).encode()
    for p in (bundle, well):
        p.unlink()
        p.write_bytes(pretty)
    again = publish(store, path, datetime(2026, 8, 1, tzinfo=UTC))
    assert again.failed == 1 and "re-serialised" in again.problems[0] and event.name in again.problems[0]
    rebuilt = bundle.read_bytes()
    assert rebuilt == well.read_bytes() == dumps_compact(json.loads(rebuilt)) != pretty


def _reorder_keys(path: Path) -> None:
    """The same content, compact, its keys in reverse order."""
    doc = json.loads(path.read_bytes())
    path.write_bytes(json.dumps(dict(reversed(list(doc.items()))), separators=(",", ":")).encode())


def _reorder_bundle_copy(store: Path, body: str) -> None:
    for p in (store / "pith" / body / "bundle.json", store / ".well-known" / "pith" / body / "bundle.json"):
        doc = json.loads(p.read_bytes())
        doc["events"] = [dict(reversed(list(e.items()))) for e in doc["events"]]
        p.unlink()
        p.write_bytes(json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode())


def _all_events_gone(store: Path, body: str) -> None:
    import shutil

    shutil.rmtree(store / "events" / body)


def _events_dir_a_file(store: Path, body: str) -> None:
    _all_events_gone(store, body)
    (store / "events" / body).write_bytes(b"x")


def _only_the_well_known_copy_left(store: Path, body: str) -> None:
    import shutil

    _all_events_gone(store, body)
    shutil.rmtree(store / "pith" / body)


_EVENT_DAMAGE = {
    "only the .well-known copy left": _only_the_well_known_copy_left,
    "keys reordered": lambda store, body: _reorder_keys(_event_of(store, "graph_snapshot")),
    "bundle's copies reordered": _reorder_bundle_copy,
    "every event deleted": _all_events_gone,
    "events/<ID> a file": _events_dir_a_file,
}


@pytest.mark.parametrize("damage", sorted(_EVENT_DAMAGE))
@pytest.mark.parametrize("command", ["build", "rebuild"])
def test_a_command_touching_a_damaged_paper_never_ends_clean_while_verify_reports_it(
    tmp_path: Path, sample_lines: list[str], damage: str, command: str
) -> None:
    """Whatever event damage `verify STORE` reports for a paper, a build or rebuild
    that touches the paper either repairs it or names it and fails; it never ends
    clean leaving the damage (and never replaces the paper's bundle)."""
    from pith_pipeline.audit import audit_store
    from pith_pipeline.publish import rebuild

    path = tmp_path / "in.jsonl"
    path.write_text("\n".join(sample_lines[:3]) + "\n")
    store = tmp_path / "store"
    publish(store, path)
    body = _event_of(store, "graph_snapshot").parent.name
    (store / "arxiv").rename(tmp_path / "pointers")  # so a build cannot learn the paper from it
    _EVENT_DAMAGE[damage](store, body)
    if command == "build":
        failures = publish(store, path, datetime(2026, 8, 1, tzinfo=UTC)).problems
    else:
        (tmp_path / "pointers").rename(store / "arxiv")
        failures = []
        list(rebuild(LocalStore(store), SIGNER, BuildConfig(), failures=failures))
    left = [f for f in audit_store(LocalStore(store)) if body in f.key]
    assert left, "the damage was repaired: nothing to check"
    assert any(body in f for f in failures), (failures, left)


def _forget_paper(store: Path, body: str, pointer: Path) -> None:
    """Remove every object of a paper, so the next build takes it for new."""
    import shutil

    for d in (store / "events" / body, store / "pith" / body, store / ".well-known" / "pith" / body):
        shutil.rmtree(d)
    pointer.unlink()


def _occupy(path: Path, kind: str) -> None:
    """Put the wrong kind of thing where an object path of the paper goes."""
    import shutil

    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()
    if kind == "dir":
        (path / "x").mkdir(parents=True)
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x")


#: (what is occupied, relative to the paper: {body} and {pointer}; by what; paper new?)
_WRONG_KIND = {
    "events/<ID> a file, new paper": ("events/{body}", "file", True),
    "pith/<ID> a file, new paper": ("pith/{body}", "file", True),
    "arxiv pointer a directory, new paper": ("{pointer}", "dir", True),
    "bundle.json a directory": ("pith/{body}/bundle.json", "dir", False),
    "state.json a directory": ("pith/{body}/state.json", "dir", False),
    "well-known bundle.json a directory": (".well-known/pith/{body}/bundle.json", "dir", False),
    "arxiv pointer a directory": ("{pointer}", "dir", False),
}


@pytest.mark.parametrize("case", sorted(_WRONG_KIND))
def test_an_object_path_occupied_by_the_wrong_kind_of_thing_stops_only_that_paper(
    tmp_path: Path, sample_lines: list[str], case: str
) -> None:
    """A file where a paper's directory goes, or a directory where its object goes:
    the paper is named as not published and the run goes on with the rest (it was
    one store error ending the whole run: `cannot create ...: File exists`)."""
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join(sample_lines[:3]) + "\n")
    store = tmp_path / "store"
    publish(store, path)
    pointer = sorted((store / "arxiv").rglob("*.json"))[0]
    body = json.loads(pointer.read_bytes())["latest"].split(":")[-1]
    where, kind, new = _WRONG_KIND[case]
    rel = where.format(body=body, pointer=pointer.relative_to(store).as_posix())
    if new:
        _forget_paper(store, body, pointer)
    _occupy(store / rel, kind)
    again = publish(store, path, datetime(2026, 8, 1, tzinfo=UTC))
    assert again.failed == 1 and rel in again.problems[0], again.problems
    assert again.built + again.unchanged == 2 and body not in "".join(again.seen)


def _drop_first_record(doc: dict[str, Any]) -> dict[str, Any]:
    return {**doc, "records": doc["records"][1:]}


#: tampered arXiv pointers (derived data): each must come back byte for byte
_POINTER_DAMAGE = {
    "deleted": None,
    "re-serialised": lambda doc: doc,
    "created_at changed": lambda doc: {
        **doc,
        "records": [{**r, "created_at": "2020-01-01T00:00:00Z"} for r in doc["records"]],
    },
    "a record left out": _drop_first_record,
    "latest wrong": lambda doc: {**doc, "latest": doc["records"][0]["pith_number"]},
    "not JSON": "{",
    "a directory": "dir",
}


@pytest.mark.parametrize("damage", sorted(_POINTER_DAMAGE))
def test_rebuild_re_derives_a_tampered_arxiv_pointer_from_the_events(
    tmp_path: Path, sample_lines: list[str], damage: str
) -> None:
    """arXiv pointers are derived from the event store, like bundles: `rebuild` writes
    the bytes the publisher wrote (it exited 0 leaving a pointer `verify` reported)."""
    from pith_pipeline.audit import audit_store
    from pith_pipeline.publish import rebuild

    obj = json.loads(sample_lines[-1])
    v1, v2 = tmp_path / "v1.jsonl", tmp_path / "v2.jsonl"
    v1.write_text("\n".join([*sample_lines[:2], json.dumps(obj)]) + "\n")
    v2.write_text(json.dumps(_version(obj, 2, obj["title"] + " (revised)")) + "\n")
    store = tmp_path / "store"
    publish(store, v1)
    publish(store, v2, datetime(2026, 9, 1, tzinfo=UTC))
    pointer = store / "arxiv" / "2606.00972.json"
    genuine = pointer.read_bytes()
    how = _POINTER_DAMAGE[damage]
    if how is None:
        pointer.unlink()
    elif how == "dir":  # the wrong kind of thing: named, the rest re-derived
        pointer.unlink()
        (pointer / "x").mkdir(parents=True)
    elif isinstance(how, str):
        pointer.write_text(how)
    else:
        pointer.write_text(json.dumps(how(json.loads(genuine)), indent=4))
    failures: list[str] = []
    rewritten: list[str] = []
    list(rebuild(LocalStore(store), SIGNER, BuildConfig(), failures=failures, pointers=rewritten))
    if how == "dir":
        assert len(failures) == 1 and "arxiv/2606.00972.json" in failures[0] and rewritten == []
        return
    assert failures == []
    assert pointer.read_bytes() == genuine
    assert rewritten == ["arxiv/2606.00972.json"]
    assert list(audit_store(LocalStore(store))) == []


def test_rebuild_names_a_pointer_listing_a_paper_whose_events_are_gone(
    tmp_path: Path, sample_lines: list[str]
) -> None:
    """A pointer is not re-derived without a record whose events were deleted (with
    its bundle): that would drop the paper silently; it is named, and left."""
    import shutil

    from pith_pipeline.publish import rebuild

    path = tmp_path / "in.jsonl"
    path.write_text("\n".join(sample_lines[:3]) + "\n")
    store = tmp_path / "store"
    publish(store, path)
    pointer = sorted((store / "arxiv").rglob("*.json"))[0]
    before = pointer.read_bytes()
    body = json.loads(before)["latest"].split(":")[-1]
    for d in (store / "events" / body, store / "pith" / body, store / ".well-known" / "pith" / body):
        shutil.rmtree(d)
    failures: list[str] = []
    list(rebuild(LocalStore(store), SIGNER, BuildConfig(), failures=failures))
    rel = pointer.relative_to(store).as_posix()
    assert len(failures) == 1 and rel in failures[0] and body in failures[0]
    assert pointer.read_bytes() == before


def test_rebuild_names_a_pointer_it_cannot_write_and_goes_on(tmp_path: Path, sample_lines: list[str]) -> None:
    """`arxiv/<archive>` a file where the pointer's directory goes: the pointer is named
    (exit 3 at the command line), not a store error that ends the rebuild."""
    from pith_pipeline.publish import rebuild

    path = tmp_path / "in.jsonl"
    path.write_text("\n".join(sample_lines[:3]) + "\n")
    store = tmp_path / "store"
    publish(store, path)
    archive = next(p for p in (store / "arxiv").iterdir() if p.is_dir())
    pointers = sorted(archive.rglob("*.json"))
    for p in pointers:
        p.unlink()
    archive.rmdir()
    archive.write_bytes(b"x")
    failures: list[str] = []
    list(rebuild(LocalStore(store), SIGNER, BuildConfig(), failures=failures))
    assert len(failures) == len(pointers) >= 1
    assert all(f"arxiv/{archive.name}/" in f and "is a file" in f for f in failures)


def _tamper_bundle(store: Path, body: str, change: Any) -> None:
    for p in (store / "pith" / body / "bundle.json", store / ".well-known" / "pith" / body / "bundle.json"):
        doc = json.loads(p.read_bytes())
        change(doc)
        p.unlink()
        p.write_bytes(dumps_compact(doc))


_BUNDLE_DAMAGE = {
    "a record field changed": lambda doc: doc["canonical_record"]["metadata"].update(license="forged"),
    "an event copy changed": lambda doc: doc["events"][0].update(created_at="2020-01-01T00:00:00Z"),
    "the state changed": lambda doc: doc["state"].update(event_count=99),
}


@pytest.mark.parametrize("damage", sorted(_BUNDLE_DAMAGE))
def test_a_build_touching_a_paper_re_derives_its_tampered_bundle(
    tmp_path: Path, sample_lines: list[str], damage: str
) -> None:
    """A published bundle whose content was changed (in the publisher's compact form,
    with its .well-known copy) no longer verifies; a build that touches the paper
    re-derives it from the verified events (it reported the paper unchanged and left
    the bundle that `verify STORE` fails)."""
    from pith_pipeline.audit import audit_store

    path = tmp_path / "in.jsonl"
    path.write_text("\n".join(sample_lines[:3]) + "\n")
    store = tmp_path / "store"
    publish(store, path)
    body = _event_of(store, "graph_snapshot").parent.name
    _tamper_bundle(store, body, _BUNDLE_DAMAGE[damage])
    assert any(body in f.key for f in audit_store(LocalStore(store)))
    again = publish(store, path, datetime(2026, 8, 1, tzinfo=UTC))
    assert again.failed == 0
    assert list(audit_store(LocalStore(store))) == []


@pytest.mark.parametrize("rebuilt", ["v1", "v2"])
def test_a_build_never_rewrites_a_deleted_pointer_without_the_papers_other_versions(
    tmp_path: Path, sample_lines: list[str], rebuilt: str
) -> None:
    """The pointer of a paper with two versions deleted: a build of one version would
    write a pointer listing it alone (exit 0, `verify` naming the pointer). Its events
    name the other version (`supersedes`, a `correction`), so the pointer is named
    instead, and `rebuild` re-derives it whole."""
    from pith_pipeline.audit import audit_store
    from pith_pipeline.publish import rebuild

    obj = json.loads(sample_lines[-1])
    v1, v2 = tmp_path / "v1.jsonl", tmp_path / "v2.jsonl"
    v1.write_text(json.dumps(obj) + "\n")
    v2.write_text(json.dumps(_version(obj, 2, obj["title"] + " (revised)")) + "\n")
    store = tmp_path / "store"
    publish(store, v1)
    publish(store, v2, datetime(2026, 9, 1, tzinfo=UTC))
    pointer = store / "arxiv" / "2606.00972.json"
    genuine = pointer.read_bytes()
    pointer.unlink()
    again = publish(store, v1 if rebuilt == "v1" else v2, datetime(2026, 10, 1, tzinfo=UTC))
    assert again.failed == 1 and "arxiv/2606.00972.json" in again.problems[0], again.problems
    assert not pointer.exists()
    failures: list[str] = []
    list(rebuild(LocalStore(store), SIGNER, BuildConfig(), failures=failures))
    assert failures == [] and pointer.read_bytes() == genuine
    assert list(audit_store(LocalStore(store))) == []


def test_a_log_key_given_inside_the_store_is_refused_before_anything_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The log key is handed to the publisher (`log_signer_spec`), not read from the
    environment deep inside: given, a key file inside the store is refused at once;
    only in the environment, the publisher does not see it (the command's edge does)."""
    from pith_pipeline.errors import KeyFileError
    from pith_pipeline.publish import rebuild

    store = tmp_path / "store"
    inside = store / "log-keys" / "pith-private-key.json"
    with pytest.raises(KeyFileError, match="inside the store"):
        Publisher(LocalStore(store), SIGNER, BuildConfig(), log_signer_spec=f"file:{inside}")
    with pytest.raises(KeyFileError, match="inside the store"):
        list(rebuild(LocalStore(store), SIGNER, BuildConfig(), log_signer_spec=str(inside)))
    assert not store.exists() or not any(store.rglob("*.json"))
    monkeypatch.setenv("PITH_LOG_SIGNER", str(inside))
    Publisher(LocalStore(store), SIGNER, BuildConfig()).publish_key_document()
    assert (store / "pith-signing-key.json").is_file()
