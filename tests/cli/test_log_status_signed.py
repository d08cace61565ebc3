"""`log status` says that the checkpoint is signed and that its signature verified.

Why: on a store made with `--log-signer` (docs/pages/transparency-log.md), its age line
ended in "unsigned" (meaning the writer's note of when it appended, log/appended.json),
and no line said the checkpoint's signature had been checked: a reader took the log
for unsigned.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import pytest
from cli_in_process import run_cli

SAMPLE = Path(__file__).parent.parent / "data" / "arxiv-sample.jsonl"


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Any:
    return partial(run_cli, capsys)


@pytest.fixture
def logged(tmp_path: Path, cli: Any, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A store built as transparency-log.md shows: `build ... --log-signer`."""
    monkeypatch.chdir(tmp_path)
    for d in ("keys", "logkey"):
        assert cli("keys", "generate", "--out", d).code == 0
    r = cli(
        "build",
        "--input",
        str(SAMPLE),
        "--store",
        "out",
        "--key",
        "keys/pith-private-key.json",
        "--log-signer",
        "logkey/pith-private-key.json",
        "--workers",
        "1",
    )
    assert r.code == 0, r.err
    return tmp_path


def _fields(out: str) -> dict[str, str]:
    return {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in out.splitlines())}


def test_log_status_of_a_signed_log_says_signed_and_verified(logged: Path, cli: Any) -> None:
    r = cli("log", "status", "out")
    assert r.code == 0, r.err
    assert "unsigned" not in r.out, r.out
    fields = _fields(r.out)
    vkey = fields["vkey"]
    name = vkey.split("+")[0]
    assert fields["checkpoint"] == f"signed by {name} (signature verified with the vkey above)", r.out
    age = fields["age"]
    assert "appended" in age and "not covered by the signature" in age, age


def test_log_status_refuses_a_checkpoint_whose_signature_does_not_verify(logged: Path, cli: Any) -> None:
    """What "signature verified" rests on: a checkpoint whose note was changed is refused."""
    cp = logged / "out/log/checkpoint"
    lines = cp.read_text().split("\n")
    lines[1] = str(int(lines[1]) + 1)  # the size, under the same signature
    cp.write_text("\n".join(lines))
    r = cli("log", "status", "out")
    assert r.code == 1, r.out
    assert "checkpoint" in r.err and "Traceback" not in r.err
    assert "signature verified" not in r.out
