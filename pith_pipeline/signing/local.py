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
from pith_pipeline.core.canonical_json import DuplicateKeyError, dumps_pretty, loads
from pith_pipeline.core.keys import Ed25519Signer, PublicKey, fingerprint_b32
from pith_pipeline.core.layout import PUBLIC_KEY_FILE as PUBLIC_KEY_FILE
from pith_pipeline.errors import KeyFileError

PRIVATE_KEY_FILE = "pith-private-key.json"
#: The key of a store's transparency log, kept beside the registry key's file
#: (`tlog.run_log`): the same directory, mode and secrecy as the registry key.
LOG_KEY_FILE = "pith-log-private-key.json"
#: Where `ingest` makes the embedded default's keys (relative to the working directory).
DEFAULT_KEY_DIR = Path("pith-keys")
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
        shown = repr(key_id)[:40] if isinstance(key_id, str) else f"({_json_type(key_id)}, not a string)"
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


def check_key_dir(out_dir: Path) -> None:
    """Refuse to put a key where someone else could replace it (like ssh's StrictModes).

    An existing directory that group or others can write (0777, 0775, even sticky 1777)
    lets them swap the key file or the public document after it is made, or plant a
    symlink under its name first: refused, with the fix. A 0755 directory is fine. When
    the directory is still to be made (0700), the nearest existing parent must not let
    others rename it away, so it must not be writable by them unless it is sticky (/tmp).
    """
    p = out_dir
    while not p.exists() and p.parent != p:
        p = p.parent
    try:
        mode = stat.S_IMODE(p.stat().st_mode)
    except OSError:
        return  # not a directory, no permission: writing says why, in one line
    if not stat.S_ISDIR(p.stat().st_mode) or not mode & 0o022:
        return
    if p != out_dir and mode & stat.S_ISVTX:
        return
    who = "group and others" if mode & 0o022 == 0o022 else "group" if mode & 0o020 else "others"
    raise KeyFileError(
        f"{p} is writable by {who} (mode {mode:04o}), who could replace the key; "
        f"refusing to write a key there. Fix with: chmod 700 {p}"
    )


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
            write_all(fd, body + b"\n")
        finally:
            os.close(fd)
    except BaseException:
        path.unlink(missing_ok=True)  # ours (O_EXCL): a half-written key is no key
        raise


def create_key_file_once(path: Path, key_id_prefix: str) -> bool:
    """Make a new Ed25519 key file at `path` unless one is there; True when made here.

    The file appears whole or not at all, mode 0600 from its first byte in a directory
    made 0700 (`make_private_dir`, after `check_key_dir`): it is written under a
    temporary name, flushed to disk, and linked to `path`, which fails when another
    process made it first. So concurrent first runs (the mapped tasks of one Airflow
    window) end with one key, and none of them reads a half-written file. The seed is
    never returned, printed or logged.
    """
    import secrets

    check_key_dir(path.parent)
    if path.exists():
        return False
    sk = nacl.signing.SigningKey.generate()
    kid = f"{key_id_prefix}-{datetime.now(tz=UTC):%Y-%m}-{fingerprint_b32(bytes(sk.verify_key))[:8].lower()}"
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    try:
        write_key_file(tmp, bytes(sk), kid)
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False  # made meanwhile by another run: that one is the key
        dfd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)  # the name is durable before anything is signed with it
        finally:
            os.close(dfd)
        return True
    except OSError as exc:
        raise KeyFileError(f"cannot write the key {path}: {describe_os_error(exc)}") from None
    finally:
        tmp.unlink(missing_ok=True)


