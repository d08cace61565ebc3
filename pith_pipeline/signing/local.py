"""The local Ed25519 key file: the embedded default signer.

The file is JSON (`pith-private-key.json`), written with mode 0600 in a directory
made with mode 0700 whatever the umask, and refused when others can read it, like
ssh does. Its seed never appears in a repr, a log or an error message. Anything
wrong with the file (not JSON, wrong shape, not a regular file) is one
`KeyFileError` line naming the path, never a traceback.
"""

from __future__ import annotations

import base64
import json
import os
import re
import stat
from datetime import UTC, datetime
from pathlib import Path

import nacl.signing

from pith_pipeline._internal.error_text import describe_os_error
from pith_pipeline.core.canonical_json import dumps_pretty
from pith_pipeline.core.keys import Ed25519Signer, PublicKey, fingerprint_b32
from pith_pipeline.core.layout import PUBLIC_KEY_FILE as PUBLIC_KEY_FILE
from pith_pipeline.errors import KeyFileError

PRIVATE_KEY_FILE = "pith-private-key.json"
KEY_FILE_KIND = "pith_ed25519_private_key"

# A key id is published in every signature and names files (keys/certs/<id>.json), so
# it is one short printable ASCII token: no separators, no whitespace, no control bytes.
KEY_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@+-]{0,127}")


class LocalKeySigner(Ed25519Signer):
    """A signer loaded from a key file; it remembers the file (resolved, symlinks
    followed) so that a publisher can refuse a key that lives inside its store."""

    __slots__ = ("key_path",)

    def __init__(self, seed: bytes, key_id: str, key_path: Path) -> None:
        super().__init__(seed, key_id)
        self.key_path = key_path


def check_key_id(key_id: object, where: str) -> str:
    """`key_id` when it is a usable key id, else a KeyFileError naming `where`."""
    if not isinstance(key_id, str) or not KEY_ID_RE.fullmatch(key_id):
        shown = repr(key_id)[:40] if isinstance(key_id, str) else type(key_id).__name__
        raise KeyFileError(
            f"{where}: key id {shown} is not usable (1-128 characters of A-Z a-z 0-9 . _ : @ + -, "
            "starting with a letter or digit)"
        )
    return key_id


def make_private_dir(path: Path) -> None:
    """Create `path` and any missing parents with mode 0700, whatever the umask.

    Why chmod after mkdir: mkdir's mode is masked by the umask, and `parents=True`
    does not apply it to the parents at all, so under umask 000 they would be 0777
    and anyone could swap the key file. Directories that already exist are left as
    they are (they may be shared on purpose); the key file itself is 0600.
    """
    missing = []
    p = path
    while not p.exists():
        missing.append(p)
        if p.parent == p:
            break
        p = p.parent
    for d in reversed(missing):
        try:
            d.mkdir(mode=0o700)
        except FileExistsError:
            continue  # made meanwhile by someone else: not ours to chmod
        os.chmod(d, 0o700)


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
    make_private_dir(path.parent)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        try:
            os.fchmod(fd, 0o600)
            _write_all(fd, body + b"\n")
        finally:
            os.close(fd)
    except BaseException:
        path.unlink(missing_ok=True)  # ours (O_EXCL): a half-written key is no key
        raise


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def generate_key(
    out_dir: Path, *, key_id: str | None = None, base_url: str = "", overwrite: bool = False
) -> tuple[Path, Path, PublicKey]:
    """Create a private key file and its public key document in `out_dir`."""
    priv = out_dir / PRIVATE_KEY_FILE
    pub = out_dir / PUBLIC_KEY_FILE
    if key_id is not None:
        check_key_id(key_id, "--key-id")
    if priv.exists() and not overwrite:
        raise KeyFileError(f"{priv} already exists; refusing to replace a private key (move it away first)")
    if priv.exists():
        priv.unlink()
    sk = nacl.signing.SigningKey.generate()
    seed = bytes(sk)
    kid = key_id or default_key_id(bytes(sk.verify_key))
    doc = PublicKey(
        key_id=kid,
        public_key=bytes(sk.verify_key),
        url=f"{base_url.rstrip('/')}/{PUBLIC_KEY_FILE}" if base_url else "",
    )
    # all or nothing: a failure (a full disk, a read-only directory) leaves neither file,
    # so the next try is not refused by a half-written key nobody can load
    try:
        write_key_file(priv, seed, kid)
        try:
            # 0644 whatever the umask: everyone may read a public key, nobody else may rewrite it
            fd = os.open(pub, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                os.fchmod(fd, 0o644)
                _write_all(fd, dumps_pretty(doc.to_json()) + b"\n")
            finally:
                os.close(fd)
        except BaseException:
            priv.unlink(missing_ok=True)  # never used: no signature can depend on it
            pub.unlink(missing_ok=True)
            raise
    except OSError as exc:
        raise KeyFileError(f"cannot write the key in {out_dir}: {describe_os_error(exc)}") from None
    return priv, pub, doc


def load_signer(path: Path | str) -> LocalKeySigner:
    """Load a local key file, refusing one that group or others can read.

    Every way the file can be wrong is one KeyFileError naming the path and the kind
    of problem, never its content (it is a secret) and never a traceback.
    """
    p = Path(path)
    try:
        st = p.stat()
    except FileNotFoundError:
        raise KeyFileError(
            f"key file {p} does not exist (create one with: pith-pipeline keys generate --out DIR)"
        ) from None
    except OSError as exc:
        raise KeyFileError(f"key file {p} cannot be read ({exc.strerror or type(exc).__name__})") from None
    if not stat.S_ISREG(st.st_mode):  # a directory fails late; a FIFO would block forever
        raise KeyFileError(f"key file {p} is not a regular file")
    if stat.S_IMODE(st.st_mode) & 0o077:
        raise KeyFileError(
            f"key file {p} is readable by others (mode {stat.S_IMODE(st.st_mode):04o}); "
            f"refusing to use it. Fix with: chmod 600 {p}"
        )
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise KeyFileError(f"key file {p} cannot be read ({exc.strerror or type(exc).__name__})") from None
    try:
        obj = json.loads(data)
        if not isinstance(obj, dict):
            raise TypeError("not a JSON object")
        if obj.get("kind") != KEY_FILE_KIND or obj.get("algorithm") != "ed25519":
            raise ValueError("not a pith ed25519 private key file")
        if not isinstance(obj.get("seed_b64"), str):
            raise TypeError("seed_b64 is not a string")
        seed = base64.b64decode(obj["seed_b64"], validate=True)
        key_id = obj["key_id"]
        public_hex = obj.get("public_key_hex")
    except (ValueError, KeyError, TypeError, RecursionError) as exc:
        # the message names the problem, never the file's content
        raise KeyFileError(f"key file {p} is malformed ({type(exc).__name__})") from None
    check_key_id(key_id, f"key file {p}")
    try:
        signer = LocalKeySigner(seed, key_id, p.resolve())
    except ValueError:
        raise KeyFileError(f"key file {p} is malformed (the seed is not 32 bytes)") from None
    if public_hex is not None and public_hex != signer.public_key.hex():
        raise KeyFileError(f"key file {p}: public_key_hex does not match its seed")
    return signer
