"""The README's commands, run as a newcomer runs them: in order, on a fresh copy of the
repository, each one expected to succeed.

Why: the README is the first thing a user follows, and it drifted (both `query` examples
printed `(0 rows)` on the store the first command made). So every shell block of
README.md runs here, except the blocks whose fence says what they need beyond a clone
(` ```sh needs-airflow `, `needs-docker`, `needs-network`, `needs-time`) and two steps
the environment running this test has already done: creating and activating the venv
and `pip install` (this interpreter has the package and its extras installed), and
`bash .ci/run` (the command that runs this test).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml
from doc_blocks import fenced_blocks

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
#: what a block may need beyond a clone; those blocks are documented, not run here
NEEDS = {"needs-airflow", "needs-docker", "needs-network", "needs-time"}
#: steps of a command chain that the environment running the tests has already done
SETUP = (
    re.compile(r"^python3 -m venv \S+$"),
    re.compile(r"^\. \S+/bin/activate$"),
    re.compile(r"^pip install "),
)


def shell_blocks(text: str) -> list[tuple[str, str]]:
    """Every fenced block of `text` whose language is sh: (its tag, its body)."""
    return fenced_blocks(text, "sh")


def commands(body: str) -> list[str]:
    """The block's commands, one per logical line (backslash continuations joined), with
    the setup steps of a `&&` chain left out."""
    out: list[str] = []
    for line in body.replace("\\\n", " ").splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        steps = [s.strip() for s in line.split(" && ")]
        kept = [s for s in steps if not any(p.match(s) for p in SETUP)]
        if kept:
            out.append(" && ".join(kept))
    return out


def fresh_copy(dest: Path) -> None:
    """The files a clone has (tracked, or new and not ignored), without .venv or stores."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        src = ROOT / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)


def test_readme_blocks_are_tagged_with_known_needs() -> None:
    blocks = shell_blocks(README.read_text())
    tags = {tag for tag, _ in blocks if tag}
    assert tags <= NEEDS, f"unknown tags {tags - NEEDS}: say what the block needs, from {sorted(NEEDS)}"
    runnable = [cmd for tag, body in blocks if not tag for cmd in commands(body)]
    assert runnable[0] == "pith-pipeline ingest --sample", "the first command must run the main job"
    assert any(c.startswith("pith-pipeline query") for c in runnable)
    assert any(c.startswith("pith-pipeline verify") for c in runnable)


def test_readme_commands_run_in_order_on_a_fresh_copy(tmp_path: Path) -> None:
    fresh_copy(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PITH_", "AWS_", "AIRFLOW"))}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    ran: list[str] = []
    for tag, body in shell_blocks((tmp_path / "README.md").read_text()):
        if tag:
            continue
        for cmd in commands(body):
            if cmd == "bash .ci/run":
                continue  # runs the test suite, this test included
            done = subprocess.run(
                ["bash", "-o", "pipefail", "-c", cmd],
                cwd=tmp_path,
                env=env,
                capture_output=True,
                text=True,
                timeout=600,
            )
            assert done.returncode == 0, f"{cmd}\nexit {done.returncode}\n{done.stdout}\n{done.stderr}"
            if cmd.startswith("pith-pipeline query"):
                assert "(0 rows)" not in done.stdout, f"{cmd} printed no rows:\n{done.stdout}"
                assert re.search(r"\((\d+) rows?\)", done.stdout), done.stdout
            ran.append(cmd)
    assert len(ran) >= 5, ran
    assert (tmp_path / "pith-store/pith-signing-key.json").is_file()


def test_readme_links_resolve() -> None:
    """A relative link of the README (GitHub renders them) points at a file of the repository."""
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README.read_text())
    assert targets
    missing = [t for t in targets if "://" not in t and not (ROOT / t).exists()]
    assert missing == [], f"README.md links to files that do not exist: {missing}"


def test_every_docs_page_is_in_the_site() -> None:
    """A page added under docs/ outside docs/pages/, or left out of the nav, would never be
    published (MkDocs sees only docs/pages/; the strict build catches the nav)."""
    config = yaml.safe_load((ROOT / "docs/mkdocs.yml").read_text())
    pages_dir = ROOT / "docs" / config["docs_dir"]

    def nav_files(node: object) -> list[str]:
        if isinstance(node, str):
            return [node]
        if isinstance(node, list):
            return [f for item in node for f in nav_files(item)]
        if isinstance(node, dict):
            return [f for value in node.values() for f in nav_files(value)]
        return []

    outside = sorted(
        str(p.relative_to(ROOT)) for p in (ROOT / "docs").rglob("*.md") if pages_dir not in p.parents
    )
    assert outside == [], f"move these into {pages_dir.relative_to(ROOT)}/ and the nav: {outside}"
    in_nav = set(nav_files(config["nav"]))
    on_disk = {str(p.relative_to(pages_dir)) for p in pages_dir.rglob("*.md")}
    assert on_disk - in_nav == set(), f"pages missing from the nav in docs/mkdocs.yml: {on_disk - in_nav}"
    assert in_nav - on_disk == set(), f"nav entries with no page: {in_nav - on_disk}"
