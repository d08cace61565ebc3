"""Record pages verify their bundles in a real browser (headless Chromium) with the checks
of `pith-pipeline verify`, by the same names (pith_pipeline/pages/assets/pith-verify.js).

Every case of the Python verifier's tamper tests (tests/core/test_verify.py and
test_verify_hostile.py: each single-character change of the registry's bundle, the
named failures, hostile values, signature blocks, rotations) is written as a store with
a record page; the browser's status of every check must equal the Python verifier's
on the same bytes, and its verdict name the first failing check. The seed bundle
verifies against the public registry's key, pinned in the fragment; a store with a
transparency log proves inclusion, and a damaged tile or checkpoint fails `log`.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cache
from pathlib import Path
from typing import Any

import orjson
import pytest

import tests.core.test_merge as tm
import tests.core.test_verify as tv
import tests.core.test_verify_hostile as th
from pith_pipeline.core.arxiv_record import ArxivRecord
from pith_pipeline.core.builder import Identity, build_record_events, sign_bundle
from pith_pipeline.core.bundle import Site, build_bundle
from pith_pipeline.core.canonical_json import dumps_pretty, loads
from pith_pipeline.core.events import SignerInfo, finalize_event, make_event, sign_event
from pith_pipeline.core.keys import Ed25519Signer, PublicKey, read_key_document
from pith_pipeline.core.verify import CHECKS, FAIL, PAGE_CHECKS, PAGE_SCRIPT_FAILURE, verify_bundle
from tests.pages.browser import VERIFY_SCRIPT, PageResult, dump_dom, install_script, served, verdicts

DATA = Path(__file__).parents[1] / "data"
SEED = DATA / "pith-bundle-1909.11150.json"
PIN = "8d4b5ee74e4693bcd1df2446408b0d54"  # the public registry's key (tests/core/test_verify.py)
_BODY = re.compile(r"pith:[0-9]{4}:([A-Z2-7]{26})")


# -- the contract's record page, until the renderer (pith_pipeline/pages) writes them ----------


def write_record_page(store: Path, body: str, *, keys: bool = True, log: str | None = None) -> str:
    """`pith/<ID>/index.html` as the page contract has it: the bundle, the key document
    and the log named on <html>, the script at `assets/pith-verify.js`; its path."""
    attrs = ['lang="en"', 'data-pith-bundle="bundle.json"']
    if keys:
        attrs.append('data-pith-keys="../../pith-signing-key.json"')
    if log is not None:
        attrs.append(f'data-pith-log="../../{log}"')
    page = store / "pith" / body / "index.html"
    page.parent.mkdir(parents=True, exist_ok=True)
    page.write_text(
        "<!DOCTYPE html>\n"
        f'<html {" ".join(attrs)}>\n<head><meta charset="utf-8"><title>{body}</title>\n'
        '<script type="module" src="../../assets/pith-verify.js"></script>\n</head>\n<body>\n'
        '<p id="pith-verdict" role="status">Checking in your browser…</p>\n<ol id="pith-checks"></ol>\n'
        "</body>\n</html>\n",
        encoding="utf-8",
    )
    install_script(store)
    return f"pith/{body}/index.html"


# -- the shared list of cases -----------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """A bundle as the reader's browser gets it, with what the reader trusts."""

    bundle: Any
    pin: str | None = None
    trusted: tuple[PublicKey, ...] | None = None
    #: the bytes served, when they are not the bundle's compact JSON
    raw: bytes | None = None
    #: a check only a page makes, which fails here while the Python verifier passes
    page_fails: str | None = None

    def data(self) -> bytes:
        return self.raw if self.raw is not None else _json_bytes(self.bundle)


class _Lit(str):
    """Literal JSON text in `_json_bytes`'s work list."""


def _json_bytes(value: Any) -> bytes:
    """The bytes a publisher would write: orjson's compact form, else (floats, integers
    beyond 64 bits, deep nesting) the standard form, built without recursion."""
    try:
        return orjson.dumps(value)
    except (orjson.JSONEncodeError, TypeError):
        pass
    parts: list[str] = []
    todo: list[Any] = [value]
    while todo:
        item = todo.pop()
        if isinstance(item, _Lit):
            parts.append(item)
        elif isinstance(item, dict):
            seq: list[Any] = [_Lit("{")]
            for i, (k, v) in enumerate(item.items()):
                seq += [_Lit("," if i else ""), _Lit(json.dumps(k, ensure_ascii=False) + ":"), v]
            todo.extend(reversed([*seq, _Lit("}")]))
        elif isinstance(item, list):
            seq = [_Lit("[")]
            for i, v in enumerate(item):
                seq += [_Lit("," if i else ""), v]
            todo.extend(reversed([*seq, _Lit("]")]))
        else:
            parts.append(json.dumps(item, ensure_ascii=False))
    return "".join(parts).encode("utf-8")


