"""One hostile record in a run is one quarantined record with its reason; the rest is built.

Each case here once stopped a whole run or signed something it should not have.
"""

from __future__ import annotations

import json
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

from click.testing import CliRunner
from testclock import StepClock

from pith_pipeline.cli import cli
from pith_pipeline.core.keys import Ed25519Signer
from pith_pipeline.publish import BuildConfig, Publisher
from pith_pipeline.signing.local import generate_key
from pith_pipeline.sources.jsonl import iter_jsonl
from pith_pipeline.storage.memory import MemoryStore

SIGNER = Ed25519Signer(bytes(range(32)), "hostile-test")
SNAPSHOT = Path(__file__).resolve().parents[1] / "data" / "arxiv-sample.jsonl"


def sample() -> list[dict[str, Any]]:
    return [json.loads(x) for x in SNAPSHOT.read_text(encoding="utf-8").splitlines()]


def write(path: Path, objs: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(o) + "\n" for o in objs), encoding="utf-8")
    return path


def quarantine(store: MemoryStore) -> list[dict[str, Any]]:
    keys = [k for k in store.list("quarantine/")]
    assert len(keys) == 1
    raw = store.get(keys[0])
    assert raw is not None
    return [json.loads(line) for line in raw.splitlines()]


def publisher(store: MemoryStore, today: date | None = None) -> Publisher:
    kw: dict[str, Any] = {"today": (lambda: today)} if today else {}
    return Publisher(
        store, SIGNER, BuildConfig(), clock=StepClock(datetime(2026, 7, 1, tzinfo=UTC)), run_id="r", **kw
    )


def test_version_beyond_2_53_is_quarantined_and_the_rest_built(tmp_path: Path) -> None:
    objs = sample()[:3]
    bad = dict(
        objs[1], versions=[{"version": "v9007199254740993", "created": objs[1]["versions"][0]["created"]}]
    )
    path = write(tmp_path / "in.jsonl", [objs[0], bad, objs[2]])
    store = MemoryStore()
    summary = publisher(store).publish(iter_jsonl(path))
    assert (summary.built, summary.quarantined) == (2, 1)
    (entry,) = quarantine(store)
    assert entry["record_id"] == bad["id"] and entry["field"] == "versions"
    assert "v9007199254740993" in entry["reason"] and entry["where"] == "in.jsonl:2"


def test_int32_overflowing_version_never_reaches_the_index(tmp_path: Path) -> None:
    key = generate_key(tmp_path / "keys")[0]
    objs = sample()[:2]
    bad = dict(objs[0], versions=[{"version": "v3000000000", "created": objs[0]["versions"][0]["created"]}])
    path = write(tmp_path / "in.jsonl", [bad, objs[1]])
    store = tmp_path / "s"
    result = CliRunner().invoke(
        cli, ["ingest", "--snapshot", str(path), "--store", str(store), "--key", str(key)]
    )
    assert result.exit_code == 0, result.output
    assert "built 1" in result.output and "quarantined 1" in result.output
    assert "run manifest:" in result.output
    (qfile,) = (store / "quarantine").glob("*.jsonl")
    (entry,) = [json.loads(x) for x in qfile.read_text().splitlines()]
    assert entry["field"] == "versions" and "v3000000000" in entry["reason"]


def test_dates_after_tomorrow_are_quarantined(tmp_path: Path) -> None:
    objs = sample()[:2]
    future = dict(objs[0], versions=[{"version": "v1", "created": "Thu, 1 Jan 2099 00:00:00 GMT"}])
    path = write(tmp_path / "in.jsonl", [future, objs[1]])
    store = MemoryStore()
    summary = publisher(store, today=date(2026, 7, 1)).publish(iter_jsonl(path))
    assert (summary.built, summary.quarantined) == (1, 1)
    (entry,) = quarantine(store)
    assert entry["field"] == "versions[v1].created" and "after tomorrow" in entry["reason"]


def test_pinned_build_clock_does_not_make_recent_records_future(tmp_path: Path) -> None:
    """SOURCE_DATE_EPOCH pins what is written, not when the run happens: a build pinned
    to a date before the sample's newest records still builds all of them."""
    path = write(tmp_path / "in.jsonl", sample())
    store = MemoryStore()
    pub = Publisher(
        store, SIGNER, BuildConfig(), clock=StepClock(datetime(2020, 1, 1, tzinfo=UTC)), run_id="r"
    )
    summary = pub.publish(iter_jsonl(path))
    assert (summary.built, summary.quarantined) == (30, 0)


def test_a_record_refused_after_parsing_keeps_its_exact_input_and_place(tmp_path: Path) -> None:
    """A record can parse and still be refused later (a date after tomorrow, an index
    row that does not fit): its quarantine line keeps the input's exact bytes and its
    file and line, as a parse failure does, not a re-serialisation of the parsed record."""
    objs = sample()[:2]
    created = "Thu, 1 Jan 2099 00:00:00 GMT"
    # key order, spacing, an escape and a field the record does not keep: all lost if re-serialised
    future = dict(objs[0], versions=[{"version": "v1", "created": created}], extra={"kept": True})
    line = json.dumps(future, indent=None, separators=(" ,", ":  ")).replace("é", "\\u00e9").encode()
    path = tmp_path / "in.jsonl"
    path.write_bytes((json.dumps(objs[1]) + "\n").encode() + line + b"\r\n")
    store = MemoryStore()
    summary = publisher(store, today=date(2026, 7, 1)).publish(iter_jsonl(path))
    assert (summary.built, summary.quarantined) == (1, 1)
    (entry,) = quarantine(store)
    assert entry["where"] == "in.jsonl:2" and entry["record_id"] == future["id"]
    assert entry["raw_encoding"] == "utf-8" and entry["raw"].encode() == line


def test_an_oai_record_refused_after_parsing_keeps_its_xml(tmp_path: Path) -> None:
    from pith_pipeline.sources.arxivraw import parse_page

    page = (
        b'<OAI-PMH xmlns="http://www.openarchives.org/OAI/2.0/"><ListRecords><record><header>'
        b"<identifier>oai:arXiv.org:2401.00005</identifier><datestamp>2024-01-02</datestamp></header>"
        b'<metadata><arXivRaw xmlns="http://arxiv.org/OAI/arXivRaw/"><id>2401.00005</id>'
        b'<version version="v1"><date>Thu, 1 Jan 2099 00:00:00 GMT</date></version>'
        b"<title>T</title><authors>A</authors><categories>hep-th</categories><abstract>X</abstract>"
        b"</arXivRaw></metadata></record></ListRecords></OAI-PMH>"
    )
    store = MemoryStore()
    summary = publisher(store, today=date(2026, 7, 1)).publish(parse_page(page, "page-1").items)
    assert (summary.built, summary.quarantined) == (0, 1)
    (entry,) = quarantine(store)
    assert entry["where"] == "page-1 record 1" and entry["field"] == "versions[v1].created"
    assert entry["raw"].startswith("<record") and "<title>T</title>" in entry["raw"]
