"""Hostile arXivRaw pages: no field is ever signed cut short, DTDs are refused.

Why: lxml's `.text` is only the text before an element's first child node, so a
comment, element, entity reference or processing instruction inside `<title>` used to
end the title silently (`Quantum<!-- c --> gravity` signed as `Quantum`).
"""

from __future__ import annotations

import base64

import pytest

from pith_pipeline.core.limits import InputLimits
from pith_pipeline.items import Rejected
from pith_pipeline.sources.arxivraw import MalformedPageError, parse_page

DATE = "Mon, 1 Jan 2024 00:00:00 GMT"
FIELDS = {
    "id": "2401.00005",
    "submitter": "A. Submitter",
    "title": "Quantum gravity",
    "authors": "A. Author and B. Author",
    "categories": "hep-th gr-qc",
    "comments": "12 pages",
    "report-no": "REP-1",
    "journal-ref": "J. Phys. 1 (2024) 1",
    "doi": "10.1000/xyz",
    "license": "http://creativecommons.org/licenses/by/4.0/",
    "abstract": "An abstract.",
}


def record(
    override: dict[str, str] | None = None,
    *,
    date: str = DATE,
    label: str = "v1",
    ident: str = "2401.00005",
    datestamp: str = "2024-01-02",
) -> str:
    fields = {**FIELDS, **(override or {})}
    body = "".join(f"<{k}>{v}</{k}>" for k, v in fields.items() if k not in ("title", "abstract", "authors"))
    return (
        f"<record><header><identifier>oai:arXiv.org:{ident}</identifier>"
        f"<datestamp>{datestamp}</datestamp></header>"
        '<metadata><arXivRaw xmlns="http://arxiv.org/OAI/arXivRaw/">'
        f'{body}<version version="{label}"><date>{date}</date></version>'
        f"<title>{fields['title']}</title><authors>{fields['authors']}</authors>"
        f"<abstract>{fields['abstract']}</abstract></arXivRaw></metadata></record>"
    )


def page_of(*records: str, prolog: str = "") -> bytes:
    return (
        prolog
        + '<OAI-PMH xmlns="http://www.openarchives.org/OAI/2.0/"><ListRecords>'
        + "".join(records)
        + "</ListRecords></OAI-PMH>"
    ).encode()


def test_plain_record_builds_every_field() -> None:
    (rec,) = parse_page(page_of(record()), "t").records
    assert (rec.title, rec.comments, rec.journal_ref, rec.report_no) == (
        "Quantum gravity",
        "12 pages",
        "J. Phys. 1 (2024) 1",
        "REP-1",
    )
    assert rec.doi == "10.1000/xyz" and rec.update_date == "2024-01-02"


@pytest.mark.parametrize("name", ["title", "abstract", "authors", "comments", "journal-ref", "report-no"])
def test_a_comment_inside_a_field_is_dropped_and_the_text_joined(name: str) -> None:
    value = FIELDS[name]
    cut = len(value) // 2
    (rec,) = parse_page(page_of(record({name: value[:cut] + "<!-- c -->" + value[cut:]})), "t").records
    assert rec.to_json()[name] == value


@pytest.mark.parametrize(
    "name", ["title", "abstract", "authors", "comments", "journal-ref", "report-no", "submitter", "doi"]
)
@pytest.mark.parametrize(
    ("inner", "what"),
    [("<b>x</b>", "element"), ("<?pi data?>", "processing instruction")],
)
def test_a_child_node_inside_a_field_rejects_the_record(name: str, inner: str, what: str) -> None:
    value = FIELDS[name]
    p = parse_page(
        page_of(
            record({name: value[:3] + inner + value[3:]}),
            record(ident="2401.00006", override={"id": "2401.00006"}),
        ),
        "t",
    )
    assert [r.id for r in p.records] == ["2401.00006"]
    (bad,) = p.rejected
    assert isinstance(bad, Rejected) and bad.field == name and what in bad.reason
    assert bad.record_id == "2401.00005" and inner.split(">")[0] in bad.raw


