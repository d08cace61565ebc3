"""Bundles (spec section 8): a record, its events, the merged state, all signed."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from pith_pipeline.core.canonical_json import FAST, CanonicalJSON
from pith_pipeline.core.events import BUNDLE_SIGNED_MESSAGE, signature_block
from pith_pipeline.core.keys import PublicKey, Signer
from pith_pipeline.core.layout import (
    PUBLIC_KEY_FILE as PUBLIC_KEY_FILE,  # the key document, named by the layout
)
from pith_pipeline.core.merge import MERGE_VERSION, merge
from pith_pipeline.core.pith_record import PithNumber

BUNDLE_TYPE = "pith_open_graph_bundle"
BUNDLE_VERSION = "1.0"


@dataclass(frozen=True, slots=True, kw_only=True)
class Site:
    """Where a registry publishes: names and the base URL for links and mirror hints."""

    base_url: str
    registry_name: str = "Pith Pipeline"
    signer_id: str = "pith-pipeline"

    @property
    def base(self) -> str:
        return self.base_url.rstrip("/")

    def links(self, body: str) -> dict[str, str]:
        return {
            "resolver": f"{self.base}/pith/{body}",
            "bundle": f"{self.base}/pith/{body}/bundle.json",
            "state": f"{self.base}/pith/{body}/state.json",
            "well_known_bundle": f"{self.base}/.well-known/pith/{body}/bundle.json",
        }

    def mirror_hint(self, body: str) -> dict[str, str]:
        links = self.links(body)
        return {
            "mirror_type": "https",
            "name": self.registry_name,
            "base_url": self.base,
            "bundle_url": links["bundle"],
            "state_url": links["state"],
            "well_known_bundle_url": links["well_known_bundle"],
            "status": "primary",
        }

    @property
    def key_url(self) -> str:
        return f"{self.base}/{PUBLIC_KEY_FILE}"


_KEY_JSON: dict[int, tuple[PublicKey, dict[str, Any]]] = {}


def _key_json(key: PublicKey) -> dict[str, Any]:
    """`key.to_json()`, built once per key object (it hashes and encodes the key twice)."""
    if key.certificate is not None:  # nested, mutable: not shared between bundles
        return key.to_json()
    hit = _KEY_JSON.get(id(key))
    if hit is None or hit[0] is not key:
        if len(_KEY_JSON) > 1024:
            _KEY_JSON.clear()
        hit = _KEY_JSON[id(key)] = (key, key.to_json())
    return dict(hit[1])  # flat str/None values: a shallow copy is a full copy


def bundle_sha256(bundle: dict[str, Any], *, trusted: bool = False, canon: CanonicalJSON = FAST) -> str:
    """canonical_sha256(bundle without its signature); `trusted` as in `dumps_trusted`."""
    body = {k: v for k, v in bundle.items() if k != "bundle_signature"}
    return canon.sha256_trusted(body) if trusted else canon.sha256(body)


def build_bundle(
    *,
    subject: str,
    canonical: dict[str, Any],
    canonical_hex: str,
    events: Sequence[dict[str, Any]],
    aliases: Sequence[dict[str, Any]],
    public_keys: Sequence[PublicKey],
    site: Site,
    built_at: str,
    signer: Signer,
    signed_at: str,
    state: dict[str, Any] | None = None,
    trusted: Collection[Any] = (),
    canon: CanonicalJSON = FAST,
) -> dict[str, Any]:
    """Assemble and sign a bundle; the state is merged here unless given.

    `trusted`: event objects this process built and signed (see `merge`). When every
    event is one of them, the state is merged here and `canon` trusts, the bundle is
    hashed on the fast path after a check of the few parts that came from elsewhere.
    """
    pn = PithNumber.parse(subject)
    fast = False
    if state is None:
        state = merge(events, aliases, public_keys, subject, trusted=trusted, canon=canon)
        ids = {id(e) for e in trusted}
        fast = canon.trust and all(id(e) in ids for e in events)
    src = canonical["source"]
    bundle: dict[str, Any] = {
        "bundle_type": BUNDLE_TYPE,
        "bundle_version": BUNDLE_VERSION,
        "pith_number": subject,
        "short_pith_number": pn.short,
        "canonical_record": canonical,
        "canonical_sha256": canonical_hex,
        "source": {"kind": src["kind"], "id": src["id"], "version": src["version"]},
        "source_aliases": list(aliases),
        "events": list(events),
        "timestamp_proofs": [],
        "mirror_hints": [site.mirror_hint(pn.body)],
        "public_keys": [_key_json(k) for k in public_keys],
        "merge_version": MERGE_VERSION,
        "built_at": built_at,
        "links": site.links(pn.body),
        "state": state,
    }
    if fast:
        # links and mirror hints are strings under fixed keys (Site); the rest is checked
        fast = (
            canon.fast_safe(bundle["canonical_record"])
            and canon.fast_safe(bundle["source_aliases"])
            and canon.fast_safe(bundle["public_keys"])
        )
    digest = bundle_sha256(bundle, trusted=fast, canon=canon)
    sig = signature_block(signer, digest, BUNDLE_SIGNED_MESSAGE, signed_at)
    sig["bundle_sha256"] = digest
    bundle["bundle_signature"] = sig
    return bundle
