"""The run's clock is read at the edge (`pith_pipeline.clock`); the core is given one."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

import pith_pipeline.core.timeutil as timeutil
from pith_pipeline.clock import clock_from_env, system_clock
from pith_pipeline.core.timeutil import epoch_clock, iso_seconds


def test_source_date_epoch_pins_the_clock() -> None:
    clock = clock_from_env({"SOURCE_DATE_EPOCH": "1569354059"})
    assert iso_seconds(clock()) == "2019-09-24T19:40:59Z"
    assert clock() == clock()


def test_without_source_date_epoch_the_clock_is_the_real_time_in_utc() -> None:
    now = clock_from_env({})()
    assert now.tzinfo is not None and now.utcoffset() == UTC.utcoffset(now)
    assert now > datetime(2026, 1, 1, tzinfo=UTC)


def test_system_clock_reads_the_environment_at_each_call(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "0")
    assert system_clock() == datetime(1970, 1, 1, tzinfo=UTC)
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "86400")
    assert system_clock() == datetime(1970, 1, 2, tzinfo=UTC)


def test_the_core_has_no_clock_of_its_own() -> None:
    """Only a stopped clock, built from a value the caller read."""
    assert not hasattr(timeutil, "system_clock")
    assert epoch_clock(0)() == datetime(1970, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    "value", ["abc", "1e9", "-5", " 17", "17\n", "1_7", "\u0661\u0667", "\uff11\uff17", "99999999999999"]
)
def test_a_malformed_source_date_epoch_is_one_line_naming_it(
    value: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whole seconds in ASCII digits, within the years a timestamp can hold. `int()` read
    other scripts' digits (`١٧` pinned the clock to 1970), and the rest ended as "a bug"
    (exit 70) with Python's words instead of the variable's name."""
    from cli_in_process import run_cli

    from pith_pipeline.config import SettingError

    with pytest.raises(SettingError, match="SOURCE_DATE_EPOCH"):
        clock_from_env({"SOURCE_DATE_EPOCH": value})
    monkeypatch.setenv("SOURCE_DATE_EPOCH", value)
    monkeypatch.chdir(tmp_path)
    result = run_cli(capsys, "ingest", "--sample", "--store", str(tmp_path / "store"))
    assert result.code not in (0, 70), result
    assert "SOURCE_DATE_EPOCH" in result.err and "Traceback" not in result.err
