"""No seed reaches a store, a log, stdout/stderr or an error, whatever the signer.

Each test runs a real build (and, where there is one, key creation) with DEBUG
logging on for every logger, botocore's included, then scans everything written
for the seed in every usual text encoding.
"""

from __future__ import annotations

import base64
import json
import logging
from pathlib import Path

import boto3
import nacl.signing
import pytest
from signing_consts import KMS_ALIAS, SAMPLE

from pith_pipeline._internal.redact_logs import sensitive_call
from pith_pipeline.signing import certified
from pith_pipeline.testing.kms_server import LocalKmsServer


def encodings(seed: bytes) -> list[str]:
    b64 = base64.b64encode(seed).decode()
    return [
        seed.hex(),
        seed.hex().upper(),
        b64,
        b64.rstrip("="),
        base64.urlsafe_b64encode(seed).decode().rstrip("="),
        base64.b32encode(seed).decode().rstrip("="),
        repr(seed)[2:-1],
    ]


def leaks(seed: bytes, texts: dict[str, str]) -> list[str]:
    return [
        f"{where} contains {enc[:6]}..."
        for where, text in texts.items()
        for enc in encodings(seed)
        if enc in text
    ]


def written(*roots: Path) -> dict[str, str]:
    out = {}
    for root in roots:
        for p in root.rglob("*"):
            if p.is_file():
                out[str(p)] = p.read_bytes().decode("latin-1")
    return out


def scan(
    seed: bytes, store: Path, outputs: list[str], caplog: pytest.LogCaptureFixture, *, aws: bool = True
) -> None:
    texts = written(store)
    texts["stdout/stderr"] = "\n".join(outputs)
    texts["logs"] = "\n".join(f"{r.name} {r.getMessage()}" for r in caplog.records)
    if aws:  # botocore logs every request at DEBUG: the scan must have seen those
        assert any(r.name.startswith("botocore") for r in caplog.records)
    found = leaks(seed, texts)  # names where, never the seed itself
    assert not found, found


def test_scanner_finds_a_seed_where_there_is_one(file_key: Path) -> None:
    seed = base64.b64decode(json.loads(file_key.read_text())["seed_b64"])
    assert leaks(seed, written(file_key.parent))  # the key file itself: the scan has teeth


def seed_of(key_file: Path) -> bytes:
    return base64.b64decode(json.loads(key_file.read_text())["seed_b64"])


def test_file_signer(file_key: Path, tmp_path: Path, cli, caplog) -> None:  # type: ignore[no-untyped-def]
    caplog.set_level(logging.DEBUG)
    seed = seed_of(file_key)
    store = tmp_path / "out"
    r = cli("build", "--input", str(SAMPLE), "--store", str(store), "--signer", f"file:{file_key}")
    assert r.code == 0, r.err
    scan(seed, store, [r.out, r.err], caplog, aws=False)
    # the log key made beside it on this first run: its seed is nowhere either
    log_key = file_key.parent / "pith-log-private-key.json"
    assert (store / "log" / "checkpoint").is_file()
    scan(seed_of(log_key), store, [r.out, r.err], caplog, aws=False)


