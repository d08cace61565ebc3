"""The `kms:` signer against a local endpoint speaking KMS's JSON protocol.

moto cannot create Ed25519 keys, so these tests pin down the exact requests the
signer sends and how it handles each kind of answer (signature, throttling,
internal errors, access denied, disabled key, a key that signs with the wrong key).
"""

from __future__ import annotations

import base64
import hashlib
import json
import socket
from pathlib import Path

import nacl.signing
import pytest
from signing_consts import KMS_ALIAS, SAMPLE

from pith_pipeline.errors import SigningError
from pith_pipeline.signing.factory import open_signer
from pith_pipeline.signing.kms import KmsSigner, make_kms_client, spki_to_raw
from pith_pipeline.testing.kms_server import LocalKey, LocalKmsServer

DIGEST = hashlib.sha256(b"a record").digest()


def sign_requests(server: LocalKmsServer) -> int:
    return [r["target"] for r in server.state.requests].count("TrentService.Sign")


def test_sign_sends_raw_digest_with_ed25519_sha_512(local_kms: LocalKmsServer, kms_key: LocalKey) -> None:
    signer = KmsSigner(KMS_ALIAS, key_id="pith-kms-test")
    sig = signer.sign_digest(DIGEST)
    reqs = local_kms.state.requests
    assert [r["target"] for r in reqs] == ["TrentService.GetPublicKey", "TrentService.Sign"]
    assert reqs[0]["body"] == {"KeyId": KMS_ALIAS}
    assert reqs[1]["body"] == {
        "KeyId": KMS_ALIAS,
        "Message": base64.b64encode(DIGEST).decode(),
        "MessageType": "RAW",
        "SigningAlgorithm": "ED25519_SHA_512",
    }
    assert all(r["content_type"] == "application/x-amz-json-1.1" and r["authorized"] for r in reqs)
    # the public key came out of the DER SubjectPublicKeyInfo intact
    assert signer.public_key == bytes(kms_key.signing_key.verify_key)
    nacl.signing.VerifyKey(signer.public_key).verify(DIGEST, sig)
    assert signer.key_id == "pith-kms-test" and "seed" not in repr(signer)


def test_throttling_is_retried_by_botocores_adaptive_mode(local_kms: LocalKmsServer) -> None:
    """Throttling and a KMS-side 500 are retried by botocore (adaptive mode: backoff,
    and a client-side rate that drops while KMS throttles); the signature then arrives."""
    assert make_kms_client().meta.config.retries == {"total_max_attempts": 8, "mode": "adaptive"}
    signer = KmsSigner(KMS_ALIAS)
    local_kms.state.faults.extend([("ThrottlingException", 400), ("KMSInternalException", 500)])
    sig = signer.sign_digest(DIGEST)
    nacl.signing.VerifyKey(signer.public_key).verify(DIGEST, sig)
    assert sign_requests(local_kms) == 3 and signer.calls == 1  # one call, botocore's retries inside


def test_throttling_that_persists_is_a_transient_error(local_kms: LocalKmsServer) -> None:
    signer = KmsSigner(KMS_ALIAS, attempts=2)
    local_kms.state.faults.extend([("ThrottlingException", 400)] * 5)
    with pytest.raises(SigningError) as info:
        signer.sign_digest(DIGEST)
    assert info.value.transient
    assert "ThrottlingException" in str(info.value) and "after 2 attempts" in str(info.value)
    assert sign_requests(local_kms) == 2


@pytest.mark.parametrize(
    ("code", "hint"),
    [
        ("AccessDeniedException", "policy"),
        ("DisabledException", "disabled"),
        ("NotFoundException", "no such KMS key"),
        ("InvalidKeyUsageException", "SIGN_VERIFY"),
    ],
)
def test_terminal_errors_are_not_retried(local_kms: LocalKmsServer, code: str, hint: str) -> None:
    signer = KmsSigner(KMS_ALIAS)
    local_kms.state.faults.append((code, 400))
    with pytest.raises(SigningError) as info:
        signer.sign_digest(DIGEST)
    assert not info.value.transient
    assert code in str(info.value) and hint in str(info.value)
    assert sign_requests(local_kms) == 1  # not retried


