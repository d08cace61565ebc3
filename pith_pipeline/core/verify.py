"""Bundle verification (spec section 9): every check by name.

Each check returns ok, fail, warn or skip with a one-line detail; a bundle
verifies when no check fails. Bundles are open: an invalid third-party event is a
warning when the state accounts for it with the same reason, a failure otherwise.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from pith_pipeline.core.bundle import bundle_sha256
from pith_pipeline.core.canonical_json import dumps
from pith_pipeline.core.events import (
    BUNDLE_SIGNED_MESSAGE,
    RECEIPT_SIGNED_MESSAGE,
    SIGNATURE_STATUS,
)
from pith_pipeline.core.key_trust import RECEIPT_REISSUED as RECEIPT_REISSUED  # reissue.py imports it here
from pith_pipeline.core.key_trust import pin_ok, signatures_relied_on, trust_problems
from pith_pipeline.core.keys import PublicKey, verify_signature
from pith_pipeline.core.merge import merge, validate_event
from pith_pipeline.core.pith_record import PithNumber, arxiv_doi
from pith_pipeline.core.signature_blocks import (
    BUNDLE_SIGNATURE_FIELDS,
    EVENT_SIGNATURE_FIELDS,
    RECEIPT_FIELDS,
    block_problem,
)
from pith_pipeline.core.stored_events import MALFORMED as _MALFORMED
from pith_pipeline.core.stored_events import KeyRing as KeyRing  # the publisher's import (pipeline.py)

OK, FAIL, WARN, SKIP = "ok", "fail", "warn", "skip"
CHECKS = (
    "canonical_hash",
    "pith_number",
    "source_aliases",
    "public_keys",
    "receipt",
    "event_hashes",
    "event_ids",
    "event_signatures",
    "bundle_hash",
    "bundle_signature",
    "state",
    "keys_listed",
    "pinned_key",
    "key_trust",
)
#: Every check a record page makes in the reader's browser
#: (pith_pipeline/pages/assets/pith-verify.js), in the order its verdict names the
#: first failure (`data-pith-verdict="failed: <name>"`): CHECKS by the same names,
#: around them what only a page can check. `bundle`: the bundle is readable JSON
#: (`verify` calls it unreadable); `key_document`: the registry's key document is
#: usable (as `--keys` needs it); `text_hashes`: the title and abstract the page
#: shows hash to the record's; `log`: each event is included under the
#: transparency log's signed checkpoint (as `verify --log`).
PAGE_CHECKS = ("bundle", "key_document", *CHECKS, "text_hashes", "log")
#: The page's verdict when its own script failed: never `verified`.
PAGE_SCRIPT_FAILURE = "script"


def _exact(block: Any, fields: frozenset[str], what: str) -> dict[str, Any]:
    why = block_problem(block, fields, what)
    if why:
        raise _Bad(why)
    result: dict[str, Any] = block
    return result


def _receipt_block(block: Any, what: str) -> dict[str, Any]:
    """A receipt's block: exactly its fields, and the kind, algorithm and message it signs."""
    r = _exact(block, RECEIPT_FIELDS, what)
    if (
        r.get("kind") != "pith_receipt"
        or r.get("algorithm") != "ed25519"
        or r.get("signed_message") != RECEIPT_SIGNED_MESSAGE
        or r.get("signature_status") != SIGNATURE_STATUS
    ):
        raise _Bad(f"{what} kind, algorithm, signed_message or signature_status unexpected")
    return r


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    status: str
    detail: str = ""

    def to_json(self) -> dict[str, str]:
        return {"name": self.name, "status": self.status, "detail": self.detail}


@dataclass(slots=True)
class Report:
    """The outcome of verifying one bundle."""

    source: str
    pith_number: str | None
    checks: list[Check] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(c.status != FAIL for c in self.checks)

    @property
    def failed(self) -> list[Check]:
        return [c for c in self.checks if c.status == FAIL]

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "pith_number": self.pith_number,
            "ok": self.ok,
            "checks": [c.to_json() for c in self.checks],
        }


class _Bad(Exception):
    """A malformed part: the check fails with this message."""