def test_kms_envelope_signer(wrap_key: str, log_key: Path, tmp_path: Path, cli, caplog) -> None:  # type: ignore[no-untyped-def]
    caplog.set_level(logging.DEBUG)
    env_file = tmp_path / "keys" / "pith.envelope.json"
    r1 = cli("keys", "envelope-create", "--kms-key", wrap_key, "--out", str(env_file))
    assert r1.code == 0, r1.err
    store = tmp_path / "out"
    r2 = cli(
        "build",
        "--input",
        str(SAMPLE),
        "--store",
        str(store),
        "--signer",
        f"kms-envelope:{env_file}",
        "--log-signer",
        f"file:{log_key}",
    )
    assert r2.code == 0, r2.err
    # a broken envelope's error must not carry anything either
    env = json.loads(env_file.read_text())
    bad = tmp_path / "keys" / "bad.envelope.json"
    bad.write_text(json.dumps({**env, "public_key_hex": "00" * 32}))
    from pith_pipeline.signing import envelope

    envelope.clear_cache()
    r3 = cli(
        "build", "--input", str(SAMPLE), "--store", str(tmp_path / "out2"), "--signer", f"kms-envelope:{bad}"
    )
    assert r3.code == 1 and "does not match its public_key_hex" in r3.err
    botocore_debug = [r for r in caplog.records if r.name.startswith("botocore")]
    assert botocore_debug  # botocore did log at DEBUG during the run
    with sensitive_call():  # the test's own look at the seed stays out of the captured logs
        seed = boto3.client("kms").decrypt(
            CiphertextBlob=base64.b64decode(env["ciphertext_b64"]),
            KeyId=env["kms_key_id"],
            EncryptionContext=env["encryption_context"],
        )["Plaintext"]
    assert bytes(nacl.signing.SigningKey(seed).verify_key).hex() == env["public_key_hex"]
    scan(seed, tmp_path, [r1.out, r1.err, r2.out, r2.err, r3.out, r3.err], caplog)
    scan(seed_of(log_key), store, [r1.out, r1.err, r2.out, r2.err, r3.out, r3.err], caplog)


def test_botocore_would_log_the_seed_without_the_guard(wrap_key: str, tmp_path: Path, caplog) -> None:  # type: ignore[no-untyped-def]
    """Why `sensitive_call` exists: a plain Decrypt puts the seed in DEBUG logs."""
    from pith_pipeline.signing.envelope import create_envelope

    env = create_envelope(wrap_key)
    caplog.set_level(logging.DEBUG)
    seed = boto3.client("kms").decrypt(
        CiphertextBlob=base64.b64decode(env["ciphertext_b64"]),
        KeyId=env["kms_key_id"],
        EncryptionContext=env["encryption_context"],
    )["Plaintext"]
    texts = {"logs": "\n".join(r.getMessage() for r in caplog.records)}
    found = bool(leaks(seed, texts))
    caplog.clear()  # keep the test seed out of any failure report
    assert found


def test_kms_signer(local_kms: LocalKmsServer, kms_log_signer: str, tmp_path: Path, cli, caplog) -> None:  # type: ignore[no-untyped-def]
    caplog.set_level(logging.DEBUG)
    store = tmp_path / "out"
    r = cli(
        "build",
        "--input",
        str(SAMPLE),
        "--store",
        str(store),
        "--signer",
        f"kms:{KMS_ALIAS}",
        "--log-signer",
        kms_log_signer,
    )
    assert r.code == 0, r.err
    assert (store / "log" / "checkpoint").is_file()
    for key in local_kms.state.keys.values():  # the registry key and the log key
        scan(bytes(key.signing_key), store, [r.out, r.err], caplog)


def test_certified_signer(
    file_key: Path, tmp_path: Path, cli, caplog, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    caplog.set_level(logging.DEBUG)
    made: list[bytes] = []

    def record() -> nacl.signing.SigningKey:
        sk = nacl.signing.SigningKey.generate()
        made.append(bytes(sk))
        return sk

    monkeypatch.setattr(certified, "_new_key", record)
    store = tmp_path / "out"
    r = cli("build", "--input", str(SAMPLE), "--store", str(store), "--signer", f"certified:file:{file_key}")
    assert r.code == 0, r.err
    assert len(made) == 1
    root_seed = base64.b64decode(json.loads(file_key.read_text())["seed_b64"])
    log_seed = seed_of(file_key.parent / "pith-log-private-key.json")  # made beside the root key
    for seed in (made[0], root_seed, log_seed):
        scan(seed, store, [r.out, r.err], caplog, aws=False)


def test_signers_refuse_to_be_pickled_and_reprs_are_clean(file_key: Path) -> None:
    import pickle

    from pith_pipeline.signing.factory import open_signer

    for spec in (f"file:{file_key}", f"certified:file:{file_key}"):
        s = open_signer(spec)
        with pytest.raises(TypeError):
            pickle.dumps(s)
        seed = base64.b64decode(json.loads(file_key.read_text())["seed_b64"])
        assert not leaks(seed, {"repr": repr(s) + str(vars(s) if hasattr(s, "__dict__") else "")})