def _at(obj: Any, path: tuple[Any, ...]) -> Any:
    for p in path:
        obj = obj[p]
    return obj


def _third_party(ours: dict[str, Any], signer: Ed25519Signer) -> dict[str, Any]:
    """test_verify.py's bundle with a stranger's event the state accounts for."""
    stranger = Ed25519Signer.generate("stranger")
    ev = make_event(
        event_type="author_attestation",
        subject=ours["pith_number"],
        payload={"claim": "mine"},
        signer_info=SignerInfo.for_signer(stranger, "someone", "author"),
        created_at="2026-05-02T00:00:00Z",
    )
    sign_event(ev, stranger, "2026-05-02T00:00:00.000000Z")
    return tv._rebundle(ours, signer, [*ours["events"], ev])[0]


def _bundle_of(title: str, abstract: str) -> tuple[dict[str, Any], Ed25519Signer]:
    """A bundle of our own (as test_verify.py's `_our_bundle`) for a paper with this text."""
    signer = Ed25519Signer.generate("ours-2026")
    rec = ArxivRecord.from_json(
        {
            "id": "2101.00002",
            "title": title,
            "abstract": abstract,
            "categories": "cs.LG",
            "versions": [{"version": "v1", "created": "Fri, 1 Jan 2021 00:00:00 GMT"}],
        }
    )
    now = datetime(2026, 5, 1, tzinfo=UTC)
    built = build_record_events(Identity.of(rec), signer, "ours", now)
    ident = built.identity
    bundle = sign_bundle(
        subject=ident.subject,
        canonical=ident.canonical,
        canonical_hex=ident.canonical_sha256,
        events=built.events,
        aliases=built.aliases,
        public_keys=[signer.public_key_doc()],
        site=Site(base_url="https://pith.example.org"),
        signer=signer,
        now=now,
    )
    return bundle, signer


def _byte_cases() -> dict[str, bytes]:
    """The registry's bundle as bytes a parser must read exactly as the Python verifier does."""
    raw = SEED.read_bytes()

    def edit(old: bytes, new: bytes) -> bytes:
        assert old in raw, old
        return raw.replace(old, new, 1)

    title, version = b'"title":"Exascale', b'"version":1'
    return {
        "a duplicate key": edit(
            b'{"bundle_type"', b'{"pith_number":"pith:2019:AAAAAAAAAAAAAAAAAAAAAAAAAA","bundle_type"'
        ),
        "a float for an integer": edit(version, b'"version":1.0'),
        "an exponent for an integer": edit(version, b'"version":1e0'),
        "an integer beyond 2**53": edit(version, b'"version":9007199254740993'),
        "an integer beyond 64 bits": edit(version, b'"version":18446744073709551616'),
        "a number beyond a double": edit(version, b'"version":1e400'),
        "leading zeros": edit(version, b'"version":01'),
        "a byte order mark": b"\xef\xbb\xbf" + raw,
        "invalid UTF-8": edit(title, b'"title":"\xffExascale'),
        "a lone surrogate": edit(title, b'"title":"\\ud800Exascale'),
        "a lone low surrogate": edit(title, b'"title":"\\udc00Exascale'),
        "a surrogate pair": edit(title, b'"title":"\\ud83d\\ude00Exascale'),
        "a raw control character": edit(title, b'"title":"\x01Exascale'),
        "a trailing comma": raw.rstrip()[:-1] + b",}",
        "trailing garbage": raw.rstrip() + b" x",
        "nested 100 deep": edit(b'"timestamp_proofs":[]', b'"timestamp_proofs":' + b"[" * 100 + b"]" * 100),
        "nested 1025 deep": edit(
            b'"timestamp_proofs":[]', b'"timestamp_proofs":' + b"[" * 1024 + b"]" * 1024
        ),
        # the same values, other bytes: both verify
        "escapes for plain letters": edit(title, b'"title":"\\u0045xascale'),
        "minus zero": edit(b'"invalid_event_count":0', b'"invalid_event_count":-0'),
        "pretty-printed": json.dumps(json.loads(raw), indent=2, ensure_ascii=False).encode(),
        "ASCII escapes everywhere": json.dumps(json.loads(raw), ensure_ascii=True).encode(),
    }


