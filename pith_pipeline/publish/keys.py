"""The store's key document (`pith-signing-key.json`): which keys a run knows, and its
compare-and-swap publish.

Why its own part: the document decides whose signatures count, so every check of a
stored event or bundle asks it (`KeyBook.keyring`, `signed_by_known_key`), and writers
of disjoint shards share the one object, so publishing it must keep what another
writer added meanwhile.
"""

from __future__ import annotations

from typing import Any

from pith_pipeline.core.bundle import PUBLIC_KEY_FILE, Site, bundle_sha256
from pith_pipeline.core.canonical_json import loads
from pith_pipeline.core.keys import PublicKey, Signer, read_key_document, verify_signature
from pith_pipeline.core.layout import certificate_key
from pith_pipeline.core.timeutil import Clock, iso_micros
from pith_pipeline.core.verify import KeyRing
from pith_pipeline.errors import CanonicalJSONError, InputError, IntegrityError, SigningError
from pith_pipeline.publish.context import Paper
from pith_pipeline.publish.writing import Writer
from pith_pipeline.signing import guard
from pith_pipeline.storage.base import Store, barrier

#: compare-and-swap attempts before a run gives up on the key document
CAS_ATTEMPTS = 50


def stored_keys(raw: bytes | None, where: str) -> dict[str, PublicKey]:
    """The keys a stored key document lists; a damaged document stops the run (it
    decides whose signatures count, so guessing would be unsafe)."""
    keys: dict[str, PublicKey] = {}
    if raw:
        for pk in read_key_document(raw, where):
            keys[pk.key_id] = pk
    return keys


class KeyBook:
    """The keys a run knows: the store's, and the signer's own (checked on load).

    `rotating`: the signer may be a key the store does not list yet (`keys rotate`,
    `receipts reissue`); otherwise such a signer is refused (`signing.guard`).
    `log_signer_spec`: the transparency log's key spec, opened only when the run ends;
    refused here, before anything is written, when its file lies inside the store.
    """

    def __init__(
        self,
        store: Store,
        signer: Signer,
        site: Site,
        clock: Clock,
        *,
        rotating: bool = False,
        log_signer_spec: str | None = None,
    ) -> None:
        self.store = store
        self.signer = signer
        self.site = site
        self._ring: KeyRing | None = None
        self._ring_marker: tuple[tuple[str, str | None], ...] = ()
        self._signer_checked = False
        guard.refuse_key_inside_store(signer, store)
        guard.refuse_key_spec_inside_store(log_signer_spec, store)
        keys = self.stored(store.get(PUBLIC_KEY_FILE))
        published = signer.published_keys(url=site.key_url)
        if not rotating:
            guard.refuse_unlisted_key(keys.values(), published, store.url)
        self.primary_key_id = published[0].key_id  # a certified key's root heads the document
        for current in published:
            if current.key_id in keys and keys[current.key_id].public_key != current.public_key:
                raise InputError(
                    f"key id {current.key_id!r} is already published with a "
                    f"different public key in {PUBLIC_KEY_FILE}; choose a new key id"
                )
            keys.setdefault(current.key_id, current)
        own = keys[signer.key_id]
        if own.certificate is None and own.rotates_at and own.rotates_at <= iso_micros(clock()):
            raise InputError(
                f"key {own.key_id!r} was rotated at {own.rotates_at} "
                f"({PUBLIC_KEY_FILE}); sign with the current key instead"
            )
        self.keys: dict[str, PublicKey] = keys

    def stored(self, raw: bytes | None) -> dict[str, PublicKey]:
        """The keys of the stored document `raw` (`stored_keys`)."""
        return stored_keys(raw, f"{self.store.url}/{PUBLIC_KEY_FILE}")

    def document(self) -> dict[str, Any]:
        """The current key (spec section 5) plus every key that signed something here."""
        current = self.keys[self.primary_key_id].to_json()
        return {**current, "keys": [k.to_json() for k in self.keys.values()]}

    def publish(self, writer: Writer, paper: Paper, log_key: dict[str, Any] | None) -> None:
        """Publish the key document, merged with what another writer published meanwhile.

        Writers of disjoint shards share this one object, so it is a compare-and-swap
        loop: keys another writer added are kept, never overwritten. `log_key`: the
        document's `log` member when the stored document names none. Written in the
        writer's serializer, counted in `paper`'s ledger.
        """
        codec = writer.codec
        for k in self.keys.values():  # certificates of short-lived keys, beside the document
            if k.certificate is not None:
                writer.put_once(paper, certificate_key(k.key_id), codec.pretty(k.certificate) + b"\n")
        for _attempt in range(CAS_ATTEMPTS):
            got = self.store.get_tagged(PUBLIC_KEY_FILE)
            for kid, pk in self.stored(got[0] if got else None).items():
                mine = self.keys.get(kid)
                if mine is None or (pk.rotates_at and not mine.rotates_at):
                    self.keys[kid] = pk  # added or rotated by another writer
            doc = self.document()
            stored = loads(got[0]) if got is not None else None
            if isinstance(stored, dict) and "log" in stored:  # the transparency log's key (tlog)
                doc["log"] = stored["log"]
            elif log_key is not None:
                doc["log"] = log_key
            data = codec.pretty(doc) + b"\n"
            if got is not None and got[0] == data:
                return
            barrier(self.store)  # the certificates it lists are durable before it names them
            if self.store.put_if_match(PUBLIC_KEY_FILE, data, got[1] if got else None):
                writer.record(paper, PUBLIC_KEY_FILE, data)
                return
        raise IntegrityError("kept changing under concurrent writers; run again", key=PUBLIC_KEY_FILE)

    def keyring(self) -> KeyRing:
        """The ring of the keys we know, rebuilt only when they change (it caches the
        certificate checks of short-lived keys)."""
        marker = tuple((k.key_id, k.rotates_at) for k in self.keys.values())
        if self._ring is None or self._ring_marker != marker:
            self._ring, self._ring_marker = KeyRing(self.keys.values()), marker
        return self._ring

    def keys_for(self, key_ids: set[str]) -> list[PublicKey]:
        """The known keys a bundle lists: its signers', and the roots of certified ones."""
        key_ids = set(key_ids)
        for k in list(key_ids):  # a certified key travels with the root that vouches for it
            cert = self.keys[k].certificate if k in self.keys else None
            if cert is not None:
                key_ids.add(str(cert.get("issuer_key_id")))
        return [self.keys[k] for k in sorted(key_ids) if k in self.keys]

    def signed_by_known_key(self, bundle: Any) -> bool:
        """The bundle's signature verifies with a key the store lists, over its content
        as it is now (`bundle_sha256` recomputed): nothing in it was changed since."""
        try:
            sig = bundle["bundle_signature"]
            key = self.keys.get(sig["key_id"])
            digest = bundle_sha256(bundle)
            if key is None or sig.get("bundle_sha256") != digest:
                return False
            return bool(verify_signature(key.public_key, digest, sig["signature_b64"]))
        except (ValueError, KeyError, TypeError, AttributeError, CanonicalJSONError):
            return False

    def check_signer(self, event: dict[str, Any]) -> None:
        """Verify the run's first fresh signature once: later ones are trusted (see `merge`)."""
        if self._signer_checked:
            return
        sig = event["signature"]
        if not verify_signature(self.signer.public_key, event["content_sha256"], sig["signature_b64"]):
            raise SigningError(
                f"signer {self.signer.key_id!r} made a signature that does not "
                "verify with its own public key; nothing was published"
            )
        self._signer_checked = True