def _obj(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _Bad(f"{what} is not an object")
    return value


def _list(value: Any, what: str) -> list[Any]:
    if not isinstance(value, list):
        raise _Bad(f"{what} is not a list")
    return value


def _str(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise _Bad(f"{what} is not a string")
    return value


class _Verifier:
    def __init__(self, bundle: dict[str, Any], pinned: str | None) -> None:
        self.b = bundle
        self.pinned = pinned.lower() if pinned else None
        self.keys: dict[str, PublicKey] = {}
        self.key_errors: list[str] = []
        listed = bundle.get("public_keys") or []
        if not isinstance(listed, list):
            self.key_errors.append("public_keys is not a list")
            listed = []
        for i, doc in enumerate(listed):
            try:
                k = PublicKey.from_json(doc)
                self.keys.setdefault(k.key_id, k)
            except _MALFORMED as exc:
                self.key_errors.append(f"public_keys[{i}]: {exc}")
        subject = bundle.get("pith_number")
        self.subject: str = subject if isinstance(subject, str) else ""
        self.state: dict[str, Any] | None = None

    # -- individual checks -------------------------------------------------
    def canonical_hash(self) -> str:
        rec = _obj(self.b.get("canonical_record"), "canonical_record")
        want = _str(self.b.get("canonical_sha256"), "canonical_sha256")
        got = hashlib.sha256(dumps(rec)).hexdigest()
        if got != want:
            raise _Bad(f"canonical_sha256 {want[:16]}... but the record hashes to {got[:16]}...")
        return f"canonical_sha256 {got}"

    def pith_number(self) -> str:
        rec = _obj(self.b.get("canonical_record"), "canonical_record")
        meta = _obj(rec.get("metadata"), "canonical_record.metadata")
        sub = _str(meta.get("submitted_at"), "submitted_at")
        digest = hashlib.sha256(dumps(rec)).hexdigest()
        want = str(PithNumber(int(sub[:4]), PithNumber.from_canonical(rec, digest).body))
        if self.b.get("pith_number") != want:
            raise _Bad(f"pith_number {self.b.get('pith_number')!r}, expected {want}")
        if self.b.get("short_pith_number") != PithNumber.parse(want).short:
            raise _Bad(f"short_pith_number {self.b.get('short_pith_number')!r} does not match")
        src = _obj(self.b.get("source"), "source")
        if dumps(src) != dumps(_obj(rec.get("source"), "canonical_record.source")):
            raise _Bad("source differs from canonical_record.source")
        return want

    def source_aliases(self) -> str | tuple[str, str]:
        """Pith short aliases must be prefixes of the number; source aliases only warn.

        Source aliases may be added later than the record and are protected by the
        bundle hash and the state anyway, so a surprising value is reported, not failed.
        """
        aliases = _list(self.b.get("source_aliases"), "source_aliases")
        body = PithNumber.parse(_str(self.b.get("pith_number"), "pith_number")).body
        src = _obj(self.b.get("source"), "source")
        strict = {"pith_short_8": body[:8], "pith_short_12": body[:12], "pith_short_16": body[:16]}
        loose: dict[str, str] = {}
        if src.get("kind") == "arxiv":
            loose = {
                "arxiv": str(src.get("id")),
                "arxiv_version": f"{src.get('id')}v{src.get('version')}",
                "doi": arxiv_doi(str(src.get("id"))),
            }
        notes = []
        for a in aliases:
            a = _obj(a, "alias")
            kind = _str(a.get("alias_kind"), "alias_kind")
            value = _str(a.get("alias_value"), "alias_value")
            _str(a.get("created_at"), "alias created_at")
            if kind in strict and value != strict[kind]:
                raise _Bad(f"alias {kind}={value!r} is not a prefix of {body}")
            if kind in loose and value.lower() != loose[kind].lower():
                notes.append(f"{kind}={value!r} (record suggests {loose[kind]!r})")
        if notes:
            return WARN, "unexpected source aliases: " + "; ".join(notes)
        return f"{len(aliases)} aliases consistent"

    def public_keys(self) -> str:
        if self.key_errors:
            raise _Bad("; ".join(self.key_errors))
        if not self.keys:
            raise _Bad("no public keys listed")
        return ", ".join(f"{k.key_id} ({k.fingerprint})" for k in self.keys.values())

    def _key(self, key_id: Any, fingerprint: Any, what: str) -> PublicKey:
        key = self.keys.get(key_id) if isinstance(key_id, str) else None
        if key is None:
            raise _Bad(f"{what}: key {key_id!r} is not listed in public_keys")
        if key.fingerprint != fingerprint:
            raise _Bad(f"{what}: fingerprint {fingerprint!r} does not match key {key_id}")
        return key

    def _applied_creation(self) -> dict[str, Any]:
        state = self._merged()
        rc = _obj(state["current"].get("record_created"), "state: no applied record_created")
        for ev in _list(self.b.get("events"), "events"):
            if isinstance(ev, dict) and ev.get("event_id") == rc["event_id"]:
                return ev
        raise _Bad("applied record_created not found among events")

    def receipt(self) -> str:
        ev = self._applied_creation()
        payload = _obj(ev.get("payload"), "record_created.payload")
        rec = _obj(payload.get("canonical_record"), "payload.canonical_record")
        if dumps(rec) != dumps(_obj(self.b.get("canonical_record"), "canonical_record")):
            raise _Bad("record_created carries a different canonical record than the bundle")
        r = _receipt_block(payload.get("receipt"), "receipt")
        digest = _str(r.get("canonical_sha256"), "receipt.canonical_sha256")
        if digest != self.b.get("canonical_sha256") or payload.get("canonical_sha256") != digest:
            raise _Bad("receipt is for a different canonical_sha256")
        key = self._key(r.get("key_id"), r.get("public_key_fingerprint"), "receipt")
        if not verify_signature(
            key.public_key, digest, _str(r.get("signature_b64"), "receipt.signature_b64")
        ):
            raise _Bad(f"receipt signature does not verify with key {key.key_id}")
        reissues = self._reissued_receipts(ev, r)
        if reissues:
            latest_key, latest = reissues[-1]
            self._pin_use("receipt (re-issued)", latest_key)
            return (
                f"signed by {key.key_id}; re-issued by {latest_key.key_id} at "
                f"{latest.get('last_reissued_at')}"
            )
        self._pin_use("receipt", key)
        return f"signed by {key.key_id}"

    def _reissued_receipts(
        self, creation: dict[str, Any], original: dict[str, Any]
    ) -> list[tuple[PublicKey, dict[str, Any]]]:
        """Receipts re-issued for the applied record, oldest first, each checked.

        A re-issued receipt travels in a `correction` event (`kind: receipt_reissued`)
        because the original sits inside the hashed `record_created` payload; it must
        name that event, keep `first_computed_at`, and verify with a listed key.
        """
        out: list[tuple[PublicKey, dict[str, Any]]] = []
        for entry in self._merged()["current"]["corrections"]:
            payload = entry.get("payload") if isinstance(entry, dict) else None
            if not isinstance(payload, dict) or payload.get("kind") != RECEIPT_REISSUED:
                continue
            if payload.get("record_created") != creation.get("event_id"):
                raise _Bad(f"re-issued receipt {entry.get('event_id')} names another record_created event")
            r = _receipt_block(payload.get("receipt"), "re-issued receipt")
            if r.get("canonical_sha256") != original.get("canonical_sha256"):
                raise _Bad("re-issued receipt is for a different canonical_sha256")
            if r.get("first_computed_at") != original.get("first_computed_at"):
                raise _Bad("re-issued receipt changes first_computed_at")
            key = self._key(r.get("key_id"), r.get("public_key_fingerprint"), "re-issued receipt")
            if not verify_signature(
                key.public_key,
                _str(r.get("canonical_sha256"), "digest"),
                _str(r.get("signature_b64"), "signature_b64"),
            ):
                raise _Bad(f"re-issued receipt signature does not verify with key {key.key_id}")
            out.append((key, r))
        out.sort(key=lambda kr: str(kr[1].get("last_reissued_at")))
        return out

    def _merged(self) -> dict[str, Any]:
        if self.state is None:
            events = _list(self.b.get("events"), "events")
            aliases = _list(self.b.get("source_aliases"), "source_aliases")
            self.state = merge(events, aliases, self.keys.values(), self.subject)
        return self.state

    def _event_check(self, wanted: tuple[str, ...], label: str) -> tuple[str, str]:
        """(status, detail) over every event for the reasons this check owns."""
        events = _list(self.b.get("events"), "events")
        claimed = {
            (e.get("event_id"), e.get("reason"))
            for e in (self.b.get("state") or {}).get("invalid_events", [])
            if isinstance(e, dict)
        }
        fails: list[str] = []
        warns: list[str] = []
        valid_ids = set(self._merged()["applied_event_ids"]) | {
            eid for eq in self._merged()["equivocations"] for eid in eq["event_ids"]
        }
        for i, ev in enumerate(events):
            reason = validate_event(ev, self.subject, self.keys)
            eid = ev.get("event_id") if isinstance(ev, dict) else None
            if reason is None or reason not in wanted:
                continue
            if eid in valid_ids:
                continue  # another copy of this id verified (a re-signed event)
            msg = f"events[{i}] {eid}: {reason}"
            (warns if (eid, reason) in claimed else fails).append(msg)
        if fails:
            return FAIL, "; ".join(fails)
        if warns:
            return WARN, "invalid events accounted for in the state: " + "; ".join(warns)
        return OK, f"{len(events)} events: {label}"

    def event_hashes(self) -> tuple[str, str]:
        return self._event_check(("malformed", "bad_content_hash", "unknown_event_type"), "hashes recompute")

    def event_ids(self) -> tuple[str, str]:
        return self._event_check(("bad_event_id", "subject_mismatch"), "ids match content hashes")

    def event_signatures(self) -> tuple[str, str]:
        status, detail = self._event_check(("bad_signature", "unknown_key"), "signatures verify")
        blocks = []
        for i, ev in enumerate(_list(self.b.get("events"), "events")):
            if isinstance(ev, dict) and isinstance(ev.get("signature"), dict):
                why = block_problem(ev["signature"], EVENT_SIGNATURE_FIELDS, f"events[{i}].signature")
                if why:
                    blocks.append(why)
        if blocks:
            return FAIL, "; ".join(blocks + ([detail] if status == FAIL else []))
        return status, detail

    def bundle_hash(self) -> str:
        sig = _obj(self.b.get("bundle_signature"), "bundle_signature")
        got = bundle_sha256(self.b)
        if sig.get("bundle_sha256") != got:
            raise _Bad(
                f"bundle_sha256 {str(sig.get('bundle_sha256'))[:16]}... but the bundle "
                f"hashes to {got[:16]}..."
            )
        return got

    def bundle_signature(self) -> str:
        sig = _exact(self.b.get("bundle_signature"), BUNDLE_SIGNATURE_FIELDS, "bundle_signature")
        if (
            sig.get("algorithm") != "ed25519"
            or sig.get("signed_message") != BUNDLE_SIGNED_MESSAGE
            or sig.get("signature_status") != SIGNATURE_STATUS
        ):
            raise _Bad("algorithm, signed_message or signature_status unexpected")
        key = self._key(sig.get("key_id"), sig.get("public_key_fingerprint"), "bundle_signature")
        digest = bundle_sha256(self.b)
        if not verify_signature(key.public_key, digest, _str(sig.get("signature_b64"), "signature_b64")):
            raise _Bad(f"signature does not verify with key {key.key_id}")
        self._pin_use("bundle_signature", key)
        return f"signed by {key.key_id}"

    def state_check(self) -> str | tuple[str, str]:
        given = _obj(self.b.get("state"), "state")
        merged = self._merged()
        if dumps(given) != dumps(merged):
            diff = sorted(k for k in set(given) | set(merged) if dumps(given.get(k)) != dumps(merged.get(k)))
            raise _Bad(f"state does not recompute from events and aliases (differs in: {', '.join(diff)})")
        if merged["equivocations"]:
            # the spec's merge handles it (first record_created applies, the state lists
            # it), so the bundle verifies; but a reader is told: a signer contradicted itself
            eqs = "; ".join(f"{e['kind']} {', '.join(e['event_ids'])}" for e in merged["equivocations"])
            return WARN, f"state_sha256 {merged['state_sha256']}; equivocations listed in the state: {eqs}"
        return f"state_sha256 {merged['state_sha256']}"

    def keys_listed(self) -> str:
        used: set[str] = set()
        for i, ev in enumerate(_list(self.b.get("events"), "events")):
            if not isinstance(ev, dict):
                continue
            for part in ("signer", "signature"):
                blk = ev.get(part)
                if isinstance(blk, dict) and isinstance(blk.get("key_id"), str):
                    if blk["key_id"] not in self.keys and not self._claimed_invalid(ev):
                        raise _Bad(f"events[{i}].{part}: key {blk['key_id']!r} not listed")
                    used.add(blk["key_id"])
        sig = _obj(self.b.get("bundle_signature"), "bundle_signature")
        if sig.get("key_id") not in self.keys:
            raise _Bad(f"bundle_signature: key {sig.get('key_id')!r} not listed")
        used.add(str(sig.get("key_id")))
        return "keys used: " + ", ".join(sorted(used))

    def _claimed_invalid(self, ev: dict[str, Any]) -> bool:
        return any(
            isinstance(e, dict) and e.get("event_id") == ev.get("event_id")
            for e in (self.b.get("state") or {}).get("invalid_events", [])
        )

    def _pin_use(self, what: str, key: PublicKey) -> None:
        if self.pinned and not pin_ok(self.pinned, self.keys, key):
            self.pin_failures.append(f"{what} uses {key.key_id} ({key.fingerprint})")

    trusted: dict[str, PublicKey] | None

    def key_trust(self) -> str:
        """Certificates, rotation windows and, with a trusted key document, trust roots
        (`key_trust.trust_problems`)."""
        certified = [k for k in self.keys.values() if k.certificate is not None]
        relied_on = signatures_relied_on(
            _list(self.b.get("events"), "events"),
            _obj(self.b.get("bundle_signature"), "bundle_signature"),
            self.b.get("built_at"),
            self._merged(),
        )
        problems = trust_problems(self.keys, self.trusted, relied_on)
        if problems:
            raise _Bad("; ".join(problems))
        parts = [
            f"{len(certified)} certified key(s) valid" if certified else "no certified keys",
            "signatures inside their keys' validity",
        ]
        if self.trusted is not None:
            parts.append("every key trusted")
        return ", ".join(parts)

    pin_failures: list[str]

    def pinned_key(self) -> tuple[str, str]:
        if not self.pinned:
            return SKIP, "no --pin given"
        fails = list(self.pin_failures)
        for i, ev in enumerate(self.b.get("events") or []):
            if not isinstance(ev, dict) or not isinstance(ev.get("signer"), dict):
                continue
            if ev["signer"].get("signer_type") == "pith_registry" and ev.get("event_id") in set(
                self._merged()["applied_event_ids"]
            ):
                sig = ev.get("signature") or {}
                if sig.get("public_key_fingerprint") != self.pinned and not pin_ok(
                    self.pinned, self.keys, self.keys.get(str(sig.get("key_id")))
                ):
                    fails.append(f"events[{i}] signed with {sig.get('public_key_fingerprint')}")
        if fails:
            return FAIL, "not the pinned key: " + "; ".join(fails)
        return OK, f"registry signatures use {self.pinned}"


def verify_bundle(
    bundle: Any,
    *,
    pinned_fingerprint: str | None = None,
    source: str = "<bundle>",
    trusted_keys: Iterable[PublicKey] | None = None,
) -> Report:
    """Run every check of spec section 9 on a parsed bundle.

    `trusted_keys`: the registry's published key document (`pith-signing-key.json`);
    when given, every key used must be in it or certified by a root in it.
    """
    if not isinstance(bundle, dict):
        return Report(source, None, [Check("bundle", FAIL, "not a JSON object")])
    v = _Verifier(bundle, pinned_fingerprint)
    v.pin_failures = []
    v.trusted = None if trusted_keys is None else {k.key_id: k for k in trusted_keys}
    report = Report(source, v.subject or None)

    def run(name: str, fn: Callable[[], str | tuple[str, str]]) -> None:
        try:
            out = fn()
            status, detail = out if isinstance(out, tuple) else (OK, out)
        except _Bad as exc:
            status, detail = FAIL, str(exc)
        except _MALFORMED as exc:  # a hostile value fails this bundle, never the run
            status, detail = FAIL, f"malformed bundle ({type(exc).__name__}: {str(exc)[:200]})"
        report.checks.append(Check(name, status, detail))

    for name in CHECKS:  # each check is the method of its name (`state`: `state_check`)
        run(name, getattr(v, "state_check" if name == "state" else name))
    return report
