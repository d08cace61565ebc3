"""Damaged snapshot files: a truncated .gz is named with where it broke (not "aborted",
exit 130, as if Ctrl-C); bytes that are not UTF-8 are quarantined unaltered; an
over-long line is quarantined without being read whole."""

from __future__ import annotations

import base64
import gzip
import json
from collections.abc import Callable
from datetime import date
from pathlib import Path

import pytest

from pith_pipeline.cli import main
from pith_pipeline.core.arxiv_record import ArxivRecord
from pith_pipeline.core.limits import InputLimits
from pith_pipeline.errors import DamagedInputError
from pith_pipeline.items import Rejected
from pith_pipeline.signing.local import generate_key
from pith_pipeline.sources.jsonl import iter_jsonl, parse_line
from pith_pipeline.window import Window

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


# -- the byte-range reader of `backfill --source snapshot` and the Airflow chunks ---------


def damaged_header_gz(tmp_path: Path) -> Path:
    data = bytearray(gzip.compress(SNAPSHOT.read_bytes(), mtime=0))
    data[2] = 7  # compression method: not deflate
    path = tmp_path / "header.json.gz"
    path.write_bytes(bytes(data))
    return path


@pytest.mark.parametrize("make", [truncated_gz, damaged_header_gz], ids=["truncated", "bad-header"])
def test_snapshot_range_names_the_damaged_file(tmp_path: Path, make: Callable[[Path], Path]) -> None:
    from pith_pipeline.runs.chunks import plan_snapshot_chunks
    from pith_pipeline.runs.windows import window_from_options
    from pith_pipeline.sources.snapshot_ranges import iter_snapshot_range

    path = make(tmp_path)
    (chunk,) = plan_snapshot_chunks(path, window_from_options("1990-01-01", "2030-01-01"))
    with pytest.raises(DamagedInputError) as err:
        list(iter_snapshot_range(chunk))
    msg = str(err.value)
    assert path.name in msg and "damaged" in msg and "\n" not in msg


@pytest.mark.parametrize("make", [truncated_gz, damaged_header_gz], ids=["truncated", "bad-header"])
def test_cli_backfill_reports_damaged_snapshot(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    make: Callable[[Path], Path],
) -> None:
    monkeypatch.chdir(tmp_path)
    key = generate_key(tmp_path / "keys")[0]
    path = make(tmp_path)
    argv = ["backfill", "--from", "1990-01-01", "--until", "2030-01-01", "--source", "snapshot"]
    with pytest.raises(SystemExit) as exit_:
        main([*argv, "--snapshot", str(path), "--store", str(tmp_path / "s"), "--key", str(key)])
    err = capsys.readouterr().err
    assert exit_.value.code == 65
    assert "aborted" not in err and "Traceback" not in err
    (line,) = [x for x in err.splitlines() if x.startswith("error:")]
    assert path.name in line and "damaged" in line


def test_snapshot_range_quarantines_an_over_long_line(tmp_path: Path) -> None:
    """The range reader holds at most one line's limit, like `iter_jsonl`."""
    from pith_pipeline.runs.chunks import plan_snapshot_chunks
    from pith_pipeline.runs.windows import window_from_options
    from pith_pipeline.sources import snapshot_ranges

    good = SNAPSHOT.read_bytes().splitlines(keepends=True)
    path = tmp_path / "in.jsonl"
    huge = b'{"id": "2101.00001", "title": "' + b"x" * 50_000 + b'"}\n'
    path.write_bytes(good[0] + huge + good[1])
    (chunk,) = plan_snapshot_chunks(path, window_from_options("1990-01-01", "2030-01-01"))
    items = list(snapshot_ranges.iter_snapshot_range(chunk, limits=InputLimits(line_bytes=10_000)))
    kinds = [type(i).__name__ for i in items]
    assert kinds.count("Rejected") == 1 and kinds.count("ArxivRecord") >= 1
    (bad,) = [i for i in items if isinstance(i, Rejected)]
    assert bad.where == f"in.jsonl@{len(good[0])}" and "10000" in bad.reason and len(bad.raw) <= 10_000


# -- raw pages kept in the store are gzip files too ---------------------------------------


