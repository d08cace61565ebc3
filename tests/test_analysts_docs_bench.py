"""docs/pages/analysts.md's benchmark command (`{.needs-time}`: a million rows take
minutes) runs as written on a few thousand rows.

Why: the script builds its rows for the `records` schema by hand, and when the schema
grew (the Unicode author columns, NOT NULL keys) it failed at once, while the page still
showed its command; only its size is changed here, never its code path.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

from doc_blocks import fenced_blocks

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "pages" / "analysts.md"


def _bench_command() -> list[str]:
    (body,) = [b for tag, b in fenced_blocks(PAGE.read_text(encoding="utf-8"), "sh") if "index_bench" in b]
    argv = shlex.split(body.replace("\\\n", " "))
    assert argv[:2] == ["python", "benchmarks/index_bench.py"], argv
    return argv


def _sized(argv: list[str], tmp: Path) -> list[str]:
    """The page's command with a small size and this test's directories."""
    small = {
        "--rows": "3000",
        "--update": "200",
        "--dir": str(tmp / "store"),
        "--cache": str(tmp / "rows.parquet"),
    }
    out = [sys.executable, str(ROOT / argv[1])]
    args = iter(argv[2:])
    for arg in args:
        out.append(arg)
        if arg in small:
            next(args)
            out.append(small[arg])
    return [*out, "--repeat", "1"]


def test_the_benchmark_command_on_the_page_runs(tmp_path: Path) -> None:
    argv = _sized(_bench_command(), tmp_path)
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout
    assert re.search(r"wrote the records table .* bytes per row", out), out
    assert "update backfill-like" in out and "update daily-like" in out, out
    assert re.search(r"full month x category count\s+[0-9.]+ ms", out), out
    if "--z-order" in argv:
        assert "z-order on primary_cat" in out, out
    # the generated rows are kept where --cache says, for the next run to reuse
    assert (tmp_path / "rows.parquet").is_file()
