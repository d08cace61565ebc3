"""The `records` index table on synthetic rows: bytes per row, MERGE cost, query times.

Not a test: run it by hand and copy the figures into docs/pages/analysts.md.

    python benchmarks/index_bench.py --rows 1000000 --update 10000 [--z-order]

Rows are made column-wise with realistic shapes (submission months 1991-2025,
growing over time; ~150 categories with arXiv-like weights; real licence URLs;
titles and author lists of typical length; random SHA-256 hex hashes, which do not
compress and dominate the size). They are written by the real writer code into a
local store's `records` Delta table (one commit), then:

- update:   `--update` papers written into it the way a run does, through
            `merge.merge_rows` (new keys appended, changed keys MERGEd) and
            `tidy.tidy_partitions`, timed per paper: a backfill-like batch of new
            papers over every month, then a daily-like batch (new papers in the newest
            month and a tenth as many older papers whose bundle changed);
- queries through the same DuckDB views as `pith-pipeline query`:
  - pruned:   a month-by-license count for cs.LG in 2019, filtered on the partition
              column `submitted_month` (12 of ~420 partitions are opened);
  - unpruned: the same question filtered on `submitted_at` instead, which every file
              must be opened for (row-group statistics still help);
  - full:     count per month and primary category over the whole table;
- `--z-order`: the queries again after `optimize.z_order(["primary_cat"])`.

`--open-commits N` instead times opening a table of N one-row commits (the log a
table has after N runs): without checkpoints, with delta-rs's default interval
(100) and with the index's `TABLE_PROPERTIES` (10).

    python benchmarks/index_bench.py --open-commits 1095
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import write_deltalake

from pith_pipeline.index import connect
from pith_pipeline.index.delta import location
from pith_pipeline.index.merge import MergeReport, merge_rows
from pith_pipeline.index.outcome import IndexUpdate
from pith_pipeline.index.schema import ALIASES, RECORDS, TABLE_PROPERTIES, TS
from pith_pipeline.index.tables import live_files, open_table, writer_properties
from pith_pipeline.index.tidy import tidy_partitions
from pith_pipeline.storage.local import LocalStore

ARCHIVES = {
    "cs": 30,
    "math": 25,
    "astro-ph": 10,
    "cond-mat": 10,
    "physics": 8,
    "hep-th": 4,
    "hep-ph": 4,
    "quant-ph": 5,
    "stat": 3,
    "eess": 3,
    "gr-qc": 2,
    "q-bio": 1,
    "econ": 1,
    "nucl-th": 1,
    "hep-ex": 1,
}
SUBS = [
    "LG",
    "AI",
    "CV",
    "CL",
    "DS",
    "IT",
    "CO",
    "PR",
    "NT",
    "AG",
    "GA",
    "CO",
    "SR",
    "HE",
    "mtrl-sci",
    "stat-mech",
    "str-el",
    "optics",
    "flu-dyn",
    "ML",
    "TH",
    "SP",
    "AS",
]
LICENSES = [
    "http://arxiv.org/licenses/nonexclusive-distrib/1.0/",
    "http://creativecommons.org/licenses/by/4.0/",
    "http://creativecommons.org/licenses/by-nc-sa/4.0/",
    "http://creativecommons.org/licenses/by-sa/4.0/",
    "http://creativecommons.org/publicdomain/zero/1.0/",
    "",
]
WORDS = [
    "learning",
    "deep",
    "neural",
    "network",
    "quantum",
    "field",
    "theory",
    "graph",
    "random",
    "matrix",
    "model",
    "spectral",
    "analysis",
    "estimation",
    "convergence",
    "stochastic",
    "gravitational",
    "lensing",
    "topological",
    "phase",
    "transition",
    "bayesian",
    "inference",
    "sparse",
    "regression",
]


def synthetic(n: int, seed: int) -> pa.Table:
    rnd = random.Random(seed)
    start = datetime(1991, 8, 1, tzinfo=UTC)
    span = (datetime(2025, 12, 31, tzinfo=UTC) - start).total_seconds()
    archives, weights = list(ARCHIVES), list(ARCHIVES.values())
    cols: dict[str, list[object]] = {f.name: [] for f in RECORDS.schema}
    built = datetime(2026, 1, 1, tzinfo=UTC)
    for i in range(n):
        when = start + timedelta(seconds=span * rnd.random() ** 0.5)  # more papers later
        arch = rnd.choices(archives, weights)[0]
        primary = (
            f"{arch}.{rnd.choice(SUBS)}"
            if arch in ("cs", "math", "stat", "physics", "cond-mat", "astro-ph", "eess", "q-bio", "econ")
            else arch
        )
        cross = sorted(
            {f"{rnd.choice(archives)}.{rnd.choice(SUBS)}" for _ in range(rnd.randint(0, 3))} - {primary}
        )
        body = rnd.randbytes(16).hex().upper()[:26]
        pn = f"pith:{when.year}:{body}"
        arxiv_id = f"{when:%y%m}.{i % 100000:05d}"
        authors = [
            f"{rnd.choice('ABCDEFGHJKLM')}. Author{rnd.randint(1, 99999)}" for _ in range(rnd.randint(1, 8))
        ]
        row = {
            "pith_number": pn,
            "short_pith_number": f"pith:{body[:8]}",
            "arxiv_id": arxiv_id,
            "version": rnd.choice((1, 1, 1, 2, 2, 3)),
            "title": " ".join(rnd.choice(WORDS) for _ in range(rnd.randint(5, 14))).title(),
            "authors": authors,
            "authors_text": ", ".join(authors),
            # ASCII names: their Unicode form is arXiv's text, stored as null
            "authors_unicode": None,
            "authors_text_unicode": None,
            "primary_cat": primary,
            "primary_archive": arch,
            "categories": [primary, *cross],
            "license": rnd.choice(LICENSES) if when.year >= 2008 else "",
            "submitted_at": when.replace(microsecond=0),
            "submitted_month": f"{when:%Y-%m}",
            "doi": f"10.48550/arxiv.{arxiv_id}",
            "canonical_sha256": rnd.randbytes(32).hex(),
            "title_canon_sha256": rnd.randbytes(32).hex(),
            "abstract_canon_sha256": rnd.randbytes(32).hex(),
            "created_at": built,
            "record_created_event_id": "sha256:" + rnd.randbytes(32).hex(),
            "key_id": "pith-v1-2026-01",
            "public_key_fingerprint": "8d4b5ee74e4693bcd1df2446408b0d54",
            "superseded_by": None,
            "event_count": 2,
            "bundle_key": f"pith/{body}/bundle.json",
            "bundle_sha256": rnd.randbytes(32).hex(),
            "state_sha256": rnd.randbytes(32).hex(),
            "built_at": built,
        }
        for k, v in row.items():
            cols[k].append(v)
    # columns the row lacks are null: the script also runs on code whose schema has fewer
    # columns (a side-by-side comparison with the code before a change)
    return pa.table({k: v if v else [None] * n for k, v in cols.items()}, schema=RECORDS.schema)


def timed(con: object, sql: str, repeat: int) -> tuple[float, int]:
    times, rows = [], 0
    for _ in range(repeat):
        t = time.perf_counter()
        rows = len(con.sql(sql).fetchall())  # type: ignore[attr-defined]
        times.append(time.perf_counter() - t)
    return statistics.median(times), rows


def _size(store: LocalStore) -> tuple[int, int]:
    files = live_files(open_table(location(store), RECORDS), RECORDS)
    return len(files), sum(f["bytes"] for f in files)


def _queries(store: LocalStore, repeat: int) -> dict[str, list[tuple[object, ...]]]:
    con = connect(store)
    queries = {
        "pruned (submitted_month filter)": "SELECT submitted_month, license, count(*) FROM records"
        " WHERE primary_cat = 'cs.LG' AND submitted_month BETWEEN '2019-01' AND '2019-12' GROUP BY ALL",
        "unpruned (submitted_at filter)": "SELECT submitted_month, license, count(*) FROM records"
        " WHERE primary_cat = 'cs.LG' AND submitted_at >= TIMESTAMPTZ '2019-01-01 00:00:00+00'"
        " AND submitted_at < TIMESTAMPTZ '2020-01-01 00:00:00+00' GROUP BY ALL",
        "full month x category count": (
            "SELECT submitted_month, primary_cat, count(*) FROM records GROUP BY ALL"
        ),
    }
    answers = {}
    for name, sql in queries.items():
        secs, n = timed(con, sql, repeat)
        answers[name] = sorted(con.sql(sql).fetchall())
        print(f"  {name:34} {secs * 1000:8.1f} ms (median of {repeat}), {n} groups")
    assert answers["pruned (submitted_month filter)"] == answers["unpruned (submitted_at filter)"]
    con.close()
    return answers


def _timed_merge(store: LocalStore, label: str, batch: pa.Table) -> None:
    before = connect(store).sql("SELECT count(*) FROM records").fetchall()[0][0]
    t = time.perf_counter()
    loc = location(store)
    report = MergeReport()
    merge_rows(loc, RECORDS, batch, report=report)
    merged = time.perf_counter() - t
    # as a run ends: partitions a MERGE wrote (string views) or holding more than one
    # file rewritten (z-ordered on primary_cat, plain strings)
    touched = report.appended_partitions | report.merged_partitions
    tidy_partitions(
        loc,
        {"records": touched},
        IndexUpdate(),
        max_files=1,
        run_id=None,
        views={"records": report.merged_partitions},
    )
    secs = time.perf_counter() - t
    n = connect(store).sql("SELECT count(*), count(DISTINCT pith_number) FROM records").fetchall()[0]
    assert n[0] == n[1], n
    files, size = _size(store)
    print(
        f"update {label}: {batch.num_rows:,} papers ({report.appended:,} appended, {report.merged:,} "
        f"MERGEd; {n[0] - before:,} new rows): {merged:.1f}s append+MERGE + "
        f"{secs - merged:.1f}s rewrite of {len(touched)} touched partitions = "
        f"{secs * 1000 / batch.num_rows:.3f} ms per paper; now {files} files, {size / n[0]:.1f} bytes per row"
    )


def open_commits(n: int, repeat: int) -> None:
    """Time opening a table after `n` one-row commits, three ways (see the docstring)."""
    import json
    import os

    from deltalake import DeltaTable, PostCommitHookProperties

    row = pa.Table.from_pylist(
        [{"alias_kind": "pith", "alias_value": "x", "alias": "pith:x", "pith_number": "p"}],
        schema=ALIASES.schema,
    )
    ways: dict[str, tuple[dict[str, str] | None, bool]] = {
        "no checkpoint": (None, False),
        "delta-rs default (interval 100)": (None, True),
        "TABLE_PROPERTIES (interval 10)": (TABLE_PROPERTIES, True),
    }
    for label, (config, checkpoints) in ways.items():
        uri = tempfile.mkdtemp(prefix="pith-open-bench-")
        dt = DeltaTable.create(
            uri, schema=ALIASES.schema, partition_by=[ALIASES.partition], configuration=config
        )
        hook = PostCommitHookProperties(create_checkpoint=checkpoints, cleanup_expired_logs=False)
        for _ in range(n):
            write_deltalake(dt, row, mode="append", post_commithook_properties=hook)
        times = []
        for _ in range(repeat):
            t = time.perf_counter()
            DeltaTable(uri).version()
            times.append(time.perf_counter() - t)
        log = Path(uri) / "_delta_log"
        last = log / "_last_checkpoint"
        since = json.loads(last.read_text())["version"] if last.exists() else -1
        tail = [p for p in os.listdir(log) if p.endswith(".json") and int(p.split(".")[0]) > since]
        print(
            f"{label:34} open {statistics.median(times) * 1000:7.1f} ms (median of {repeat}); "
            f"reads {'checkpoint ' + str(since) + ' + ' if since >= 0 else ''}{len(tail)} commit files"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--update", type=int, default=10_000, help="Papers per timed MERGE (0: none)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--z-order", action="store_true", help="Also time the queries after a z-order")
    ap.add_argument("--dir", type=Path, default=None, help="Store directory (default: a temp dir)")
    ap.add_argument("--cache", type=Path, default=None, help="Parquet file keeping the generated rows")
    ap.add_argument(
        "--open-commits", type=int, default=0, help="Only time opening a table of this many commits"
    )
    args = ap.parse_args()
    if args.open_commits:
        open_commits(args.open_commits, args.repeat)
        return
    root = args.dir or Path(tempfile.mkdtemp(prefix="pith-index-bench-"))
    store = LocalStore(root)
    loc = location(store)
    t = time.perf_counter()
    if args.cache and args.cache.exists():
        table = pq.read_table(args.cache).cast(RECORDS.schema)
        print(f"read {table.num_rows:,} generated rows from {args.cache}")
    else:
        table = synthetic(args.rows, args.seed)
        print(f"generated {table.num_rows:,} rows in {time.perf_counter() - t:.1f}s")
        if args.cache:
            pq.write_table(table, args.cache)
    t = time.perf_counter()
    # the rows are unique by construction: sorted as the writer sorts, one commit (as
    # `reindex` writes its first chunk)
    write_deltalake(
        loc.uri(RECORDS.name),
        table.sort_by([(RECORDS.partition, "ascending")] + [(c, "ascending") for c in RECORDS.sort]),
        mode="overwrite",
        partition_by=[RECORDS.partition],
        writer_properties=writer_properties(RECORDS),
    )
    # the properties the writer gives every table (the change data feed makes a MERGE
    # write its changed rows twice): on main, where there are none, this does nothing
    try:
        from pith_pipeline.index.tables import ensure_properties
    except ImportError:
        pass
    else:
        ensure_properties(loc, RECORDS)
    files, size = _size(store)
    print(
        f"wrote the records table in {time.perf_counter() - t:.1f}s: {files} files, "
        f"{size / 1e6:.1f} MB, {size / table.num_rows:.1f} bytes per row"
    )
    hashes = sum(
        pc.sum(pc.binary_length(table.column(c))).as_py()
        for c in (
            "canonical_sha256",
            "title_canon_sha256",
            "abstract_canon_sha256",
            "bundle_sha256",
            "state_sha256",
            "record_created_event_id",
        )
    )
    print(
        f"  (random hex hashes alone are {hashes / table.num_rows:.0f} bytes per row "
        "uncompressed and cannot compress below half that)"
    )
    if args.update:
        rng = random.Random(args.seed + 1)
        # a backfill batch: new papers spread over every month
        spread = synthetic(args.update, args.seed + 1)
        _timed_merge(store, "backfill-like: new papers over all months", spread)
        # a daily run: new papers in the newest month, and a tenth as many older papers
        # whose bundle changed (a new version supersedes them), spread over the archive
        daily = synthetic(args.update, args.seed + 2)
        day = datetime(2025, 12, 30, 12, tzinfo=UTC)
        daily = daily.set_column(
            daily.schema.get_field_index("submitted_at"), "submitted_at", pa.array([day] * daily.num_rows, TS)
        )
        daily = daily.set_column(
            daily.schema.get_field_index("submitted_month"),
            "submitted_month",
            pa.array(["2025-12"] * daily.num_rows),
        )
        changed = table.take(sorted(rng.sample(range(table.num_rows), max(1, args.update // 10))))
        changed = changed.set_column(
            changed.schema.get_field_index("bundle_sha256"),
            "bundle_sha256",
            pa.array(["f" * 64] * changed.num_rows),
        )
        _timed_merge(
            store,
            "daily-like: new in one month + 10% changed",
            pa.concat_tables([t.cast(RECORDS.schema) for t in (daily, changed)]),
        )
    print("queries:")
    before = _queries(store, args.repeat)
    if args.z_order:
        t = time.perf_counter()
        props = writer_properties(RECORDS)
        open_table(loc, RECORDS).optimize.z_order(["primary_cat"], writer_properties=props)
        files, size = _size(store)
        print(f"z-order on primary_cat: {time.perf_counter() - t:.1f}s, {files} files, {size / 1e6:.1f} MB")
        after = _queries(store, args.repeat)
        assert after == before
    print(f"store: {root}")


if __name__ == "__main__":
    main()
