"""The README's commands as a newcomer types them, after `pith-pipeline ingest --sample`.

Every command that reads or writes a store defaults to ./pith-store (as `ingest`
does), and every signing command takes --signer (or PITH_SIGNER).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from sampled_store import here_fixture, sampled_fixture  # noqa: F401  (fixtures)

from pith_pipeline.cli import cli

KEY = "pith-keys/pith-private-key.json"


def run(*args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(cli, list(args), env=env)


@pytest.mark.parametrize(
    "args",
    [
        ("status",),
        ("query", "SELECT count(*) AS n FROM records"),
        ("keys", "show"),
        ("reindex",),
        ("compact",),
        ("rebuild", "--signer", KEY),
    ],
)
def test_store_commands_default_to_the_store_ingest_made(here: Path, args: tuple[str, ...]) -> None:
    result = run(*args)
    assert result.exit_code == 0, result.output
    assert "Missing option '--store'" not in result.output


def test_query_reads_the_default_store(here: Path) -> None:
    result = run("query", "SELECT count(*) AS n FROM records", "--format", "json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == [{"n": 30}]


def test_keys_show_lists_the_key_ingest_made(here: Path) -> None:
    document = json.loads((here / "pith-store/pith-signing-key.json").read_text())
    fingerprint = document["fingerprint_sha256_hex"]
    result = run("keys", "show")
    assert result.exit_code == 0, result.output
    assert fingerprint in result.output


def test_verify_with_no_path_verifies_the_default_store(here: Path) -> None:
    result = run("verify")
    assert result.exit_code == 0, result.output
    assert "30 bundles, 30 verified, 0 failed" in result.output


def test_verify_with_no_path_follows_pith_store(here: Path) -> None:
    (here / "pith-store").rename(here / "elsewhere")
    result = run("verify", env={"PITH_STORE": str(here / "elsewhere")})
    assert result.exit_code == 0, result.output
    assert "30 bundles, 30 verified, 0 failed" in result.output


def test_rebuild_takes_the_signer_from_pith_signer(here: Path) -> None:
    result = run("rebuild", env={"PITH_SIGNER": f"file:{KEY}"})
    assert result.exit_code == 0, result.output
    assert "--key" not in result.output


def test_rebuild_accepts_signer_and_its_older_name_key(here: Path) -> None:
    assert run("rebuild", "--signer", KEY).exit_code == 0
    assert run("rebuild", "--key", KEY).exit_code == 0