#: cases both verifiers accept (the rest are rejected by both)
CONTROLS = {
    "seed pinned",
    "unprotected signed_at",
    "ours pinned",
    "third party accounted",
    "built before rotation",
    "built before rotation, signed_at edited",
    "seed pinned and trusted",
    "bytes: escapes for plain letters",
    "bytes: minus zero",
    "bytes: pretty-printed",
    "bytes: ASCII escapes everywhere",
    "text: Python's whitespace and case rules",
    "text: a title the record does not hash",  # Python passes it; the page does not
    "merge: every rule",
    "merge: code point order",
}


@cache
def cases() -> dict[str, Case]:
    """Every case of the Python verifier's tamper tests, by a readable id."""
    ref = json.loads(SEED.read_bytes())
    out: dict[str, Case] = {"seed pinned": Case(ref, PIN), "wrong pin": Case(ref, "00" * 16)}
    # test_verify.py: every single-character change, and the one unprotected field
    for path, value in tv.leaves(ref):
        if path in tv.UNPROTECTED:
            continue
        b = copy.deepcopy(ref)
        tv.set_at(b, path, tv.one_char_change(value))
        out["char " + "/".join(map(str, path))] = Case(b, PIN)
    b = copy.deepcopy(ref)
    tv.set_at(b, ("bundle_signature", "signed_at"), "2026-08-17T16:31:39.452329Z")
    out["unprotected signed_at"] = Case(b, PIN)
    for path, check in tv.NAMED_FAILURES:
        b = copy.deepcopy(ref)
        tv.set_at(b, path, tv.one_char_change(_at(b, path)))
        out[f"named {check} " + "/".join(map(str, path))] = Case(b, PIN)
    for i, garbage in enumerate(tv.GARBAGE):
        out[f"garbage {i}"] = Case(garbage)
    ours, signer = tv._our_bundle()
    out["ours pinned"] = Case(ours, signer.fingerprint)
    third = _third_party(ours, signer)
    out["third party accounted"] = Case(third)
    unaccounted = copy.deepcopy(third)
    unaccounted["state"]["invalid_events"] = []
    out["third party unaccounted"] = Case(unaccounted)
    intruder = Ed25519Signer.generate(signer.key_id)  # same id, different key
    forged, _ = tv._rebundle(ours, intruder, ours["events"])
    forged["public_keys"] = ours["public_keys"]
    out["unlisted signing key"] = Case(forged)
    # test_verify_hostile.py
    for i, (path, value) in enumerate(th.HOSTILE_VALUES):
        out[f"hostile {i} " + "/".join(map(str, path))] = Case(th._hostile(ref, path, value), PIN)
    deep: Any = "x"
    for _ in range(5000):
        deep = [deep]
    out["deep nesting"] = Case(th._hostile(ref, ("canonical_record", "extra"), deep))
    for path, _check in th.SIGNATURE_BLOCKS:
        b = copy.deepcopy(ref)
        _at(b, path)["trust_me"] = "yes"
        out["unknown field in " + "/".join(map(str, path))] = Case(b, PIN)
    b = copy.deepcopy(ref)
    created = b["events"][0]
    created["payload"]["receipt"]["trust_me"] = "yes"
    finalize_event(created)
    sign_event(created, th.OLD, "2026-05-01T00:00:00.000000Z")
    may = datetime(2026, 5, 1, tzinfo=UTC)
    out["unknown field in the receipt"] = Case(th._signed_by_old(b, may, may))
    for missing in th.MISSING_FIELDS:
        b = copy.deepcopy(ref)
        del b["bundle_signature"][missing]
        out[f"bundle_signature without {missing}"] = Case(b, PIN)
    trusted = tuple(th._trusted(ref))
    july = datetime(2026, 7, 1, tzinfo=UTC)
    out["built after rotation"] = Case(th._signed_by_old(ref, july, may), None, trusted)
    early = th._signed_by_old(ref, may, july)
    out["built before rotation"] = Case(early, None, trusted)
    late_claim = copy.deepcopy(early)
    late_claim["bundle_signature"]["signed_at"] = "2099-01-01T00:00:00.000000Z"
    out["built before rotation, signed_at edited"] = Case(late_claim, None, trusted)
    out["seed pinned and trusted"] = Case(ref, PIN, trusted)
    for name, data in _byte_cases().items():
        out["bytes: " + name] = Case(None, PIN, None, data)
    # the title and abstract a page shows hash as core/text.py says (str.isspace, NFC, lower)
    odd, odd_signer = _bundle_of(
        "T\x1cU\u3000V\ufeffW \u0130 \u03a3\u03a3 A\u030a \u2028x", "A \x85 b\u2028c\u00a0d"
    )
    out["text: Python's whitespace and case rules"] = Case(odd, odd_signer.fingerprint)
    forged = copy.deepcopy(odd)
    snapshot = next(e for e in forged["events"] if e["event_type"] == "graph_snapshot")
    snapshot["payload"]["graph_snapshot"]["paper"]["title"] = "Another title"
    finalize_event(snapshot)
    sign_event(snapshot, odd_signer, snapshot["signature"]["signed_at"])
    resigned, _ = tv._rebundle(forged, odd_signer, forged["events"])
    out["text: a title the record does not hash"] = Case(
        resigned, odd_signer.fingerprint, page_fails="text_hashes"
    )
    # the merge (tests/core/test_merge.py's scenario: every rule, equivocations and
    # invalid events the state accounts for), and Python's string order
    events, aliases = tm.scenario()
    out["merge: every rule"] = Case(_signed(events, aliases), tm.SIGNER.fingerprint)
    astral = [tm._event("author_attestation", {"n": i}, tm.T0 + timedelta(hours=1)) for i in range(2)]
    for ev, tail in zip(astral, ("\uffff", "\U0001f600"), strict=True):
        ev["created_at"] += tail  # code point order and UTF-16 order disagree here
        sign_event(finalize_event(ev), tm.SIGNER, "2026-03-01T13:00:00.000000Z")
    created = build_record_events(tm.IDENT, tm.SIGNER, "tester", tm.T0).events
    out["merge: code point order"] = Case(
        _signed([*created, *reversed(astral)], aliases), tm.SIGNER.fingerprint
    )
    return out


