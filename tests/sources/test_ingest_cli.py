"""`pith-pipeline ingest` against the local arXiv stand-in: --ids and --query through the
`arxiv` package's client, windows, replay, option checks."""

from __future__ import annotations

import json
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path

import pytest
from click.testing import CliRunner
from oai_server import FakeArxiv, standard_repository

from pith_pipeline.cli import cli
from pith_pipeline.ingest import Ingest
from pith_pipeline.signing.local import generate_key, load_signer
from pith_pipeline.sources.arxiv_api import normalise_id
from pith_pipeline.storage.local import LocalStore

INTERVAL = 0.2
QUERY = "cat:hep-th AND submittedDate:[199901010000 TO 202612312359]"


@pytest.fixture
def server() -> Iterator[FakeArxiv]:
    with FakeArxiv(standard_repository()) as s:
        yield s


@pytest.fixture
def key(tmp_path: Path) -> Path:
    return generate_key(tmp_path / "keys", key_id="cli-key")[0]


def invoke(server: FakeArxiv, *args: str) -> tuple[int, str, str]:
    runner = CliRunner()
    result = runner.invoke(
        cli,
        ["ingest", *args],
        env={
            "PITH_ARXIV_API_URL": server.api_url,
            "PITH_OAI_URL": server.oai_url,
            "PITH_STORE": None,
            "PITH_KEY": None,
            "PITH_SIGNER": None,
        },
        catch_exceptions=False,
    )
    return result.exit_code, result.stdout, result.stderr


def pointer(store: Path, arxiv_id: str) -> dict:  # type: ignore[type-arg]
    return json.loads((store / "arxiv" / f"{arxiv_id}.json").read_bytes())


def test_ids_checked_by_the_api_then_getrecord(tmp_path: Path, server: FakeArxiv, key: Path) -> None:
    store = tmp_path / "store"
    code, out, err = invoke(
        server,
        "--ids",
        "1909.11150v1, hep-th/9901001,2401.99999",
        "--store",
        str(store),
        "--key",
        str(key),
        "--min-interval",
        str(INTERVAL),
    )
    assert code == 0, err
    assert "fetched 3, built 2, unchanged 0, superseded 0, quarantined 1" in out
    assert pointer(store, "1909.11150")["latest"] == "pith:2019:CDU3BX5RMZUBC43H42ZNV4JXNI"
    assert pointer(store, "hep-th/9901001")["records"][0]["version"] == 3
    [q] = [json.loads(x) for f in (store / "quarantine").iterdir() for x in f.read_text().splitlines()]
    assert q["record_id"] == "2401.99999" and "no entry" in q["reason"]
    # one API request (the id list), then one GetRecord per known id, all spaced
    assert [r.path for r in server.log] == ["/api/query", "/oai", "/oai"]
    api = server.log[0]
    assert api.params["id_list"] == "1909.11150,hep-th/9901001,2401.99999"
    assert all(r.user_agent.startswith("pith-pipeline/") for r in server.log)
    assert min(b.at - a.at for a, b in pairwise(server.log)) >= INTERVAL
    assert [r.params["identifier"] for r in server.log[1:]] == [
        "oai:arXiv.org:1909.11150",
        "oai:arXiv.org:hep-th/9901001",
    ]
    raw = sorted(p.name for p in (store / "raw/oai/arXivRaw/getrecord").rglob("*.gz"))
    assert raw == ["00001-1909.11150.xml.gz", "00002-hep-th_9901001.xml.gz"]

    # the look-ups replay offline, like windows
    n = len(server.log)
    code, out, err = invoke(server, "--replay", "--store", str(store), "--key", str(key))
    assert code == 0, err
    assert "fetched 2, built 0, unchanged 2" in out
    assert len(server.log) == n


