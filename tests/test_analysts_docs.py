"""docs/pages/analysts.md's examples, run as a reader runs them: on the store the README's
first command makes (`pith-pipeline ingest --sample`, `./pith-store`), each expected to
succeed and to print rows.

Why: the page's examples read `out/`, which a README user does not have, so they printed
"(0 rows)"; its pandas example failed with "No module named 'pandas'" and never said
where `open_store` comes from. Every `sh` and `python` block runs here, except those whose
fence says what they need beyond that store (` ```sh {.needs-s3} `, `{.needs-spark}`,
`{.needs-time}`: a class, which the site's Markdown accepts and drops), and `pip install`
(this interpreter has the `analysts` extra installed, as .ci/run installs it).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from doc_blocks import fenced_blocks

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "pages" / "analysts.md"
#: what a block may need beyond the README's store; those blocks are not run here
NEEDS = {"needs-s3", "needs-spark", "needs-time"}
#: what an example prints when it found nothing: pith-pipeline's table, Polars, pandas, DuckDB
EMPTY = re.compile(r"\(0 rows\)|shape: \(0,|Empty DataFrame|^\s*0 rows\s*$", re.M)


def blocks(text: str, language: str) -> list[tuple[str, str]]:
    """Every fenced block of `text` in `language`: (its tag, its body)."""
    return [(tag.removeprefix("{.").removesuffix("}"), body) for tag, body in fenced_blocks(text, language)]


def commands(body: str) -> list[str]:
    """A shell block's commands: backslash continuations joined, and a quoted argument
    (an SQL statement) over several lines kept whole; comments and `pip install` left out."""
    out: list[str] = []
    pending = ""
    for line in body.replace("\\\n", " ").splitlines():
        pending = f"{pending}\n{line}" if pending else line
        try:
            shlex.split(pending, comments=True)
        except ValueError:  # a quotation still open: the command goes on
            continue
        command = pending.strip()
        pending = ""
        if command and not command.startswith("#") and not command.startswith("pip install "):
            out.append(command)
    assert not pending, f"unterminated command: {pending}"
    return out


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PITH_", "AWS_", "AIRFLOW"))}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


@pytest.fixture(scope="module")
def readme_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory where the README's first command ran: `pith-store/` and `pith-keys/`."""
    where = tmp_path_factory.mktemp("analyst")
    done = subprocess.run(
        [sys.executable, "-m", "pith_pipeline", "ingest", "--sample"],
        cwd=where,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    assert (where / "pith-store/index/records").is_dir()
    return where


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=600)


def test_the_page_tags_every_block_that_needs_more() -> None:
    text = PAGE.read_text()
    tagged = {tag for lang in ("sh", "python") for tag, _ in blocks(text, lang) if tag}
    assert tagged <= NEEDS, f"unknown tags {tagged - NEEDS}: say what the block needs, from {sorted(NEEDS)}"
    runnable_sh = [c for tag, body in blocks(text, "sh") if not tag for c in commands(body)]
    assert sum(c.startswith("pith-pipeline query") for c in runnable_sh) >= 3, runnable_sh
    runnable_py = [body for tag, body in blocks(text, "python") if not tag]
    assert len(runnable_py) >= 4, "Polars, pandas, DuckDB and pith_pipeline.index.connect"
    assert "out/" not in "\n".join(runnable_sh + runnable_py), "examples read the README's store"


def test_every_import_a_python_example_uses_is_shown() -> None:
    """A name an example uses comes from an import in that example (open_store did not)."""
    for tag, body in blocks(PAGE.read_text(), "python"):
        if tag:
            continue
        for name in ("open_store", "connect", "DeltaTable", "pl", "duckdb"):
            if re.search(rf"(?<![.\w]){name}\b", body):
                assert re.search(rf"^(import .*\b{name}\b|from \S+ import .*\b{name}\b)", body, re.M), (
                    f"{name} is used but not imported:\n{body}"
                )


def _shell_cases() -> list[str]:
    return [c for tag, body in blocks(PAGE.read_text(), "sh") if not tag for c in commands(body)]