def _signed(events: list[dict[str, Any]], aliases: list[dict[str, Any]]) -> dict[str, Any]:
    """A bundle of test_merge.py's record with these events, its state merged."""
    return sign_bundle(
        subject=tm.SUBJECT,
        canonical=tm.IDENT.canonical,
        canonical_hex=tm.IDENT.canonical_sha256,
        events=events,
        aliases=aliases,
        public_keys=tm.KEYS,
        site=Site(base_url="https://pith.example.org"),
        signer=tm.SIGNER,
        now=datetime(2026, 3, 2, tzinfo=UTC),
    )


# tests/signing/test_rotation.py and test_certified.py: their stores and cases, built
# from the same parts (the stores are built once, in the fixture below)
ROTATION_OLD = Ed25519Signer(hashlib.sha256(b"old").digest(), "pith-v1-2026-01")
ROTATION_NEW = Ed25519Signer(hashlib.sha256(b"new").digest(), "pith-v2-2026-06")
ROGUE = Ed25519Signer(hashlib.sha256(b"rogue").digest(), "pith-v3-rogue")
CERT_ROOT = Ed25519Signer(hashlib.sha256(b"root").digest(), "pith-root-2026")
CERT_OTHER = Ed25519Signer(hashlib.sha256(b"other").digest(), "pith-other")
#: mutations of a short-lived key's certificate (test_certified.py)
CERTIFICATE_DAMAGE: dict[str, Any] = {
    "not_after": lambda c: c.update(not_after="2027-01-01T00:00:00.000000Z"),
    "issuer": lambda c: c.update(issuer_key_id="pith-other", issuer_fingerprint=CERT_OTHER.fingerprint),
    "signature": lambda c: c["signature"].update(signature_b64=c["signature"]["signature_b64"][::-1]),
    "public_key_hex": lambda c: c.update(public_key_hex="00" * 32),
}
SIGNING_CASES = (
    "rotation: a bundle before, trusted",
    "rotation: a bundle after, pinned to the new key, trusted",
    "rotation: signed by an unlisted key",
    "rotation: a listed rogue key, trusted",
    "rotation: a listed rogue key, alone",
    "rotation: the old key after its rotation, trusted",
    "rotation: a re-issued receipt changing first_computed_at",
    "certified: alone",
    "certified: pinned to the root",
    "certified: trusting the roots only",
    "certified: pinned to another key",
    "certified: an uncertified short-lived key, trusting the roots",
    "certified: an uncertified short-lived key, pinned to the root",
    *(f"certified: certificate {name} changed, trusting the roots" for name in CERTIFICATE_DAMAGE),
    "certified: signed outside the certificate's window",
)


def _resign(
    bundle: dict[str, Any], signer: Any, keys: list[PublicKey], built: str, signed: str
) -> dict[str, Any]:
    """`bundle` signed again by `signer` (test_rotation.py's `_resign`)."""
    b = copy.deepcopy(bundle)
    return build_bundle(
        subject=b["pith_number"],
        canonical=b["canonical_record"],
        canonical_hex=b["canonical_sha256"],
        events=b["events"],
        aliases=b["source_aliases"],
        public_keys=keys,
        site=Site(base_url="https://pith.example.org"),
        built_at=built,
        signer=signer,
        signed_at=signed,
    )


def _bundles(root: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_bytes()) for p in sorted(root.glob("pith/*/bundle.json"))]