def test_query_discovers_ids_then_getrecord(tmp_path: Path, server: FakeArxiv, key: Path) -> None:
    store = tmp_path / "store"
    code, out, err = invoke(
        server, "--query", QUERY, "--store", str(store), "--key", str(key), "--min-interval", str(INTERVAL)
    )
    assert code == 0, err
    assert "fetched 2, built 2" in out
    assert server.log[0].params["search_query"] == QUERY
    assert pointer(store, "2606.18380")["latest"] == "pith:2026:SG6QNWFIOVZEMA3A2RIEOEVPD6"


def test_getrecord_for_an_unknown_id_is_quarantined(tmp_path: Path, server: FakeArxiv, key: Path) -> None:
    store = LocalStore(tmp_path / "s")
    run = Ingest(store, load_signer(key))
    from pith_pipeline.sources.politeness import Gate, Politeness

    run.records(
        ["2401.99999", "hep-th/9901001"], oai_url=server.oai_url, gate=Gate(Politeness(min_interval=0.05))
    )
    assert run.report.counts()["built"] == 1 and run.report.counts()["quarantined"] == 1
    [q] = [json.loads(x) for x in (store.get(f"quarantine/{run.run_id}.jsonl") or b"").splitlines()]
    assert "idDoesNotExist" in q["raw"] and "oai:arXiv.org:2401.99999" in q["reason"]


def test_window_from_the_command_line(tmp_path: Path, server: FakeArxiv, key: Path) -> None:
    store = tmp_path / "store"
    args = (
        "--from",
        "2024-01-01",
        "--through",  # the last day; --until 2024-01-04 is the same window
        "2024-01-03",
        "--store",
        str(store),
        "--key",
        str(key),
        "--min-interval",
        "0.05",
    )
    code, out, err = invoke(server, *args)
    assert code == 0, err
    assert "fetched 8, built 7, unchanged 0, superseded 0, quarantined 1, deleted 1" in out
    assert "quarantine/" in err
    code, out, err = invoke(server, *args)
    assert "already harvested" in err and "fetched 0" in out


def test_window_days_split_a_backfill(tmp_path: Path, server: FakeArxiv, key: Path) -> None:
    store = tmp_path / "store"
    code, out, err = invoke(
        server,
        "--from",
        "2024-01-08",
        "--until",
        "2024-01-12",
        "--window-days",
        "2",
        "--store",
        str(store),
        "--key",
        str(key),
        "--min-interval",
        "0.05",
    )
    assert code == 0, err
    assert "fetched 0" in out and "2 pages" in out  # both windows answer noRecordsMatch
    windows = sorted(p.name for p in (store / "raw/oai/arXivRaw").iterdir())
    assert windows == ["2024-01-08_2024-01-09", "2024-01-10_2024-01-11"]
    assert [(r.params.get("from"), r.params.get("until")) for r in server.log] == [
        ("2024-01-08", "2024-01-09"),
        ("2024-01-10", "2024-01-11"),
    ]


@pytest.mark.parametrize(
    "args,words",
    [
        (
            ("--from", "2024-01-01", "--oai-url", "https://oaipmh.arxiv.org/oai", "--min-interval", "1"),
            "every 3 s",
        ),
        (
            (
                "--ids",
                "1909.11150",
                "--api-url",
                "https://export.arxiv.org/api/query",
                "--min-interval",
                "0.5",
            ),
            "every 3 s",
        ),
        (("--sample", "--min-interval", "nan"), "not a finite number"),
        (("--sample", "--min-interval", "inf"), "not a finite number"),
        (("--sample", "--min-interval", "-1"), "--min-interval"),
        (("--sample", "--ids", "1909.11150"), "choose one source"),
        (("--snapshot", __file__, "--query", "x"), "choose one source"),
        ((), "nothing to ingest"),
        (("--from", "2024-01-01", "--category", "cs"), "--category filters --snapshot"),
    ],
)
def test_usage_errors(tmp_path: Path, args: tuple[str, ...], words: str) -> None:
    result = CliRunner().invoke(
        cli, ["ingest", *args, "--store", str(tmp_path / "s"), "--key", str(tmp_path / "k.json")]
    )
    assert result.exit_code == 2 and words in result.output
    assert not (tmp_path / "s").exists()


