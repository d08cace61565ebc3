"""Error text for people: one line, the errno's advice, and never a secret.

Why here, in one place: the command line's error boundary, the local store and the
index all describe the same operating-system failures (a full disk, a read-only
file system, a missing permission), and an error can carry text that came from
elsewhere (a library's message, a URL), which must not print a credential.
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Mapping

#: What to do about the OS failures an operator meets, by errno.
OS_ERROR_HINTS = {
    errno.EROFS: "the file system is read-only",
    errno.ENOSPC: "the disk is full: free space, then run again",
    errno.EDQUOT: "disk quota exceeded: free space, then run again",
    errno.EACCES: "permission denied: check the directory's owner and mode",
    errno.EPERM: "operation not permitted: check the directory's owner and mode",
}

#: Environment variables whose values are secrets wherever they appear.
SECRET_ENV = ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN")

MAX_LINE = 600
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_RUST_ERRNO = re.compile(r"\(os error ([0-9]+)\)")
#: a URL's user:password: anything up to an `@` before the authority ends (`/?#`) or the
#: line does; blanks included, since a password may hold one (cutting too much of an
#: error line is the safe side of this)
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/?#@\r\n]+@")


def one_line(text: str) -> str:
    """`text` as one line: colour codes dropped, the lines of a chained message
    (`↳ cause`, as Rust libraries print them) joined with ": ", capped in length."""
    parts = []
    for raw in _ANSI.sub("", text).splitlines():
        part = raw.strip().lstrip("↳").strip()
        if part:
            parts.append(part)
    line = ": ".join(parts)
    return line if len(line) <= MAX_LINE else line[: MAX_LINE - 3] + "..."


def redact(text: str, env: Mapping[str, str] | None = None) -> str:
    """`text` without credentials: the user:password of a URL, and the value of any
    secret environment variable (an AWS secret key or session token)."""
    environ = os.environ if env is None else env
    text = _USERINFO.sub(r"\1****@", text)
    for name in SECRET_ENV:
        value = environ.get(name, "")
        if len(value) >= 8:  # shorter values would mask ordinary words
            text = text.replace(value, "****")
    return text


def os_errno(exc: OSError) -> int | None:
    """The errno of `exc`, also when a Rust library gave it only in the text."""
    if exc.errno is not None:
        return exc.errno
    found = _RUST_ERRNO.findall(str(exc))
    return int(found[-1]) if found else None


def os_error_hint(exc: OSError) -> str:
    """The advice for the OS failures an operator can fix, as " (advice)", else ""."""
    hint = OS_ERROR_HINTS.get(os_errno(exc) or 0)
    return f" ({hint})" if hint else ""


def describe_os_error(exc: OSError) -> str:
    """One line: the path(s) involved, the reason, and what to do."""
    reason = exc.strerror or one_line(str(exc)) or type(exc).__name__
    where = [str(f) for f in (exc.filename, exc.filename2) if f is not None]
    prefix = " -> ".join(where)
    return f"{prefix}: {reason}{os_error_hint(exc)}" if prefix else f"{reason}{os_error_hint(exc)}"
