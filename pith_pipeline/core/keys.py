"""Keys, fingerprints and the `Signer` interface (spec section 5).

A signer signs the raw 32 bytes of a SHA-256 digest, never its hex text. Back ends
(a local file key, AWS KMS, an envelope-encrypted seed, a short-lived certified
key) implement `Signer`; the core only ever sees this interface.
"""

from __future__ import annotations

import base64
import hashlib
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import nacl.exceptions
import nacl.signing

from pith_pipeline.core.canonical_json import loads
from pith_pipeline.errors import IntegrityError, SigningError

DEFAULT_KEY_NOTES = (
    "Ed25519 key used to sign canonical record SHA-256 digests, event and bundle digests. "
    "Verify with: ed25519_verify(public_key, message=digest_bytes, "
    "signature=base64decode(signature_b64))."
)


def b32(digest: bytes) -> str:
    """RFC 4648 base32, upper case, no padding."""
    return base64.b32encode(digest).decode("ascii").rstrip("=")


@lru_cache(maxsize=256)
def fingerprint_hex(public_key: bytes) -> str:
    """First 16 bytes of sha256(raw public key), hex (cached: asked for on every signature)."""
    return hashlib.sha256(public_key).digest()[:16].hex()


def fingerprint_b32(public_key: bytes) -> str:
    return b32(hashlib.sha256(public_key).digest())[:26]


def verify_signature(public_key: bytes, digest_hex: str, signature_b64: str) -> bool:
    """Ed25519 check of a signature over the raw bytes of a hex digest."""
    try:
        sig = base64.b64decode(signature_b64, validate=True)
        msg = bytes.fromhex(digest_hex)
        if len(sig) != 64 or len(public_key) != 32 or base64.b64encode(sig).decode() != signature_b64:
            return False
        nacl.signing.VerifyKey(public_key).verify(msg, sig)
        return True
    except (ValueError, TypeError, nacl.exceptions.BadSignatureError, nacl.exceptions.CryptoError):
        return False


@dataclass(frozen=True, slots=True)
class PublicKey:
    """A public key document entry (spec section 5)."""

    key_id: str
    public_key: bytes
    url: str = ""
    notes: str = DEFAULT_KEY_NOTES
    rotates_at: str | None = None
    # set for a short-lived key vouched for by a root key (see core.certificate)
    certificate: dict[str, Any] | None = field(default=None, compare=False)

    @property
    def fingerprint(self) -> str:
        return fingerprint_hex(self.public_key)

    def to_json(self) -> dict[str, Any]:
        return {
            "key_id": self.key_id,
            "algorithm": "ed25519",
            "format": "raw",
            "public_key_b64": base64.b64encode(self.public_key).decode("ascii"),
            "public_key_hex": self.public_key.hex(),
            "fingerprint_sha256_b32_first128bits": fingerprint_b32(self.public_key),
            "fingerprint_sha256_hex": fingerprint_hex(self.public_key),
            "rotates_at": self.rotates_at,
            "url": self.url,
            "notes": self.notes,
            **({"certificate": self.certificate} if self.certificate is not None else {}),
        }

    @classmethod
    def from_json(cls, obj: Any) -> PublicKey:
        """Parse and check a key document: both encodings and both fingerprints agree."""
        if not isinstance(obj, dict):
            raise ValueError("key document is not an object")
        if obj.get("algorithm") != "ed25519" or obj.get("format") != "raw":
            raise ValueError("key is not a raw ed25519 key")
        key_id = obj.get("key_id")
        if not isinstance(key_id, str) or not key_id:
            raise ValueError("key_id missing")
        b64 = obj.get("public_key_b64")
        if not isinstance(b64, str):
            raise ValueError(f"key {key_id}: field public_key_b64 is missing or not a string")
        try:
            raw = base64.b64decode(b64, validate=True)
        except ValueError:
            raise ValueError(f"key {key_id}: field public_key_b64 is not base64") from None
        if len(raw) != 32:
            raise ValueError(f"key {key_id}: public key is not 32 bytes")
        if base64.b64encode(raw).decode() != b64:
            raise ValueError(f"key {key_id}: public_key_b64 is not canonical base64")
        if obj.get("public_key_hex") != raw.hex():
            raise ValueError(f"key {key_id}: public_key_hex does not match public_key_b64")
        if obj.get("fingerprint_sha256_hex") != fingerprint_hex(raw):
            raise ValueError(f"key {key_id}: fingerprint_sha256_hex does not match the key")
        if obj.get("fingerprint_sha256_b32_first128bits") != fingerprint_b32(raw):
            raise ValueError(f"key {key_id}: fingerprint_sha256_b32_first128bits does not match")
        rotates = obj.get("rotates_at")
        cert = obj.get("certificate")
        if cert is not None and not isinstance(cert, dict):
            raise ValueError(f"key {key_id}: certificate is not an object")
        return cls(
            key_id=key_id,
            public_key=raw,
            url=str(obj.get("url", "")),
            notes=str(obj.get("notes", "")),
            rotates_at=rotates if isinstance(rotates, str) else None,
            certificate=cert,
        )