def test_child_nodes_in_id_date_and_datestamp_reject_too() -> None:
    for xml, field in [
        (record({"id": "2401.<!-- c -->00005"}), None),  # joined: builds
        (record({"id": "2401.<x/>00005"}), "id"),
        (record(date="Mon, 1 Jan <x/>2024 00:00:00 GMT"), "versions"),
        (record(datestamp="2024-<x/>01-02"), "header"),
    ]:
        p = parse_page(page_of(xml), "t")
        if field is None:
            assert [r.id for r in p.records] == ["2401.00005"]
        else:
            assert not p.records and p.rejected[0].field == field, xml


def test_repeated_field_rejects_the_record() -> None:
    xml = record().replace("<title>", "<title>Other</title><title>", 1)
    (bad,) = parse_page(page_of(xml), "t").rejected
    assert bad.field == "title" and "more than one" in bad.reason


def test_cdata_and_character_references_are_text() -> None:
    xml = record({"title": "Quantum <![CDATA[<grav>]]> &#233;&amp; gravity"})
    (rec,) = parse_page(page_of(xml), "t").records
    assert rec.title == "Quantum <grav> é& gravity"


@pytest.mark.parametrize(
    "prolog",
    [
        '<?xml version="1.0"?><!DOCTYPE OAI-PMH [<!ENTITY e "Quantum">]>',
        '<!DOCTYPE OAI-PMH SYSTEM "http://127.0.0.1:9/evil.dtd">',
        '<!DOCTYPE OAI-PMH [<!ENTITY e SYSTEM "file:///etc/passwd">]>',
    ],
)
def test_dtds_are_refused(prolog: str) -> None:
    body = page_of(record({"title": "&e; gravity"} if "ENTITY" in prolog else None), prolog=prolog)
    with pytest.raises(MalformedPageError) as err:
        parse_page(body, "raw/p.xml.gz")
    assert "DTD" in str(err.value) and "raw/p.xml.gz" in str(err.value)
    assert "root:" not in str(err.value)


def three(middle: str | bytes) -> tuple[bytes, bytes]:
    """A page of three records whose second one carries `middle` in its title, and
    that record's exact bytes."""
    mark = "@@TITLE@@"
    recs = [record(ident=i, override={"id": i, "title": mark if i.endswith("6") else "T"}) for i in IDS]
    body = page_of(*recs)
    middle_b = middle.encode() if isinstance(middle, str) else middle
    bad = recs[1].encode().replace(mark.encode(), middle_b)
    return body.replace(mark.encode(), middle_b), bad


IDS = ("2401.00005", "2401.00006", "2401.00007")


@pytest.mark.parametrize(
    "middle",
    [
        b"Quan\xfftum",  # not UTF-8
        "Quan&#1;tum",  # a character XML 1.0 forbids, as a reference
        "Quan\x01tum",  # ... and as itself
        "Quan\ufffetum",  # a non-character
        "&#xD800;",  # a lone surrogate
        "&e; gravity",  # an entity nobody declared
        "Quan</b>tum",  # a stray end tag
    ],
)
def test_a_record_that_is_not_well_formed_is_one_reject_and_the_page_is_read(middle: str | bytes) -> None:
    """One record the XML parser refuses used to make the whole page malformed: the
    window stopped at it, and every rerun again. It is one reject with its exact
    bytes (base64 when not UTF-8); the page's other records and its token are read."""
    body, bad_bytes = three(middle)
    body = body.replace(
        b"</ListRecords>", b'<resumptionToken completeListSize="9">tok</resumptionToken></ListRecords>'
    )
    p = parse_page(body, "t")
    assert [r.id for r in p.records] == ["2401.00005", "2401.00007"]
    assert p.resumption_token == "tok" and p.complete_list_size == 9
    (bad,) = p.rejected
    assert bad.where == "t record 2" and bad.record_id == "2401.00006" and "well-formed" in bad.reason
    raw = base64.b64decode(bad.raw) if bad.raw_encoding == "base64" else bad.raw.encode()
    assert raw == bad_bytes
    assert bad.raw_encoding == ("base64" if isinstance(middle, bytes) else "utf-8")


