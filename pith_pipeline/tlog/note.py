"""C2SP signed notes and tlog checkpoints, Ed25519 only.

Why exactly the C2SP format: a checkpoint in it is verified by any note client
(Go's `sumdb/note`, witnesses), with a verifier key string an auditor pins once:
`<name>+<hex key id>+<base64(0x01 || public key)>`.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import struct
from collections.abc import Callable
from dataclasses import dataclass

import nacl.exceptions
import nacl.signing

ED25519_TYPE = 0x01
_DASH = "\u2014 "
_HEX_ID = re.compile(r"[0-9a-fA-F]{8}")


def key_id(name: str, public_key: bytes) -> int:
    """SHA-256(name || 0x0A || 0x01 || public key)[:4], big-endian."""
    digest = hashlib.sha256(name.encode() + b"\n" + bytes([ED25519_TYPE]) + public_key).digest()
    return int(struct.unpack(">I", digest[:4])[0])


def check_name(name: str) -> str:
    if not name or any(c.isspace() or c == "+" for c in name):
        raise ValueError(f"note key name {name!r} is empty or has a space or '+'")
    return name


def verifier_key(name: str, public_key: bytes) -> str:
    """The vkey string an auditor pins: `name+hex(id)+base64(0x01||key)`."""
    check_name(name)
    b64 = base64.b64encode(bytes([ED25519_TYPE]) + public_key).decode()
    return f"{name}+{key_id(name, public_key):08x}+{b64}"


@dataclass(frozen=True, slots=True)
class Verifier:
    name: str
    key_id: int
    public_key: bytes

    @classmethod
    def parse(cls, vkey: str) -> Verifier:
        """Parse a vkey string; the key id must match the name and key."""
        try:
            name, hex_id, b64 = vkey.strip().split("+", 2)
            raw = base64.b64decode(b64, validate=True)
            kid = int(hex_id, 16)
        except (ValueError, binascii.Error):
            raise ValueError("not a note verifier key (name+hexid+base64)") from None
        # eight ASCII hex digits: `int(_, 16)` also takes `0x`, `_`, spaces and other
        # scripts' digits, which would make look-alike spellings of one key
        if _HEX_ID.fullmatch(hex_id) is None or len(raw) != 33 or raw[0] != ED25519_TYPE:
            raise ValueError("not an Ed25519 note verifier key")
        check_name(name)
        if key_id(name, raw[1:]) != kid:
            raise ValueError(f"verifier key {name}: key id does not match the key")
        return cls(name, kid, raw[1:])

    @property
    def vkey(self) -> str:
        return verifier_key(self.name, self.public_key)

    def verify(self, text: bytes, signature: bytes) -> bool:
        try:
            nacl.signing.VerifyKey(self.public_key).verify(text, signature)
            return True
        except (nacl.exceptions.BadSignatureError, nacl.exceptions.CryptoError, ValueError):
            return False


def sign_note(text: bytes, name: str, public_key: bytes, sign: Callable[[bytes], bytes]) -> bytes:
    """`text` (ending in a newline) followed by one Ed25519 signature line."""
    check_name(name)
    if not text.endswith(b"\n"):
        raise ValueError("a note text ends with a newline")
    sig = sign(text)
    blob = struct.pack(">I", key_id(name, public_key)) + sig
    return text + b"\n" + (_DASH + name + " " + base64.b64encode(blob).decode() + "\n").encode()


def open_note(data: bytes, verifier: Verifier) -> bytes:
    """The note text, once a signature by `verifier` checks; ValueError saying why not.

    Signatures by other keys are ignored (the spec's rule, which lets witnesses
    cosign and keys rotate); a bad signature by the known key rejects the note.
    """
    try:
        whole = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError("note is not UTF-8") from None
    if any(ord(c) < 0x20 and c != "\n" for c in whole):
        raise ValueError("note has a control character")
    cut = whole.rfind("\n\n")
    if cut < 0 or not whole.endswith("\n"):
        raise ValueError("note has no signature block")
    text, sigs = whole[: cut + 1], whole[cut + 2 :]
    good = False
    for line in sigs[:-1].split("\n"):
        if not line.startswith(_DASH):
            raise ValueError("malformed note signature line")
        name, _, b64 = line[len(_DASH) :].rpartition(" ")
        try:
            blob = base64.b64decode(b64, validate=True)
        except binascii.Error:
            raise ValueError("malformed note signature") from None
        if len(blob) < 5:
            raise ValueError("malformed note signature")
        if name != verifier.name or struct.unpack(">I", blob[:4])[0] != verifier.key_id:
            continue
        if not verifier.verify(text.encode(), blob[4:]):
            raise ValueError(f"note signature by {name} does not verify")
        good = True
    if not good:
        raise ValueError(f"note is not signed by {verifier.name}+{verifier.key_id:08x}")
    return text.encode()


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A tree head: origin, size and root hash (C2SP tlog-checkpoint)."""

    origin: str
    size: int
    root: bytes

    def text(self) -> bytes:
        if not self.origin or "\n" in self.origin:
            raise ValueError("a checkpoint origin is one non-empty line")
        return f"{self.origin}\n{self.size}\n{base64.b64encode(self.root).decode()}\n".encode()

    @property
    def root_b64(self) -> str:
        return base64.b64encode(self.root).decode()

    @classmethod
    def parse(cls, text: bytes) -> Checkpoint:
        lines = text.decode("utf-8").split("\n")
        if len(lines) < 4 or lines[-1] != "" or any(not line for line in lines[:-1]):
            raise ValueError("a checkpoint has an origin, a size and a root hash line")
        origin, size_s, root_s = lines[0], lines[1], lines[2]
        # ASCII only: `isdigit` takes other scripts' digits, which `int` reads as a number
        if not (size_s.isascii() and size_s.isdigit()) or (size_s.startswith("0") and size_s != "0"):
            raise ValueError(f"checkpoint size {size_s!r} is not a decimal number")
        try:
            root = base64.b64decode(root_s, validate=True)
        except binascii.Error:
            raise ValueError("checkpoint root hash is not base64") from None
        if len(root) != 32:
            raise ValueError("checkpoint root hash is not 32 bytes")
        return cls(origin, int(size_s), root)


def open_checkpoint(data: bytes, verifier: Verifier, origin: str | None = None) -> Checkpoint:
    """Verify a signed checkpoint and parse it; `origin`, when given, must match."""
    cp = Checkpoint.parse(open_note(data, verifier))
    if origin is not None and cp.origin != origin:
        raise ValueError(f"checkpoint origin {cp.origin!r} is not {origin!r}")
    return cp