def test_disabled_or_denied_key_fails_when_opened(local_kms: LocalKmsServer, kms_key: LocalKey) -> None:
    kms_key.enabled = False
    with pytest.raises(SigningError, match="DisabledException") as info:
        open_signer(f"kms:{KMS_ALIAS}")
    assert not info.value.transient
    kms_key.enabled = True
    local_kms.state.denied.add(kms_key.key_id)
    with pytest.raises(SigningError, match="AccessDeniedException"):
        open_signer(f"kms:{kms_key.arn}")


def test_wrong_key_fails_on_the_first_signature_before_anything_is_published(
    local_kms: LocalKmsServer, kms_key: LocalKey, tmp_path: Path, cli
) -> None:  # type: ignore[no-untyped-def]
    kms_key.sign_with = nacl.signing.SigningKey.generate()
    with pytest.raises(SigningError, match="does not verify with its own public key"):
        open_signer(f"kms:{KMS_ALIAS}")
    r = cli("build", "--input", str(SAMPLE), "--store", str(tmp_path / "out"), "--signer", f"kms:{KMS_ALIAS}")
    assert r.code == 1 and "does not verify with its own public key" in r.err
    assert not (tmp_path / "out" / "pith").exists()


def test_unreachable_endpoint_is_transient(
    monkeypatch: pytest.MonkeyPatch, local_kms: LocalKmsServer
) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("AWS_ENDPOINT_URL_KMS", f"http://127.0.0.1:{port}")
    with pytest.raises(SigningError) as info:
        KmsSigner(KMS_ALIAS, attempts=2)
    assert info.value.transient and "EndpointConnectionError" in str(info.value)
    assert "after 2 attempts" in str(info.value)


def test_sign_digests_is_concurrent_bounded_and_ordered(local_kms: LocalKmsServer) -> None:
    signer = KmsSigner(KMS_ALIAS, concurrency=4)
    local_kms.state.latency = 0.02
    digests = [hashlib.sha256(str(i).encode()).digest() for i in range(24)]
    sigs = signer.sign_digests(digests)
    vk = nacl.signing.VerifyKey(signer.public_key)
    for d, s in zip(digests, sigs, strict=True):
        vk.verify(d, s)
    assert 2 <= local_kms.state.max_in_flight <= 4


def test_public_key_must_be_an_ed25519_spki() -> None:
    raw = bytes(range(32))
    assert spki_to_raw(bytes.fromhex("302a300506032b6570032100") + raw) == raw
    with pytest.raises(SigningError):
        spki_to_raw(bytes.fromhex("302a300506032b6571032100") + raw)  # Ed448 OID
    with pytest.raises(SigningError):
        spki_to_raw(bytes.fromhex("302a300506032b6570032100") + raw[:31])


def test_build_with_kms_signer_verifies_with_the_kms_key_pinned(
    local_kms: LocalKmsServer, kms_log_signer: str, tmp_path: Path, cli
) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "out"
    args = ["build", "--input", str(SAMPLE), "--store", str(out)]
    signer = f"kms:{KMS_ALIAS}?key_id=pith-kms-2026-06&concurrency=8"
    # a new store keeps a log; a KMS registry key has no directory for a log key beside
    # it, so the run says what to do before it writes anything
    r = cli(*args, "--signer", signer)
    assert r.code == 1 and "--log-signer" in r.err and not out.exists(), r.err
    # the log signed in KMS too (its own key: notes signed as RAW messages)
    r = cli(*args, "--signer", signer, "--log-signer", kms_log_signer)
    assert r.code == 0, r.err
    from pith_pipeline.storage.local import LocalStore
    from pith_pipeline.tlog.pipeline import check_log_matches_event_store

    assert check_log_matches_event_store(LocalStore(out)) == []
    doc = json.loads((out / "pith-signing-key.json").read_text())
    assert doc["key_id"] == "pith-kms-2026-06"
    r = cli(
        "verify",
        str(out),
        "--pin",
        doc["fingerprint_sha256_hex"],
        "--keys",
        str(out / "pith-signing-key.json"),
        "-q",
    )
    assert r.code == 0, r.out
    assert "30 verified" in r.out


def test_kms_signs_a_log_checkpoint_note_and_a_certified_key_refuses(local_kms: LocalKmsServer) -> None:
    from pith_pipeline.signing.certified import CertifiedSigner
    from pith_pipeline.tlog.log import LogSigner
    from pith_pipeline.tlog.note import Checkpoint, open_checkpoint

    signer = KmsSigner(KMS_ALIAS, key_id="pith-kms-test")
    log = LogSigner.from_signer(signer, "pith.example.org/log")
    cp = Checkpoint("pith.example.org/log", 7, DIGEST)
    assert open_checkpoint(log.sign_checkpoint(cp), log.verifier) == cp
    with pytest.raises(SigningError, match="4096"):
        signer.sign_message(bytes(5000))
    with pytest.raises(SigningError, match="cannot sign transparency log checkpoints"):
        LogSigner.from_signer(CertifiedSigner(signer), "x/log").sign_checkpoint(cp)