@pytest.mark.parametrize(
    "damage",
    [
        lambda b: b[: b.index(b"2401.00007") + 30],  # truncated inside a record
        lambda b: b[: b.index(b"</ListRecords>")],  # truncated after one
        lambda b: b.replace(b"<ListRecords>", b"<ListRecords>\xff"),  # bad bytes outside records
        lambda b: b.replace(
            b"Quan\xfftum", b"<![CDATA[Quan\xfftum]]>"
        ),  # records cannot be told apart safely
        lambda b: b.replace(b"Quan\xfftum", b"<!-- </record> -->\xff"),
        lambda b: b.replace(b"</record>", b"</record><record>", 1),  # unbalanced
        # an envelope so large that parsing it again around each record would cost more
        # than the page is worth (a normal one is a few hundred bytes)
        lambda b: b.replace(
            b"<ListRecords>", b"<responseDate>" + b"9" * 70_000 + b"</responseDate><ListRecords>"
        ),
    ],
)
def test_a_page_broken_outside_its_records_is_still_malformed(damage) -> None:  # type: ignore[no-untyped-def]
    """Only whole, cleanly separated records are read one by one: a truncated page, bad
    bytes between records, or markup that could hide a record boundary stay a malformed
    page (kept and retried), never a page read in part."""
    body, _ = three(b"Quan\xfftum")
    with pytest.raises(MalformedPageError):
        parse_page(damage(body), "t")


@pytest.mark.parametrize("ident", ["2401.0000\u0665", "\uff12401.00005", "2401.0005", "1412.00005"])
def test_look_alike_ids_are_rejected(ident: str) -> None:
    (bad,) = parse_page(page_of(record({"id": ident}, ident=ident)), "t").rejected
    assert bad.field == "id"


@pytest.mark.parametrize(
    "text",
    [
        "1909.11150v\u0662",
        "\uff11909.11150",
        "1909.11150\nv2",
        "hep-th/990100\u0661",
        "1501.0001v2",  # four digits after the dot only up to 1412
        "arXiv:1412.00001",  # five only from 1501
    ],
)
def test_ids_given_on_the_command_line_are_ascii(text: str) -> None:
    from pith_pipeline.errors import InputError
    from pith_pipeline.sources.arxiv_api import normalise_id

    with pytest.raises(InputError):
        normalise_id(text)


def test_token_cut_by_a_comment_is_read_whole() -> None:
    body = page_of(record()).replace(
        b"</ListRecords>",
        b'<resumptionToken completeListSize="9">12<!-- c -->34</resumptionToken></ListRecords>',
    )
    assert parse_page(body, "t").resumption_token == "1234"


@pytest.mark.parametrize("label", [" v1", "v1 ", "v1&#9;", "v&#x31;&#10;"])
def test_a_version_label_is_taken_as_written(label: str) -> None:
    """The snapshot refuses `"v1 "`; an arXivRaw `version` attribute is held to the same
    rule rather than trimmed into a label it does not spell."""
    (bad,) = parse_page(page_of(record(label=label)), "t").rejected
    assert bad.field == "versions" and "version label" in bad.reason


def test_a_rejected_record_keeps_its_bytes_as_served() -> None:
    """The quarantine keeps a rejected record's bytes as the server sent them, not lxml's
    re-serialisation (which resolves character references, re-quotes attributes and
    adds the page's namespace declaration)."""
    rec = record({"title": "Caf&#233; &amp; <![CDATA[x]]>"}, label="v0").replace(
        '<version version="v0">', "<version version='v0'  >"
    )
    body = page_of(record(ident="2401.00006", override={"id": "2401.00006"}), rec)
    (bad,) = parse_page(body, "t").rejected
    assert bad.field == "versions" and bad.raw_encoding == "utf-8"
    assert bad.raw == rec
    (good,) = parse_page(body, "t").records
    assert good.source_raw == record(ident="2401.00006", override={"id": "2401.00006"}).encode()


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (
            "</metadata>",
            '<arXivRaw xmlns="http://arxiv.org/OAI/arXivRaw/"><title>Other</title></arXivRaw></metadata>',
        ),
        ("</metadata>", "</metadata><metadata/>"),
        ("</header>", "</header><header><identifier>oai:arXiv.org:2401.00009</identifier></header>"),
    ],
    ids=["two arXivRaw", "two metadata", "two headers"],
)
def test_a_record_given_twice_inside_one_record_is_rejected(old: str, new: str) -> None:
    """A record that holds its header, metadata or arXivRaw block twice says two things
    at once, as a field given twice does: rejected, never built from the first."""
    (bad,) = parse_page(page_of(record().replace(old, new, 1)), "t").rejected
    assert "more than one" in bad.reason


