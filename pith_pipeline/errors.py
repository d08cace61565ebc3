"""One root error for the whole package.

Every error a user can meet derives from `PithError`; the CLI catches only that
root and prints `diagnostics()`. Every error is either a `TransientError` (trying
again can help) or a `TerminalError` (it cannot): the class decides, so a retry
policy (Airflow's, or our own backoff) needs nothing else; `transient` mirrors it.
Errors keep their constructor arguments in `args` so they pickle across process
boundaries (Airflow workers, multiprocessing pools).
"""

from __future__ import annotations


class PithError(Exception):
    """Root of every error this package raises on purpose."""

    transient: bool = False
    #: the CLI's exit status for this error (docs/pages/exit-codes.md)
    exit_code: int = 1

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
    """A back end (signer, store) failed; the class says whether a retry can help.

    The same call fails either way (throttling is transient, access denied is not),
    so `StorageError(msg, transient=...)` and `SigningError(msg, transient=...)` give
    an instance of their transient or terminal subclass (`TransientStorageError`,
    `TerminalStorageError`, ...). Why classes, not a flag: a retry policy that only
    knows class names (Airflow's `ExceptionRetryPolicy`) fails fast on every
    `TerminalError`, and a flag outside that hierarchy let a non-transient storage
    error (AccessDenied, a missing staged chunk) be retried. It survives pickling for
    Airflow workers.
    """

    #: (terminal, transient) subclass that `cls(message, transient=...)` gives
    _kinds: tuple[type[BackendError], type[BackendError]] | None = None

    def __new__(cls, message: str, *, transient: bool | None = None) -> BackendError:
        kinds = cls.__dict__.get("_kinds")
        if kinds is not None:
            cls = kinds[bool(transient)]  # the class decides
        return super().__new__(cls, message)

    def __init__(self, message: str, *, transient: bool | None = None) -> None:
        if transient is not None and bool(transient) != self.transient:
            raise TypeError(f"{type(self).__name__} is {'' if self.transient else 'not '}transient")
        super().__init__(message)

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild_backend_error, (type(self), str(self.args[0])))

    def __str__(self) -> str:
        return str(self.args[0])


def _rebuild_backend_error(cls: type[BackendError], message: str) -> BackendError:
    return cls(message)


class SigningError(BackendError):
    """A signer failed: `SigningError(msg, transient=...)` picks the subclass below."""


class TransientSigningError(SigningError, TransientError):
    """A signer failure a retry may fix (throttling, a KMS hiccup, a timeout)."""


class TerminalSigningError(SigningError, TerminalError):
    """A signer failure a retry cannot fix (permission, key state, key usage)."""


SigningError._kinds = (TerminalSigningError, TransientSigningError)


class StorageError(BackendError):
    """A storage back end failed: `StorageError(msg, transient=...)` picks the subclass below."""


class TransientStorageError(StorageError, TransientError):
    """A storage failure a retry may fix (throttling, 5xx, timeouts, conditional-write races)."""


class TerminalStorageError(StorageError, TerminalError):
    """A storage failure a retry cannot fix (access denied, no bucket, a missing object)."""


StorageError._kinds = (TerminalStorageError, TransientStorageError)


class WriteConflictError(TerminalError):
    """A write-once object already exists with different bytes: never overwritten."""


class VerificationError(TerminalError):
    """A bundle or event failed verification."""


class IntegrityError(TerminalError):
    """A stored object (an event, a pointer) failed its checks: it is named, and the
    subject it belongs to is not published from it. The run goes on with the other
    papers and ends non-zero."""

    def __init__(self, message: str, *, key: str = "") -> None:
        super().__init__(message, key)
        self.message = message
        self.key = key

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild_integrity_error, (self.message, self.key))

    def __str__(self) -> str:
        return f"{self.key}: {self.message}" if self.key else self.message


def _rebuild_integrity_error(message: str, key: str) -> IntegrityError:
    return IntegrityError(message, key=key)


def is_record_problem(exc: BaseException) -> bool:
    """Whether `exc` is something one input record can cause (so: quarantine it and go
    on) rather than a store, signer, lease or configuration failure (stop the run).

    Why a rule rather than a list of record errors: a hostile record can reach any
    ValueError, KeyError or OverflowError deep in canonicalisation; none of them may
    stop a run. What stops a run is what no other record could avoid either.
    """
    if isinstance(exc, PithError):
        return isinstance(exc, InputError | CanonicalJSONError | VerificationError)
    if isinstance(exc, OSError | MemoryError):
        return False
    return isinstance(exc, Exception)


class RequestDeadlineError(TransientError):
    """An HTTP request that did not complete within its total deadline.

    Why a deadline besides the read timeout: a server that sends one byte just before
    each read timeout would otherwise hold a run forever.
    """


class ResponseTooLargeError(TerminalError):
    """An HTTP response body over its size limit; reading stopped at the limit."""


class ResumptionLoopError(TerminalError):
    """An OAI-PMH list that does not end: a resumption token seen before in the window,
    or more records than the server's own `completeListSize`."""


class DamagedInputError(TerminalError):
    """An input file that cannot be read to its end (a truncated or corrupt .gz):
    names the file and how far it was read. Not a record problem: the rest of the file
    is unreadable, so the run stops (exit code `exit_code`)."""

    exit_code = 65  # EX_DATAERR (sysexits.h): the input data was incorrect


class UnreadableInputError(TerminalError):
    """An input file that cannot be opened at all (missing, a directory, no permission).
    Exit status 2, as when the command line's own check of `--input` refuses it: the
    readers are also called without that check (Airflow's chunk tasks, Python)."""

    exit_code = 2


class SettingError(TerminalError):
    """A setting whose value cannot be used: names the variable and what it expects."""


class LeaseConfigError(SettingError):
    """A shard selection, lease TTL or wait that cannot be used: a usage error (exit 2).

    Here rather than in `config`, so the lease code (which is given its settings and
    reads none) raises the same class as the settings that feed it."""

    exit_code = 2


class IncompleteRunError(TerminalError):
    """A run that finished, but left papers unpublished because a stored object of
    theirs failed its checks: everything else was published and the run manifest
    written. Exit status 3, so schedulers notice without the run being lost."""

    exit_code = 3
