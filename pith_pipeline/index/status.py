"""What is published in a store, from its index manifest, run manifests and quarantine.

The default reads only small objects (manifests, the `runs/` and `quarantine/`
listings) plus the indexes' row counts, so it is cheap on a large S3 store; `deep`
also lists every bundle and event object and reports bundles missing from the index.
"""

from __future__ import annotations

from typing import Any

from pith_pipeline.core.canonical_json import loads
from pith_pipeline.index import manifest as mf
from pith_pipeline.index.query import connect
from pith_pipeline.index.runs import RUN_MANIFEST_FORMAT
from pith_pipeline.index.schema import TABLES
from pith_pipeline.index.writer import all_bundle_keys
from pith_pipeline.storage.base import Store


def status(store: Store, *, deep: bool = False) -> dict[str, Any]:
    manifest = mf.load(store)
    out: dict[str, Any] = {
        "store": store.url,
        "index": {
            "generation": manifest.generation,
            "updated_at": manifest.updated_at,
            "retired_files": len(manifest.retired),
            "tables": {},
        },
    }
    con = connect(store, manifest=manifest)
    try:
        for name in TABLES:
            parts = manifest.partitions(name)
            row = con.sql(f"SELECT count(*) FROM {name}").fetchall()[0]
            out["index"]["tables"][name] = {
                "rows": int(row[0]) if row else 0,
                "rows_in_files": sum(f["rows"] for f in manifest.files[name]),
                "files": len(manifest.files[name]),
                "bytes": sum(f["bytes"] for f in manifest.files[name]),
                "partitions": len(parts),
                "partitions_to_compact": sum(len(v) > 1 for v in parts.values()),
            }
        latest = con.sql("SELECT count(*) FROM records WHERE superseded_by IS NULL").fetchall()[0]
        out["records"] = out["index"]["tables"]["records"]["rows"]
        out["latest_versions"] = int(latest[0]) if latest else 0
        out["events"] = out["index"]["tables"]["events"]["rows"]
    finally:
        con.close()
    runs = [k for k in store.list("runs/") if k.endswith("/manifest.json")]
    out["runs"] = len(runs)
    out["last_run"] = None
    if runs:
        data = store.get(runs[-1])  # run ids start with their UTC start time
        doc = loads(data) if data else {}
        if isinstance(doc, dict) and doc.get("format") == RUN_MANIFEST_FORMAT:
            out["last_run"] = {
                "key": runs[-1],
                "run_id": doc.get("run_id"),
                "finished_at": doc.get("finished_at"),
                "window": doc.get("window"),
                "counts": doc.get("counts"),
                "objects": len(doc.get("objects") or []),
            }
    quarantine = [k for k in store.list("quarantine/") if k.endswith(".jsonl")]
    lines = 0
    for key in quarantine:
        data = store.get(key) or b""
        lines += sum(1 for line in data.splitlines() if line.strip())
    out["quarantine"] = {"files": len(quarantine), "records": lines}
    if deep:
        bundles = all_bundle_keys(store)
        indexed_con = connect(store, manifest=manifest)
        try:
            indexed = {r[0] for r in indexed_con.sql("SELECT bundle_key FROM records").fetchall()}
        finally:
            indexed_con.close()
        out["bundles"] = len(bundles)
        out["event_objects"] = sum(1 for k in store.list("events/") if k.endswith(".json"))
        out["bundles_not_indexed"] = sorted(set(bundles) - indexed)[:20]
        out["bundles_not_indexed_count"] = len(set(bundles) - indexed)
    return out


def format_status(st: dict[str, Any]) -> str:
    lines = [f"store: {st['store']}"]
    idx = st["index"]
    lines.append(
        f"index: generation {idx['generation']}, updated {idx['updated_at'] or 'never'}"
        f", {idx['retired_files']} retired files awaiting deletion"
    )
    for name, t in idx["tables"].items():
        lines.append(
            f"  {name:8} {t['rows']:>10} rows  {t['files']:>5} files  "
            f"{t['bytes']:>12} bytes  {t['partitions']:>4} partitions"
            + (f"  ({t['partitions_to_compact']} to compact)" if t["partitions_to_compact"] else "")
        )
    lines.append(
        f"records: {st['records']} ({st['latest_versions']} latest versions), events: {st['events']}"
    )
    if "bundles" in st:
        lines.append(
            f"objects: {st['bundles']} bundles, {st['event_objects']} events; "
            f"{st['bundles_not_indexed_count']} bundles not indexed"
        )
        lines += [f"  not indexed: {k}" for k in st["bundles_not_indexed"]]
    lines.append(f"runs: {st['runs']}")
    if st["last_run"]:
        lr = st["last_run"]
        counts = ", ".join(f"{k} {v}" for k, v in (lr["counts"] or {}).items())
        lines.append(
            f"last run: {lr['run_id']} finished {lr['finished_at']}; {counts}; "
            f"window {lr['window']}; {lr['objects']} objects written"
        )
    q = st["quarantine"]
    lines.append(f"quarantined: {q['records']} records in {q['files']} files (quarantine/)")
    return "\n".join(lines)