def _listed(b: dict[str, Any]) -> list[PublicKey]:
    return [PublicKey.from_json(k) for k in b["public_keys"]]


def signing_cases(work: Path) -> dict[str, Case]:
    """The rotation and certificate cases, on stores built here from the sample."""
    from pith_pipeline.publish import BuildConfig, Publisher
    from pith_pipeline.reissue import reissue
    from pith_pipeline.signing.certified import CertifiedSigner
    from pith_pipeline.sources.jsonl import iter_jsonl
    from pith_pipeline.storage.local import LocalStore
    from tests.testclock import StepClock

    sample = DATA / "arxiv-sample.jsonl"
    rotated = LocalStore(work / "rotated")
    Publisher(
        rotated, ROTATION_OLD, BuildConfig(), clock=StepClock(datetime(2026, 1, 5, tzinfo=UTC))
    ).publish(iter_jsonl(sample))
    before = _bundles(rotated.root)[0]
    reissue(
        rotated, ROTATION_NEW, BuildConfig(), clock=StepClock(datetime(2026, 6, 1, tzinfo=UTC)), workers=1
    )
    keys = tuple(read_key_document((rotated.root / "pith-signing-key.json").read_bytes(), "keys"))
    after = _bundles(rotated.root)[0]
    june3, june5 = (
        ("2026-06-03T00:00:00Z", "2026-06-03T00:00:00.000000Z"),
        ("2026-06-05T00:00:00Z", "2026-06-05T00:00:00.000000Z"),
    )
    rogue = _resign(after, ROGUE, [*_listed(after), ROGUE.public_key_doc()], *june3)
    changed = copy.deepcopy(after)
    ev = next(e for e in changed["events"] if e["payload"].get("kind") == "receipt_reissued")
    ev["payload"]["receipt"]["first_computed_at"] = "2026-06-01T00:00:00.000000Z"
    finalize_event(ev)
    sign_event(ev, ROTATION_NEW, ev["signature"]["signed_at"])
    out = {
        SIGNING_CASES[0]: Case(before, None, keys),
        SIGNING_CASES[1]: Case(after, ROTATION_NEW.fingerprint, keys),
        SIGNING_CASES[2]: Case(_resign(after, ROGUE, _listed(after), *june3)),
        SIGNING_CASES[3]: Case(rogue, None, keys),
        SIGNING_CASES[4]: Case(rogue),
        SIGNING_CASES[5]: Case(_resign(before, ROTATION_OLD, _listed(before), *june5), None, keys),
        SIGNING_CASES[6]: Case(_resign(changed, ROTATION_NEW, _listed(changed), *june3)),
    }
    t0 = datetime(2026, 3, 1, tzinfo=UTC)
    signer = CertifiedSigner(CERT_ROOT, run_id="backfill-test", now=t0, validity=timedelta(hours=12))
    certified = LocalStore(work / "certified")
    Publisher(certified, signer, BuildConfig(), clock=StepClock(t0)).publish(iter_jsonl(sample))
    b = _bundles(certified.root)[0]
    roots = tuple(k for k in _listed(b) if k.certificate is None)
    out[SIGNING_CASES[7]] = Case(b)
    out[SIGNING_CASES[8]] = Case(b, CERT_ROOT.fingerprint)
    out[SIGNING_CASES[9]] = Case(b, None, roots)
    out[SIGNING_CASES[10]] = Case(b, CERT_OTHER.fingerprint)
    bare = copy.deepcopy(b)
    del next(k for k in bare["public_keys"] if k["key_id"] == signer.key_id)["certificate"]
    out[SIGNING_CASES[11]] = Case(bare, None, roots)
    out[SIGNING_CASES[12]] = Case(bare, CERT_ROOT.fingerprint)
    for name, mutate in CERTIFICATE_DAMAGE.items():
        damaged = copy.deepcopy(b)
        mutate(next(k for k in damaged["public_keys"] if k["key_id"] == signer.key_id)["certificate"])
        out[f"certified: certificate {name} changed, trusting the roots"] = Case(damaged, None, roots)
    late = _resign(b, signer, _listed(b), "2026-03-02T00:00:00Z", "2026-03-02T00:00:00.000000Z")
    out[SIGNING_CASES[-1]] = Case(late)
    assert tuple(out) == SIGNING_CASES
    return out


def python_statuses(data: bytes, case: Case, trusted: list[PublicKey] | None) -> dict[str, str]:
    """Each check's status from the Python verifier on the bytes the browser reads."""
    try:
        bundle = loads(data)
    except (ValueError, RecursionError):
        return {"bundle": FAIL}  # `verify` calls it unreadable
    report = verify_bundle(bundle, pinned_fingerprint=case.pin, trusted_keys=trusted)
    return {c.name: c.status for c in report.checks}


