"""`--wait SECONDS` / `PITH_LEASE_WAIT`: anything but a finite number >= 0 is refused.

Why: `nan` compares false with every deadline, so a wait of `nan` either ended at
once (the commands: `max(0, nan)` is 0) or never (a lease loop comparing `now >=
deadline`); neither is what the operator asked for. It is a usage error (exit 2)
naming the option, before anything is read or written.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from pith_pipeline.cli import cli
from pith_pipeline.config import LeaseConfigError, SettingError, Settings, load_settings, wait_seconds

BAD = ["nan", "NaN", "-nan", "-1", "inf", "-inf", "soon", ""]


def commands(tmp: Path) -> list[list[str]]:
    """Every writing command with its required options (valid paths), `--wait` left out."""
    existing = tmp / "file.jsonl"
    existing.write_text("")
    store = str(tmp / "store")
    key = ["--signer", f"file:{existing}"]
    return [
        ["build", "--input", str(existing), "--store", store, *key],
        ["ingest", "--store", store, *key],
        ["rebuild", "--store", store, *key],
        ["reindex", "--store", store],
        ["compact", "--store", store],
        ["receipts", "reissue", "--store", store, *key],
        ["log", "sync", "--store", store, "--log-signer", f"file:{existing}"],
        ["log", "rebuild", "--store", store, "--log-signer", f"file:{existing}"],
    ]


@pytest.mark.parametrize("bad", ["nan", "-1", "inf", "soon"])
def test_a_wait_that_is_not_a_number_of_seconds_is_a_usage_error(tmp_path: Path, bad: str) -> None:
    for argv in commands(tmp_path):
        r = CliRunner().invoke(cli, [*argv[: 2 if argv[0] in ("receipts", "log") else 1], "--wait", bad])
        assert r.exit_code == 2, (argv, r.output)
        assert "--wait" in r.output and bad in r.output, (argv, r.output)
        assert "Traceback" not in r.output


def test_lease_wait_from_the_environment_is_checked_the_same_way(tmp_path: Path) -> None:
    for argv in commands(tmp_path):
        r = CliRunner().invoke(cli, argv, env={"PITH_LEASE_WAIT": "nan"})
        assert r.exit_code == 2, (argv, r.output)
        assert "PITH_LEASE_WAIT" in r.output and "nan" in r.output, (argv, r.output)


@pytest.mark.parametrize("bad", BAD)
def test_wait_seconds_refuses_what_is_not_a_finite_number_at_least_zero(bad: str) -> None:
    with pytest.raises(LeaseConfigError, match="PITH_LEASE_WAIT"):
        wait_seconds(bad, "PITH_LEASE_WAIT")


@pytest.mark.parametrize(("text", "seconds"), [("0", 0.0), ("2.5", 2.5), ("600", 600.0)])
def test_wait_seconds_takes_numbers_at_least_zero(text: str, seconds: float) -> None:
    assert wait_seconds(text, "--wait") == seconds


@pytest.mark.parametrize("bad", ["nan", "-5", "inf", "soon"])
def test_the_task_settings_refuse_a_bad_lease_wait(bad: str) -> None:
    """DAG tasks and `backfill` read PITH_LEASE_WAIT through `Settings`: same rule,
    same exit status, the variable named."""
    with pytest.raises(LeaseConfigError, match="PITH_LEASE_WAIT") as info:
        _ = Settings(lease_wait=bad).lease_wait_seconds
    assert info.value.exit_code == 2


@pytest.mark.parametrize("bad", ["nan", "inf", "0", "-3"])
def test_a_lease_ttl_that_is_not_a_positive_number_is_refused(bad: str) -> None:
    """`PITH_LEASE_TTL=nan` made every expiry `nan`: a lease document that cannot be written."""
    with pytest.raises(SettingError, match="PITH_LEASE_TTL"):
        load_settings(env={"PITH_LEASE_TTL": bad})


@pytest.mark.parametrize("bad", ["\u0663", "+3", "1_0", "0-\uff17", " 3\n", "3-", "-3"])
def test_shards_are_ascii_numbers(bad: str) -> None:
    """`--shards` took what `int()` takes: other scripts' digits, a sign, underscores.
    A shard selection is written as ASCII numbers, or refused in one line."""
    from pith_pipeline.storage.lease import parse_shards

    with pytest.raises(LeaseConfigError, match="--shards"):
        parse_shards(bad)


@pytest.mark.parametrize(
    ("text", "shards"), [("0-7", set(range(8))), ("1, 3,5-6", {1, 3, 5, 6}), ("15", {15})]
)
def test_shards_read_right(text: str, shards: set[int]) -> None:
    from pith_pipeline.storage.lease import parse_shards

    assert parse_shards(text) == shards