def test_bad_dates_are_clear_errors(tmp_path: Path, key: Path) -> None:
    from pith_pipeline.errors import InputError

    result = CliRunner().invoke(
        cli,
        [
            "ingest",
            "--from",
            "2024-02-30",
            "--store",
            str(tmp_path / "s"),
            "--key",
            str(key),
            "--oai-url",
            "http://127.0.0.1:9/oai",
        ],
    )
    assert isinstance(result.exception, InputError)
    assert "--from must be a date YYYY-MM-DD, not '2024-02-30'" in str(result.exception)


def test_help_teaches() -> None:
    out = CliRunner().invoke(cli, ["ingest", "--help"]).output
    for words in (
        "--sample",
        "--from",
        "--ids",
        "--query",
        "--snapshot",
        "--replay",
        "PITH_OAI_URL",
        "PITH_ARXIV_API_URL",
        "3 s",
        "Examples",
    ):
        assert words in out


@pytest.mark.parametrize(
    "text,bare",
    [
        ("1909.11150v2", "1909.11150"),
        ("arXiv:2401.00001", "2401.00001"),
        ("https://arxiv.org/abs/hep-lat/0305021v1", "hep-lat/0305021"),
        ("hep-lat/0305021", "hep-lat/0305021"),
        ("1412.9999v3", "1412.9999"),
        ("arXiv:0704.0001", "0704.0001"),
    ],
)
def test_normalise_id(text: str, bare: str) -> None:
    assert normalise_id(text) == bare


def test_normalise_id_refuses_junk() -> None:
    from pith_pipeline.errors import InputError

    with pytest.raises(InputError, match="not an arXiv identifier"):
        normalise_id("../../etc/passwd")


def test_api_requests_honour_retry_after_through_the_gate(
    tmp_path: Path, server: FakeArxiv, key: Path
) -> None:
    from oai_server import retry_after_seconds

    server.fail("api", retry_after_seconds(1))
    code, out, err = invoke(
        server,
        "--ids",
        "hep-th/9901001",
        "--store",
        str(tmp_path / "s"),
        "--key",
        str(key),
        "--min-interval",
        str(INTERVAL),
    )
    assert code == 0, err
    assert "built 1" in out
    api = server.requests_for("api")
    assert len(api) == 2 and api[1].at - api[0].at >= 1.0


def test_incremental_continues_from_the_last_complete_window(
    tmp_path: Path, server: FakeArxiv, key: Path
) -> None:
    from datetime import date

    from pith_pipeline.sources.politeness import Politeness

    store = LocalStore(tmp_path / "s")
    run = Ingest(store, load_signer(key))
    fast = Politeness(min_interval=0.05)
    with pytest.raises(Exception, match="needs an earlier complete window"):
        run.incremental(today=date(2024, 1, 10), oai_url=server.oai_url, politeness=fast)
    from pith_pipeline.runs.windows import window_from_options

    run.windows(
        [window_from_options("2024-01-01", None, through="2024-01-03")],
        oai_url=server.oai_url,
        politeness=fast,
    )
    run.incremental(today=date(2024, 1, 10), oai_url=server.oai_url, politeness=fast)
    assert (server.log[-1].params["from"], server.log[-1].params["until"]) == ("2024-01-03", "2024-01-10")
    code, _out, err = invoke(
        server, "--incremental", "--from", "2024-01-01", "--store", str(tmp_path / "s"), "--key", str(key)
    )
    assert code == 2 and "chooses --from/--until itself" in err


