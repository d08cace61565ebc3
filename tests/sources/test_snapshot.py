"""The bulk snapshot reader: streamed (never loaded whole), gzip or not, filtered by
v1 date and category; and the CLI's --snapshot mode."""

from __future__ import annotations

import email.utils
import gzip
import io
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from click.testing import CliRunner

from pith_pipeline.cli import cli
from pith_pipeline.core.arxiv_record import ArxivRecord
from pith_pipeline.signing.local import generate_key
from pith_pipeline.sources.jsonl import Rejected, iter_jsonl

SNAPSHOT = Path(__file__).resolve().parents[1] / "data" / "arxiv-sample.jsonl"


class CountingStream(io.RawIOBase):
    """A read-only stream that counts how many bytes were pulled from it."""

    def __init__(self, data: bytes) -> None:
        self.buf = io.BytesIO(data)
        self.read_bytes = 0

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:  # type: ignore[no-untyped-def,override]
        n = self.buf.readinto(b)
        self.read_bytes += n
        return n


def test_gzip_stream_is_read_incrementally() -> None:
    lines = SNAPSHOT.read_bytes().splitlines(keepends=True)
    big = gzip.compress(b"".join(lines * 60), mtime=0)  # 1,800 records
    stream = CountingStream(big)
    items = iter_jsonl(stream, name="snap.json.gz")  # type: ignore[arg-type]
    first = next(items)
    assert isinstance(first, ArxivRecord) and first.id == "hep-th/9901001"
    assert stream.read_bytes < len(big) / 4
    assert sum(1 for _ in items) == 30 * 60 - 1


def v1(line: dict) -> datetime:  # type: ignore[type-arg]
    return email.utils.parsedate_to_datetime(line["versions"][0]["created"]).astimezone(UTC)


def test_filters_by_v1_date_and_category(tmp_path: Path) -> None:
    path = tmp_path / "snap.json.gz"
    raw = SNAPSHOT.read_bytes() + b'{"id": "2401.00007", "title": ""}\nnot json\n'
    path.write_bytes(gzip.compress(raw))
    since, until = datetime(2005, 1, 1, tzinfo=UTC), datetime(2007, 4, 3, tzinfo=UTC)
    got = list(iter_jsonl(path, categories={"math", "cs.IT"}, submitted_from=since, submitted_until=until))
    lines = [json.loads(x) for x in SNAPSHOT.read_text().splitlines()]
    want = [
        x["id"]
        for x in lines
        if since <= v1(x) < until
        and any(c in {"cs.IT"} or c.split(".")[0] == "math" for c in x["categories"].split())
    ]
    assert [r.id for r in got if isinstance(r, ArxivRecord)] == want and len(want) >= 3
    rejects = [r for r in got if isinstance(r, Rejected)]
    assert [r.where for r in rejects] == ["snap.json.gz:31", "snap.json.gz:32"]
    assert rejects[0].field == "versions" and "invalid JSON" in rejects[1].reason


def test_cli_snapshot_mode(tmp_path: Path) -> None:
    key = generate_key(tmp_path / "keys")[0]
    path = tmp_path / "snap.json"
    path.write_bytes(SNAPSHOT.read_bytes())
    result = CliRunner().invoke(
        cli,
        [
            "ingest",
            "--snapshot",
            str(path),
            "--category",
            "hep-th",
            "--from",
            "1999-01-01",
            "--until",
            "2007-12-31",
            "--store",
            str(tmp_path / "s"),
            "--key",
            str(key),
        ],
    )
    assert result.exit_code == 0, result.output
    lines = [json.loads(x) for x in SNAPSHOT.read_text().splitlines()]
    want = {
        x["id"]
        for x in lines
        if "hep-th" in x["categories"].split()
        and datetime(1999, 1, 1, tzinfo=UTC) <= v1(x) < datetime(2008, 1, 1, tzinfo=UTC)
    }
    assert f"fetched {len(want)}, built {len(want)}" in result.output and len(want) >= 3
    assert {p.stem for p in (tmp_path / "s/arxiv").rglob("*.json")} == {i.split("/")[-1] for i in want}


def test_bad_snapshot_date_is_a_clear_error(tmp_path: Path) -> None:
    from pith_pipeline.errors import InputError
    from pith_pipeline.ingest import Ingest
    from pith_pipeline.signing.local import load_signer
    from pith_pipeline.storage.local import LocalStore

    run = Ingest(LocalStore(tmp_path / "s"), load_signer(generate_key(tmp_path / "k")[0]))
    with pytest.raises(InputError, match="--until must be a date"):
        run.snapshot(SNAPSHOT, until="yesterday")
