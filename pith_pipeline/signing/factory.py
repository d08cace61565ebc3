"""One place that turns a signer spec (`file:PATH`, `kms:...`, ...) into a `Signer`."""

from __future__ import annotations

import math
import os

from pith_pipeline.config import env_name
from pith_pipeline.core.keys import Signer
from pith_pipeline.errors import KeyFileError

SIGNER_ENV = env_name("signer")


SCHEMES = "file:PATH, kms:KEY_ID_OR_ALIAS, kms-envelope:LOCATION, certified:ROOT_SPEC"


def _kms_params(rest: str) -> tuple[str, dict[str, str]]:
    """`alias/x?key_id=pith-v2&region=eu-west-1&concurrency=16&max_rps=250`."""
    from urllib.parse import parse_qsl

    key, _, query = rest.partition("?")
    params = dict(parse_qsl(query, keep_blank_values=False))
    unknown = set(params) - {"key_id", "region", "concurrency", "max_rps"}
    if unknown:
        raise KeyFileError(
            f"unknown kms signer option(s) {', '.join(sorted(unknown))} "
            "(known: key_id, region, concurrency, max_rps)"
        )
    if "key_id" in params:
        from pith_pipeline.signing.local import check_key_id

        check_key_id(params["key_id"], "kms signer option key_id")
    return key, params


def open_signer(spec: str, *, self_test: bool = True) -> Signer:
    """A signer from its spec; one option and `PITH_SIGNER` choose the back end.

    \b
    file:PATH or PATH           the local key file (default)
    kms:KEY_ID_OR_ALIAS[?key_id=NAME&region=R&concurrency=N&max_rps=N]
                                an Ed25519 key in AWS KMS (never leaves KMS)
    kms-envelope:PATH|s3://...  an Ed25519 seed encrypted under a symmetric KMS key
    certified:ROOT_SPEC         a per-run in-memory key certified by ROOT_SPEC's key

    Remote keys sign once at open (`self_test`) so a wrong key, algorithm or
    permission fails before any work is done.
    """
    scheme, _, rest = spec.partition(":")
    if scheme == "kms":
        from pith_pipeline.signing.kms import KmsSigner

        key, params = _kms_params(rest)
        try:
            concurrency = int(params.get("concurrency", 16))
            max_rps = float(params["max_rps"]) if "max_rps" in params else None
        except ValueError:
            raise KeyFileError(f"kms signer options must be numbers in {spec!r}") from None
        # `float()` reads inf and nan; inf overflowed the rate limiter's burst, and a
        # rate of nan, 0 or less meant "unlimited": a rate is a finite positive number
        if max_rps is not None and not (math.isfinite(max_rps) and max_rps > 0):
            raise KeyFileError(
                f"kms signer option max_rps={params['max_rps']!r}: must be a finite number above 0"
            )
        try:
            signer = KmsSigner(
                key,
                key_id=params.get("key_id"),
                region=params.get("region"),
                concurrency=concurrency,
                max_rps=max_rps,
            )
        except ValueError:
            raise KeyFileError(f"kms signer options must be numbers in {spec!r}") from None
        if self_test:
            signer.self_test()
        return signer
    if scheme == "kms-envelope":
        from pith_pipeline.signing.envelope import open_envelope_signer

        return open_envelope_signer(rest)
    if scheme == "certified":
        from pith_pipeline.signing.certified import CertifiedSigner

        if not rest:
            raise KeyFileError("certified: needs the root signer, e.g. certified:kms:alias/pith")
        return CertifiedSigner(open_signer(rest, self_test=self_test))
    if scheme == "file":
        from pith_pipeline.signing.local import load_signer

        return load_signer(rest)
    if not rest or os.path.sep in scheme or scheme.startswith("."):
        from pith_pipeline.signing.local import load_signer

        return load_signer(spec)
    raise KeyFileError(f"unknown signer scheme {scheme!r} in {spec!r} (expected one of: {SCHEMES})")