def _page_verdict(expected: dict[str, str], case: Case) -> str:
    """The verdict a page must give: the first failure of the Python verifier's checks and
    of the page's own (those fail only where the case says so)."""
    statuses = {**expected, **({case.page_fails: FAIL} if case.page_fails else {})}
    failed = [name for name in PAGE_CHECKS if statuses.get(name) == FAIL]
    return f"failed: {failed[0]}" if failed else "verified"


@dataclass(frozen=True)
class Checked:
    case: Case
    expected: dict[str, str]
    page: PageResult | None


@pytest.fixture(scope="module")
def checked(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Checked]:
    """Every case as a store of its own, all read by one Chromium process."""
    root = tmp_path_factory.mktemp("cases")
    urls: dict[str, str] = {}
    expected: dict[str, dict[str, str]] = {}
    every = {**cases(), **signing_cases(tmp_path_factory.mktemp("signing"))}
    for n, (name, case) in enumerate(every.items()):
        store = root / f"c{n}"
        number = case.bundle.get("pith_number") if isinstance(case.bundle, dict) else None
        m = _BODY.fullmatch(number) if isinstance(number, str) else None
        body = m.group(1) if m else "NOTAPITHNUMBER"
        page = write_record_page(store, body, keys=case.trusted is not None)
        data = case.data()
        (store / "pith" / body / "bundle.json").write_bytes(data)
        trusted = None
        if case.trusted is not None:
            doc = dumps_pretty({"keys": [k.to_json() for k in case.trusted]})
            (store / "pith-signing-key.json").write_bytes(doc)
            trusted = read_key_document(doc, "pith-signing-key.json")
        expected[name] = python_statuses(data, case, trusted)
        urls[name] = f"c{n}/{page}" + (f"#pin={case.pin}" if case.pin else "")
    got = verdicts(root, list(urls.values()))
    return {name: Checked(every[name], expected[name], got.get(urls[name])) for name in urls}


@pytest.mark.parametrize("name", [*cases(), *SIGNING_CASES])
def test_the_browser_agrees_with_the_python_verifier(checked: dict[str, Checked], name: str) -> None:
    c = checked[name]
    assert c.page is not None, f"{name}: the page gave no verdict"
    got = c.page.status()
    assert [ch["name"] for ch in c.page.checks] == list(PAGE_CHECKS)
    mismatched = {k: (v, got.get(k)) for k, v in c.expected.items() if got.get(k) != v}
    assert not mismatched, (name, mismatched, [ch for ch in c.page.checks if ch["status"] != "ok"])
    assert c.page.verdict == _page_verdict(c.expected, c.case)


def test_every_tamper_case_is_rejected_by_both() -> None:
    """The list holds the tamper tests' cases (rejected) and their controls (accepted)."""
    ref = json.loads(SEED.read_bytes())
    assert sum(name.startswith("char ") for name in cases()) == sum(
        p not in tv.UNPROTECTED for p, _ in tv.leaves(ref)
    )
    for name, case in cases().items():
        trusted = list(case.trusted) if case.trusted is not None else None
        statuses = python_statuses(case.data(), case, trusted)
        assert (FAIL not in statuses.values()) == (name in CONTROLS), name


def test_the_signing_cases_are_rejected_where_their_tests_reject_them(checked: dict[str, Checked]) -> None:
    controls = {SIGNING_CASES[i] for i in (0, 1, 4, 7, 8, 9)}
    for name in SIGNING_CASES:
        assert (FAIL not in checked[name].expected.values()) == (name in controls), name
    assert checked["rotation: the old key after its rotation, trusted"].expected["key_trust"] == FAIL
    assert checked["certified: pinned to another key"].expected["pinned_key"] == FAIL
    assert checked["rotation: a bundle after, pinned to the new key, trusted"].page is not None
    receipt = next(
        c["detail"]
        for c in checked["rotation: a bundle after, pinned to the new key, trusted"].page.checks
        if c["name"] == "receipt"
    )
    assert "re-issued by pith-v2-2026-06" in receipt


def test_the_seed_bundle_verifies_against_the_registrys_pinned_key(checked: dict[str, Checked]) -> None:
    page = checked["seed pinned and trusted"].page
    assert page is not None and page.verdict == "verified"
    statuses = page.status()
    assert all(statuses[name] == "ok" for name in CHECKS), page.checks
    assert statuses["key_document"] == "ok" and statuses["text_hashes"] == "ok", page.checks
    assert page.words is not None and page.words.startswith("Verified") and "pinned" in page.words
    wrong = checked["wrong pin"].page
    assert wrong is not None and wrong.verdict == "failed: pinned_key"
    assert wrong.words is not None and wrong.words.startswith("Not verified") and "pinned_key" in wrong.words


