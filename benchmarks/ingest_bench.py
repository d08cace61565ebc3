"""End-to-end `pith-pipeline ingest --snapshot` of N synthetic papers: time split and peak RSS.

Not a test: run it by hand and copy the figures into docs/pages/performance.md.

    python benchmarks/ingest_bench.py --n 10000 --n 100000 [--workers 2]

For each N: a snapshot of N records (benchmarks/gen_records.py, cached in --workdir) is
ingested into a fresh local store by the real CLI, run under `/usr/bin/time -v`
(its "Maximum resident set size" is the largest single process), while the summed RSS
of the command's whole process tree (parent + worker processes) is sampled every
0.2 s. A small driver around the CLI times its phases:

- publish: from start until `finish_run` is called (harvest, build, sign, write);
- index:   `update_indexes` (the Delta tables);
- log:     appending the run's events to the transparency log (on by default, as in
           the command: the log key is made beside the run's key; `--no-log` runs with
           PITH_KEEP_LOG=0);
- manifest: the run manifest.

`--compare` runs each N twice, log off then on, into fresh stores from the same
snapshot, and prints what the log adds to the whole run beside the log phase's share:

    python benchmarks/ingest_bench.py --n 10000 --workers 2 --fsync --compare --rounds 2

The CLI indexes the rows of the bundles the run wrote (`index.RowSink`, fed by the
publisher in every process); no bundle is read back. The issue-13 target: publishing plus index of 1,000,000
papers ≤ 10 minutes on this 2-core machine, peak RSS < 1 GB and flat from 100 k to 1 M.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

DRIVER = r"""
import json, os, resource, sys, time
t0 = time.perf_counter()
def peak_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
import pith_pipeline.runs.manifest as runs
phases = {}
orig_update = runs.update_indexes
def update_indexes(*a, **k):
    t = time.perf_counter()
    out = orig_update(*a, **k)
    phases["update_s"] = time.perf_counter() - t
    phases["peak_after_index_mb"] = peak_mb()
    phases["index_line"] = out.line()
    return out
runs.update_indexes = update_indexes
import pith_pipeline.tlog.pipeline as tlog
orig_log = tlog.log_run
def log_run(*a, **k):
    t = time.perf_counter()
    out = orig_log(*a, **k)
    phases["log_s"] = time.perf_counter() - t
    phases["peak_after_log_mb"] = peak_mb()
    return out
tlog.log_run = log_run
orig_finish = runs.finish_run
def finish_run(*a, **k):
    t1 = time.perf_counter()
    phases["publish_s"] = t1 - t0
    phases["peak_after_publish_mb"] = peak_mb()
    out = orig_finish(*a, **k)
    phases["finish_s"] = time.perf_counter() - t1
    sys.stderr.write("PHASES " + json.dumps(phases) + "\n")
    return out
