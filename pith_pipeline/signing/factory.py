"""One place that turns a signer spec (`file:PATH`, `kms:...`) into a `Signer`."""

from __future__ import annotations

import os

from pith_pipeline.core.keys import Signer
from pith_pipeline.errors import KeyFileError

SIGNER_ENV = "PITH_SIGNER"


def open_signer(spec: str) -> Signer:
    """`file:PATH` (or a bare path) is the local key; other schemes are added by back ends."""
    scheme, _, rest = spec.partition(":")
    if scheme == "file":
        from pith_pipeline.signing.local import load_signer

        return load_signer(rest)
    if not rest or os.path.sep in scheme or scheme.startswith("."):
        from pith_pipeline.signing.local import load_signer

        return load_signer(spec)
    raise KeyFileError(f"unknown signer scheme {scheme!r} in {spec!r} (expected file:PATH)")
