"""Every error the package raises on purpose is transient or terminal by its class."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import pith_pipeline
from pith_pipeline.errors import (
    BackendError,
    PithError,
    SigningError,
    StorageError,
    TerminalError,
    TransientError,
)

#: Bases that are never raised as themselves: `StorageError(msg, transient=...)` gives
#: an instance of its transient or terminal subclass.
ABSTRACT = {PithError, TransientError, TerminalError, BackendError, StorageError, SigningError}


def _subclasses(cls: type) -> set[type]:
    out = set()
    for sub in cls.__subclasses__():
        out |= {sub, *_subclasses(sub)}
    return out


def test_every_error_class_is_transient_or_terminal() -> None:
    for info in pkgutil.walk_packages(pith_pipeline.__path__, "pith_pipeline."):
        if not info.name.endswith("__main__"):
            importlib.import_module(info.name)
    undecided = sorted(
        c.__qualname__
        for c in _subclasses(PithError) - ABSTRACT
        if c.__module__.startswith("pith_pipeline") and not issubclass(c, TransientError | TerminalError)
    )
    assert undecided == []


def test_the_flag_picks_the_class() -> None:
    for base in (StorageError, SigningError):
        transient, terminal = base("a", transient=True), base("b")
        assert isinstance(transient, base) and isinstance(terminal, base)
        assert isinstance(transient, TransientError) and transient.transient
        assert isinstance(terminal, TerminalError) and not terminal.transient
        assert str(transient) == "a" and str(terminal) == "b"


@pytest.mark.parametrize(
    "url",
    [
        "https://alice:s3cret-pass@oai.example.org/oai",
        "https://alice:s3cret pass@oai.example.org/oai",  # whitespace in the password
        "https://alice:s3cret\u00a0pass@oai.example.org/oai",  # a no-break space
        "HTTPS://alice:s3cret-pass@oai.example.org",
    ],
)
def test_the_password_of_a_url_never_reaches_an_error(url: str) -> None:
    """A URL's user:password is cut from every error line, whatever it holds: a
    password with a space in it was printed whole (the pattern stopped at blanks)."""
    from pith_pipeline._internal.error_text import redact

    out = redact(f"cannot reach {url}: connection refused", env={})
    assert "s3cret" not in out and "pass@" not in out, out
    assert "oai.example.org" in out and "connection refused" in out
