"""One meaning of a date range everywhere: `--from` inclusive, `--until` exclusive.

`ingest`, `backfill`, the DAGs and the library all read `[from, until)` like a
Python range; `--through` names the last day for those who think inclusively
(and for scripts written when `ingest --until` was inclusive). Snapshots are
filtered by one rule: the record's datestamp (`update_date`), like OAI-PMH.
"""

from __future__ import annotations

from datetime import date
from pathlib import Path

import pytest
from click.testing import CliRunner

from pith_pipeline.cli import cli
from pith_pipeline.errors import InputError
from pith_pipeline.runs.windows import window_from_options, windows_of_days
from pith_pipeline.storage.local import LocalStore
from pith_pipeline.window import Window, parse_day

SAMPLE = Path(__file__).parents[1] / "data" / "arxiv-sample.jsonl"
D = date.fromisoformat


@pytest.fixture
def key(tmp_path: Path) -> Path:
    from pith_pipeline.signing.local import generate_key

    return generate_key(tmp_path / "keys", key_id="pith-test-key")[0]


def test_there_is_one_window_type() -> None:
    import pith_pipeline.ingest
    import pith_pipeline.sources.oai

    assert pith_pipeline.sources.oai.Window is Window
    assert pith_pipeline.ingest.Window is Window


def test_a_window_is_half_open_and_asks_oai_for_its_last_day() -> None:
    w = Window(D("2024-01-01"), D("2024-01-03"), "physics:hep-th")
    assert w.params() == {
        "verb": "ListRecords",
        "metadataPrefix": "arXivRaw",
        "from": "2024-01-01",
        "until": "2024-01-02",  # OAI-PMH's until is inclusive
        "set": "physics:hep-th",
    }
    # raw pages stay where earlier harvests stored them (keyed by the OAI request)
    assert w.label == "2024-01-01_2024-01-02_physics~hep-th"
    assert w.oai_json() == {
        "from": "2024-01-01",
        "until": "2024-01-02",
        "set": "physics:hep-th",
        "metadataPrefix": "arXivRaw",
    }
    assert w.to_json() == {"from": "2024-01-01", "until": "2024-01-03"}
    assert [d.id for d in w.days()] == ["2024-01-01", "2024-01-02"]
    assert Window().params() == {"verb": "ListRecords", "metadataPrefix": "arXivRaw"}
    assert Window().label == "earliest_latest"


def test_window_checks_its_arguments() -> None:
    with pytest.raises(InputError, match="not after"):
        Window(D("2024-02-01"), D("2024-02-01"))
    with pytest.raises(InputError, match="not an OAI set spec"):
        Window(D("2024-01-01"), None, "cs/../x")


def test_one_day_parser_names_the_option() -> None:
    assert parse_day("2024-01-31", "--from") == D("2024-01-31")
    for bad in ("2024-02-30", "yesterday", "2024-1-3", "2024-01-31garbage"):
        with pytest.raises(InputError, match=rf"--until must be a date YYYY-MM-DD, not '{bad}'"):
            parse_day(bad, "--until")


def test_until_is_exclusive_and_through_inclusive() -> None:
    assert window_from_options("2024-01-01", "2024-02-01") == Window(D("2024-01-01"), D("2024-02-01"))
    assert window_from_options("2024-01-01", None, through="2024-01-31") == Window(
        D("2024-01-01"), D("2024-02-01")
    )
    assert window_from_options(None, None, set_spec="cs") == Window(None, None, "cs")
    with pytest.raises(InputError, match="not both"):
        window_from_options("2024-01-01", "2024-02-01", through="2024-01-31")


def test_the_old_one_day_form_says_what_to_write_instead() -> None:
    with pytest.raises(InputError) as err:
        window_from_options("2024-01-01", "2024-01-01")
    text = str(err.value)
    assert "exclusive" in text and "--until 2024-01-02" in text and "--through 2024-01-01" in text
    assert "\n" not in text


def test_windows_of_days_cover_the_range_once() -> None:
    got = windows_of_days(Window(D("2024-01-30"), D("2024-02-04"), "cs"), 2)
    assert got == [
        Window(D("2024-01-30"), D("2024-02-01"), "cs"),
        Window(D("2024-02-01"), D("2024-02-03"), "cs"),
        Window(D("2024-02-03"), D("2024-02-04"), "cs"),
    ]
    with pytest.raises(InputError, match="--window-days"):
        windows_of_days(Window(D("2024-01-30"), D("2024-02-04")), -1)
    with pytest.raises(InputError, match="needs both --from and --until"):
        windows_of_days(Window(D("2024-01-30"), None), 2)


def _ingest_snapshot(out: Path, key: Path, *dates: str) -> tuple[int, str, int]:
    res = CliRunner().invoke(
        cli,
        [
            "ingest",
            "--snapshot",
            str(SAMPLE),
            *dates,
            "--store",
            str(out),
            "--key",
            str(key),
            "--workers",
            "1",
        ],
    )
    store = LocalStore(out)
    n = len([k for k in store.list("pith/") if k.endswith("/bundle.json") and k.count("/") == 2])
    return res.exit_code, res.output, n


def test_snapshot_ingest_and_backfill_select_the_same_records(tmp_path: Path, key: Path) -> None:
    """Both filter on the record's datestamp (update_date, as OAI-PMH does), [from, until)."""
    from pith_pipeline.sources.jsonl import iter_jsonl
    from pith_pipeline.sources.snapshot_ranges import record_datestamp

    inside = {
        r.id
        for r in iter_jsonl(SAMPLE)
        if not hasattr(r, "reason") and D("2000-01-01") <= record_datestamp(r) < D("2010-01-01")
    }
    assert 0 < len(inside) < 30
    code, output, n = _ingest_snapshot(tmp_path / "a", key, "--from", "2000-01-01", "--until", "2010-01-01")
    assert code == 0, output
    assert n == len(inside)
    assert "--until 2010-01-01 is exclusive" in output  # the changed meaning is named
    code, output, n = _ingest_snapshot(tmp_path / "b", key, "--from", "2000-01-01", "--through", "2009-12-31")
    assert code == 0, output
    assert n == len(inside)
    assert "exclusive" not in output
    res = CliRunner().invoke(
        cli,
        [
            "backfill",
            "--from",
            "2000-01-01",
            "--until",
            "2010-01-01",
            "--source",
            "snapshot",
            "--snapshot",
            str(SAMPLE),
            "--store",
            str(tmp_path / "c"),
            "--signer",
            f"file:{key}",
        ],
    )
    assert res.exit_code == 0, res.output
    c = LocalStore(tmp_path / "c")
    assert len([k for k in c.list("pith/") if k.endswith("/bundle.json") and k.count("/") == 2]) == len(
        inside
    )


def test_backfill_takes_through_too(tmp_path: Path, key: Path) -> None:
    res = CliRunner().invoke(
        cli,
        [
            "backfill",
            "--from",
            "2024-01-01",
            "--until",
            "2024-01-02",
            "--through",
            "2024-01-01",
            "--store",
            str(tmp_path / "s"),
            "--signer",
            f"file:{key}",
        ],
    )
    assert isinstance(res.exception, InputError) and "not both" in str(res.exception)
