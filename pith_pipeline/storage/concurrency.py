"""How many requests a run keeps in flight on a store (`--io-concurrency`).

The one rule for every loop that talks to a store from several threads (the
publish loop in `loader`, the audit's readers): the default by kind of store,
the bounds of the option, and the connection pool the store keeps for them.
Below the loop and the audit, so both take it from here.
"""

from __future__ import annotations

from pith_pipeline.errors import InputError
from pith_pipeline.storage.base import Store

#: requests in flight on S3 by default: about what one core keeps busy building and
#: signing while the requests wait (a distant region: 100 ms each)
S3_IO_CONCURRENCY = 32
#: a local directory: one at a time (its writes are short; the group commit makes
#: them durable together)
LOCAL_IO_CONCURRENCY = 1
MAX_IO_CONCURRENCY = 256


def default_io_concurrency(store: Store) -> int:
    """Requests in flight when `--io-concurrency` is not given: many on S3, one locally."""
    return S3_IO_CONCURRENCY if store.url.startswith("s3://") else LOCAL_IO_CONCURRENCY


def check_io_concurrency(n: int) -> int:
    """`n`, or `InputError` naming `--io-concurrency` when it is outside 1..MAX_IO_CONCURRENCY."""
    if not 1 <= n <= MAX_IO_CONCURRENCY:
        raise InputError(f"--io-concurrency must be between 1 and {MAX_IO_CONCURRENCY}, not {n}")
    return n


def reserve_connections(store: Store, n: int) -> None:
    """Let the store keep `n` connections open (S3: boto3's `max_pool_connections`),
    so that `n` requests in flight do not queue for, or churn, a smaller pool."""
    store.reserve_connections(n)