def write_all(fd: int, data: bytes) -> None:
    """Write every byte of `data` to `fd`, however many `os.write` calls it takes (a
    single call may write less): for key files, where a short write is a damaged key."""
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
    check_key_dir(out_dir)
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
                write_all(fd, dumps_pretty(doc.to_json()) + b"\n")
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
    if not str(path).strip():  # Path("") is ".", the current directory: say what is missing
        raise KeyFileError("no key file given: --key/--signer file: needs the path of pith-private-key.json")
    p = Path(path)
    try:
        st = p.stat()
    except FileNotFoundError:
        raise KeyFileError(
            f"key file {p} does not exist (create one with: pith-pipeline keys generate --out DIR)"
        ) from None
    except OSError as exc:
        raise KeyFileError(f"key file {p} cannot be read ({exc.strerror or type(exc).__name__})") from None
    if stat.S_ISDIR(st.st_mode):
        raise KeyFileError(
            f"key file {p} is not a regular file but a directory; "
            f"give the key file in it: {p / PRIVATE_KEY_FILE}"
        )
    if not stat.S_ISREG(st.st_mode):  # a FIFO would block forever, a device read forever
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
    seed, key_id, public_hex = _parse_key_file(data, p)
    check_key_id(key_id, f"key file {p}")
    signer = LocalKeySigner(seed, key_id, p.resolve())
    if public_hex is not None and public_hex != signer.public_key.hex():
        raise KeyFileError(f"key file {p}: public_key_hex does not match its seed")
    return signer


def _json_type(value: object) -> str:
    """The JSON name of a value's type, for a message that must not show the value."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "a list" if isinstance(value, list) else "an object"


def _field(obj: dict[str, object], name: str, p: Path, *, required: bool = True) -> str | None:
    """Field `name` of a key file as a string; missing or of another type is one line."""
    if name not in obj:
        if required:
            raise KeyFileError(f"key file {p} is malformed (field {name} is missing)")
        return None
    value = obj[name]
    if not isinstance(value, str):
        raise KeyFileError(f"key file {p} is malformed (field {name} is {_json_type(value)}, not a string)")
    return value


def _parse_key_file(data: bytes, p: Path) -> tuple[bytes, str, str | None]:
    """(seed, key id, public_key_hex or None) of a key file's bytes.

    Every message names the file and what is wrong with it (which field is missing, of
    the wrong type or length), and never shows a value: the seed is the secret, and a
    mangled file may hold it anywhere. A public key document or a KMS envelope given in
    place of the private key is named as such, with the option that takes it.
    """
    if not data.strip():
        raise KeyFileError(f"key file {p} is empty (an interrupted copy? restore it from your backup)")
    try:
        obj = loads(data)  # refuses a repeated field: two key ids or seeds mean two keys
    except DuplicateKeyError as exc:  # names the field, not its values
        raise KeyFileError(f"key file {p} is malformed ({exc})") from None
    except (ValueError, RecursionError) as exc:
        where = f" at line {exc.lineno} column {exc.colno}" if isinstance(exc, json.JSONDecodeError) else ""
        raise KeyFileError(f"key file {p} is not JSON{where} (or not UTF-8, or nested too deeply)") from None
    if not isinstance(obj, dict):
        raise KeyFileError(f"key file {p} is malformed (it is {_json_type(obj)}, not a JSON object)")
    if obj.get("kind") != KEY_FILE_KIND and ("public_key_b64" in obj or "keys" in obj):
        raise KeyFileError(
            f"key file {p} is a public key document ({PUBLIC_KEY_FILE}), which cannot sign; "
            f"give the private key file {PRIVATE_KEY_FILE} made with it"
        )
    if obj.get("kind") == "pith_kms_envelope":
        raise KeyFileError(f"key file {p} is a KMS envelope; give it as --signer kms-envelope:{p}")
    kind = _field(obj, "kind", p)
    if kind != KEY_FILE_KIND:
        raise KeyFileError(f"key file {p} is malformed (field kind is not {KEY_FILE_KIND!r})")
    if _field(obj, "algorithm", p) != "ed25519":
        raise KeyFileError(f"key file {p} is malformed (field algorithm is not 'ed25519')")
    seed_b64 = _field(obj, "seed_b64", p) or ""
    try:
        seed = base64.b64decode(seed_b64, validate=True)
    except ValueError:
        raise KeyFileError(f"key file {p} is malformed (field seed_b64 is not base64)") from None
    if len(seed) != 32:
        raise KeyFileError(f"key file {p} is malformed (field seed_b64 holds {len(seed)} bytes, not 32)")
    if "key_id" not in obj:
        raise KeyFileError(f"key file {p} is malformed (field key_id is missing)")
    key_id = check_key_id(obj["key_id"], f"key file {p}")
    return seed, key_id, _field(obj, "public_key_hex", p, required=False)
