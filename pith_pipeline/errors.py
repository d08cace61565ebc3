"""One root error for the whole package.

Every error a user can meet derives from `PithError`; the CLI catches only that
root and prints `diagnostics()`. `transient` tells a retry policy (Airflow's, or
our own backoff) whether trying again can help. Errors keep their constructor
arguments in `args` so they pickle across process boundaries (Airflow workers,
multiprocessing pools).
"""

from __future__ import annotations


class PithError(Exception):
    """Root of every error this package raises on purpose."""

    transient: bool = False

    def diagnostics(self) -> str:
        """A text for people: what went wrong and, where known, what to do."""
        return str(self)


class TransientError(PithError):
    """A failure that may succeed when retried (throttling, timeouts, 5xx)."""

    transient = True


class TerminalError(PithError):
    """A failure that a retry cannot fix (bad input, bad key, conflict)."""


class CanonicalJSONError(TerminalError):
    """A value that RFC 8785 canonical JSON cannot represent exactly (floats, big ints)."""


class InputError(TerminalError):
    """Bad input: names the record, the field and where it came from."""

    def __init__(
        self,
        message: str,
        *,
        record_id: str | None = None,
        field: str | None = None,
        where: str | None = None,
    ) -> None:
        super().__init__(message, record_id, field, where)
        self.message = message
        self.record_id = record_id
        self.field = field
        self.where = where

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild_input_error, (self.message, self.record_id, self.field, self.where))

    def __str__(self) -> str:
        parts = []
        if self.where:
            parts.append(self.where)
        if self.record_id:
            parts.append(f"record {self.record_id}")
        if self.field:
            parts.append(f"field {self.field!r}")
        prefix = ", ".join(parts)
        return f"{prefix}: {self.message}" if prefix else self.message


def _rebuild_input_error(
    message: str, record_id: str | None, field: str | None, where: str | None
) -> InputError:
    return InputError(message, record_id=record_id, field=field, where=where)


class KeyFileError(TerminalError):
    """A key file that is missing, malformed or readable by others."""


class BackendError(PithError):
    """A back end (signer, store) failed; `transient` says whether a retry can help.

    The flag is per instance because the same call fails either way (throttling is
    transient, access denied is not); it survives pickling for Airflow workers.
    """

    def __init__(self, message: str, *, transient: bool = False) -> None:
        super().__init__(message, transient)
        self.transient = transient

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild_backend_error, (type(self), str(self.args[0]), self.transient))

    def __str__(self) -> str:
        return str(self.args[0])


def _rebuild_backend_error(cls: type[BackendError], message: str, transient: bool) -> BackendError:
    return cls(message, transient=transient)


class SigningError(BackendError):
    """A signer failed; `transient` says whether to retry."""


class StorageError(BackendError):
    """A storage back end failed; `transient` says whether to retry."""


class WriteConflictError(TerminalError):
    """A write-once object already exists with different bytes: never overwritten."""


class VerificationError(TerminalError):
    """A bundle or event failed verification."""