def sample_store(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A store with the bundled sample harvested into it; returns (store, key, a page)."""
    key = generate_key(tmp_path / "keys")[0]
    store = tmp_path / "s"
    main_ok(["ingest", "--sample", "--store", str(store), "--key", str(key)])
    page = sorted((store / "raw").rglob("page-00002.xml.gz"))[0]
    return store, key, page


def main_ok(argv: list[str]) -> None:
    try:
        main(argv)
    except SystemExit as exit_:
        assert exit_.code in (0, None)


def test_a_truncated_stored_page_is_named_on_replay(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A truncated raw page printed 'aborted' (gzip's EOFError, exit 130)."""
    monkeypatch.chdir(tmp_path)
    store, key, page = sample_store(tmp_path)
    page.write_bytes(page.read_bytes()[:300])
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        main(["ingest", "--sample", "--replay", "--store", str(store), "--key", str(key)])
    err = capsys.readouterr().err
    assert exit_.value.code == 65 and "aborted" not in err
    (line,) = [x for x in err.splitlines() if x.startswith("error:")]
    assert page.name in line and "damaged" in line


def test_a_stored_page_is_decompressed_with_the_response_cap(tmp_path: Path) -> None:
    """A raw page that inflates without end was decompressed whole before the XML
    parser saw it; no page was ever stored bigger than a response may be."""
    from pith_pipeline.ingest import Ingest
    from pith_pipeline.signing.local import load_signer
    from pith_pipeline.storage.local import LocalStore

    store, key, page = sample_store(tmp_path)
    page.write_bytes(gzip.compress(b" " * 3_000_000, mtime=0))
    run = Ingest(LocalStore(store), load_signer(key), limits=InputLimits(response_bytes=1_000_000))
    with pytest.raises(DamagedInputError) as err:
        run.replay(raw_root="raw/sample")
    assert page.name in str(err.value) and "1000000" in str(err.value)


# -- files that are not JSON lines at all -------------------------------------------------


def _lzma(data: bytes) -> bytes:
    import lzma

    return lzma.compress(data)


def _bz2(data: bytes) -> bytes:
    import bz2

    return bz2.compress(data)


NOT_JSON_LINES = {
    "gz-of-binary": ("snap.json.gz", lambda: gzip.compress(bytes(range(256)) * 400, mtime=0), "binary"),
    "gz-of-gz": ("snap.json.gz", lambda: gzip.compress(gzip.compress(SNAPSHOT.read_bytes())), "gzip"),
    "bzip2": ("snap.json.bz2", lambda: _bz2(SNAPSHOT.read_bytes()), "bzip2"),
    "xz": ("snap.json.xz", lambda: _lzma(SNAPSHOT.read_bytes()), "xz"),
    "zstd": ("snap.json.zst", lambda: b"\x28\xb5\x2f\xfd" + bytes(300), "zstd"),
    "zip": ("snap.zip", lambda: b"PK\x03\x04" + bytes(300), "zip"),
    "binary": ("snap.jsonl", lambda: bytes(range(256)) * 400, "binary"),
}


@pytest.mark.parametrize("case", list(NOT_JSON_LINES))
def test_a_file_that_is_not_json_lines_fails_whole(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    """A binary file, or one compressed with something other than gzip, used to be
    read as lines of text: every "line" quarantined (the whole file, base64, held in
    memory for the run) and exit 0. It is one line naming the file instead."""
    name, make, what = NOT_JSON_LINES[case]
    path = tmp_path / name
    path.write_bytes(make())
    with pytest.raises(DamagedInputError) as err:
        list(iter_jsonl(path))
    assert name in str(err.value) and what in str(err.value) and "\n" not in str(err.value)

    monkeypatch.chdir(tmp_path)
    key = generate_key(tmp_path / "keys")[0]
    with pytest.raises(SystemExit) as exit_:
        main(["build", "--input", str(path), "--store", str(tmp_path / "s"), "--key", str(key)])
    assert exit_.value.code == 65
    (line,) = [x for x in capsys.readouterr().err.splitlines() if x.startswith("error:")]
    assert name in line and what in line
    assert not (tmp_path / "s" / "quarantine").exists()


def test_one_binary_line_inside_a_snapshot_is_one_reject(tmp_path: Path) -> None:
    """Only the start of a file decides that it is not JSON lines; later, a line of
    junk is one record's problem."""
    good = SNAPSHOT.read_bytes().splitlines(keepends=True)
    path = tmp_path / "in.jsonl"
    path.write_bytes(good[0] + b"\x00\x01\x02 junk\n" + good[1])
    kinds = [type(i).__name__ for i in iter_jsonl(path)]
    assert kinds == ["ArxivRecord", "Rejected", "ArxivRecord"]


def test_backfill_reads_a_gz_name_as_gzip_like_build(tmp_path: Path) -> None:
    """`build` refused a `.gz` that is not gzip while the range reader read it as plain
    text; both take the name at its word now."""
    from pith_pipeline.runs.chunks import plan_snapshot_chunks
    from pith_pipeline.runs.windows import window_from_options
    from pith_pipeline.sources.snapshot_ranges import iter_snapshot_range

    path = tmp_path / "plain.json.gz"
    path.write_bytes(SNAPSHOT.read_bytes())
    with pytest.raises(DamagedInputError):
        list(iter_jsonl(path))
    (chunk,) = plan_snapshot_chunks(path, window_from_options("1990-01-01", "2030-01-01"), min_bytes=1000)
    with pytest.raises(DamagedInputError) as err:
        list(iter_snapshot_range(chunk))
    assert "plain.json.gz" in str(err.value)


@pytest.mark.parametrize("kind", ["missing", "directory"])
def test_an_input_that_cannot_be_opened_is_one_error(tmp_path: Path, kind: str) -> None:
    """The command line checks `--input` before a run, but the readers are also called
    by Airflow's chunk tasks (the file may be gone by then) and from Python: they
    raised a bare FileNotFoundError / IsADirectoryError."""
    from pith_pipeline.errors import UnreadableInputError
    from pith_pipeline.runs.windows import window_from_options
    from pith_pipeline.sources.snapshot_ranges import iter_snapshot_range

    path = tmp_path / "snap.jsonl"
    if kind == "directory":
        path.mkdir()
    window = window_from_options("1990-01-01", "2030-01-01")
    chunk = {"kind": "snapshot", "path": str(path), "window": window.to_json(), "start": 0, "end": None}
    for read in (lambda: list(iter_jsonl(path)), lambda: list(iter_snapshot_range(chunk))):
        with pytest.raises(UnreadableInputError) as err:
            read()
        assert str(path) in str(err.value) and "\n" not in str(err.value)
    assert UnreadableInputError.exit_code == 2


def test_rejects_held_for_the_quarantine_are_bounded(tmp_path: Path) -> None:
    """Rejects are held in memory until the run writes its quarantine: 911 bytes of
    gzip (300,000 lines of `{}`) took 387 MB and made a 50 MB quarantine, so a small
    gzip bomb could take any amount of memory. Past the budget, the file fails whole."""
    from pith_pipeline.runs.chunks import plan_snapshot_chunks
    from pith_pipeline.runs.windows import window_from_options
    from pith_pipeline.sources.snapshot_ranges import iter_snapshot_range

    good = SNAPSHOT.read_bytes().splitlines(keepends=True)
    path = tmp_path / "bomb.json.gz"
    path.write_bytes(gzip.compress(good[0] + b"{}\n" * 5000, mtime=0))
    limits = InputLimits(rejected_bytes=100_000)
    items: list[object] = []
    with pytest.raises(DamagedInputError) as err:
        items.extend(iter_jsonl(path, limits=limits))
    msg = str(err.value)
    assert "bomb.json.gz" in msg and "100000" in msg and "\n" not in msg
    assert isinstance(items[0], ArxivRecord) and 1 < len(items) < 200  # what came first is kept
    (chunk,) = plan_snapshot_chunks(path, window_from_options("1990-01-01", "2030-01-01"))
    with pytest.raises(DamagedInputError):
        list(iter_snapshot_range(chunk, limits=limits))
    assert len(list(iter_jsonl(path, limits=InputLimits(rejected_bytes=10_000_000)))) == 5001


@pytest.mark.parametrize(
    "argv",
    [["build", "--input"], ["build", "--workers", "2", "--input"], ["ingest", "--snapshot"]],
    ids=["build", "build-workers", "ingest"],
)
def test_what_comes_before_the_damage_is_published_and_quarantined(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, argv: list[str]
) -> None:
    """The damage was raised through the publishing loop, which reads records in
    batches of 256: the records read before it (all of them, in a small file) were
    never published, and `build` never wrote the rejects before it."""
    monkeypatch.chdir(tmp_path)
    lines = SNAPSHOT.read_bytes().splitlines(keepends=True)
    data = gzip.compress(lines[0] + b"{not json\n" + b"".join(lines[1:]), mtime=0)
    path = tmp_path / "snap.json.gz"
    path.write_bytes(data[: len(data) // 2])
    read: list[object] = []
    with pytest.raises(DamagedInputError):
        read.extend(iter_jsonl(path))
    good = [i for i in read if isinstance(i, ArxivRecord)]
    assert len(good) > 3 and len(read) == len(good) + 1
    key = generate_key(tmp_path / "keys")[0]
    store = tmp_path / "s"
    with pytest.raises(SystemExit) as exit_:
        main([*argv, str(path), "--store", str(store), "--key", str(key)])
    assert exit_.value.code == 65
    published = {json.loads(p.read_bytes())["source"]["id"] for p in store.glob("pith/*/bundle.json")}
    assert published == {r.id for r in good}
    (quarantine,) = store.glob("quarantine/*.jsonl")
    (entry,) = [json.loads(x) for x in quarantine.read_text().splitlines()]
    assert entry["where"] == "snap.json.gz:2"


def test_a_utf16_snapshot_is_named_as_such(tmp_path: Path) -> None:
    path = tmp_path / "snap.jsonl"
    path.write_bytes(SNAPSHOT.read_text("utf-8").encode("utf-16"))
    with pytest.raises(DamagedInputError, match="UTF-16"):
        list(iter_jsonl(path))


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
    from pith_pipeline.runs.chunks import plan_snapshot_chunks
    from pith_pipeline.sources.snapshot_ranges import iter_snapshot_range

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
    from pith_pipeline.runs.chunks import plan_snapshot_chunks
    from pith_pipeline.sources.snapshot_ranges import iter_snapshot_range

    ranged = [i for c in plan_snapshot_chunks(path, WIDE, min_bytes=1) for i in iter_snapshot_range(c)]
    assert [type(i) for i in ranged] == [ArxivRecord, Rejected, ArxivRecord]
