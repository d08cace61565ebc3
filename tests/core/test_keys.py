from __future__ import annotations

import os
import pickle
import stat
from pathlib import Path
from typing import Any

import pytest

from pith_pipeline.core.keys import Ed25519Signer, PublicKey, fingerprint_b32, fingerprint_hex
from pith_pipeline.errors import KeyFileError
from pith_pipeline.signing.local import generate_key, load_signer


def test_reference_key_fingerprints(reference_bundle: dict[str, Any]) -> None:
    doc = reference_bundle["public_keys"][0]
    key = PublicKey.from_json(doc)
    assert fingerprint_hex(key.public_key) == doc["fingerprint_sha256_hex"]
    assert fingerprint_b32(key.public_key) == doc["fingerprint_sha256_b32_first128bits"]
    assert key.to_json() == doc


def test_key_document_rejects_mismatched_fingerprint(reference_bundle: dict[str, Any]) -> None:
    doc = dict(reference_bundle["public_keys"][0], fingerprint_sha256_hex="00" * 16)
    with pytest.raises(ValueError, match="fingerprint"):
        PublicKey.from_json(doc)


def test_generated_key_file_is_0600_and_loads(tmp_path: Path) -> None:
    priv, pub, doc = generate_key(tmp_path / "keys", key_id="test-key")
    assert stat.S_IMODE(priv.stat().st_mode) == 0o600
    signer = load_signer(priv)
    assert signer.key_id == "test-key" and signer.public_key == doc.public_key
    assert PublicKey.from_json(__import__("json").loads(pub.read_text())).key_id == "test-key"


def test_world_readable_key_is_refused(tmp_path: Path) -> None:
    priv, _, _ = generate_key(tmp_path)
    os.chmod(priv, 0o644)
    with pytest.raises(KeyFileError, match="chmod 600"):
        load_signer(priv)


def test_generate_refuses_to_replace_a_key(tmp_path: Path) -> None:
    generate_key(tmp_path)
    with pytest.raises(KeyFileError, match="already exists"):
        generate_key(tmp_path)


def test_private_key_never_in_repr_or_errors(tmp_path: Path) -> None:
    priv, _, _ = generate_key(tmp_path)
    seed_b64 = __import__("json").loads(priv.read_text())["seed_b64"]
    signer = load_signer(priv)
    assert seed_b64 not in repr(signer) and seed_b64 not in str(signer)
    with pytest.raises(TypeError):
        pickle.dumps(signer)
    priv.write_text(priv.read_text().replace('"algorithm"', '"algo"'))
    with pytest.raises(KeyFileError) as err:
        load_signer(priv)
    assert seed_b64 not in str(err.value)


def test_missing_key_file_says_how_to_create_one(tmp_path: Path) -> None:
    with pytest.raises(KeyFileError, match="keys generate"):
        load_signer(tmp_path / "nope.json")


def test_signer_signs_raw_digest() -> None:
    s = Ed25519Signer.generate("k")
    import nacl.signing

    digest = bytes(range(32))
    nacl.signing.VerifyKey(s.public_key).verify(digest, s.sign_digest(digest))
