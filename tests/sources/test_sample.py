"""The bundled sample: a faithful arXivRaw rendering of the 30 real records, served
by the in-process OAI-PMH responder."""

from __future__ import annotations

import json
from pathlib import Path

from lxml import etree

from pith_pipeline.core.arxiv_record import ArxivRecord
from pith_pipeline.sources.arxivraw import parse_page
from pith_pipeline.sources.sample import (
    StaticRepository,
    build_pages,
    list_records_page,
    sample_pages,
)

SNAPSHOT = Path(__file__).resolve().parents[1] / "data" / "arxiv-sample.jsonl"


def snapshot_records() -> list[dict]:  # type: ignore[type-arg]
    return [json.loads(line) for line in SNAPSHOT.read_text(encoding="utf-8").splitlines()]


def test_bundled_pages_are_the_snapshot_records_exactly() -> None:
    pages = sample_pages()
    assert len(pages) >= 2
    parsed = [parse_page(p, f"page {n}") for n, p in enumerate(pages, start=1)]
    assert all(not p.rejected and not p.deleted for p in parsed)
    assert [p.resumption_token is None for p in parsed] == [False] * (len(pages) - 1) + [True]
    records = [r for p in parsed for r in p.records]
    expected = snapshot_records()
    assert [r.id for r in records] == [e["id"] for e in expected]
    for rec, exp in zip(records, expected, strict=True):
        got = rec.to_json()
        for k in ("update_date", "authors_parsed"):  # not in arXivRaw; datestamp instead
            got.pop(k)
            exp.pop(k)
        assert got == exp, rec.id
        assert rec.update_date and len(rec.update_date) == 10


def test_pages_regenerate_byte_for_byte() -> None:
    from pith_pipeline.sources.jsonl import iter_jsonl

    records = [r for r in iter_jsonl(SNAPSHOT) if isinstance(r, ArxivRecord)]
    assert build_pages(records, page_size=12) == sample_pages()


def test_static_repository_answers_like_oai_pmh() -> None:
    repo = StaticRepository(sample_pages())
    status, first = repo.respond({"verb": "ListRecords", "metadataPrefix": "arXivRaw"})
    token = parse_page(first, "p1").resumption_token
    assert status == 200 and token
    assert repo.respond({"verb": "ListRecords", "resumptionToken": token})[1] == sample_pages()[1]
    bad = parse_page(repo.respond({"verb": "ListRecords", "resumptionToken": "nope"})[1], "x")
    assert bad.error_code == "badResumptionToken"
    got = parse_page(
        repo.respond(
            {"verb": "GetRecord", "identifier": "oai:arXiv.org:0704.0248", "metadataPrefix": "arXivRaw"}
        )[1],
        "g",
    )
    assert [r.id for r in got.records] == ["0704.0248"] and got.records[0].version == 4
    missing = parse_page(
        repo.respond({"verb": "GetRecord", "identifier": "oai:arXiv.org:x", "metadataPrefix": "arXivRaw"})[1],
        "g",
    )
    assert missing.error_code == "idDoesNotExist"
    assert repo.respond({"verb": "Nonsense"})[0] == 400


def test_writer_escapes_and_keeps_text() -> None:
    rec = ArxivRecord.from_json(
        {
            "id": "2401.00009",
            "title": "A & B < C\n  $x$",
            "abstract": "  caf\u00e9 \\'e\n",
            "categories": "cs.LG",
            "versions": [{"version": "v1", "created": "Mon, 1 Jan 2024 00:00:00 GMT"}],
            "authors": "A (X & Y) and B",
            "license": None,
        }
    )
    page = list_records_page(
        [rec], token=None, cursor=0, complete_list_size=1, request_attrs={"verb": "ListRecords"}
    )
    etree.fromstring(page)  # well-formed
    [back] = parse_page(page, "w").records
    assert back.title == rec.title and back.abstract == rec.abstract
    assert back.authors == rec.authors and back.license is None