def _python_cases() -> list[str]:
    return [body for tag, body in blocks(PAGE.read_text(), "python") if not tag]


@pytest.mark.parametrize("command", _shell_cases(), ids=lambda c: " ".join(c.split())[:60])
def test_shell_example_prints_rows(readme_dir: Path, command: str) -> None:
    done = _run(["bash", "-o", "pipefail", "-c", command], readme_dir)
    assert done.returncode == 0, f"{command}\nexit {done.returncode}\n{done.stdout}\n{done.stderr}"
    assert done.stdout.strip(), f"{command} printed nothing"
    assert not EMPTY.search(done.stdout), f"{command} printed no rows:\n{done.stdout}"
    if "--format csv" in command:
        assert len(done.stdout.strip().splitlines()) >= 2, f"only a header:\n{done.stdout}"
    elif command.startswith("pith-pipeline query"):
        rows = re.search(r"\((\d+) rows?\)", done.stdout)
        assert rows and int(rows.group(1)) > 0, done.stdout
    elif command.startswith("pith-pipeline status"):
        assert "records: 30 " in done.stdout and "last run: " in done.stdout, done.stdout


@pytest.mark.parametrize("body", _python_cases(), ids=lambda b: b.splitlines()[-1][:40])
def test_python_example_prints_rows(readme_dir: Path, body: str, tmp_path: Path) -> None:
    script = tmp_path / "example.py"
    script.write_text(body + "\n")
    done = _run([sys.executable, str(script)], readme_dir)
    assert done.returncode == 0, f"{body}\nexit {done.returncode}\n{done.stdout}\n{done.stderr}"
    assert done.stdout.strip(), f"printed nothing:\n{body}"
    assert not EMPTY.search(done.stdout), f"printed no rows:\n{done.stdout}"
    assert re.search(r"\b(1992-02|1999-01|2007-0[34]|hep-th|pith:)", done.stdout), done.stdout


def _s3_cases() -> list[tuple[str, str]]:
    text = PAGE.read_text()
    return [("sh", c) for tag, body in blocks(text, "sh") if tag == "needs-s3" for c in commands(body)] + [
        ("python", body) for tag, body in blocks(text, "python") if tag == "needs-s3"
    ]


def test_s3_examples_run_as_written_on_moto(s3_store_url: str, s3_env: str, tmp_path: Path) -> None:
    """Every `{.needs-s3}` block, on the README's store made on moto's S3 server, with
    only the variables the page names set: the endpoint and credentials (AWS_*) and
    the store (PITH_S3). A storage_options that needs more than the page shows fails."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PITH_", "AWS_", "AIRFLOW"))}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env |= {
        "AWS_ACCESS_KEY_ID": os.environ["AWS_ACCESS_KEY_ID"],
        "AWS_SECRET_ACCESS_KEY": os.environ["AWS_SECRET_ACCESS_KEY"],
        "AWS_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": s3_env,
        "AWS_CONFIG_FILE": "/dev/null",
        "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
    }
    keys = subprocess.run(
        [sys.executable, "-m", "pith_pipeline", "keys", "generate", "--out", "keys"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert keys.returncode == 0, keys.stderr
    key = str(tmp_path / "keys/pith-private-key.json")
    made = subprocess.run(
        [sys.executable, "-m", "pith_pipeline", "ingest", "--sample", "--store", s3_store_url, "--key", key],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert made.returncode == 0, made.stderr
    env["PITH_S3"] = s3_store_url
    cases = _s3_cases()
    assert {lang for lang, _ in cases} == {"sh", "python"}, cases
    for lang, case in cases:
        if lang == "sh":
            argv = ["bash", "-o", "pipefail", "-c", case]
        else:
            script = tmp_path / "example.py"
            script.write_text(case + "\n")
            argv = [sys.executable, str(script)]
        done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"{case}\nexit {done.returncode}\n{done.stdout}\n{done.stderr}"
        assert done.stdout.strip() and not EMPTY.search(done.stdout), (
            f"{case} printed no rows:\n{done.stdout}"
        )