class Signer(ABC):
    """Signs SHA-256 digests with one Ed25519 key. Never exposes private material."""

    key_id: str

    @property
    @abstractmethod
    def public_key(self) -> bytes:
        """The raw 32-byte Ed25519 public key."""

    @abstractmethod
    def sign_digest(self, digest: bytes) -> bytes:
        """Sign the raw 32 bytes of a SHA-256 digest; returns the 64-byte signature."""

    def sign_digests(self, digests: Sequence[bytes]) -> list[bytes]:
        """Sign many digests; remote back ends override this to sign concurrently."""
        return [self.sign_digest(d) for d in digests]

    def sign_message(self, message: bytes) -> bytes:
        """Sign arbitrary bytes: a transparency log checkpoint (a C2SP signed note is
        Ed25519 over its text, not over a digest). Back ends that cannot refuse."""
        raise SigningError(f"a {type(self).__name__} cannot sign transparency log checkpoints")

    @property
    def fingerprint(self) -> str:
        return fingerprint_hex(self.public_key)

    def public_key_doc(
        self, *, url: str = "", notes: str = DEFAULT_KEY_NOTES, rotates_at: str | None = None
    ) -> PublicKey:
        return PublicKey(
            key_id=self.key_id, public_key=self.public_key, url=url, notes=notes, rotates_at=rotates_at
        )

    def published_keys(self, *, url: str = "") -> list[PublicKey]:
        """Key documents a registry publishes for this signer: roots first, then this key.

        A certified short-lived key returns its root and itself (with its certificate).
        """
        return [self.public_key_doc(url=url)]

    def sign_hex_b64(self, digest_hex: str) -> str:
        return base64.b64encode(self.sign_digest(bytes.fromhex(digest_hex))).decode("ascii")

    def __repr__(self) -> str:
        return f"{type(self).__name__}(key_id={self.key_id!r}, fingerprint={self.fingerprint!r})"


class Ed25519Signer(Signer):
    """An in-memory Ed25519 key (pynacl). The seed is never printed or pickled."""

    __slots__ = ("_public", "_sk", "key_id")

    def __init__(self, seed: bytes, key_id: str) -> None:
        if len(seed) != 32:
            raise ValueError("an Ed25519 seed is 32 bytes")
        self._sk = nacl.signing.SigningKey(seed)
        self._public = bytes(self._sk.verify_key)
        self.key_id = key_id

    @classmethod
    def generate(cls, key_id: str) -> Ed25519Signer:
        return cls(bytes(nacl.signing.SigningKey.generate()), key_id)

    @property
    def public_key(self) -> bytes:
        return self._public

    def sign_digest(self, digest: bytes) -> bytes:
        return self._sk.sign(digest).signature

    def sign_message(self, message: bytes) -> bytes:
        return self._sk.sign(message).signature

    def __getstate__(self) -> None:
        raise TypeError("signers holding private keys are not pickled")

    def __reduce__(self) -> Any:
        raise TypeError("signers holding private keys are not pickled")


def read_key_document(data: bytes, where: str) -> list[PublicKey]:
    """Every key a `pith-signing-key.json` lists (its head alone for a one-key document).

    The one parser of key documents, with one error: a document that cannot be used is
    an `IntegrityError` naming `where`. It decides whose signatures count, so a damaged
    one is never read around, whoever reads it (a run, `verify`, the audit, a monitor).
    """
    try:
        doc = loads(data)
        entries = doc.get("keys", [doc]) if isinstance(doc, dict) else None
        if not isinstance(entries, list):
            raise ValueError("not a key document")
        keys = [PublicKey.from_json(k) for k in entries]
        # one entry per key id, and a head equal to its entry: readers that keep the
        # first or the last of two entries (or read only the head) would trust
        # different keys, so such a document says two things and is refused
        by_id: dict[str, PublicKey] = {}
        for k in keys:
            if k.key_id in by_id:
                raise ValueError(f"key id {k.key_id!r} is listed twice")
            by_id[k.key_id] = k
        if "keys" not in doc or "key_id" not in doc:
            return keys
        head = PublicKey.from_json(doc)
        listed = by_id.get(head.key_id)
        if listed is None or (listed.public_key, listed.rotates_at) != (head.public_key, head.rotates_at):
            raise ValueError(f"the head key {head.key_id!r} differs from its entry in keys")
        return keys
    except (ValueError, KeyError, TypeError) as exc:
        raise IntegrityError(f"not a usable key document ({exc})", key=where) from None