def test_the_script_is_self_contained() -> None:
    """No third-party code, no CDN, no URL of its own: it imports nothing and reads only
    the relative URLs its page names."""
    text = VERIFY_SCRIPT.read_text(encoding="utf-8")
    assert not re.search(r"^\s*import\b|\bimport\s*\(|\brequire\s*\(", text, re.MULTILINE)
    assert not re.search(r"(https?:)?//[a-z0-9.-]+\.[a-z]{2,}/", text, re.IGNORECASE)
    assert len(re.findall(r"(?<![.\w])fetch\(", text)) == 1  # fetchBytes, given URLs relative to the page


# -- a store built by the pipeline, with and without a transparency log ------------------------


def _store_pages(store: Path, log: str | None) -> list[str]:
    bodies = sorted(p.parent.name for p in store.glob("pith/*/bundle.json"))
    assert bodies
    return [write_record_page(store, body, log=log) for body in bodies]


def _cli(cwd: Path, *args: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pith_pipeline", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])},
    )
    assert done.returncode == 0, done.stderr


@pytest.fixture(scope="module")
def logged_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sample built with a registry key and a log key (`build ... --log-signer`)."""
    work = tmp_path_factory.mktemp("logged")
    for d in ("keys", "logkey"):
        _cli(work, "keys", "generate", "--out", d)
    _cli(
        work,
        "build",
        "--input",
        str(DATA / "arxiv-sample.jsonl"),
        "--store",
        "store",
        "--key",
        "keys/pith-private-key.json",
        "--log-signer",
        "logkey/pith-private-key.json",
        "--workers",
        "1",
    )
    return work / "store"


def test_pages_of_a_logged_store_prove_every_event_under_the_checkpoint(logged_store: Path) -> None:
    pages = _store_pages(logged_store, "log/")
    fingerprint = json.loads((logged_store / "pith-signing-key.json").read_bytes())["fingerprint_sha256_hex"]
    got = verdicts(logged_store, [f"{p}#pin={fingerprint}" for p in pages])
    size = int((logged_store / "log" / "checkpoint").read_text(encoding="utf-8").split("\n")[1])
    bound = math.ceil(math.log(size, 256)) + 2
    for p in pages:
        page = got[f"{p}#pin={fingerprint}"]
        assert page.verdict == "verified", (p, page.checks)
        statuses = page.status()
        assert statuses["log"] == "ok" and statuses["pinned_key"] == "ok", page.checks
        assert page.log_reads is not None and 1 <= int(page.log_reads) <= bound


def test_inclusion_reads_at_most_log256_n_plus_2_tiles_per_event(logged_store: Path, tmp_path: Path) -> None:
    """The sample's events under a tree of three tile levels (more entries appended after
    them): each page proves its events reading at most ceil(log256 N) + 2 tiles and
    entry bundles (transparency-log.md, Costs)."""
    from pith_pipeline.storage.local import LocalStore
    from pith_pipeline.tlog.log import append_entries
    from pith_pipeline.tlog.pipeline import open_log_signer

    store = tmp_path / "big"
    shutil.copytree(logged_store, store)
    local = LocalStore(str(store))
    log = open_log_signer(str(logged_store.parent / "logkey" / "pith-private-key.json"), local)
    result = append_entries(local, log, (b"entry %d" % i for i in range(256 * 256 + 300)))
    assert result.size > 256 * 256
    pages = _store_pages(store, "log/")
    got = verdicts(store, pages)
    bound = math.ceil(math.log(result.size, 256)) + 2
    reads = []
    for p in pages:
        assert got[p].verdict == "verified", (p, got[p].checks)
        assert got[p].log_reads is not None
        reads.append(int(got[p].log_reads))
    assert max(reads) <= bound and max(reads) >= 3, reads


def _damaged_copy(store: Path, where: Path, damage: str) -> Path:
    out = where / damage
    shutil.copytree(store, out)
    log = out / "log"
    if damage == "tile":
        tile = next(p for p in sorted((log / "tile" / "0").rglob("*")) if p.is_file())
        data = bytearray(tile.read_bytes())
        data[5] ^= 0x01
        tile.write_bytes(bytes(data))
    elif damage == "checkpoint size":
        lines = (log / "checkpoint").read_bytes().split(b"\n")
        lines[1] = str(int(lines[1]) - 1).encode()
        (log / "checkpoint").write_bytes(b"\n".join(lines))
    elif damage == "checkpoint signature":
        text = (log / "checkpoint").read_bytes()
        cut = text.rindex(b" ") + 10
        (log / "checkpoint").write_bytes(text[:cut] + bytes([text[cut] ^ 0x02]) + text[cut + 1 :])
    elif damage == "entry":
        bundle = next(p for p in sorted((log / "tile" / "entries").rglob("*")) if p.is_file())
        data = bytearray(bundle.read_bytes())
        at = data.index(b'"event_id":"sha256:') + 30
        data[at] = ord("0") if data[at] != ord("0") else ord("1")
        bundle.write_bytes(bytes(data))
    elif damage == "checkpoint gone":
        (log / "checkpoint").unlink()
    return out


@pytest.mark.parametrize(
    "damage", ["tile", "checkpoint size", "checkpoint signature", "entry", "checkpoint gone"]
)
def test_a_damaged_log_fails_by_name(logged_store: Path, tmp_path: Path, damage: str) -> None:
    store = _damaged_copy(logged_store, tmp_path, damage)
    pages = _store_pages(store, "log/")
    got = verdicts(store, pages)
    failed = [p for p in pages if got[p].verdict == "failed: log"]
    others = {got[p].verdict for p in pages} - {"failed: log", "verified"}
    assert not others
    # a damaged tile or entry bundle touches the papers whose proofs read it; the
    # checkpoint, every paper
    assert failed if damage in ("tile", "entry") else len(failed) == len(pages)


def test_the_sample_stores_pages_verify_pinned(tmp_path: Path) -> None:
    """`ingest --sample` (the README's first command), every paper's page, pinned."""
    _cli(tmp_path, "ingest", "--sample")
    store = tmp_path / "pith-store"
    log = "log/" if (store / "log" / "checkpoint").is_file() else None
    pages = _store_pages(store, log)
    fingerprint = json.loads((store / "pith-signing-key.json").read_bytes())["fingerprint_sha256_hex"]
    got = verdicts(store, [f"{p}#pin={fingerprint}" for p in pages])
    assert len(got) == len(pages) >= 30
    for url, page in got.items():
        assert page.verdict == "verified", (url, page.checks)


# -- a page whose script fails never says `verified` ------------------------------------------


def _page_with(store: Path, body: str, head: str) -> str:
    """The record page with `head` before its script (after it when `head` starts AFTER)."""
    page = store / "pith" / body / "index.html"
    text = page.read_text(encoding="utf-8")
    if head.startswith("AFTER"):
        text = text.replace("</head>", head.removeprefix("AFTER") + "\n</head>", 1)
    else:
        text = text.replace('<script type="module"', head + '\n<script type="module"', 1)
    page.write_text(text, encoding="utf-8")
    return f"pith/{body}/index.html"


@pytest.mark.parametrize(
    "head",
    [
        # another script on the page throws while the checks are under way
        "AFTER<script type=\"module\">throw new Error('boom');</script>",
        # the browser's crypto is broken: every hash throws
        "<script>crypto.subtle.digest = () => { throw new Error('no digest'); };</script>",
        # signatures cannot be checked at all
        "<script>crypto.subtle.verify = () => Promise.reject(new Error('no verify'));</script>",
    ],
)
def test_a_page_with_script_errors_never_says_verified(tmp_path: Path, head: str) -> None:
    store = tmp_path / "store"
    ref = json.loads(SEED.read_bytes())
    body = ref["pith_number"].rsplit(":", 1)[1]
    write_record_page(store, body)
    (store / "pith" / body / "bundle.json").write_bytes(SEED.read_bytes())
    (store / "pith-signing-key.json").write_bytes(dumps_pretty({"keys": ref["public_keys"]}))
    page = _page_with(store, body, head)
    got = verdicts(store, [f"{page}#pin={PIN}"])[f"{page}#pin={PIN}"]
    assert got.verdict is not None and got.verdict.startswith("failed: ")
    assert got.verdict.removeprefix("failed: ") in (*PAGE_CHECKS, PAGE_SCRIPT_FAILURE)


def test_a_page_whose_script_does_not_load_never_says_verified(tmp_path: Path) -> None:
    store = tmp_path / "store"
    ref = json.loads(SEED.read_bytes())
    body = ref["pith_number"].rsplit(":", 1)[1]
    page = write_record_page(store, body)
    (store / "pith" / body / "bundle.json").write_bytes(SEED.read_bytes())
    script = store / "assets" / "pith-verify.js"
    script.write_text(script.read_text(encoding="utf-8")[:5000], encoding="utf-8")  # cut mid-way
    with served(store) as base:
        dom = dump_dom(f"{base}/{page}#pin={PIN}", tmp_path / "profile", budget_ms=10_000)
    assert 'data-pith-verdict="verified"' not in dom and "data-pith-verdict" not in dom
