"""Signed notes and checkpoints against the C2SP specifications' own examples."""

from __future__ import annotations

import pytest

from pith_pipeline.core.keys import Ed25519Signer
from pith_pipeline.tlog.note import (
    Checkpoint,
    Verifier,
    key_id,
    open_checkpoint,
    open_note,
    sign_note,
    verifier_key,
)

# c2sp.org/signed-note, "Verifier keys / Example"
SPEC_VKEY = "example.com/foo+530d903a+AekyeRrm56hApGFkyQR4ZCbV54Id2LKaANYcrnKv3U2k"
SPEC_NOTE = (
    "This is an example message.\n\n"
    "\u2014 example.com/foo "
    "Uw2QOkn8srV1yJGh2VYRlL1Tnagv1YEq6TfXppzi2ONncAlTgK7Ztg1ERYNZXsYjOBH3mFXmRKuwHjG1Yu72IneyaQM=\n"
).encode()


def test_the_spec_example_note_verifies() -> None:
    v = Verifier.parse(SPEC_VKEY)
    assert v.name == "example.com/foo" and v.key_id == 0x530D903A
    assert v.vkey == SPEC_VKEY  # key id recomputed from name and key
    assert open_note(SPEC_NOTE, v) == b"This is an example message.\n"
    tampered = SPEC_NOTE.replace(b"example message", b"exemple message")
    with pytest.raises(ValueError, match="does not verify"):
        open_note(tampered, v)


def test_the_spec_example_checkpoint_parses() -> None:
    spec = b"example.com/behind-the-sofa\n20852163\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n"
    cp = Checkpoint.parse(spec)
    assert (cp.origin, cp.size) == ("example.com/behind-the-sofa", 20852163)
    assert cp.text().endswith(b"\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n")
    for bad in (b"o\n012\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n", b"o\n1\n\n", b"o\n1\n"):
        with pytest.raises(ValueError):
            Checkpoint.parse(bad)


def test_sign_and_open_a_checkpoint() -> None:
    key = Ed25519Signer.generate("log")
    name = "pith.example.org/log"
    cp = Checkpoint(name, 3, bytes(range(32)))
    signed = sign_note(cp.text(), name, key.public_key, _raw(key))
    v = Verifier.parse(verifier_key(name, key.public_key))
    assert open_checkpoint(signed, v, name) == cp
    # an unknown key's signature is ignored; a note with only unknown keys is rejected
    other = Ed25519Signer.generate("x")
    with pytest.raises(ValueError, match="not signed by"):
        open_checkpoint(signed, Verifier.parse(verifier_key(name, other.public_key)))
    witness = sign_note(cp.text(), "witness.example", other.public_key, _raw(other))
    cosigned = signed + witness.split(b"\n\n")[1]
    assert open_checkpoint(cosigned, v) == cp
    with pytest.raises(ValueError, match="origin"):
        open_checkpoint(signed, v, "elsewhere/log")
    assert key_id(name, key.public_key) == int(v.vkey.split("+")[1], 16)


def _raw(key: Ed25519Signer):  # type: ignore[no-untyped-def]
    return lambda msg: key._sk.sign(msg).signature


@pytest.mark.parametrize("size", ["\u0661\u0660", "\uff13", "\xb2", "+3", "1_0", " 3"])
def test_a_checkpoint_size_is_ascii_decimal(size: str) -> None:
    """A signed checkpoint whose size another verifier would refuse (or read as another
    number) is refused here too: `str.isdigit` took other scripts' digits."""
    key = Ed25519Signer.generate("log")
    name = "pith.example.org/log"
    text = f"{name}\n{size}\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n".encode()
    signed = sign_note(text, name, key.public_key, _raw(key))
    with pytest.raises(ValueError, match="not a decimal number"):
        open_checkpoint(signed, Verifier.parse(verifier_key(name, key.public_key)))


def test_a_verifier_key_id_is_eight_ascii_hex_digits() -> None:
    key = Ed25519Signer.generate("log")
    vkey = verifier_key("pith.example.org/log", key.public_key)
    name, hex_id, b64 = vkey.split("+", 2)
    arabic = hex_id.translate({ord(d): 0x0660 + int(d) for d in "0123456789"})
    for bad in (arabic, "0x" + hex_id[2:], hex_id[:4] + "_" + hex_id[5:]):
        if bad == hex_id:
            continue
        with pytest.raises(ValueError):
            Verifier.parse(f"{name}+{bad}+{b64}")
    assert Verifier.parse(vkey).vkey == vkey
