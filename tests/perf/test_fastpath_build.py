"""The fast build path writes exactly the bytes of the straightforward reference path.

The reference path is the same code given the reference serializer: `rfc8785` for
every hash (`canonical_json.REFERENCE`, injected through the publisher's codec),
`json.dumps` for every output, no trusted shortcuts and every event re-hashed and
re-verified in the merge. Both publish the same records (the real sample plus
generated records with hostile text) into in-memory stores; every object written
must be byte-identical. Nothing is patched: each path is what its publisher is given.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from store_doubles import without_markers

from pith_pipeline.core import canonical_json
from pith_pipeline.core.arxiv_record import ArxivRecord
from pith_pipeline.core.builder import FreshBuilder, Identity, build_record_events, sign_bundle
from pith_pipeline.core.bundle import Site
from pith_pipeline.core.canonical_json import CanonicalJSON, dumps_compact
from pith_pipeline.core.keys import Ed25519Signer
from pith_pipeline.core.merge import merge
from pith_pipeline.errors import SigningError
from pith_pipeline.items import Rejected
from pith_pipeline.publish import CANONICAL, ONE_PASS, REFERENCE, BuildConfig, Codec, Publisher
from pith_pipeline.sources.jsonl import iter_jsonl, parse_line
from pith_pipeline.storage.local import LocalStore
from pith_pipeline.storage.memory import MemoryStore

SIGNER = Ed25519Signer(bytes(range(32)), "fastpath-test")
START = datetime(2026, 7, 1, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime:
        self.now += timedelta(seconds=1)
        return self.now


#: what the reference path writes and hashes with: `json.dumps` for the bytes written,
#: rfc8785 for every hash, not the canonical fast serializer
REFERENCE_CODEC = Codec(
    compact=lambda v: json.dumps(v, ensure_ascii=False, separators=(",", ":")).encode(),
    pretty=lambda v: json.dumps(v, ensure_ascii=False, indent=2).encode(),
    canon=canonical_json.REFERENCE,
)

Make = Callable[..., Publisher]


def reference_publisher(
    store: Any, config: BuildConfig, *, codec: Codec = REFERENCE_CODEC, **kw: Any
) -> Publisher:
    """A publisher on the reference path: events then bundle, nothing trusted, hashed
    with rfc8785 and written with `json.dumps`."""
    return Publisher(store, SIGNER, config, builder=REFERENCE, codec=codec, **kw)


def fast_publisher(store: Any, config: BuildConfig, *, codec: Codec = CANONICAL, **kw: Any) -> Publisher:
    """A publisher as every run makes it (the defaults, named)."""
    return Publisher(store, SIGNER, config, builder=ONE_PASS, codec=codec, **kw)


def differing(a: dict[str, bytes], b: dict[str, bytes]) -> list[str]:
    """The keys written by one run only, or with other bytes."""
    return sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))


def hostile_records(sample_lines: list[str]) -> list[str]:
    """Real records with the text the spec worries about put into every free field."""
    out = []
    nasty = [
        "\u2028 line\u2029sep",
        "ctl \x01\x1f\x7f",
        "astral \U0001d11e \U0001f600",
        "priv \ue000\uffff",
        'quote " back \\ slash /',
        "Ångström é\u0301 NFC",
    ]
    for i, line in enumerate(sample_lines[:12]):
        obj = json.loads(line)
        n = nasty[i % len(nasty)]
        obj["title"] = f"{obj['title']} {n}"
        obj["abstract"] = f"{n}\n  {obj['abstract']}"
        obj["authors_parsed"] = [[f"Zoë{n}", "Ñ.", ""], *(obj.get("authors_parsed") or [])]
        obj["license"] = f"http://example.org/{n}"
        out.append(json.dumps(obj, ensure_ascii=i % 2 == 0))
    return out


def publish_lines(lines: list[str], path: Path, make: Make = fast_publisher, **kw: Any) -> dict[str, bytes]:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    store = MemoryStore()
    pub = make(store, BuildConfig(registry_name="Test \u2028 Registry"), clock=Clock(), run_id="run-1", **kw)
    summary = pub.publish(iter_jsonl(path))
    assert summary.quarantined == 0
    return without_markers(store.objects)


@pytest.fixture
def fast_output(tmp_path: Path, sample_lines: list[str]) -> dict[str, bytes]:
    return publish_lines(sample_lines + hostile_records(sample_lines), tmp_path / "in.jsonl")


def test_fast_path_writes_the_reference_bytes(tmp_path: Path, sample_lines: list[str]) -> None:
    lines = sample_lines + hostile_records(sample_lines)
    fast_output = publish_lines(lines, tmp_path / "in.jsonl")
    ref = publish_lines(lines, tmp_path / "ref.jsonl", reference_publisher)
    assert differing(fast_output, ref) == []
    assert sum(k.startswith("pith/") and k.endswith("bundle.json") for k in ref) == 42


def test_published_pith_numbers_are_unchanged(fast_output: dict[str, bytes]) -> None:
    bodies = {k.split("/")[1] for k in fast_output if k.startswith("pith/")}
    assert {
        "SG6QNWFIOVZEMA3A2RIEOEVPD6",
        "FB7EI2ZX4R67OX2UW4ZBVAEDPX",
        "QFNLYXY3A3MFRS4IYJABHRTBHK",
    } <= bodies


def two_runs(tmp_path: Path, sample_lines: list[str], make: Make, **kw: Any) -> dict[str, bytes]:
    """A paper's first version, then a run with its second, which supersedes it: stored
    (untrusted) events meet fresh ones, and the first record gets a correction."""
    obj = json.loads(sample_lines[-1])
    v2 = dict(
        obj,
        title=obj["title"] + " \U0001f600 revised",
        versions=[*obj["versions"], {"version": "v2", "created": obj["versions"][0]["created"]}],
    )
    store = MemoryStore()
    clock = Clock()
    for i, rec in enumerate((obj, v2)):
        p = tmp_path / f"run{i}.jsonl"
        p.write_text(json.dumps(rec) + "\n", encoding="utf-8")
        make(store, BuildConfig(), clock=clock, run_id=f"r{i}", **kw).publish(iter_jsonl(p))
    return without_markers(store.objects)


def test_superseding_run_writes_the_reference_bytes(tmp_path: Path, sample_lines: list[str]) -> None:
    fast = two_runs(tmp_path, sample_lines, fast_publisher)
    ref = two_runs(tmp_path, sample_lines, reference_publisher)
    assert differing(fast, ref) == []
    assert any(b'"kind":"superseded"' in v for k, v in fast.items() if k.startswith("events/"))


def recording(base: CanonicalJSON) -> tuple[CanonicalJSON, set[str]]:
    """`base`, noting the SHA-256 of every value it serialises: the hashes it made."""
    made: set[str] = set()

    def noting(dumps: Callable[[Any], bytes]) -> Callable[[Any], bytes]:
        def dumps_noted(value: Any) -> bytes:
            data = dumps(value)
            made.add(hashlib.sha256(data).hexdigest())
            return data

        return dumps_noted

    strategy = dataclasses.replace(base, dumps=noting(base.dumps), dumps_trusted=noting(base.dumps_trusted))
    return strategy, made


def hashes_named(value: Any) -> Iterator[str]:
    """Every JSON-hash member of a stored document (`content_sha256`, `state_sha256`,
    `snapshot_sha256`, `bundle_sha256`, `canonical_sha256`), however deep."""
    if isinstance(value, dict):
        for k, v in value.items():
            if k in {
                "content_sha256",
                "state_sha256",
                "snapshot_sha256",
                "bundle_sha256",
                "canonical_sha256",
            }:
                yield v
            else:
                yield from hashes_named(v)
    elif isinstance(value, list):
        for v in value:
            yield from hashes_named(v)


@pytest.mark.parametrize("make", [reference_publisher, fast_publisher], ids=["reference", "fast"])
def test_the_injected_serializer_makes_every_hash_written(
    make: Make, tmp_path: Path, sample_lines: list[str]
) -> None:
    """The codec's `canon` reaches every builder a run calls: the record's identity, its
    events and snapshot sections, the merged state and the bundle, and the correction
    and rewritten bundle of a superseded version (else the reference would prove
    nothing about the part it missed)."""
    base = REFERENCE_CODEC if make is reference_publisher else CANONICAL
    canon, made = recording(base.canon)
    out = two_runs(tmp_path, sample_lines, make, codec=dataclasses.replace(base, canon=canon))
    written = {h for k, v in out.items() if k.endswith(".json") for h in hashes_named(json.loads(v))}
    assert len(written) > 10
    assert written <= made, sorted(written - made)[:3]


def test_a_diverging_fast_serializer_is_caught(tmp_path: Path, sample_lines: list[str]) -> None:
    """The comparison is not vacuous: a fast serializer that escapes non-ASCII (valid
    JSON, not RFC 8785) writes other bytes than the reference."""
    ascii_only = dataclasses.replace(
        canonical_json.FAST,
        dumps_trusted=lambda v: json.dumps(v, sort_keys=True, separators=(",", ":")).encode(),
    )
    lines = hostile_records(sample_lines)
    broken = publish_lines(
        lines, tmp_path / "in.jsonl", codec=dataclasses.replace(CANONICAL, canon=ascii_only)
    )
    ref = publish_lines(lines, tmp_path / "ref.jsonl", reference_publisher)
    assert differing(broken, ref) != []


def _built(rec: ArxivRecord) -> tuple[Identity, Any, list[Any], Site]:
    site = Site(base_url="https://x.example")
    ident = Identity.of(rec)
    built = build_record_events(ident, SIGNER, "s", START)
    return ident, built, [SIGNER.public_key_doc(url=site.key_url)], site


def test_trusted_merge_equals_verifying_merge(sample_lines: list[str]) -> None:
    for line in sample_lines:
        rec = parse_line(line.encode(), "t")
        assert isinstance(rec, ArxivRecord)
        ident, built, keys, site = _built(rec)
        fast = merge(built.events, built.aliases, keys, ident.subject, trusted=built.events)
        slow = merge(built.events, built.aliases, keys, ident.subject)
        assert fast == slow
        b1 = sign_bundle(
            subject=ident.subject,
            canonical=ident.canonical,
            canonical_hex=ident.canonical_sha256,
            events=built.events,
            aliases=built.aliases,
            public_keys=keys,
            site=site,
            signer=SIGNER,
            now=START,
            trusted=built.events,
        )
        b2 = sign_bundle(
            subject=ident.subject,
            canonical=ident.canonical,
            canonical_hex=ident.canonical_sha256,
            events=built.events,
            aliases=built.aliases,
            public_keys=keys,
            site=site,
            signer=SIGNER,
            now=START,
        )
        assert b1 == b2


def test_trust_is_by_object_not_by_event_id(sample_lines: list[str]) -> None:
    """A tampered copy with a trusted event's id is still checked (and found invalid)."""
    rec = parse_line(sample_lines[0].encode(), "t")
    assert isinstance(rec, ArxivRecord)
    ident, built, keys, _site = _built(rec)
    forged = json.loads(json.dumps(built.events[1]))
    forged["payload"]["graph_snapshot"]["paper"]["title"] = "forged"
    state = merge([forged, *built.events], built.aliases, keys, ident.subject, trusted=built.events)
    assert state == merge([forged, *built.events], built.aliases, keys, ident.subject)
    assert state["current"]["graph_snapshots"][0]["payload"] == built.events[1]["payload"]


