"""A number of seconds or hours is finite: nan and inf are usage errors.

Why: click's `float` and `FloatRange` take `nan`, `inf` and `-inf` (they are floats,
and nan fails no comparison, so no range refuses it). `--retention nan` vacuumed with
a retention no one meant, `--retention inf` ended in an OverflowError, `--wait nan`
never waited, and `--min-interval nan` slipped past the "at least 3 seconds for arXiv"
check. Each is now refused before anything runs: exit 2, one line naming the option.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_in_process import run_cli

BAD = ["nan", "NaN", "inf", "-inf", "Infinity", "1e999"]

COMMANDS = [
    ["compact", "--retention", "{v}"],
    ["reindex", "--retention", "{v}"],
    ["reindex", "--wait", "{v}"],
    ["compact", "--wait", "{v}"],
    ["build", "--input", "{input}", "--wait", "{v}"],
    ["rebuild", "--wait", "{v}"],
    ["receipts", "reissue", "--wait", "{v}"],
    ["ingest", "--sample", "--wait", "{v}"],
    ["ingest", "--sample", "--min-interval", "{v}"],
]


@pytest.mark.parametrize("value", BAD)
@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c[:2]) + " " + c[-2])
def test_nan_and_inf_are_usage_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str], value: str
) -> None:
    snap = tmp_path / "in.jsonl"
    snap.write_text("", encoding="utf-8")
    args = [a.format(v=value, input=snap) for a in command]
    store = tmp_path / "store"
    result = run_cli(capsys, *args, "--store", str(store))
    assert result.code == 2, result
    lines = result.err.strip().splitlines()
    assert lines and "Traceback" not in result.err
    assert any(command[-2] in line and "finite" in line for line in lines), result.err
    assert not store.exists()  # refused before anything ran


@pytest.mark.parametrize("value", ["nan", "inf"])
def test_nan_and_inf_from_the_environment_are_usage_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("PITH_LEASE_WAIT", value)
    result = run_cli(capsys, "reindex", "--store", str(tmp_path / "store"))
    assert result.code == 2 and "finite" in result.err and "Traceback" not in result.err


def test_finite_values_still_work(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "store"
    store.mkdir()
    result = run_cli(capsys, "compact", "--store", str(store), "--retention", "0.5", "--wait", "1e3")
    assert result.code == 0, result
