"""Keep botocore's DEBUG logging away from calls that carry key material.

botocore logs every request's parameters and every response body at DEBUG
(`botocore.endpoint`, `botocore.parsers`). For KMS `Encrypt` (the seed goes in)
and `Decrypt` (the seed comes out) that would put the seed, base64-encoded, in
any log where someone turned DEBUG on. Inside `sensitive_call()` those loggers
drop every record emitted by the current thread; other threads log as usual.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_LOGGERS = (
    "botocore.endpoint",
    "botocore.parsers",
    "botocore.hooks",
    "botocore.auth",
    "botocore.retryhandler",
    "botocore.awsrequest",
    "botocore.httpsession",
    "botocore.client",
    "urllib3.connectionpool",
)
_state = threading.local()


class _DropWhileSensitive(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not getattr(_state, "depth", 0)


_FILTER = _DropWhileSensitive()


def _install() -> None:
    for name in _LOGGERS:
        lg = logging.getLogger(name)
        if _FILTER not in lg.filters:
            lg.addFilter(_FILTER)


@contextmanager
def sensitive_call() -> Iterator[None]:
    """Silence the HTTP-level loggers in this thread for the duration of the block."""
    _install()
    _state.depth = getattr(_state, "depth", 0) + 1
    try:
        yield
    finally:
        _state.depth -= 1