def test_a_signer_whose_signatures_do_not_verify_is_refused(sample_lines: list[str], tmp_path: Path) -> None:
    class Broken(Ed25519Signer):
        __slots__ = ()

        def sign_digest(self, digest: bytes) -> bytes:
            return super().sign_digest(bytes(32))  # valid signature, wrong message

    store = MemoryStore()
    pub = Publisher(store, Broken(bytes(range(32)), "broken"), BuildConfig(), clock=Clock())
    rec = parse_line(sample_lines[0].encode(), "t")
    assert isinstance(rec, ArxivRecord)
    with pytest.raises(SigningError):
        pub.publish_record(rec)
    assert not any(k.startswith(("pith/", "events/")) for k in store.objects)


def test_versions_beyond_2_53_are_refused_not_hashed(sample_lines: list[str]) -> None:
    obj = json.loads(sample_lines[0])
    obj["versions"] = [{"version": f"v{2**53}", "created": obj["versions"][0]["created"]}]
    rec = parse_line(json.dumps(obj).encode(), "t")
    # refused when the record is built (version labels are v1..v9999), before any hash
    assert isinstance(rec, Rejected) and rec.field == "versions", rec


def test_listing_an_absent_directory_prefix_is_empty(tmp_path: Path) -> None:
    store = LocalStore(tmp_path)
    store.put("events/AAA/one.json", b"{}")
    store.put("events/AB.json", b"{}")
    assert list(store.list("events/AB/")) == []
    assert list(store.list("events/AAA/")) == ["events/AAA/one.json"]
    assert list(store.list("events/A")) == ["events/AAA/one.json", "events/AB.json"]