def test_papers_in_flight_sign_with_kms_at_once(local_kms: LocalKmsServer) -> None:
    """The loader's threads share one KMS signer: several papers are signed at once
    (its rate limiter and call counter are locked), and every bundle verifies."""
    from pith_pipeline.core.canonical_json import loads
    from pith_pipeline.core.verify import verify_bundle
    from pith_pipeline.publish import Publisher
    from pith_pipeline.sources.jsonl import iter_jsonl
    from pith_pipeline.storage.memory import MemoryStore

    signer = KmsSigner(KMS_ALIAS, concurrency=4, max_rps=1000)
    local_kms.state.latency = 0.02
    store = MemoryStore()
    summary = Publisher(store, signer, io_concurrency=6).publish(iter_jsonl(SAMPLE))
    assert summary.built == 30
    assert local_kms.state.max_in_flight >= 2
    bundles = [
        loads(v) for k, v in store.objects.items() if k.startswith("pith/") and k.endswith("bundle.json")
    ]
    assert len(bundles) == 30
    assert all(verify_bundle(b, pinned_fingerprint=signer.fingerprint).ok for b in bundles)


# -- a KMS client that cannot be made ---------------------------------------------------

_BAD_SETUPS = {
    "no region": ({}, "AWS_REGION"),
    "an empty region": ({"AWS_REGION": "", "AWS_DEFAULT_REGION": ""}, "AWS_REGION"),
    "a region that is no name": ({"AWS_REGION": "bad region!"}, "bad region!"),
    "an endpoint that is no URL": (
        {"AWS_REGION": "us-east-1", "AWS_ENDPOINT_URL": "not-a-url"},
        "AWS_ENDPOINT_URL",
    ),
    "a KMS endpoint that is no URL": (
        {"AWS_REGION": "us-east-1", "AWS_ENDPOINT_URL_KMS": "http://[::1"},
        "AWS_ENDPOINT_URL_KMS",
    ),
    "an unknown profile": ({"AWS_REGION": "us-east-1", "AWS_PROFILE": "no-such-profile"}, "AWS_PROFILE"),
}


@pytest.mark.parametrize("case", _BAD_SETUPS.values(), ids=_BAD_SETUPS.keys())
def test_a_kms_client_that_cannot_be_made_names_the_setting(
    case: tuple[dict[str, str], str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cli
) -> None:  # type: ignore[no-untyped-def]
    """No region, an endpoint that is not a URL, an unknown profile: configuration, one
    line naming the setting (exit 1), not an 'unexpected' bug (exit 70)."""
    env, names = case
    for var in list(__import__("os").environ):
        if var.startswith("AWS_") and var not in ("AWS_CA_BUNDLE",):
            monkeypatch.delenv(var)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing-secret-value")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(SigningError) as info:
        open_signer("kms:alias/x")
    assert names in str(info.value) and "\n" not in str(info.value)
    result = cli("keys", "envelope-create", "--kms-key", "alias/x", "--out", str(tmp_path / "env.json"))
    assert result.code == 1, result.err
    lines = [line for line in result.err.splitlines() if line.strip()]
    assert len(lines) == 1 and names in lines[0] and "unexpected" not in lines[0], result.err


@pytest.mark.parametrize(
    "options",
    [
        "concurrency=x",
        "concurrency=0",
        "concurrency=-3",
        "max_rps=x",
        "max_rps=nan",
        "max_rps=inf",
        "max_rps=-1",
    ],
)
def test_kms_signer_numbers_are_checked_before_kms_is_asked(options: str) -> None:
    """`max_rps=nan` reached int(nan) inside the signer (an unexpected ValueError), a
    negative rate a negative sleep; each is one line naming the option."""
    from pith_pipeline.errors import KeyFileError

    name = options.partition("=")[0]
    with pytest.raises(KeyFileError) as info:
        open_signer(f"kms:alias/x?{options}")
    assert name in str(info.value) and "\n" not in str(info.value)
