"""Property tests: for any input, the snapshot-line parser and the arXivRaw record parser
either build a record or reject it with a reason; they never raise anything else.

A record that builds must also go all the way: canonical form, canonical bytes and the
date check raise nothing but `InputError`. A reject must be serialisable into the
quarantine as it is.
"""

from __future__ import annotations

import json
from datetime import date
from typing import Any
from xml.sax.saxutils import escape, quoteattr

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from testclock import StepClock

from pith_pipeline.core.arxiv_record import ArxivRecord
from pith_pipeline.core.canonical_json import dumps, dumps_compact
from pith_pipeline.core.keys import Ed25519Signer
from pith_pipeline.core.pith_record import canonical_record
from pith_pipeline.errors import InputError
from pith_pipeline.pipeline import Publisher
from pith_pipeline.sources.arxivraw import Deleted, MalformedPageError, parse_page
from pith_pipeline.sources.jsonl import Rejected, parse_line
from pith_pipeline.storage.memory import MemoryStore

SIGNER = Ed25519Signer(bytes(range(32)), "property-test")
TODAY = date(2026, 12, 3)
SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
KEYS = (
    "id",
    "submitter",
    "authors",
    "title",
    "comments",
    "journal-ref",
    "doi",
    "report-no",
    "categories",
    "license",
    "abstract",
    "versions",
    "update_date",
    "authors_parsed",
)

ids = st.one_of(
    st.sampled_from(["2101.00021", "0704.0001", "hep-th/9901001", "math.CO/0102003", "2101.00021\n"]),
    st.from_regex(r"[0-9]{4}\.[0-9]{4,5}", fullmatch=True),
    st.text(max_size=20),
)
labels = st.one_of(
    st.sampled_from(
        ["v1", "v2", "v9999", "v10000", "v0", "v01", "v9007199254740993", "v3000000000", "v\u0661"]
    ),
    st.builds(lambda n: f"v{n}", st.integers(min_value=-(2**70), max_value=2**70)),
    st.builds(lambda n: f"v{n}", st.integers(min_value=2**31 - 2, max_value=2**70)),  # int32, 2^53
    st.text(max_size=12),
)
dates = st.one_of(
    st.sampled_from(
        [
            "Tue, 24 Sep 2019 19:40:59 GMT",
            "Mon, 1 Jan 0001 00:00:00 GMT",
            "Mon, 1 Jan 01 00:00:00 GMT",
            "Fri, 1 Jan 1993",
            "Mon, 31 Feb 2024 25:61:00 GMT",
            "Mon, 1 Jan 9999 23:59:59 -2359",
            "Mon, 1 Jan 1991 00:00:00 +2359",
        ]
    ),
    st.builds(
        lambda d, m, y, h, mi, s, z: f"{d} {m} {y} {h:02d}:{mi:02d}:{s:02d} {z}",
        st.integers(0, 40),
        st.sampled_from(["Jan", "Feb", "Dec", "Foo"]),
        st.integers(0, 10000),
        st.integers(0, 30),
        st.integers(0, 70),
        st.integers(0, 70),
        st.sampled_from(["GMT", "+0000", "-9999", "UTC", "EST"]),
    ),
    st.text(max_size=40),
)
texts = st.one_of(st.text(max_size=60), st.sampled_from(["Quantum gravity", "cs.LG hep-th", "  ", ""]))
json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(allow_nan=False),
    texts,
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
good_dates = st.sampled_from(["Tue, 24 Sep 2019 19:40:59 GMT", "Fri, 1 Jan 1993", "2 Apr 2007 19:18:42 GMT"])
good_labels = st.builds(lambda n: f"v{n}", st.integers(min_value=1, max_value=9999))
versions = st.one_of(
    # mostly one hostile part in an otherwise good list
    st.lists(
        st.one_of(
            st.fixed_dictionaries({"version": labels, "created": good_dates}),
            st.fixed_dictionaries({"version": good_labels, "created": dates}),
        ),
        min_size=1,
        max_size=3,
    ),
    st.lists(
        st.one_of(st.fixed_dictionaries({"version": labels, "created": dates}), json_values), max_size=4
    ),
)


