"""One place that turns a signer spec (`file:PATH`, `kms:...`, ...) into a `Signer`."""

from __future__ import annotations

import math
import os
from datetime import timedelta

from pith_pipeline.config import Settings, env_name
from pith_pipeline.core.keys import Signer
from pith_pipeline.errors import KeyFileError
from pith_pipeline.signing.certified import CertifiedSigner
from pith_pipeline.signing.envelope import open_envelope_signer
from pith_pipeline.signing.kms import KmsSigner
from pith_pipeline.signing.local import check_key_id, load_signer

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
        check_key_id(params["key_id"], "kms signer option key_id")
    return key, params


#: Most KMS requests one signer keeps in flight (the connection pool is this big).
MAX_KMS_CONCURRENCY = 256


def _kms_numbers(params: dict[str, str]) -> tuple[int, float | None]:
    """(concurrency, max_rps) of a kms: spec, checked before KMS is asked: a whole number
    from 1 to MAX_KMS_CONCURRENCY, and a finite rate above 0 (nan reached int(nan) in
    the signer, a negative rate a negative sleep)."""
    text = params.get("concurrency", "16")
    try:
        concurrency = int(text)
    except ValueError:
        concurrency = 0
    if not 1 <= concurrency <= MAX_KMS_CONCURRENCY:
        raise KeyFileError(
            f"kms signer option concurrency={text!r}: expected a whole number from 1 to {MAX_KMS_CONCURRENCY}"
        )
    if "max_rps" not in params:
        return concurrency, None
    try:
        max_rps = float(params["max_rps"])
    except ValueError:
        max_rps = math.nan
    if not (math.isfinite(max_rps) and max_rps > 0):
        raise KeyFileError(
            f"kms signer option max_rps={params['max_rps']!r}: expected a number of requests a second above 0"
        )
    return concurrency, max_rps


def open_signer(spec: str, *, self_test: bool = True, settings: Settings | None = None) -> Signer:
    """A signer from its spec; one option and `PITH_SIGNER` choose the back end.

    \b
    file:PATH or PATH           the local key file (default)
    kms:KEY_ID_OR_ALIAS[?key_id=NAME&region=R&concurrency=N&max_rps=N]
                                an Ed25519 key in AWS KMS (never leaves KMS)
    kms-envelope:PATH|s3://...  an Ed25519 seed encrypted under a symmetric KMS key
    certified:ROOT_SPEC         a per-run in-memory key certified by ROOT_SPEC's key

    Remote keys sign once at open (`self_test`) so a wrong key, algorithm or
    permission fails before any work is done. A `certified:` key takes its run id and
    validity from `settings` (`run_id`, `cert_hours`), the run's; a caller that has
    none gets the table's defaults (this reads no environment: the command or task
    that resolved its settings passes them).
    """
    scheme, _, rest = spec.partition(":")
    if scheme == "kms":
        # lazy, as the two below: kms, envelope and certified add 6 ms to every command's
        # start (python -X importtime), and most runs sign with a key file

        key, params = _kms_params(rest)
        concurrency, max_rps = _kms_numbers(params)
        signer = KmsSigner(
            key,
            key_id=params.get("key_id"),
            region=params.get("region"),
            concurrency=concurrency,
            max_rps=max_rps,
        )
        if self_test:
            signer.self_test()
        return signer
    if scheme == "kms-envelope":
        return open_envelope_signer(rest)
    if scheme == "certified":
        if not rest:
            raise KeyFileError("certified: needs the root signer, e.g. certified:kms:alias/pith")
        run = settings if settings is not None else Settings()
        return CertifiedSigner(
            open_signer(rest, self_test=self_test),
            run_id=run.run_id,
            validity=timedelta(hours=run.cert_hours),
        )
    if scheme == "file":
        return load_signer(rest)
    if not rest or os.path.sep in scheme or scheme.startswith("."):
        return load_signer(spec)
    raise KeyFileError(f"unknown signer scheme {scheme!r} in {spec!r} (expected one of: {SCHEMES})")