@pytest.mark.parametrize("bad", ["hep-th/9901001v3/../../x", "hep-th/99010\uff101v3", "2606.18380v1%0A"])
def test_a_search_result_that_is_not_an_id_does_not_stop_the_query(
    tmp_path: Path, bad: str, key: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The search API's answer is input too: an entry whose id is not an arXiv id is
    left out with a warning naming it, and the other matches are still fetched."""
    repo = standard_repository()
    feed = repo.atom_query[QUERY]
    repo.atom_query[QUERY] = feed.replace(b"/abs/hep-th/9901001v3<", f"/abs/{bad}<".encode())
    assert repo.atom_query[QUERY] != feed
    store = tmp_path / "store"
    with FakeArxiv(repo) as server:
        code, out, err = invoke(
            server, "--query", QUERY, "--store", str(store), "--key", str(key), "--min-interval", "0"
        )
        assert code == 0, err
        assert "fetched 1, built 1" in out
        assert [r.params.get("identifier") for r in server.log[1:]] == ["oai:arXiv.org:2606.18380"]
    assert any(bad in r.getMessage() and "not an arXiv identifier" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(
    "updated",
    ["garbage", "2021-13-01T00:00:00Z", "2021-01-01T00:00:0\u0661Z"],
    ids=["text", "month", "digit"],
)
def test_a_search_answer_the_api_package_cannot_read_is_one_line(
    tmp_path: Path,
    updated: str,
    key: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The `arxiv` package raises whatever its parsing meets (a ValueError for a bad
    `<updated>`): that used to end the run with a traceback. It is one line naming the
    API, with the exit code of a failed run."""
    from oai_server import _feed

    from pith_pipeline.cli import main

    entry = (
        "<entry xmlns='http://www.w3.org/2005/Atom'><id>http://arxiv.org/abs/2101.00001v1</id>"
        f"<published>2021-01-01T00:00:00Z</published><updated>{updated}</updated><title>x</title></entry>"
    ).encode()
    repo = standard_repository()
    repo.atom_query[QUERY] = _feed([entry])
    with FakeArxiv(repo) as server:
        monkeypatch.setenv("PITH_ARXIV_API_URL", server.api_url)
        monkeypatch.setenv("PITH_OAI_URL", server.oai_url)
        args = ["ingest", "--query", QUERY, "--store", str(tmp_path / "s"), "--key", str(key)]
        with pytest.raises(SystemExit) as exit_:
            main([*args, "--min-interval", "0"])
    assert exit_.value.code == 1
    # the new store's first run made its log key (one note), then the error: one line
    note, line = capsys.readouterr().err.strip().splitlines()
    assert note.startswith("no log key given") and "pith-log-private-key.json" in note
    assert line.startswith("error: arXiv API") and server.api_url in line and "cannot read" in line


def test_getrecord_answered_with_another_paper_is_quarantined(tmp_path: Path, key: Path) -> None:
    """A `GetRecord` for one id answered with another paper's record (or with several)
    builds nothing that was not asked for: the answer is quarantined naming both ids,
    on the harvest and on its replay."""
    from oai_server import data

    from pith_pipeline.sources.politeness import Gate, Politeness

    repo = standard_repository()
    repo.getrecord["oai:arXiv.org:1909.11150"] = data("getrecord-hep-th_9901001.xml")
    store = LocalStore(tmp_path / "s")
    with FakeArxiv(repo) as server:
        run = Ingest(store, load_signer(key))
        run.records(["1909.11150"], oai_url=server.oai_url, gate=Gate(Politeness(min_interval=0.0)))
    assert run.report.counts()["built"] == 0 and run.report.counts()["quarantined"] == 1
    [q] = [json.loads(x) for x in (store.get(f"quarantine/{run.run_id}.jsonl") or b"").splitlines()]
    assert "1909.11150" in q["reason"] and "hep-th/9901001" in q["reason"] and q["record_id"] == "1909.11150"
    assert store.get("arxiv/hep-th/9901001.json") is None
    replay = Ingest(store, load_signer(key))
    replay.replay()
    assert replay.report.counts()["built"] == 0 and replay.report.counts()["quarantined"] == 1