GOOD: dict[str, Any] = {
    "id": "2101.00021",
    "submitter": "A. Submitter",
    "authors": "A. Author and B. Author",
    "title": "Quantum gravity",
    "comments": "12 pages",
    "journal-ref": None,
    "doi": "10.1000/xyz",
    "report-no": None,
    "categories": "hep-th gr-qc",
    "license": None,
    "abstract": "An abstract.",
    "versions": [{"version": "v1", "created": "Tue, 24 Sep 2019 19:40:59 GMT"}],
    "update_date": "2024-01-02",
    "authors_parsed": [["Author", "A.", ""]],
}
FIELD_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "id": ids,
    "versions": versions,
    "update_date": st.one_of(st.sampled_from(["2024-01-02", "0001-01-01", "2024-1-1", "2999-01-01"]), texts),
    "authors_parsed": st.one_of(st.lists(st.lists(texts, max_size=3), max_size=3), json_values),
    "categories": st.one_of(texts, st.sampled_from(["hep-th", "cs.LG math.CO", "cs.LG\u0661"])),
}


@st.composite
def records(draw: st.DrawFn) -> dict[str, Any]:
    """A good record with a few fields replaced or removed: most examples are one
    hostile value away from building, which is where the parser must be exact."""
    obj = dict(GOOD)
    # the fields with structure (versions, dates, ids) are where values hide: drawn more often
    weighted = (*KEYS, "versions", "versions", "versions", "id", "update_date", "categories")
    for key in draw(st.lists(st.sampled_from(weighted), max_size=3, unique=True)):
        if draw(st.integers(0, 9)) == 0:
            obj.pop(key)
        else:
            obj[key] = draw(FIELD_VALUES.get(key, st.one_of(texts, json_values)))
    return obj


def check_built(rec: ArxivRecord) -> None:
    """A record that builds is published: canonical form, events, signatures, bundle.
    Nothing later in the run may refuse what the parser accepted (bar the date horizon,
    which depends on the day of the run)."""
    dumps(canonical_record(rec))  # the checked canonical form (refuses big ints)
    try:
        rec.check_dates(today=TODAY)
    except InputError:
        return
    pub = Publisher(MemoryStore(), SIGNER, clock=StepClock(), run_id="p", today=lambda: TODAY)
    assert pub.publish_item(rec) is None, pub.quarantine
    assert pub.summary.built == 1


def check_reject(item: Rejected) -> None:
    assert item.reason
    dumps_compact(item.to_json())  # the quarantine line can be written


def check_item(item: object) -> None:
    if isinstance(item, ArxivRecord):
        check_built(item)
    else:
        assert isinstance(item, Rejected), item
        check_reject(item)


@SETTINGS
@given(st.binary(max_size=400))
def test_any_bytes_line_builds_or_is_rejected(line: bytes) -> None:
    check_item(parse_line(line, "in.jsonl:1"))


@SETTINGS
@given(records())
def test_any_snapshot_object_builds_or_is_rejected(obj: dict[str, Any]) -> None:
    line = json.dumps(obj, ensure_ascii=False).encode("utf-8", errors="surrogatepass")
    check_item(parse_line(line, "in.jsonl:1"))


@SETTINGS
@given(json_values)
def test_any_json_value_builds_or_is_rejected(value: Any) -> None:
    check_item(parse_line(json.dumps(value).encode(), "in.jsonl:1"))


# -- arXivRaw ---------------------------------------------------------------------------
# characters XML 1.0 allows (others make the page malformed, which is tested elsewhere)
xml_text = st.text(
    alphabet=st.one_of(
        st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters="\ufffe\uffff"),
        st.sampled_from("\t\n\r &<>\"'"),
    ),
    max_size=40,
)
# (markup inside a field, the text it stands for; None: the field cannot be read whole)
INNER = {
    "": "",
    "<!-- c -->": "",
    "<![CDATA[<x>]]>": "<x>",
    "&amp;": "&",
    "&#233;": "\u00e9",
    "&#x10FFFF;": "\U0010ffff",
    "<b>x</b>": None,
    "<?pi x?>": None,
}


def xml_newlines(text: str) -> str:
    """What an XML parser makes of line ends in text (XML 1.0, section 2.11)."""
    return text.replace("\r\n", "\n").replace("\r", "\n")


