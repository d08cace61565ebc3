"""A store that is not there is an error, never an empty store.

Why: `query --store /nonexistent "SELECT count(*) FROM records"` printed 0 with exit
status 0, `status` printed empty tables, `reindex` made the directory and reported an
index of 0 records: a typo in a path looked like a store with nothing published. Every
command that reads or maintains a store it did not make opens it through one function
(`storage.factory.open_existing_store`), which refuses a missing store in one line naming
it, with exit status 2 (input that cannot be used at all, docs/pages/exit-codes.md).
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import pytest
from cli_in_process import run_cli

from pith_pipeline.errors import UnreadableInputError
from pith_pipeline.storage.factory import MissingStoreError, open_existing_store, open_store

#: every command that reads or maintains an existing store, with STORE where it goes
COMMANDS = [
    ("query", "--store", "STORE", "SELECT count(*) FROM records"),
    ("status", "--store", "STORE"),
    ("status", "--store", "STORE", "--deep"),
    ("status", "--store", "STORE", "--json"),
    ("reindex", "--store", "STORE"),
    ("compact", "--store", "STORE"),
    ("rebuild", "--store", "STORE", "--signer", "KEY"),
    ("keys", "show", "--store", "STORE"),
    ("receipts", "reissue", "--store", "STORE", "--signer", "KEY"),
    ("log", "status", "STORE"),
    ("log", "verify", "STORE"),
    ("log", "prove", "--log", "STORE", "sha256:" + "0" * 64),
    ("log", "consistency", "--log", "STORE", "CHECKPOINT"),
    ("log", "monitor", "STORE", "--state", "MONITOR"),
    ("log", "sync", "--store", "STORE", "--log-signer", "KEY"),
    ("log", "rebuild", "--store", "STORE", "--log-signer", "KEY"),
    ("verify", "PATH", "--log", "STORE"),
    ("report", "--store", "STORE"),
]


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Any:
    return partial(run_cli, capsys)


@pytest.fixture
def key(tmp_path: Path) -> Path:
    from pith_pipeline.signing.local import generate_key

    priv, _pub, _doc = generate_key(tmp_path / "keys")
    return priv


def _args(command: tuple[str, ...], store: str, key: Path, tmp_path: Path) -> list[str]:
    checkpoint = tmp_path / "old-checkpoint"
    checkpoint.write_text("x\n")
    bundle = Path(__file__).parent.parent / "data" / "pith-bundle-1909.11150.json"
    values = {
        "STORE": store,
        "KEY": f"file:{key}",
        "CHECKPOINT": str(checkpoint),
        "MONITOR": str(tmp_path / "monitor.json"),
        "PATH": str(bundle),
    }
    return [values.get(a, a) for a in command]


def _one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c[:2]))
def test_a_store_that_does_not_exist_is_an_error_naming_it(
    command: tuple[str, ...], cli: Any, key: Path, tmp_path: Path
) -> None:
    missing = tmp_path / "no-such-store"
    r = cli(*_args(command, str(missing), key, tmp_path))
    assert r.code == 2, r.out + r.err
    line = _one_error_line(r.err)
    assert line.startswith("error: ") and str(missing) in line and "does not exist" in line, line
    assert r.out == ""
    assert not missing.exists(), "a command that reads a store must not create it"
    assert not (tmp_path / "monitor.json").exists()


@pytest.mark.parametrize(
    "command", [c for c in COMMANDS if c[0] in ("query", "status", "log")], ids=lambda c: " ".join(c[:2])
)
def test_a_store_path_that_is_a_file_is_an_error_naming_it(
    command: tuple[str, ...], cli: Any, key: Path, tmp_path: Path
) -> None:
    a_file = tmp_path / "store.txt"
    a_file.write_text("not a store\n")
    r = cli(*_args(command, str(a_file), key, tmp_path))
    assert r.code == 2, r.out + r.err
    line = _one_error_line(r.err)
    assert str(a_file) in line and "not a directory" in line, line


def test_the_default_store_missing_says_how_to_make_one(
    cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PITH_STORE", raising=False)
    r = cli("query", "SELECT count(*) FROM records")
    assert r.code == 2, r.out + r.err
    line = _one_error_line(r.err)
    assert str(tmp_path / "pith-store") in line and "pith-pipeline ingest --sample" in line, line
    assert not (tmp_path / "pith-store").exists()


def test_an_empty_directory_is_an_empty_store(cli: Any, tmp_path: Path) -> None:
    """A directory that is there but holds nothing yet is a store with nothing published
    (analysts.md: "an empty store has empty tables"), not a missing one."""
    empty = tmp_path / "empty"
    empty.mkdir()
    r = cli("query", "--store", str(empty), "--format", "csv", "SELECT count(*) AS n FROM records")
    assert r.code == 0, r.err
    assert r.out.splitlines() == ["n", "0"]
    assert cli("status", "--store", str(empty)).code == 0


def test_an_s3_prefix_with_nothing_under_it_is_no_store(s3_store_url: str, cli: Any) -> None:
    r = cli("query", "--store", s3_store_url, "SELECT count(*) FROM records")
    assert r.code == 2, r.out + r.err
    line = _one_error_line(r.err)
    assert s3_store_url in line and "holds no objects" in line, line
    assert cli("status", "--store", s3_store_url).code == 2


def test_an_s3_store_with_objects_opens(s3_store_url: str) -> None:
    store = open_store(s3_store_url)
    store.put("pith-signing-key.json", b"{}")
    assert open_existing_store(s3_store_url).url == store.url


def test_open_existing_store_is_the_one_check(tmp_path: Path) -> None:
    """The Python API refuses the same way, with an input error (exit status 2, terminal:
    an Airflow task fails at once rather than retrying a typo)."""
    with pytest.raises(MissingStoreError) as caught:
        open_existing_store(str(tmp_path / "nope"))
    assert isinstance(caught.value, UnreadableInputError) and caught.value.exit_code == 2
    assert not caught.value.transient
    (tmp_path / "there").mkdir()
    assert open_existing_store(f"file://{tmp_path / 'there'}").url == str(tmp_path / "there")
