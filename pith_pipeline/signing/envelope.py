"""An Ed25519 seed kept encrypted under a symmetric KMS key (`--signer kms-envelope:LOCATION`).

Why: signing at local speed (tens of thousands of signatures a second) while the
only copy of the key at rest is a ciphertext that only KMS can open, under an
IAM policy and with CloudTrail logging every `Decrypt`. The envelope is a small
JSON file (or store object, `s3://bucket/key`) holding the ciphertext of the
32-byte seed, the public key and the key id. The seed is decrypted once per
process, lives only inside a pynacl `SigningKey`, and is never written, logged,
pickled or put in an error message. The encryption context binds the ciphertext
to its key id, so an envelope cannot be relabelled as another key.

Create one with `pith-pipeline keys envelope-create --kms-key alias/pith-wrap --out FILE`.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import tempfile
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import nacl.signing

from pith_pipeline._internal.error_text import describe_os_error
from pith_pipeline._internal.redact_logs import sensitive_call
from pith_pipeline.core.canonical_json import dumps_pretty, loads
from pith_pipeline.core.keys import Ed25519Signer, fingerprint_b32
from pith_pipeline.errors import KeyFileError, SigningError
from pith_pipeline.signing.kms import call_kms, make_kms_client
from pith_pipeline.signing.local import check_key_dir, check_key_id, make_private_dir, write_all
from pith_pipeline.storage.factory import open_store

ENVELOPE_KIND = "pith_kms_envelope"
ENVELOPE_VERSION = "1"
PURPOSE = "pith-ed25519-signing-seed"

_cache: dict[tuple[str, str], Ed25519Signer] = {}
_cache_lock = threading.Lock()


def encryption_context(key_id: str) -> dict[str, str]:
    return {"pith_purpose": PURPOSE, "pith_key_id": key_id}


def read_location(location: str) -> bytes:
    """Bytes of a local file or of a store object (`s3://bucket/prefix/name`)."""
    if "://" in location and not location.startswith("file://"):
        parent, _, name = location.rstrip("/").rpartition("/")
        try:
            data = open_store(parent).get(name)
        except ImportError as exc:
            raise KeyFileError(f"cannot read envelope {location}: {exc}") from None
        if data is None:
            raise KeyFileError(f"envelope {location} does not exist")
        return data
    path = Path(location[len("file://") :] if location.startswith("file://") else location)
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise KeyFileError(
            f"envelope {path} does not exist (create one with: pith-pipeline "
            "keys envelope-create --kms-key alias/... --out FILE)"
        ) from None
    except OSError as exc:  # a directory, no permission, an I/O error: one line, no traceback
        raise KeyFileError(f"envelope {path} cannot be read ({exc.strerror or type(exc).__name__})") from None


def parse_envelope(data: bytes, where: str) -> dict[str, Any]:
    """The envelope object of `data`; anything wrong is one line naming `where` and the
    field, and a private key file or key document given in its place is named as such."""
    try:
        env = loads(data)  # refuses a repeated field: two key ids would name two keys
        if not isinstance(env, dict):
            raise ValueError("not a JSON object")
        if env.get("kind") == "pith_ed25519_private_key":
            raise KeyFileError(
                f"envelope {where} is a local private key file; give it as --signer file:{where}"
            )
        if "public_key_b64" in env or "keys" in env:
            raise KeyFileError(f"envelope {where} is a public key document, which cannot sign")
        if env.get("kind") != ENVELOPE_KIND or env.get("algorithm") != "ed25519":
            raise ValueError("not a pith KMS envelope: field kind or algorithm is wrong")
        for name in ("key_id", "public_key_hex", "ciphertext_b64", "kms_key_id"):
            if not isinstance(env.get(name), str) or not env[name]:
                raise ValueError(f"field {name} is missing, empty or not a string")
        try:
            base64.b64decode(env["ciphertext_b64"], validate=True)
        except ValueError:
            raise ValueError("field ciphertext_b64 is not base64") from None
        try:
            public = bytes.fromhex(env["public_key_hex"])
        except ValueError:
            raise ValueError("field public_key_hex is not hex") from None
        if len(public) != 32:
            raise ValueError(f"field public_key_hex holds {len(public)} bytes, not 32")
    except ValueError as exc:  # orjson's JSONDecodeError and DuplicateKeyError are ValueErrors
        raise KeyFileError(f"envelope {where} is malformed ({exc})") from None
    except RecursionError:  # absurdly deep nesting
        raise KeyFileError(f"envelope {where} is malformed (nested too deeply)") from None
    check_key_id(env["key_id"], f"envelope {where}")  # it is published in every signature
    return dict(env)


def create_envelope(
    kms_key: str,
    *,
    key_id: str | None = None,
    client: Any = None,
    region: str | None = None,
    endpoint_url: str | None = None,
    now: datetime | None = None,
) -> dict[str, Any]:
    """Generate a seed in memory, encrypt it under `kms_key`, return the envelope object."""
    client = client if client is not None else make_kms_client(region=region, endpoint_url=endpoint_url)
    sk = nacl.signing.SigningKey.generate()
    public = bytes(sk.verify_key)
    now = now or datetime.now(tz=UTC)
    kid = key_id or f"pith-env-{now:%Y-%m}-{fingerprint_b32(public)[:8].lower()}"
    check_key_id(kid, "--key-id")  # before KMS is asked: an envelope nobody could load is useless
    ctx = encryption_context(kid)

    def encrypt() -> Any:
        with sensitive_call():
            return client.encrypt(KeyId=kms_key, Plaintext=bytes(sk), EncryptionContext=ctx)

    resp = call_kms(encrypt, f"KMS Encrypt with {kms_key}")
    return {
        "kind": ENVELOPE_KIND,
        "envelope_version": ENVELOPE_VERSION,
        "key_id": kid,
        "algorithm": "ed25519",
        "public_key_hex": public.hex(),
        "public_key_fingerprint": hashlib.sha256(public).digest()[:16].hex(),
        "kms_key_id": str(resp.get("KeyId") or kms_key),
        "encryption_context": ctx,
        "ciphertext_b64": base64.b64encode(bytes(resp["CiphertextBlob"])).decode("ascii"),
        "created_at": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def write_envelope(path: Path, envelope: dict[str, Any], *, overwrite: bool = False) -> None:
    """Write the envelope to `path`, 0600, all or nothing; write-once by default
    (replacing an envelope would orphan the key it holds).

    Why like `keys generate`: whoever can write the directory can swap the envelope
    for one naming their own KMS key, so a directory others can write is refused
    (`check_key_dir`), missing parents are made 0700 whatever the umask, and the body
    goes to a temporary file first, then is linked into place (atomically, and only if
    no envelope is there): a full disk or a kill never leaves a cut envelope that the
    next try would refuse as existing, or that would load as garbage.
    """
    check_key_dir(path.parent)
    if path.exists() and not overwrite:
        raise KeyFileError(f"{path} already exists; refusing to replace an envelope")
    body = dumps_pretty(envelope) + b"\n"
    try:
        make_private_dir(path.parent)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".envelope", dir=path.parent)  # 0600
        try:
            try:
                os.fchmod(fd, 0o600)
                write_all(fd, body)
                os.fsync(fd)
            finally:
                os.close(fd)
            if overwrite:
                os.replace(tmp, path)
            else:
                try:
                    os.link(tmp, path)
                except FileExistsError:
                    raise KeyFileError(f"{path} already exists; refusing to replace an envelope") from None
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
    except OSError as exc:
        raise KeyFileError(f"cannot write the envelope {path}: {describe_os_error(exc)}") from None


def open_envelope_signer(
    location: str,
    *,
    client: Any = None,
    region: str | None = None,
    endpoint_url: str | None = None,
    cache: bool = True,
) -> Ed25519Signer:
    """Decrypt the envelope once per process and return an in-memory signer."""
    if not location:
        raise KeyFileError(
            "kms-envelope: needs the envelope's location (kms-envelope:PATH or kms-envelope:s3://bucket/key)"
        )
    data = read_location(location)
    cache_key = (location, hashlib.sha256(data).hexdigest())
    with _cache_lock:
        if cache and cache_key in _cache:
            return _cache[cache_key]
        env = parse_envelope(data, location)
        client = client if client is not None else make_kms_client(region=region, endpoint_url=endpoint_url)
        blob = base64.b64decode(env["ciphertext_b64"])

        def decrypt() -> Any:
            with sensitive_call():
                return client.decrypt(
                    CiphertextBlob=blob,
                    KeyId=env["kms_key_id"],
                    EncryptionContext=encryption_context(env["key_id"]),
                )

        resp = call_kms(decrypt, f"KMS Decrypt of envelope {location}")
        try:
            signer = Ed25519Signer(bytes(resp["Plaintext"]), env["key_id"])
        except (ValueError, KeyError, TypeError):
            raise SigningError(f"envelope {location} did not decrypt to an Ed25519 seed") from None
        finally:
            resp.clear()
        if signer.public_key.hex() != env["public_key_hex"]:
            raise SigningError(
                f"envelope {location}: the decrypted key does not match its "
                "public_key_hex (tampered or mixed-up envelope)"
            )
        if cache:
            _cache[cache_key] = signer
        return signer


def clear_cache() -> None:
    """Drop decrypted keys held by this process (tests; long-lived workers after rotation)."""
    with _cache_lock:
        _cache.clear()