@st.composite
def field_xml(draw: st.DrawFn, name: str, values: st.SearchStrategy[str]) -> tuple[str, str | None]:
    """`<name>...</name>` with markup somewhere inside, and the text a reader must get."""
    text = draw(values)
    cut = draw(st.integers(0, len(text)))
    inner = draw(st.sampled_from(sorted(INNER))) if draw(st.integers(0, 3)) == 0 else ""
    meant = INNER[inner]
    want = None if meant is None else xml_newlines(text[:cut]) + meant + xml_newlines(text[cut:])
    return f"<{name}>{escape(text[:cut])}{inner}{escape(text[cut:])}</{name}>", want


TEXT_FIELDS = {"title": "title", "authors": "authors", "comments": "comments", "journal-ref": "journal_ref"}


@st.composite
def record_xml(draw: st.DrawFn) -> tuple[str, dict[str, str | None]]:
    """One `<record>` and, per free-text field present once, the text it must build with."""
    # mostly good, with hostile parts now and then, so that many examples build
    hostile = st.integers(0, 4).map(lambda n: n == 0)
    ident = "2401.00005"
    if draw(hostile):
        ident = draw(
            st.one_of(st.sampled_from(["hep-th/9901001", "2401.0000\u0665", "2401.00005\n"]), xml_text)
        )
    header_id = draw(st.sampled_from([ident, "2401.00005", ""])) if draw(hostile) else ident
    status = ' status="deleted"' if draw(hostile) else ""
    parts = [f"<record><header{status}><identifier>oai:arXiv.org:{escape(header_id)}</identifier>"]
    if draw(hostile):
        stamps = st.one_of(st.sampled_from(["2024-01-02", "0001-01-01"]), xml_text)
        parts.append(draw(field_xml("datestamp", stamps))[0])
    else:
        parts.append("<datestamp>2024-01-02</datestamp>")
    parts.append('</header><metadata><arXivRaw xmlns="http://arxiv.org/OAI/arXivRaw/">')
    parts.append(f"<id>{escape(ident)}</id>")
    printable_dates = dates.map(lambda d: "".join(c for c in d if c.isprintable()))
    for n in range(1, draw(st.integers(0, 3)) + 1):
        if draw(hostile):
            label = draw(labels.filter(lambda t: all(c.isprintable() for c in t)))
            date_xml = draw(field_xml("date", printable_dates))[0]
        else:
            label, date_xml = f"v{n}", f"<date>{draw(good_dates)}</date>"
        parts.append(f"<version version={quoteattr(label)}>{date_xml}</version>")
    expected: dict[str, str | None] = {}
    for name in ("title", "authors", "categories", "comments", "journal-ref", "doi", "license", "abstract"):
        count = draw(st.sampled_from([1] * 10 + [0, 2]))
        for _ in range(count):
            values = st.sampled_from(["hep-th", "cs.LG math.CO"]) if name == "categories" else xml_text
            xml, want = draw(field_xml(name, values))
            parts.append(xml)
            if name in TEXT_FIELDS and count == 1:
                expected[name] = want
    parts.append("</arXivRaw></metadata></record>")
    return "".join(parts), expected


@SETTINGS
@given(record_xml())
def test_any_arxivraw_record_builds_whole_or_is_rejected(case: tuple[str, dict[str, str | None]]) -> None:
    xml, expected = case
    body = (
        '<OAI-PMH xmlns="http://www.openarchives.org/OAI/2.0/"><ListRecords>'
        + xml
        + "</ListRecords></OAI-PMH>"
    ).encode("utf-8")
    try:
        page = parse_page(body, "p")
    except MalformedPageError:
        return  # not well-formed XML (e.g. a character XML forbids): the page is kept and retried
    assert len(page.items) + len(page.deleted) == 1
    for d in page.deleted:
        assert isinstance(d, Deleted)
    for item in page.items:
        check_item(item)
        if isinstance(item, ArxivRecord):  # built: every field whole, never cut at markup
            for name, want in expected.items():
                assert want is not None, f"<{name}> with markup inside was built"
                assert getattr(item, TEXT_FIELDS[name]) == want, name


@SETTINGS
@given(st.binary(max_size=300))
def test_any_bytes_page_parses_or_is_malformed(body: bytes) -> None:
    try:
        page = parse_page(b'<OAI-PMH xmlns="http://www.openarchives.org/OAI/2.0/"><ListRecords>' + body, "p")
    except MalformedPageError:
        return
    for item in page.items:
        check_item(item)