def test_unsynced_local_store_writes_the_same_files(tmp_path: Path) -> None:
    a, b = LocalStore(tmp_path / "a"), LocalStore(tmp_path / "b", fsync=False)
    for s in (a, b):
        s.put("pith/X/bundle.json", b'{"x":1}')
        assert s.put_once("events/X/e.json", b"{}")
    assert (tmp_path / "a/pith/X/bundle.json").read_bytes() == (
        tmp_path / "b/pith/X/bundle.json"
    ).read_bytes()
    assert not b.fsync and a.fsync


def _general(
    ident: Identity, keys: list[Any], site: Site, supersedes: list[str], bundle_now: datetime
) -> tuple[list[bytes], bytes, bytes]:
    built = build_record_events(ident, SIGNER, "s", START, supersedes=supersedes)
    b = sign_bundle(
        subject=ident.subject,
        canonical=ident.canonical,
        canonical_hex=ident.canonical_sha256,
        events=built.events,
        aliases=built.aliases,
        public_keys=keys,
        site=site,
        signer=SIGNER,
        now=bundle_now,
    )  # nothing trusted: every event re-hashed and verified
    return [dumps_compact(e) for e in built.events], dumps_compact(b), dumps_compact(b["state"])


@pytest.mark.parametrize("case", ["plain", "supersedes", "foreign-key-list", "odd-supersedes"])
def test_fresh_builder_equals_the_general_path(case: str, sample_lines: list[str]) -> None:
    site = Site(base_url="https://x.example/\u2028", registry_name="R \U0001f600")
    keys = [SIGNER.public_key_doc(url=site.key_url)]
    if case == "foreign-key-list":  # the events' key is not listed: the merge says unknown_key
        keys = [Ed25519Signer(bytes(32), "other").public_key_doc()]
    supersedes: list[Any] = {"supersedes": ["sha256:" + "ab" * 32], "odd-supersedes": [7]}.get(case, [])
    fb = FreshBuilder(SIGNER, "s", site, keys)
    for line in sample_lines + hostile_records(sample_lines):
        rec = parse_line(line.encode(), "t")
        assert isinstance(rec, ArxivRecord)
        ident = Identity.of(rec)
        later = START + timedelta(seconds=3)
        fresh = fb.build(ident, START, later, supersedes=supersedes)
        events, bundle, state = _general(ident, keys, site, supersedes, later)
        assert fresh.event_bytes == events
        assert fresh.bundle_bytes == bundle
        assert fresh.state_bytes == state
