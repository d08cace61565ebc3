"""A short-lived Ed25519 key, generated in memory per run and certified by a root key.

`--signer certified:ROOT_SPEC` (for example `certified:kms:alias/pith-signing`):
the run makes a fresh key that exists only in this process, asks the root
signer for one signature over a certificate of it (public key, key id, validity
window, run id), and then signs everything locally at pynacl speed. The
certificate is published at `keys/certs/<key_id>.json`, listed in
`pith-signing-key.json` and carried in each bundle's `public_keys` entry, so a
verifier that trusts the root accepts the key without trusting it by name.
When the process ends the private key is gone; nothing can sign with it again,
and its certificate's `not_after` bounds the damage of a leaked process image.

Why: a full-archive backfill is ~12 million signatures; through KMS at the
account's ~300 requests/second that is 11+ hours of the whole quota, here it is
one KMS call per run.
"""

from __future__ import annotations

import dataclasses
import math
import secrets
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

import nacl.signing

from pith_pipeline.clock import system_clock
from pith_pipeline.config import env_name
from pith_pipeline.core.certificate import issue_certificate
from pith_pipeline.core.keys import Ed25519Signer, PublicKey, Signer, fingerprint_b32
from pith_pipeline.core.timeutil import iso_micros
from pith_pipeline.errors import KeyFileError, SigningError

DEFAULT_VALIDITY = timedelta(hours=48)
VALIDITY_ENV = env_name("cert_hours")
#: Longest PITH_CERT_HOURS accepted (ten years): a per-run key outliving that is a mistake.
MAX_VALIDITY_HOURS = 24 * 3653


class CertifiedSigner(Signer):
    """Signs with an ephemeral key; `root` signed its certificate once, at creation."""

    def __init__(
        self,
        root: Signer,
        *,
        run_id: str | None = None,
        validity: timedelta | None = None,
        now: datetime | None = None,
        generate: Callable[[], nacl.signing.SigningKey] | None = None,
    ) -> None:
        self.root = root
        # the run's clock (SOURCE_DATE_EPOCH when set), so that the signatures of a
        # reproducible build fall inside the certificate's window
        now = now or system_clock()
        validity = checked_validity(DEFAULT_VALIDITY if validity is None else validity)
        self.run_id = run_id or f"{now:%Y%m%dT%H%M%SZ}-{secrets.token_hex(3)}"
        sk = (generate or _new_key)()
        public = bytes(sk.verify_key)
        self.key_id = f"pith-eph-{now:%Y%m%d}-{fingerprint_b32(public)[:10].lower()}"
        self._inner = Ed25519Signer(bytes(sk), self.key_id)
        del sk
        # backdate a little: clocks of machines checking signed_at differ
        self.certificate: dict[str, Any] = issue_certificate(
            issuer=root,
            subject_key_id=self.key_id,
            subject_public_key=public,
            not_before=iso_micros(now - timedelta(minutes=5)),
            not_after=iso_micros(now + validity),
            run_id=self.run_id,
            issued_at=iso_micros(now),
        )

    @property
    def public_key(self) -> bytes:
        return self._inner.public_key

    def sign_digest(self, digest: bytes) -> bytes:
        return self._inner.sign_digest(digest)

    def sign_digests(self, digests: Sequence[bytes]) -> list[bytes]:
        return self._inner.sign_digests(digests)

    def public_key_doc(self, *, url: str = "", notes: str = "", rotates_at: str | None = None) -> PublicKey:
        notes = notes or (
            f"Short-lived Ed25519 key of run {self.run_id}, certified by "
            f"{self.root.key_id}; valid {self.certificate['not_before']} to "
            f"{self.certificate['not_after']}. Accept only through its certificate."
        )
        return PublicKey(
            key_id=self.key_id,
            public_key=self.public_key,
            url=url,
            notes=notes,
            rotates_at=rotates_at or self.certificate["not_after"],
            certificate=self.certificate,
        )

    def published_keys(self, *, url: str = "") -> list[PublicKey]:
        return [*self.root.published_keys(url=url), self.public_key_doc(url=url)]

    def handoff(self, *, url: str = "") -> CertifiedHandoff:
        """The run's key for this run's own worker processes (see `CertifiedHandoff`)."""
        return CertifiedHandoff(self, url=url)

    def __getstate__(self) -> None:
        raise TypeError("signers holding private keys are not pickled")

    def __reduce__(self) -> Any:
        raise TypeError("signers holding private keys are not pickled")


class _RootKeys:
    """The root's published key documents, as a worker needs them (no root signing)."""

    def __init__(self, key_id: str, url: str, keys: Sequence[PublicKey]) -> None:
        self.key_id, self._url, self._keys = key_id, url, list(keys)

    def published_keys(self, *, url: str = "") -> list[PublicKey]:
        if url == self._url:
            return list(self._keys)
        return [dataclasses.replace(k, url=url) for k in self._keys]


class CertifiedHandoff:
    """The run's short-lived key and certificate, for the run's worker processes.

    A certified key exists once per run: every process of the run must sign with it,
    or bundles would carry keys the key document does not list. The parent sends this
    object to each worker it spawns, through the pipe that starts the worker (nothing
    is written anywhere); the root is not asked to sign again. Its repr shows no key
    material.
    """

    __slots__ = ("_seed", "certificate", "key_id", "root_key_id", "root_keys", "run_id", "url")

    def __init__(self, signer: CertifiedSigner, *, url: str = "") -> None:
        self.key_id = signer.key_id
        self.run_id = signer.run_id
        self.certificate = signer.certificate
        self.root_key_id = signer.root.key_id
        self.url = url
        self.root_keys = tuple(signer.root.published_keys(url=url))
        self._seed = bytes(signer._inner._sk)  # the 32-byte seed

    def __repr__(self) -> str:
        return f"CertifiedHandoff(key_id={self.key_id!r}, run_id={self.run_id!r})"

    def __getstate__(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__slots__}

    def __setstate__(self, state: dict[str, Any]) -> None:
        for name, value in state.items():
            setattr(self, name, value)

    def signer(self) -> CertifiedSigner:
        """The same key and certificate as the parent's signer, in this process."""
        out = CertifiedSigner.__new__(CertifiedSigner)
        out.root = _RootKeys(self.root_key_id, self.url, self.root_keys)  # type: ignore[assignment]
        out.run_id = self.run_id
        out.key_id = self.key_id
        out._inner = Ed25519Signer(self._seed, self.key_id)
        out.certificate = self.certificate
        if (
            bytes(nacl.signing.SigningKey(self._seed).verify_key) != out.public_key
            or self.certificate.get("public_key_hex") != out.public_key.hex()
        ):
            raise SigningError("the run's certified key did not arrive intact in a worker process")
        return out


def _new_key() -> nacl.signing.SigningKey:
    return nacl.signing.SigningKey.generate()


def checked_validity(validity: timedelta) -> timedelta:
    """A certificate's validity window (the `cert_hours` setting, `PITH_CERT_HOURS`):
    more than 0 and at most MAX_VALIDITY_HOURS. Why refuse the rest: a window of zero
    or fewer hours ends before it starts, so every bundle the run signs would fail
    `verify`."""
    hours = validity.total_seconds() / 3600
    if not (math.isfinite(hours) and 0 < hours <= MAX_VALIDITY_HOURS):
        raise KeyFileError(
            f"{VALIDITY_ENV}={hours:g}: a certificate's validity must be more than 0 and at most "
            f"{MAX_VALIDITY_HOURS} hours"
        )
    return validity
