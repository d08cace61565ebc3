"""Two processes MERGE into one index table at the same moment, on a local directory and
on moto's S3 server (its own process): Delta's commit protocol (S3: conditional PUT of
the next log entry, `conditional_put=etag`) must keep every row of both, one per key."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pith_pipeline.index import run_query
from pith_pipeline.storage.base import Store
from pith_pipeline.storage.factory import open_store

WRITER = textwrap.dedent(
    """
    import copy, json, sys, time
    from pith_pipeline.index.delta import location
    from pith_pipeline.index.rows import rows_from_bundle
    from pith_pipeline.index.schema import TABLES
    from pith_pipeline.index.merge import merge_rows
    from pith_pipeline.index.tables import to_table
    from pith_pipeline.storage.factory import open_store

    url, bundle_path, who, batches, per, start_at = sys.argv[1:7]
    bundle = json.loads(open(bundle_path, encoding="utf-8").read())
    template = rows_from_bundle(bundle, bundle_key="pith/X/bundle.json", bundle_sha256="0" * 64).records[0]
    loc = location(open_store(url))
    while time.time() < float(start_at):  # both writers start together
        time.sleep(0.005)
    committed = []
    for b in range(int(batches)):
        rows = []
        for i in range(int(per)):
            row = copy.deepcopy(template)
            # the same `who` in both writers: the same keys; else disjoint keys
            row["pith_number"] = f"pith:2019:{who}-{b:03d}-{i:04d}"
            row["title"] = f"written by {sys.argv[7]}"
            rows.append(row)
        committed += merge_rows(loc, TABLES["records"], to_table(TABLES["records"], rows))
    print(json.dumps(committed))
    """
)


def _race(
    url: str, tmp_path: Path, asset_path: Path, keys: tuple[str, str], batches: int, per: int
) -> list[int]:
    import json
    import time

    script = tmp_path / "writer.py"
    script.write_text(WRITER, encoding="utf-8")
    start_at = time.time() + 3.0  # after both interpreters have imported deltalake
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                str(script),
                url,
                str(asset_path),
                key,
                str(batches),
                str(per),
                str(start_at),
                name,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for key, name in zip(keys, ("one", "two"), strict=True)
    ]
    versions: list[int] = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-2000:]
        versions += json.loads(out)
    return versions


@pytest.fixture(params=["local", "s3"])
def race_store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    if request.param == "local":
        return open_store(str(tmp_path / "store"))
    return open_store(request.getfixturevalue("s3_store_url"))


def test_two_processes_merging_at_once_lose_nothing(race_store: Store, tmp_path: Path, asset: object) -> None:
    bundle = asset("pith-bundle-1909.11150.json")  # type: ignore[operator]
    versions = _race(race_store.url, tmp_path, bundle, ("a", "b"), batches=4, per=25)
    # every MERGE of both writers committed its own version; none overwrote another's
    assert sorted(versions) == list(range(1, 9))
    rows = run_query(race_store, "SELECT count(*), count(DISTINCT pith_number) FROM records").rows[0]
    assert rows == (200, 200)
    sql = "SELECT substr(pith_number, 11, 1), min(title), max(title) FROM records GROUP BY 1 ORDER BY 1"
    assert run_query(race_store, sql).rows == [
        ("a", "written by one", "written by one"),
        ("b", "written by two", "written by two"),
    ]


def test_two_processes_merging_the_same_keys_keep_one_row_per_key(
    race_store: Store, tmp_path: Path, asset: object
) -> None:
    bundle = asset("pith-bundle-1909.11150.json")  # type: ignore[operator]
    _race(race_store.url, tmp_path, bundle, ("s", "s"), batches=3, per=20)
    rows = run_query(race_store, "SELECT count(*), count(DISTINCT pith_number) FROM records").rows[0]
    assert rows == (60, 60)
