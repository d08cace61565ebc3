"""`kms-envelope:` end to end against moto's KMS (and S3) server on 127.0.0.1."""

from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path
from typing import Any

import boto3
import pytest
from signing_consts import SAMPLE

from pith_pipeline.errors import KeyFileError, SigningError
from pith_pipeline.signing import envelope
from pith_pipeline.signing.envelope import create_envelope, open_envelope_signer, write_envelope


def test_envelope_create_build_verify(wrap_key: str, log_key: Path, tmp_path: Path, cli) -> None:  # type: ignore[no-untyped-def]
    env_file = tmp_path / "keys" / "pith.envelope.json"
    r = cli(
        "keys",
        "envelope-create",
        "--kms-key",
        wrap_key,
        "--out",
        str(env_file),
        "--key-id",
        "pith-env-2026-06",
    )
    assert r.code == 0, r.err
    env = json.loads(env_file.read_text())
    assert env["kind"] == "pith_kms_envelope" and env["key_id"] == "pith-env-2026-06"
    assert env["encryption_context"] == {
        "pith_purpose": "pith-ed25519-signing-seed",
        "pith_key_id": "pith-env-2026-06",
    }
    # refuses to replace an envelope
    assert cli("keys", "envelope-create", "--kms-key", wrap_key, "--out", str(env_file)).code != 0

    out = tmp_path / "out"
    build = ["build", "--input", str(SAMPLE), "--store", str(out), "--signer", f"kms-envelope:{env_file}"]
    # no plaintext log key is made beside an envelope (its seed lives only under KMS)
    r = cli(*build)
    assert r.code == 1 and "--log-signer" in r.err and not out.exists(), r.err
    r = cli(*build, "--log-signer", f"file:{log_key}")
    assert r.code == 0, r.err
    r = cli("verify", str(out), "--pin", env["public_key_fingerprint"], "-q")
    assert r.code == 0 and "30 verified" in r.out, r.out


def test_decrypted_once_per_process(wrap_key: str, tmp_path: Path) -> None:
    calls: list[str] = []
    real = boto3.client("kms")

    class Counting:
        def decrypt(self, **kw: Any) -> Any:
            calls.append("decrypt")
            return real.decrypt(**kw)

    path = tmp_path / "e.json"
    write_envelope(path, create_envelope(wrap_key, client=real))
    a = open_envelope_signer(str(path), client=Counting())
    b = open_envelope_signer(str(path), client=Counting())
    assert a is b and calls == ["decrypt"]
    envelope.clear_cache()
    open_envelope_signer(str(path), client=Counting())
    assert calls == ["decrypt", "decrypt"]


def test_relabelled_envelope_does_not_decrypt(wrap_key: str, tmp_path: Path) -> None:
    env = create_envelope(wrap_key, key_id="pith-env-a")
    env["key_id"] = "pith-env-b"  # the encryption context no longer matches the ciphertext
    path = tmp_path / "e.json"
    write_envelope(path, env)
    with pytest.raises(SigningError) as info:
        open_envelope_signer(str(path), cache=False)
    assert not info.value.transient and "InvalidCiphertextException" in str(info.value)


def test_public_key_mismatch_and_malformed_envelopes(wrap_key: str, tmp_path: Path) -> None:
    env = create_envelope(wrap_key)
    env["public_key_hex"] = "00" * 32
    path = tmp_path / "e.json"
    write_envelope(path, env)
    with pytest.raises(SigningError, match="does not match its public_key_hex"):
        open_envelope_signer(str(path), cache=False)
    bad = tmp_path / "bad.json"
    bad.write_text('{"kind": "pith_kms_envelope"}')
    with pytest.raises(KeyFileError, match="malformed"):
        open_envelope_signer(str(bad), cache=False)
    with pytest.raises(KeyFileError, match="does not exist"):
        open_envelope_signer(str(tmp_path / "missing.json"))


def test_envelope_stored_in_s3(wrap_key: str, s3_bucket: str, log_key: Path, tmp_path: Path, cli) -> None:  # type: ignore[no-untyped-def]
    env = create_envelope(wrap_key, key_id="pith-env-s3")
    boto3.client("s3").put_object(
        Bucket=s3_bucket, Key="keys/pith.envelope.json", Body=json.dumps(env).encode()
    )
    spec = f"kms-envelope:s3://{s3_bucket}/keys/pith.envelope.json"
    out = tmp_path / "out"
    r = cli(
        "build", "--input", str(SAMPLE), "--store", str(out), "--signer", spec, "--log-signer", str(log_key)
    )
    assert r.code == 0, r.err
    assert json.loads((out / "pith-signing-key.json").read_text())["key_id"] == "pith-env-s3"
    assert cli("verify", str(out), "-q").code == 0


# -- where the envelope is written: like `keys generate` (issue 16, item 19) ----------


def test_envelope_create_under_umask_000_makes_0700_parents_and_a_0600_file(
    wrap_key: str, tmp_path: Path
) -> None:
    out = tmp_path / "new" / "keys" / "pith.envelope.json"
    env = create_envelope(wrap_key)
    old = os.umask(0)
    try:
        write_envelope(out, env)
    finally:
        os.umask(old)
    for d in (out.parent, out.parent.parent):
        assert stat.S_IMODE(d.stat().st_mode) == 0o700, d
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    assert json.loads(out.read_bytes()) == env
    assert sorted(p.name for p in out.parent.iterdir()) == ["pith.envelope.json"]  # no temporary left


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o1777])
def test_envelope_create_refuses_a_directory_others_can_write_before_asking_kms(
    mode: int,
    kms_env: str,
    tmp_path: Path,
    cli,  # type: ignore[no-untyped-def]
) -> None:
    """Whoever can write the directory can swap the envelope (for one naming their KMS
    key) after it is made. Refused before KMS is asked: the key named does not exist."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(mode)
    result = cli("keys", "envelope-create", "--kms-key", "alias/none", "--out", str(shared / "e.json"))
    assert result.code == 1
    lines = [line for line in result.err.splitlines() if line.strip()]
    assert len(lines) == 1 and f"chmod 700 {shared}" in lines[0], result.err
    assert list(shared.iterdir()) == []


def test_a_failed_envelope_write_leaves_nothing_and_the_next_try_succeeds(
    wrap_key: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk half way: no cut envelope is left that would refuse the next try
    ("already exists") or load as garbage; the error is one line naming the path."""
    out = tmp_path / "keys" / "e.json"
    env = create_envelope(wrap_key)
    real_write = os.write

    def full(fd: int, data: Any) -> int:
        real_write(fd, bytes(data)[:10])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", full)
    with pytest.raises(KeyFileError, match=f"cannot write the envelope {out}: .*No space left"):
        write_envelope(out, env)
    monkeypatch.undo()
    assert list(out.parent.iterdir()) == []
    write_envelope(out, env)
    assert json.loads(out.read_bytes()) == env
    with pytest.raises(KeyFileError, match="already exists"):
        write_envelope(out, env)
