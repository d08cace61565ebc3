"""Signing throughput per back end, and the projected time to sign a full-archive backfill.

    python benchmarks/signing_bench.py [--latency-ms 5] [--kms-n 600] [--local-n 20000]

`kms` is measured against the local KMS-protocol endpoint (pith_pipeline.testing.kms_server)
on 127.0.0.1 with injected per-request latency, through the real boto3 client and the
real `KmsSigner` (SigV4 signing, JSON protocol, local verification of each signature).
`kms-envelope` and `certified` sign in process with pynacl after one KMS call each
(Decrypt, or Sign for the certificate), so they are measured as local signing.
The projection is for 2.9 million papers x 4 signatures (receipt, two events, bundle),
signing only: hashing, merging and storage writes are not included.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import time

from pith_pipeline.core.keys import Ed25519Signer
from pith_pipeline.signing.certified import CertifiedSigner
from pith_pipeline.signing.kms import KmsSigner
from pith_pipeline.testing.kms_server import LocalKmsServer

PAPERS = 2_900_000
PER_PAPER = 4
QUOTA_RPS = 300.0  # AWS KMS ECC request quota, shared by the whole account and region


def digests(n: int) -> list[bytes]:
    return [hashlib.sha256(i.to_bytes(8, "big")).digest() for i in range(n)]


def rate(fn, n: int) -> float:  # type: ignore[no-untyped-def]
    t = time.perf_counter()
    fn(digests(n))
    return n / (time.perf_counter() - t)


def hours(signatures: int, rps: float) -> str:
    h = signatures / rps / 3600
    return f"{h:.1f} h" if h >= 1 else f"{h * 60:.0f} min"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--latency-ms", type=float, default=5.0)
    ap.add_argument("--kms-n", type=int, default=600)
    ap.add_argument("--local-n", type=int, default=20000)
    args = ap.parse_args()
    for k, v in {
        "AWS_ACCESS_KEY_ID": "bench",
        "AWS_SECRET_ACCESS_KEY": "bench",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_CONFIG_FILE": "/dev/null",
        "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
    }.items():
        os.environ[k] = v
    total = PAPERS * PER_PAPER
    rows: list[tuple[str, float, str]] = []
    with LocalKmsServer() as kms:
        kms.state.add_key("bench", alias="alias/bench")
        os.environ["AWS_ENDPOINT_URL_KMS"] = kms.url
        kms.state.latency = args.latency_ms / 1000
        for c in (1, 8, 32):
            signer = KmsSigner("alias/bench", concurrency=c)
            signer.sign_digests(digests(c))  # warm the connection pool
            r = rate(signer.sign_digests, args.kms_n if c > 1 else max(50, args.kms_n // 8))
            proj = hours(total, min(r, QUOTA_RPS))
            rows.append(
                (
                    f"kms, concurrency {c} ({args.latency_ms:g} ms latency)",
                    r,
                    f"{proj} (at min(measured, {QUOTA_RPS:g} rps quota))",
                )
            )
        root = KmsSigner("alias/bench")
        t = time.perf_counter()
        cert_signer = CertifiedSigner(root, run_id="bench")
        cert_setup = time.perf_counter() - t
    local = Ed25519Signer.generate("bench-local")
    r_local = rate(local.sign_digests, args.local_n)
    rows.append(
        (
            "file / kms-envelope (in-process pynacl, 1 thread)",
            r_local,
            f"{hours(total, r_local)} (+1 KMS Decrypt per process)",
        )
    )
    r_cert = rate(cert_signer.sign_digests, args.local_n)
    rows.append(
        (
            f"certified ephemeral key (1 thread; certificate took {cert_setup * 1000:.0f} ms)",
            r_cert,
            f"{hours(total, r_cert)} (+1 KMS Sign per run)",
        )
    )
    print(
        f"| back end | signatures/s | full backfill ({PAPERS:,} papers x {PER_PAPER} = "
        f"{total:,} signatures) |"
    )
    print("|---|---:|---|")
    for name, r, proj in rows:
        print(f"| {name} | {r:,.0f} | {proj} |")
    print(
        f"\nkms direct is capped by the account quota: {hours(total, QUOTA_RPS)} at the full "
        f"{QUOTA_RPS:g} rps, with nothing left for the daily run; on {os.cpu_count()} cores "
        "the client and the local endpoint share the CPU, so high concurrency measures CPU, "
        "not KMS."
    )


if __name__ == "__main__":
    main()
