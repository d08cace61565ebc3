"""The clock of a run, read at the edge: the one place that looks at `SOURCE_DATE_EPOCH`.

`SOURCE_DATE_EPOCH` (the reproducible-builds convention) pins every timestamp a
build writes to one instant, so two builds of the same input are byte-identical.
The core is pure and is given a clock (`core.timeutil.Clock`); commands, tasks and
the library's defaults use `system_clock` from here.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from datetime import UTC, datetime

from pith_pipeline.config import SettingError
from pith_pipeline.core.timeutil import Clock, epoch_clock

SOURCE_DATE_EPOCH = "SOURCE_DATE_EPOCH"


def clock_from_env(environ: Mapping[str, str] = os.environ) -> Clock:
    """`SOURCE_DATE_EPOCH`'s instant when it is set, else the real time."""
    sde = environ.get(SOURCE_DATE_EPOCH)
    if sde:
        return epoch_clock(_epoch_seconds(sde))
    return _now


#: 9999-12-31T23:59:59Z, the last second a `datetime` (and an ISO timestamp) can hold.
_MAX_EPOCH = 253402300799


def _epoch_seconds(text: str) -> int:
    """`SOURCE_DATE_EPOCH` as whole seconds: ASCII digits only (the convention's form;
    `int()` also reads other scripts' digits, spaces and `_`), within the years a
    timestamp can hold. Anything else is a setting error naming the variable, not a
    Python error from deep inside the run."""
    if not (text.isascii() and text.isdigit()):
        raise SettingError(f"{SOURCE_DATE_EPOCH}={text!r}: expected whole seconds since 1970 (ASCII digits)")
    seconds = int(text)
    if seconds > _MAX_EPOCH:
        raise SettingError(f"{SOURCE_DATE_EPOCH}={text!r}: after the year 9999")
    return seconds


def system_clock() -> datetime:
    """Now, or SOURCE_DATE_EPOCH when it is set (read at each call, as a default argument
    must: a test or a command may set it after this module was imported)."""
    return clock_from_env()()


def _now() -> datetime:
    return datetime.now(tz=UTC)