runs.finish_run = finish_run
from pith_pipeline.cli import main
sys.argv = ["pith-pipeline", *sys.argv[1:]]
main()
"""


def _tree_rss(pid: int) -> int:
    """Summed RSS (bytes) of `pid` and its descendants."""
    import psutil

    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0
    total = 0
    for p in procs:
        with contextlib.suppress(psutil.Error):
            total += p.memory_info().rss
    return total


def _snapshot(work: Path, n: int) -> Path:
    src = work / f"records-{n}.jsonl"
    if not src.exists():
        part = src.with_suffix(".part")
        subprocess.run(
            [sys.executable, str(HERE / "gen_records.py"), "--n", str(n), "--out", str(part)], check=True
        )
        part.replace(src)
    return src


def run_one(args: argparse.Namespace, n: int, keyfile: Path, log: bool) -> dict[str, float | str]:
    src = _snapshot(args.workdir, n)
    store = args.workdir / f"store-{n}"
    shutil.rmtree(store, ignore_errors=True)
    timing = args.workdir / f"time-{n}.txt"
    cmd = ["/usr/bin/time", "-v", "-o", str(timing), sys.executable, "-c", DRIVER]
    cmd += ["ingest", "--snapshot", str(src), "--store", str(store), "--key", str(keyfile)]
    if args.workers is not None:
        cmd += ["--workers", str(args.workers)]
    env = {**os.environ, "SOURCE_DATE_EPOCH": "1767225600", "TQDM_DISABLE": "1"}
    if not args.fsync:
        env["PITH_LOCAL_FSYNC"] = "0"
    env.pop("PITH_LOG_SIGNER", None)  # the default: the log key beside the run's key
    env["PITH_KEEP_LOG"] = "1" if log else "0"
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak = [0]

    def sample() -> None:
        while proc.poll() is None:
            peak[0] = max(peak[0], _tree_rss(proc.pid))
            time.sleep(0.2)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out, err = proc.communicate()
    wall = time.perf_counter() - start
    sampler.join()
    if proc.returncode != 0:
        sys.stderr.write(out + err)
        raise SystemExit(proc.returncode)
    phases = json.loads(next(line for line in err.splitlines() if line.startswith("PHASES "))[7:])
    report = timing.read_text()
    maxrss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", report)
    user = re.search(r"User time \(seconds\): ([\d.]+)", report)
    system = re.search(r"System time \(seconds\): ([\d.]+)", report)
    return {
        "n": n,
        "wall_s": wall,
        "publish_s": phases["publish_s"],
        "index_s": phases["update_s"],
        "log_s": phases.get("log_s", 0.0),
        "manifest_s": phases["finish_s"] - phases["update_s"] - phases.get("log_s", 0.0),
        "tree_peak_mb": peak[0] / 1e6,
        "process_peak_mb": int(maxrss.group(1)) / 1024 if maxrss else float("nan"),
        "index_line": phases.get("index_line", ""),
        "peaks": " / ".join(
            f"{phases[k]:.0f}" if k in phases else "-"
            for k in ("peak_after_publish_mb", "peak_after_index_mb", "peak_after_log_mb")
        ),
        "user_s": float(user.group(1)) if user else float("nan"),
        "sys_s": float(system.group(1)) if system else float("nan"),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, action="append", required=True, help="papers per run (repeatable)")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/pith-ingest-bench"))
    ap.add_argument("--workers", type=int, default=None, help="--workers for the command (default: its own)")
    ap.add_argument(
        "--fsync",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="fsync every object (default off: PITH_LOCAL_FSYNC=0, as in issue 13's 1 M figures)",
    )
    ap.add_argument("--keep", action="store_true", help="keep each store")
    ap.add_argument(
        "--log",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="keep a transparency log (the default, as the command: its key beside the run's "
        "key) and time its append; --no-log: PITH_KEEP_LOG=0",
    )
    ap.add_argument(
        "--compare",
        action="store_true",
        help="each N with the log off, then on (fresh stores, same snapshot); print the difference",
    )
    ap.add_argument("--rounds", type=int, default=1, help="with --compare: off/on pairs per N")
    args = ap.parse_args(argv)
    args.workdir.mkdir(parents=True, exist_ok=True)
    keyfile = args.workdir / "keys" / "pith-private-key.json"
    if not keyfile.exists():
        exe = Path(sys.executable).with_name("pith-pipeline")
        subprocess.run(
            [str(exe), "keys", "generate", "--out", str(keyfile.parent), "--key-id", "bench-key"],
            check=True,
            stdout=subprocess.DEVNULL,
        )
    print(
        f"ingest --snapshot, workers {args.workers or 'default'}, "
        f"durability {'group commit (default)' if args.fsync else 'off (PITH_LOCAL_FSYNC=0)'}"
    )
    print(
        f"{'N':>9} {'total s':>8} {'publish s':>9} {'index s':>8} {'ms/paper':>8} {'manifest s':>10} "
        f"{'tree RSS MB':>11} {'1-proc RSS MB':>13} {'CPU user s':>10} {'CPU sys s':>9} {'log s':>6}"
    )
    for n in args.n:
        pairs: list[tuple[float, float, float]] = []
        for _round in range(args.rounds if args.compare else 1):
            rows = {}
            for log in (False, True) if args.compare else (args.log,):
                r = rows[log] = run_one(args, n, keyfile, log)
                print(
                    f"{n:9d} {r['wall_s']:8.1f} {r['publish_s']:9.1f} {r['index_s']:8.1f} "
                    f"{1000 * float(r['index_s']) / n:8.3f} {r['manifest_s']:10.1f} "
                    f"{r['tree_peak_mb']:11.0f} {r['process_peak_mb']:13.0f} "
                    f"{r['user_s']:10.1f} {r['sys_s']:9.1f} {r['log_s']:6.1f}  log {'on' if log else 'off'}",
                    flush=True,
                )
                print(f"   {r['index_line']}", flush=True)
                print(f"   main process peak RSS MB after publish / index / log: {r['peaks']}", flush=True)
                if not args.keep:
                    shutil.rmtree(args.workdir / f"store-{n}", ignore_errors=True)
            if args.compare:
                off, on = float(rows[False]["wall_s"]), float(rows[True]["wall_s"])
                pairs.append((off, on, float(rows[True]["log_s"])))
        for off, on, log_s in pairs:
            print(
                f"   log off {off:.1f} s, on {on:.1f} s: the log adds {100 * (on - off) / off:+.1f} % "
                f"to the run; its phase is {log_s:.1f} s, {100 * log_s / on:.1f} % of the run with it",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
