"""Run one benchmark against two versions of the code, side by side, in one run.

A speed claim ("nothing gets slower") needs the code before and the code after on the
same machine at the same time: machine speed drifts between runs far more than the
differences worth finding. This script checks the `--before` revision out into a
temporary git worktree, then runs the same benchmark command against it and against
the working tree (`--after`, default: this checkout) in interleaved rounds
(before, after, before, after, ...), so drift hits both alike. Each side runs its own
copy of the benchmark script with its own package first on `PYTHONPATH`.

It reports the wall time of each whole command (process start to exit: what a user
waits for), the best and median per side and their ratio, and the last lines each
benchmark printed in its best round, so the benchmark's own figures sit side by side.

    python benchmarks/compare.py --before main~5 -- benchmarks/build_bench.py build --n 2000
    python benchmarks/compare.py --before v0.3 --rounds 5 -- benchmarks/local_bench.py --n 2000
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Side:
    """One version of the code: where it is checked out and what its rounds gave."""

    name: str
    tree: Path
    times: list[float] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)

    def run(self, command: list[str], tail: int) -> None:
        script, *args = command
        env = dict(os.environ, PYTHONPATH=str(self.tree))
        start = time.perf_counter()
        out = subprocess.run(
            [sys.executable, str(self.tree / script), *args],
            cwd=self.tree,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        elapsed = time.perf_counter() - start
        if out.returncode != 0:
            sys.exit(f"compare: {self.name} ({self.tree}) failed: {out.stderr.strip().splitlines()[-1:]}")
        self.times.append(elapsed)
        self.outputs.append("\n".join(out.stdout.rstrip().splitlines()[-tail:]))

    def best(self) -> tuple[float, str]:
        i = min(range(len(self.times)), key=self.times.__getitem__)
        return self.times[i], self.outputs[i]


@contextlib.contextmanager
def checkout(revision: str) -> Iterator[Path]:
    """A detached worktree of `revision`, removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="pith-compare-") as tmp:
        tree = Path(tmp) / "before"
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(tree), revision], check=True
        )
        try:
            yield tree
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=False)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--before", required=True, help="git revision of the code before (e.g. main~3)")
    parser.add_argument(
        "--after", type=Path, default=ROOT, help="checkout of the code after (default: this one)"
    )
    parser.add_argument("--rounds", type=int, default=3, help="rounds per side (default 3)")
    parser.add_argument("--tail", type=int, default=12, help="lines of each benchmark's output shown")
    parser.add_argument(
        "command", nargs=argparse.REMAINDER, help="-- SCRIPT [ARGS]: a path under the checkout"
    )
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the benchmark after --, e.g. -- benchmarks/build_bench.py build --n 2000")
    with checkout(args.before) as before_tree:
        sides = [Side(f"before ({args.before})", before_tree), Side("after", args.after.resolve())]
        for r in range(args.rounds):
            for side in sides if r % 2 == 0 else reversed(sides):
                side.run(command, args.tail)
                print(f"round {r + 1}: {side.name}: {side.times[-1]:.2f} s", file=sys.stderr, flush=True)
    print(f"$ {' '.join(command)}  ({args.rounds} rounds, interleaved)")
    for side in sides:
        best, output = side.best()
        print(f"\n== {side.name}: best {best:.2f} s, median {statistics.median(side.times):.2f} s")
        print(output)
    ratio = sides[1].best()[0] / sides[0].best()[0]
    print(f"\nafter/before (best wall time): {ratio:.3f}")


if __name__ == "__main__":
    main()
