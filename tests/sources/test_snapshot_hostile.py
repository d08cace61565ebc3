"""Damaged snapshot files: a truncated .gz is named with where it broke (not "aborted",
exit 130, as if Ctrl-C); bytes that are not UTF-8 are quarantined unaltered; an
over-long line is quarantined without being read whole."""

from __future__ import annotations

import base64
import gzip
import json
from datetime import date
from pathlib import Path

import pytest

from pith_pipeline.cli import main
from pith_pipeline.core.arxiv_record import ArxivRecord
from pith_pipeline.core.limits import InputLimits
from pith_pipeline.errors import DamagedInputError
from pith_pipeline.items import Rejected
from pith_pipeline.runs.windows import Window
from pith_pipeline.signing.local import generate_key
from pith_pipeline.sources.jsonl import iter_jsonl, parse_line

SNAPSHOT = Path(__file__).resolve().parents[1] / "data" / "arxiv-sample.jsonl"


def truncated_gz(tmp_path: Path) -> Path:
    full = gzip.compress(SNAPSHOT.read_bytes(), mtime=0)
    path = tmp_path / "snap.json.gz"
    path.write_bytes(full[: len(full) // 2])
    return path


def test_truncated_gzip_names_the_file_and_the_place(tmp_path: Path) -> None:
    path = truncated_gz(tmp_path)
    items = []
    with pytest.raises(DamagedInputError) as err:
        items.extend(iter_jsonl(path))
    msg = str(err.value)
    assert "snap.json.gz" in msg and f"after line {len(items)}" in msg and "byte" in msg
    assert "\n" not in msg and len(items) > 3  # everything before the damage was read


def test_cli_reports_damaged_input_with_its_exit_code(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    key = generate_key(tmp_path / "keys")[0]
    path = truncated_gz(tmp_path)
    with pytest.raises(SystemExit) as exit_:
        main(["ingest", "--snapshot", str(path), "--store", str(tmp_path / "s"), "--key", str(key)])
    err = capsys.readouterr().err
    assert exit_.value.code == DamagedInputError.exit_code == 65
    assert "aborted" not in err
    (line,) = [x for x in err.splitlines() if x.startswith("error:")]
    assert "snap.json.gz" in line and "damaged" in line


def test_cli_build_reports_damaged_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    key = generate_key(tmp_path / "keys")[0]
    path = truncated_gz(tmp_path)
    with pytest.raises(SystemExit) as exit_:
        main(["build", "--input", str(path), "--store", str(tmp_path / "s"), "--key", str(key)])
    assert exit_.value.code == 65
    assert "snap.json.gz" in capsys.readouterr().err


def test_invalid_utf8_is_quarantined_byte_for_byte() -> None:
    line = b'{"id": "2101.00001", "title": "caf\xe9 \xff"}\n'
    item = parse_line(line, "in.jsonl:3")
    assert isinstance(item, Rejected)
    entry = item.to_json()
    assert entry["raw_encoding"] == "base64"
    assert base64.b64decode(entry["raw"]) == line.rstrip(b"\n")


def test_utf8_rejects_keep_their_text() -> None:
    item = parse_line(b'{"id": "2101.00001", "title": "caf\xc3\xa9"}\r\n', "in.jsonl:3")
    assert isinstance(item, Rejected)
    assert item.to_json()["raw"] == '{"id": "2101.00001", "title": "café"}'
    assert item.to_json()["raw_encoding"] == "utf-8"


def test_over_long_line_is_quarantined_and_the_next_line_read(tmp_path: Path) -> None:
    good = SNAPSHOT.read_bytes().splitlines(keepends=True)
    path = tmp_path / "in.jsonl"
    huge = b'{"id": "2101.00001", "title": "' + b"x" * 50_000 + b'"}\n'
    path.write_bytes(good[0] + huge + good[1])
    items = list(iter_jsonl(path, limits=InputLimits(line_bytes=10_000)))
    assert [type(i).__name__ for i in items] == ["ArxivRecord", "Rejected", "ArxivRecord"]
    bad = items[1]
    assert isinstance(bad, Rejected) and bad.where == "in.jsonl:2"
    assert "10000" in bad.reason and len(bad.raw) <= 10_000
    assert json.dumps(bad.to_json())  # serialisable as it is


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (b"}", b', "title": "Second title"}'),  # orjson keeps the last, other readers the first
        (b"}", b', "\\u0074itle": "Escaped key"}'),  # the same key, written another way
        (b'{"version": "v1"', b'{"version": "v9", "version": "v1"'),  # inside a version entry
    ],
)
def test_a_line_with_a_repeated_key_is_quarantined(old: bytes, new: bytes) -> None:
    """A line that gives one field twice says two things at once: which one would be
    signed depends on the reader. It is quarantined whole, never built from one of them."""
    first = SNAPSHOT.read_bytes().splitlines()[0]
    assert isinstance(parse_line(first, "in.jsonl:1"), ArxivRecord)
    at = first.rindex(old) if old == b"}" else first.index(old)
    line = first[:at] + new + first[at + len(old) :]
    item = parse_line(line + b"\n", "in.jsonl:1")
    assert isinstance(item, Rejected), item
    assert "duplicate key" in item.reason and item.raw.encode() == line


BOM = b"\xef\xbb\xbf"
WIDE = Window(date(1990, 1, 1), date(2030, 1, 1))


def _bom_files(tmp_path: Path) -> list[Path]:
    """The sample's first three lines, with a UTF-8 byte order mark before the first."""
    body = BOM + b"".join(line + b"\n" for line in SNAPSHOT.read_bytes().splitlines()[:3])
    plain, as_json = tmp_path / "bom.jsonl", tmp_path / "bom.json"
    plain.write_bytes(body)
    as_json.write_bytes(body)
    gz = tmp_path / "bom.json.gz"
    gz.write_bytes(gzip.compress(body, mtime=0))
    return [plain, as_json, gz]


def test_a_byte_order_mark_at_the_start_of_a_snapshot_is_not_part_of_its_first_record(
    tmp_path: Path,
) -> None:
    from pith_pipeline.sources.snapshot_ranges import iter_snapshot_range, plan_snapshot_chunks

    want = [parse_line(line, "x").id for line in SNAPSHOT.read_bytes().splitlines()[:3]]  # type: ignore[union-attr]
    for path in _bom_files(tmp_path):
        items = list(iter_jsonl(path))
        assert all(isinstance(i, ArxivRecord) for i in items), (path.name, items[0])
        assert [i.id for i in items] == want  # type: ignore[union-attr]
        # the backfill's byte-range reader: the first range starts at the mark
        ranged = [
            item
            for chunk in plan_snapshot_chunks(path, WIDE, min_bytes=1)
            for item in iter_snapshot_range(chunk)
        ]
        assert [getattr(i, "id", i) for i in ranged] == want, path.name


def test_a_byte_order_mark_anywhere_else_stays_a_reject(tmp_path: Path) -> None:
    lines = SNAPSHOT.read_bytes().splitlines()[:3]
    path = tmp_path / "mid.jsonl"
    path.write_bytes(lines[0] + b"\n" + BOM + lines[1] + b"\n" + lines[2] + b"\n")
    items = list(iter_jsonl(path))
    assert [type(i) for i in items] == [ArxivRecord, Rejected, ArxivRecord]
    assert isinstance(items[1], Rejected) and items[1].raw.encode().startswith(BOM)
    from pith_pipeline.sources.snapshot_ranges import iter_snapshot_range, plan_snapshot_chunks

    ranged = [i for c in plan_snapshot_chunks(path, WIDE, min_bytes=1) for i in iter_snapshot_range(c)]
    assert [type(i) for i in ranged] == [ArxivRecord, Rejected, ArxivRecord]