@pytest.mark.parametrize(
    ("prolog", "encode"),
    [
        ('<?xml version="1.0" encoding="ISO-8859-1"?>', "utf-8"),  # UTF-8 bytes, Latin-1 declared
        ("<?xml version='1.0' encoding='windows-1252'?>", "cp1252"),
        ('<?xml version="1.0" encoding="UTF-16"?>', "utf-16"),
        ("", "utf-16"),  # a byte order mark, no declaration
    ],
    ids=["latin1-declared", "cp1252", "utf16", "utf16-bom"],
)
def test_pages_not_in_utf8_are_refused(prolog: str, encode: str) -> None:
    """OAI-PMH responses are UTF-8. A page declaring another encoding was decoded by
    its declaration: UTF-8 bytes declared ISO-8859-1 made `café` into `cafÃ©`, signed."""
    body = (prolog + page_of(record({"title": "café"})).decode()).encode(encode)
    with pytest.raises(MalformedPageError) as err:
        parse_page(body, "raw/p.xml.gz")
    assert "UTF-8" in str(err.value) and "raw/p.xml.gz" in str(err.value)


@pytest.mark.parametrize(
    "prolog",
    ["", '<?xml version="1.0" encoding="UTF-8"?>', "<?xml version='1.0' encoding='utf-8'?>", "\ufeff"],
)
def test_utf8_pages_parse_with_or_without_a_declaration(prolog: str) -> None:
    page = parse_page((prolog + page_of(record({"title": "café"})).decode()).encode("utf-8"), "t")
    assert [r.title for r in page.records] == ["café"]


def test_a_page_of_many_tiny_elements_is_refused_before_its_tree_is_built() -> None:
    """4.5 MB of `<record/>` made a 217 MB tree and half a million rejects; at the
    64 MiB response cap, gigabytes. Markup per response is limited, so the tree is."""
    body = page_of("<record/>" * 1000)
    with pytest.raises(MalformedPageError) as err:
        parse_page(body, "raw/p.xml.gz", limits=InputLimits(response_markup=500))
    assert "500" in str(err.value) and "raw/p.xml.gz" in str(err.value)
    assert len(parse_page(body, "t", limits=InputLimits(response_markup=5000)).items) == 1000


def test_a_page_with_more_records_than_any_arxiv_page_is_refused() -> None:
    body = page_of(*[record()] * 30)
    with pytest.raises(MalformedPageError) as err:
        parse_page(body, "raw/p.xml.gz", limits=InputLimits(page_records=20))
    assert "30 records" in str(err.value) and "20" in str(err.value)
    assert len(parse_page(body, "t", limits=InputLimits(page_records=30)).items) == 30


def test_an_over_long_resumption_token_is_refused() -> None:
    """A token is sent back in the next request's URL and kept in the checkpoint: a
    megabyte one went into both."""
    token = "t" * 5000
    body = page_of(record()).replace(
        b"</ListRecords>", f"<resumptionToken>{token}</resumptionToken></ListRecords>".encode()
    )
    with pytest.raises(MalformedPageError) as err:
        parse_page(body, "raw/p.xml.gz")
    assert "resumption token" in str(err.value) and "4096" in str(err.value)
    assert token not in str(err.value)


@pytest.mark.parametrize("attr", ["completeListSize", "cursor"])
@pytest.mark.parametrize("value", ["\u0661\u0660", "1_000", " 10", "10 ", "", "+10", "-1", "1" * 40])
def test_token_counts_are_ascii_digits_or_the_page_fails(attr: str, value: str) -> None:
    other = "cursor" if attr == "completeListSize" else "completeListSize"
    body = page_of(record()).replace(
        b"</ListRecords>",
        f'<resumptionToken {attr}="{value}" {other}="0">1234</resumptionToken></ListRecords>'.encode(),
    )
    with pytest.raises(MalformedPageError, match=attr):
        parse_page(body, "raw/p.xml")


def test_token_counts_in_ascii_digits_are_read() -> None:
    body = page_of(record()).replace(
        b"</ListRecords>",
        b'<resumptionToken completeListSize="1000" cursor="0">1234</resumptionToken></ListRecords>',
    )
    page = parse_page(body, "t")
    assert (page.complete_list_size, page.cursor) == (1000, 0)
