"""The arXivRaw parser on recorded pages in arXiv's real OAI-PMH layout."""

from __future__ import annotations

from pathlib import Path

import pytest

from pith_pipeline.core.arxiv_record import ArxivRecord
from pith_pipeline.sources.arxivraw import Deleted, MalformedPageError, parse_page
from pith_pipeline.sources.jsonl import Rejected

OAI = Path(__file__).resolve().parents[1] / "data" / "oai"


def page(name: str):  # type: ignore[no-untyped-def]
    return parse_page((OAI / name).read_bytes(), name)


def by_id(p) -> dict[str, ArxivRecord]:  # type: ignore[no-untyped-def]
    return {r.id: r for r in p.records}


def test_first_page_fields_exactly_as_served() -> None:
    p = page("listrecords-2024-01-01-p1.xml")
    recs = by_id(p)
    assert list(recs) == ["1909.11150", "hep-th/9901001", "0704.0248"]
    assert p.resumption_token == "7134892|4"
    assert p.complete_list_size == 9 and p.cursor == 0
    assert p.deleted == [Deleted("0704.0999", "2024-01-02", "listrecords-2024-01-01-p1.xml record 4")]

    old = recs["hep-th/9901001"]  # old-style id, three versions, no licence
    assert old.version == 3 and old.license is None and old.license_url == ""
    assert old.submitted_at.isoformat() == "1999-01-01T01:01:10+00:00"
    assert old.journal_ref == "Prog.Theor.Phys.101:1155-1164,1999"
    assert old.report_no == "YITP-99-1" and old.doi == "10.1143/PTP.101.1155"
    assert old.update_date == "2024-01-02"

    v4 = recs["0704.0248"]  # a v4 paper: v1 time, latest version number
    assert v4.version == 4
    assert [v.version for v in v4.versions] == ["v1", "v2", "v3", "v4"]
    assert v4.submitted_at.isoformat() == "2007-04-02T17:42:00+00:00"
    assert v4.title == (
        "A Rigorous Time-Domain Analysis of Full--Wave Electromagnetic Cloaking\n  (Invisibility)"
    )
    assert v4.abstract.startswith("  There is currently")  # leading spaces kept
    assert 'Schr\\"odinger form' in v4.abstract  # TeX kept, not converted
    assert v4.primary_cat == "physics.optics"
    assert v4.cross_cats_sorted == ["math-ph", "math.MP"]

    ml = recs["1909.11150"]
    assert ml.license == "http://arxiv.org/licenses/nonexclusive-distrib/1.0/"
    assert ml.author_names[0] == "Nouamane Laanait" and len(ml.author_names) == 9


def test_non_ascii_tex_entities_and_affiliations() -> None:
    p = page("listrecords-2024-01-01-p2.xml")
    recs = by_id(p)
    q = recs["2401.00001"]
    assert q.title == (
        "Quantenverschränkung für Anfänger: Schrödinger's $\\psi$ and\n  {\\it Zürich} lectures"
    )
    assert "Zürich & Oslo" in q.abstract  # &amp; decoded once, nothing else touched
    assert "“inequality”" in q.abstract
    assert q.author_names == ["Zoë Müller", "José Núñez", "Øystein Ås"]
    assert q.cross_cats_sorted == ["physics.hist-ph"]  # primary repeated -> dropped
    k = recs["0704.0199"]
    assert k.author_names == ["Christian Krattenthaler", 'Thomas M\\"uller']
    assert "Queen Mary & Westfield College" in k.authors


def test_broken_date_is_a_reject_with_raw_xml_and_the_rest_is_built() -> None:
    p = page("listrecords-2024-01-01-p2.xml")
    assert [r.id for r in p.records] == ["2401.00001", "0704.0199"]
    [bad] = p.rejected
    assert isinstance(bad, Rejected)
    assert bad.record_id == "2401.00002"
    assert bad.field == "versions[v1].created"
    assert "Mon, 31 Feb 2024 25:61:00 GMT" in bad.reason
    assert bad.where == "listrecords-2024-01-01-p2.xml record 2"
    assert bad.raw.startswith("<record") and "<id>2401.00002</id>" in bad.raw
    assert "Mon, 31 Feb 2024 25:61:00 GMT" in bad.raw


def test_last_page_has_no_token() -> None:
    p = page("listrecords-2024-01-01-p3.xml")
    assert p.resumption_token is None and p.complete_list_size == 9 and p.cursor == 7
    assert [r.id for r in p.records] == ["2606.18380", "math-ph/0509021"]


@pytest.mark.parametrize(
    "name,code",
    [
        ("error-badResumptionToken.xml", "badResumptionToken"),
        ("error-noRecordsMatch.xml", "noRecordsMatch"),
        ("error-idDoesNotExist.xml", "idDoesNotExist"),
    ],
)
def test_oai_errors_are_reported_not_raised(name: str, code: str) -> None:
    p = page(name)
    assert p.error_code == code and p.error_message and not p.items


def test_getrecord_document() -> None:
    p = page("getrecord-hep-th_9901001.xml")
    assert [r.id for r in p.records] == ["hep-th/9901001"] and p.resumption_token is None


@pytest.mark.parametrize(
    "body,words",
    [
        (b"<html><body><h1>502 Bad Gateway</h1>", "not an XML document"),
        ((OAI / "listrecords-2024-01-01-p2.xml").read_bytes()[:900], "not an XML document"),
        (b"<?xml version='1.0'?><feed xmlns='http://www.w3.org/2005/Atom'/>", "not an OAI-PMH"),
        (b"", "not an XML document"),
    ],
)
def test_malformed_page_raises_naming_where(body: bytes, words: str) -> None:
    with pytest.raises(MalformedPageError) as e:
        parse_page(body, "raw/x/page-00002.xml.gz")
    assert words in str(e.value) and "raw/x/page-00002.xml.gz" in str(e.value)


def _one(record_xml: str):  # type: ignore[no-untyped-def]
    doc = (
        '<OAI-PMH xmlns="http://www.openarchives.org/OAI/2.0/"><ListRecords>'
        + record_xml
        + "</ListRecords></OAI-PMH>"
    ).encode()
    return parse_page(doc, "t")


def test_record_level_problems_are_rejects() -> None:
    mismatch = _one(
        "<record><header><identifier>oai:arXiv.org:2401.00005</identifier>"
        '</header><metadata><arXivRaw xmlns="http://arxiv.org/OAI/arXivRaw/">'
        "<id>2401.00006</id></arXivRaw></metadata></record>"
    )
    assert "does not match" in mismatch.rejected[0].reason
    no_meta = _one("<record><header><identifier>oai:arXiv.org:2401.00005</identifier></header></record>")
    assert no_meta.rejected[0].reason == "record has no arXivRaw metadata"
    assert no_meta.rejected[0].record_id == "2401.00005"
    no_title = _one(
        "<record><header><identifier>oai:arXiv.org:2401.00005</identifier>"
        '</header><metadata><arXivRaw xmlns="http://arxiv.org/OAI/arXivRaw/">'
        '<id>2401.00005</id><version version="v1"><date>Mon, 1 Jan 2024 '
        "00:00:00 GMT</date></version><categories>cs.LG</categories>"
        "<abstract>a</abstract></arXivRaw></metadata></record>"
    )
    assert no_title.rejected[0].field == "title"
