"""The local Ed25519 key file: the embedded default signer.

The file is JSON (`pith-private-key.json`), written with mode 0600 and refused
when others can read it, like ssh does. Its seed never appears in a repr, a log
or an error message.
"""

from __future__ import annotations

import base64
import json
import os
import stat
from datetime import UTC, datetime
from pathlib import Path

import nacl.signing

from pith_pipeline.core.canonical_json import dumps_pretty
from pith_pipeline.core.keys import Ed25519Signer, PublicKey, fingerprint_b32
from pith_pipeline.errors import KeyFileError

PRIVATE_KEY_FILE = "pith-private-key.json"
PUBLIC_KEY_FILE = "pith-signing-key.json"
KEY_FILE_KIND = "pith_ed25519_private_key"


def default_key_id(public_key: bytes, when: datetime | None = None) -> str:
    when = when or datetime.now(tz=UTC)
    return f"pith-local-{when:%Y-%m}-{fingerprint_b32(public_key)[:8].lower()}"


def write_key_file(path: Path, seed: bytes, key_id: str) -> None:
    """Write a private key file with mode 0600 from the first byte (no umask race)."""
    public = bytes(nacl.signing.SigningKey(seed).verify_key)
    body = dumps_pretty(
        {
            "kind": KEY_FILE_KIND,
            "key_id": key_id,
            "algorithm": "ed25519",
            "seed_b64": base64.b64encode(seed).decode("ascii"),
            "public_key_hex": public.hex(),
        }
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, body + b"\n")
    finally:
        os.close(fd)


def generate_key(
    out_dir: Path, *, key_id: str | None = None, base_url: str = "", overwrite: bool = False
) -> tuple[Path, Path, PublicKey]:
    """Create a private key file and its public key document in `out_dir`."""
    priv = out_dir / PRIVATE_KEY_FILE
    pub = out_dir / PUBLIC_KEY_FILE
    if priv.exists() and not overwrite:
        raise KeyFileError(f"{priv} already exists; refusing to replace a private key (move it away first)")
    if priv.exists():
        priv.unlink()
    sk = nacl.signing.SigningKey.generate()
    seed = bytes(sk)
    kid = key_id or default_key_id(bytes(sk.verify_key))
    write_key_file(priv, seed, kid)
    doc = PublicKey(
        key_id=kid,
        public_key=bytes(sk.verify_key),
        url=f"{base_url.rstrip('/')}/{PUBLIC_KEY_FILE}" if base_url else "",
    )
    pub.write_bytes(dumps_pretty(doc.to_json()) + b"\n")
    return priv, pub, doc


def load_signer(path: Path | str) -> Ed25519Signer:
    """Load a local key file, refusing one that group or others can read."""
    p = Path(path)
    try:
        st = p.stat()
    except FileNotFoundError:
        raise KeyFileError(
            f"key file {p} does not exist (create one with: pith-pipeline keys generate --out DIR)"
        ) from None
    if stat.S_IMODE(st.st_mode) & 0o077:
        raise KeyFileError(
            f"key file {p} is readable by others (mode {stat.S_IMODE(st.st_mode):04o}); "
            f"refusing to use it. Fix with: chmod 600 {p}"
        )
    try:
        obj = json.loads(p.read_bytes())
        if obj.get("kind") != KEY_FILE_KIND or obj.get("algorithm") != "ed25519":
            raise ValueError("not a pith ed25519 private key file")
        seed = base64.b64decode(obj["seed_b64"], validate=True)
        key_id = obj["key_id"]
        signer = Ed25519Signer(seed, key_id)
    except (ValueError, KeyError, TypeError, json.JSONDecodeError) as exc:
        # the message names the problem, never the file's content
        raise KeyFileError(f"key file {p} is malformed ({type(exc).__name__})") from None
    if obj.get("public_key_hex") not in (None, signer.public_key.hex()):
        raise KeyFileError(f"key file {p}: public_key_hex does not match its seed")
    return signer
