"""A harvest says what it got: records outside the window asked for, and empty weekdays.

Through the real CLI (`pith-pipeline ingest`) against the loopback OAI-PMH server
(tests/oai_server.py) serving real recorded arXivRaw records (tests/data/oai), re-dated.
Asserts on the run manifest, the end-of-run summary and the log line.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from click.testing import CliRunner
from lxml import etree
from oai_server import FakeArxiv, RecordedDays, Repository

from pith_pipeline.cli import cli
from pith_pipeline.signing.local import generate_key

OAI_DATA = Path(__file__).resolve().parent.parent / "data" / "oai"
OAI_NS = "http://www.openarchives.org/OAI/2.0/"


def redated(name: str, day: str) -> list[bytes]:
    """The `<record>`s of a recorded page, their header datestamp set to `day`."""
    root = etree.parse(str(OAI_DATA / name)).getroot()
    out = []
    for rec in root.iter(f"{{{OAI_NS}}}record"):
        rec.find(f"{{{OAI_NS}}}header/{{{OAI_NS}}}datestamp").text = day
        out.append(etree.tostring(rec))
    return out


class IgnoresDates(RecordedDays):
    """A mirror that answers every window with everything it has, whatever its dates."""

    def listing(self, from_: str, until: str) -> list[bytes]:
        return [r for day in sorted(self.days) for r in self.days[day]]


@pytest.fixture
def key(tmp_path: Path) -> Path:
    return generate_key(tmp_path / "keys", key_id="honest-key")[0]


def ingest(oai_url: str, store: Path, key: Path, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(
        cli,
        ["ingest", *args, "--store", str(store), "--key", str(key), "--min-interval", "0.05"],
        env={"PITH_OAI_URL": oai_url, "PITH_STORE": None, "PITH_KEY": None, "PITH_SIGNER": None},
        catch_exceptions=False,
    )
    return result.exit_code, result.stdout, result.stderr


def manifest(store: Path, out: str) -> dict:  # type: ignore[type-arg]
    line = next(x for x in out.splitlines() if x.startswith("run manifest: "))
    return json.loads((store / line.removeprefix("run manifest: ")).read_bytes())  # type: ignore[no-any-return]


def warnings_in(caplog: pytest.LogCaptureFixture, code: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and code in r.getMessage()]


def test_records_outside_the_window_are_counted_apart_and_named(
    tmp_path: Path, key: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # a request for Monday 2019-09-30 answered with that day's two records and the
    # nine records of Thursday 2019-09-26 (one deleted, one to quarantine)
    days = IgnoresDates(
        {
            "2019-09-26": [
                r for n in (1, 2, 3) for r in redated(f"listrecords-2024-01-01-p{n}.xml", "2019-09-26")
            ],
            "2019-09-30": redated("listrecords-2024-01-10-p1.xml", "2019-09-30"),
        }
    )
    store = tmp_path / "store"
    with FakeArxiv(Repository(), listing=days) as fake:
        # credentials in the server's URL must not reach the log, output or manifest
        url = fake.oai_url.replace("http://", "http://harvester:s3cr3t-pw@") + "?token=s3cr3t-tok"
        with caplog.at_level(logging.WARNING):
            code, out, err = ingest(url, store, key, "--from", "2019-09-30", "--through", "2019-09-30")
    assert code == 0, err
    doc = manifest(store, out)
    # from 2019-09-26: 7 records, 1 deletion (both outside) and 1 quarantined record
    # (its reason stands, it is not counted again); from 2019-09-30: 2 records
    assert doc["counts"]["outside_window"] == 8
    assert doc["counts"]["fetched"] == 10
    assert doc["counts"]["quarantined"] == 1
    listed = doc["outside_window"]
    assert len(listed) == 8
    assert {r["datestamp"] for r in listed} == {"2019-09-26"}
    assert {r["window"] for r in listed} == {"2019-09-30"}
    assert "0704.0999" in {r["id"] for r in listed if r["deleted"]}
    assert "1909.11150" in {r["id"] for r in listed}  # also served in the window: both counted
    (warning,) = [w for w in doc["warnings"] if w["code"] == "outside-window"]
    assert warning["count"] == 8 and warning["window"] == "2019-09-30"
    assert warning["server"] == fake.oai_url
    assert warning["request"]["from"] == "2019-09-30" and warning["request"]["until"] == "2019-09-30"
    # the records are real: built (nothing silently lost), and named
    assert (store / "arxiv" / "0704.0248.json").exists()
    logged = warnings_in(caplog, "outside-window")
    assert logged and all(fake.oai_url in m and "2019-09-30" in m and "2019-09-26" in m for m in logged)
    assert "outside_window 8" in out
    assert "outside-window" in err
    everything = out + err + "\n".join(r.getMessage() for r in caplog.records) + json.dumps(doc)
    assert "s3cr3t" not in everything
    assert not [w for w in doc["warnings"] if w["code"] == "empty-weekday"]


def test_an_empty_weekday_is_a_warning_in_the_log_manifest_and_summary(
    tmp_path: Path, oai_server: tuple[str, RecordedDays], key: Path, caplog: pytest.LogCaptureFixture
) -> None:
    url, _days = oai_server  # records on 2024-01-02 and 2024-01-03 only
    store = tmp_path / "store"
    with caplog.at_level(logging.WARNING):
        code, out, err = ingest(
            url, store, key, "--from", "2024-01-04", "--through", "2024-01-04"
        )  # Thursday
    assert code == 0, err  # holidays exist: a warning, not a failure
    doc = manifest(store, out)
    assert doc["counts"]["fetched"] == 0
    (warning,) = doc["warnings"]
    assert warning["code"] == "empty-weekday"
    assert warning["window"] == "2024-01-04" and warning["weekdays"] == ["2024-01-04"]
    assert warning["server"] == url
    logged = warnings_in(caplog, "empty-weekday")
    assert len(logged) == 1 and "2024-01-04" in logged[0] and url in logged[0]
    assert "empty-weekday" in err and "2024-01-04" in err


def test_an_empty_weekend_and_a_full_weekday_warn_of_nothing(
    tmp_path: Path, oai_server: tuple[str, RecordedDays], key: Path, caplog: pytest.LogCaptureFixture
) -> None:
    url, _days = oai_server
    with caplog.at_level(logging.WARNING):
        code, out, err = ingest(
            url, tmp_path / "weekend", key, "--from", "2024-01-06", "--through", "2024-01-07"
        )  # Saturday and Sunday
        assert code == 0, err
        assert manifest(tmp_path / "weekend", out)["warnings"] == []
        code, out, err = ingest(
            url, tmp_path / "full", key, "--from", "2024-01-02", "--through", "2024-01-03"
        )
        assert code == 0, err
        doc = manifest(tmp_path / "full", out)
    assert doc["warnings"] == [] and doc["outside_window"] == []
    assert doc["counts"]["outside_window"] == 0
    assert not warnings_in(caplog, "empty-weekday") and not warnings_in(caplog, "outside-window")
    assert "warning" not in err.lower()


def test_replaying_an_empty_weekday_warns_again(
    tmp_path: Path, oai_server: tuple[str, RecordedDays], key: Path, caplog: pytest.LogCaptureFixture
) -> None:
    url, _days = oai_server
    store = tmp_path / "store"
    window = ("--from", "2024-01-04", "--through", "2024-01-04")
    code, out, err = ingest(url, store, key, *window)
    assert code == 0, err
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        code, out, err = ingest(url, store, key, "--replay", *window)
    assert code == 0, err
    assert [w["code"] for w in manifest(store, out)["warnings"]] == ["empty-weekday"]
    assert warnings_in(caplog, "empty-weekday")


def test_only_weekdays_that_are_over_can_be_empty() -> None:
    from datetime import date

    from pith_pipeline.sources.oai_pages import weekdays
    from pith_pipeline.window import Window

    week = Window(date(2024, 1, 5), date(2024, 1, 10))  # Friday to Tuesday
    assert weekdays(week, date(2024, 2, 1)) == ["2024-01-05", "2024-01-08", "2024-01-09"]
    assert weekdays(week, date(2024, 1, 9)) == ["2024-01-05", "2024-01-08"]  # the 9th is today
    assert weekdays(Window(date(2024, 1, 6), date(2024, 1, 8)), date(2024, 2, 1)) == []
    assert weekdays(Window(), date(2024, 2, 1)) == []  # an open window (the sample)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://user:pw@mirror.example:8443/oai?key=k#f", "https://mirror.example:8443/oai"),
        ("http://127.0.0.1:8000/oai", "http://127.0.0.1:8000/oai"),
        ("http://tok@[::1]/oai", "http://[::1]/oai"),
    ],
)
def test_a_server_is_named_without_credentials(url: str, shown: str) -> None:
    from pith_pipeline.sources.oai_pages import public_url

    assert public_url(url) == shown


# -- the Airflow path (pith_ingest, pith_backfill): the same task functions the DAGs call


def airflow_window(tmp_path: Path, oai_url: str, day: str, caplog: pytest.LogCaptureFixture) -> dict:  # type: ignore[type-arg]
    """One window through harvest, build, publish, index and finish; its run manifest."""
    from datetime import date, timedelta

    from pith_pipeline import airflow_tasks as at
    from pith_pipeline.runs import chunks as chunks_mod
    from pith_pipeline.runs import harvest
    from pith_pipeline.storage.local import LocalStore
    from pith_pipeline.window import Window

    key = generate_key(tmp_path / "keys", key_id="pith-test-key")[0]
    settings = at.Settings(
        store=str(tmp_path / "store"), signer=f"file:{key}", oai_url=oai_url, oai_min_interval="0"
    )
    store = LocalStore(settings.store)
    start = date.fromisoformat(day)
    with caplog.at_level(logging.WARNING):
        harvested = harvest.harvest_window(settings, Window(start, start + timedelta(days=1)), store=store)
    run_id = str(harvested["run_id"])
    staged = [
        at.build_chunk(settings, run_id, c, store=store)["staged"]
        for c in chunks_mod.plan_page_chunks(harvested["pages"])
    ]
    published = at.publish_staged(settings, staged, store=store)
    indexed = at.index_window(settings, run_id, staged, store=store)
    done = at.finish_window(settings, harvested, staged, indexed, published, store=store)
    return json.loads((tmp_path / "store" / done["manifest"]).read_bytes())  # type: ignore[no-any-return]


def test_the_airflow_window_counts_records_outside_it_in_its_manifest(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    days = IgnoresDates(
        {
            "2019-09-26": redated("listrecords-2024-01-01-p1.xml", "2019-09-26"),
            "2019-09-30": redated("listrecords-2024-01-10-p1.xml", "2019-09-30"),
        }
    )
    with FakeArxiv(Repository(), listing=days) as fake:
        doc = airflow_window(tmp_path, fake.oai_url, "2019-09-30", caplog)
    assert doc["counts"]["outside_window"] == 4
    assert {(r["id"], r["datestamp"]) for r in doc["outside_window"]} >= {("0704.0248", "2019-09-26")}
    (warning,) = doc["warnings"]
    assert warning["code"] == "outside-window" and warning["server"] == fake.oai_url
    assert any(fake.oai_url in m and "2019-09-30" in m for m in warnings_in(caplog, "outside-window"))


def test_the_airflow_window_of_an_empty_weekday_says_so_in_its_manifest(
    tmp_path: Path, oai_server: tuple[str, RecordedDays], caplog: pytest.LogCaptureFixture
) -> None:
    url, _days = oai_server
    doc = airflow_window(tmp_path, url, "2024-01-04", caplog)
    assert doc["counts"]["fetched"] == 0
    assert [(w["code"], w["weekdays"]) for w in doc["warnings"]] == [("empty-weekday", ["2024-01-04"])]
    assert warnings_in(caplog, "empty-weekday")


def test_a_search_answer_outside_the_querys_submitted_dates_is_counted_apart(
    tmp_path: Path, key: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from oai_server import data, standard_repository

    # the recorded answer lists hep-th/9901001 (submitted 1999) and 2606.18380 (June 2026)
    query = "cat:hep-th AND submittedDate:[202606010000 TO 202606302359]"
    repo = standard_repository()
    repo.atom_query[query] = data("atom-query-hep-th.xml")
    store = tmp_path / "store"
    with FakeArxiv(repo) as fake, caplog.at_level(logging.WARNING):
        result = CliRunner().invoke(
            cli,
            ["ingest", "--query", query, "--store", str(store), "--key", str(key), "--min-interval", "0.05"],
            env={"PITH_OAI_URL": fake.oai_url, "PITH_ARXIV_API_URL": fake.api_url, "PITH_STORE": None},
            catch_exceptions=False,
        )
    assert result.exit_code == 0, result.stderr
    doc = manifest(store, result.stdout)
    assert doc["counts"]["outside_window"] == 1
    (listed,) = doc["outside_window"]
    assert listed["id"] == "hep-th/9901001" and listed["datestamp"].startswith("1999-01-01")
    (warning,) = doc["warnings"]
    assert warning["code"] == "outside-window" and warning["server"] == fake.api_url
    assert warning["request"] == {"search_query": query}
    assert doc["counts"]["built"] == 2  # the record is real: built, and named
    assert any(fake.api_url in m and "hep-th/9901001" in m for m in warnings_in(caplog, "outside-window"))
    assert "outside_window 1" in result.stdout


@pytest.mark.parametrize(
    ("query", "bound"),
    [
        (
            "cat:cs.LG AND submittedDate:[202401010000 TO 202401012359]",
            ("2024-01-01T00:00", "2024-01-02T00:00"),
        ),
        ("submittedDate:[20240101 TO 20240102] AND ti:x", ("2024-01-01T00:00", "2024-01-03T00:00")),
        ("cat:cs.LG OR submittedDate:[202401010000 TO 202401012359]", None),  # not every match
        ("cat:cs.LG ANDNOT submittedDate:[202401010000 TO 202401012359]", None),
        ("cat:cs.LG", None),
    ],
)
def test_a_querys_submitted_dates_bind_only_when_every_match_must_have_them(
    query: str, bound: tuple[str, str] | None
) -> None:
    from pith_pipeline.sources.arxiv_api import submitted_range

    got = submitted_range(query)
    assert (
        None if got is None else (got[0].strftime("%Y-%m-%dT%H:%M"), got[1].strftime("%Y-%m-%dT%H:%M"))
    ) == bound
