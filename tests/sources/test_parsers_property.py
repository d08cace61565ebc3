"""Property tests: for any input, the snapshot-line parser and the arXivRaw record parser
either build a record or reject it with a reason; they never raise anything else.

A record that builds must also go all the way: canonical form, canonical bytes and the
date check raise nothing but `InputError`; what it builds with is the input's text, never
a trimmed or normalised copy. A reject must be serialisable into the quarantine as it
is, and keep the input's exact bytes (base64 when not UTF-8), also when the record is
refused only after parsing (a date after the run's tomorrow).

Hostile classes drawn: arbitrary bytes; arbitrary JSON; snapshot objects one hostile
value away from good (big and odd version labels, dates, ids, non-strings, nesting);
the same lines mutated at the byte level (bytes that are not UTF-8, NUL, lone surrogate
escapes, NaN / Infinity / huge numbers, a BOM, CR line ends); keys given twice;
arXivRaw records with markup in every field; and records broken at the byte level
inside an otherwise sound page.
"""

from __future__ import annotations

import base64
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
from pith_pipeline.items import Rejected
from pith_pipeline.publish import Publisher
from pith_pipeline.sources.arxivraw import Deleted, MalformedPageError, parse_page
from pith_pipeline.sources.jsonl import parse_line
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
    # ids valid for their month: four digits after the dot up to 1412, five from 1501
    st.builds(
        lambda y, m, n: f"{y:02d}{m:02d}.{n:04d}",
        st.integers(8, 14),
        st.integers(1, 12),
        st.integers(1, 9999),
    ),
    st.builds(
        lambda y, m, n: f"{y:02d}{m:02d}.{n:05d}",
        st.integers(15, 99),
        st.integers(1, 12),
        st.integers(1, 99999),
    ),
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
            "Fri, 1 Jan 9999 23:59:59 -2359",  # far future, a day of the week right
            "Tue, 1 Jan 1991 00:00:00 +2359",  # 1990 in UTC
            "Mon, 1 Jan 1991 00:00:00 GMT",  # a wrong day of the week
            "Tue, 1 Jan 1991 00:00:00 +0060",
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


def raw_of(entry: dict[str, Any]) -> bytes:
    """The input bytes a quarantine entry keeps."""
    if entry["raw_encoding"] == "base64":
        return base64.b64decode(entry["raw"], validate=True)
    assert entry["raw_encoding"] == "utf-8"
    return str(entry["raw"]).encode("utf-8")


def check_built(rec: ArxivRecord, raw: bytes | None = None) -> None:
    """A record that builds is published: canonical form, events, signatures, bundle.
    Nothing later in the run may refuse what the parser accepted, bar the date horizon
    (it depends on the day of the run): then the record is quarantined with its input's
    exact bytes and its place."""
    dumps(canonical_record(rec))  # the checked canonical form (refuses big ints)
    pub = Publisher(MemoryStore(), SIGNER, clock=StepClock(), run_id="p", today=lambda: TODAY)
    entry = pub.publish_item(rec)
    try:
        rec.check_dates(today=TODAY)
    except InputError:
        assert entry is not None and entry["where"] == rec.source_where
        if raw is not None:
            assert raw_of(entry) == raw
        return
    assert entry is None, entry
    assert pub.summary.built == 1


def check_reject(item: Rejected, raw: bytes | None = None) -> None:
    assert item.reason
    entry = item.to_json()
    dumps_compact(entry)  # the quarantine line can be written
    if raw is not None:
        assert raw_of(entry) == raw


def check_item(item: object, raw: bytes | None = None) -> None:
    """`raw`: the exact input bytes every quarantine entry of `item` must keep."""
    if isinstance(item, ArxivRecord):
        check_built(item, raw)
    else:
        assert isinstance(item, Rejected), item
        check_reject(item, raw)


def check_line(line: bytes) -> object:
    item = parse_line(line, "in.jsonl:1")
    check_item(item, line.rstrip(b"\r\n"))
    return item


SNAPSHOT_TEXT = (
    ("title", "title"),
    ("abstract", "abstract"),
    ("categories", "categories"),
    ("submitter", "submitter"),
    ("comments", "comments"),
    ("journal-ref", "journal_ref"),
    ("doi", "doi"),
    ("report-no", "report_no"),
    ("license", "license"),
    ("update_date", "update_date"),
)


def check_faithful(rec: ArxivRecord, obj: dict[str, Any]) -> None:
    """A built record holds the input's values as given: nothing trimmed, cased or
    re-read (a year 0001 read as 2001, `v01` as version 1)."""
    assert rec.id == obj["id"]
    for key, attr in SNAPSHOT_TEXT:
        assert getattr(rec, attr) == obj.get(key), key
    assert rec.authors == (obj.get("authors") or "")
    assert [(v.version, v.created) for v in rec.versions] == [
        (v["version"], v["created"]) for v in obj["versions"]
    ]
    assert rec.version == max(int(v["version"][1:]) for v in obj["versions"])


@SETTINGS
@given(st.binary(max_size=400))
def test_any_bytes_line_builds_or_is_rejected(line: bytes) -> None:
    check_line(line)


@SETTINGS
@given(records(), st.booleans())
def test_any_snapshot_object_builds_or_is_rejected(obj: dict[str, Any], ascii_only: bool) -> None:
    line = json.dumps(obj, ensure_ascii=ascii_only).encode("utf-8", errors="surrogatepass")
    item = check_line(line)
    if isinstance(item, ArxivRecord):
        check_faithful(item, obj)


@SETTINGS
@given(json_values)
def test_any_json_value_builds_or_is_rejected(value: Any) -> None:
    check_line(json.dumps(value).encode())


# byte strings a hostile or broken file holds inside an otherwise good line
HOSTILE_BYTES = st.one_of(
    st.binary(min_size=1, max_size=4),
    st.sampled_from(
        [
            b"\xff",  # not UTF-8
            b"\xc3",  # a cut UTF-8 sequence
            b"\xed\xa0\x80",  # a surrogate encoded as UTF-8
            b"\x00",
            b"\\ud800",  # a lone surrogate escape
            b"\\udc00\\ud800",
            b"\\u0000",
            b"\xef\xbf\xbe",  # U+FFFE
            b"NaN",
            b"-Infinity",
            b"1e999",
            b"123456789012345678901234567890",
            b"9007199254740993",
            b"\xef\xbb\xbf",  # a BOM
            b"\r",
            b"\\",
            b'"',
            b"[[[[[[[[",
        ]
    ),
)


@st.composite
def mutated_lines(draw: st.DrawFn) -> bytes:
    """A snapshot line with a few bytes inserted, replaced or removed, maybe a BOM before
    it and a CR line end after it."""
    obj = draw(records())
    line = bytearray(json.dumps(obj, ensure_ascii=draw(st.booleans())).encode("utf-8", "surrogatepass"))
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, len(line)))
        cut = draw(st.integers(0, 3))
        line[at : at + cut] = draw(HOSTILE_BYTES)
    if draw(st.integers(0, 9)) == 0:
        line[:0] = b"\xef\xbb\xbf"
    if draw(st.booleans()):
        line += b"\r\n"
    return bytes(line)


@SETTINGS
@given(mutated_lines())
def test_any_damaged_line_builds_or_is_rejected_with_its_bytes(line: bytes) -> None:
    check_line(line)


@st.composite
def lines_with_a_repeated_key(draw: st.DrawFn) -> bytes:
    """A snapshot line that gives one key twice: at the top, or in a version entry, the
    second spelled the same way or with escapes."""
    obj = draw(records())
    value = json.dumps(draw(st.one_of(texts, json_values)))
    key = draw(st.sampled_from([*KEYS, "extra"]))
    if draw(st.booleans()):
        key = draw(st.sampled_from(["version", "created"]))
        spelled = (
            json.dumps(key) if draw(st.booleans()) else '"' + "".join(f"\\u{ord(c):04x}" for c in key) + '"'
        )
        entry = '{"version": "v1", "created": "Tue, 24 Sep 2019 19:40:59 GMT", ' + f"{spelled}: {value}}}"
        obj.pop("versions", None)
        body = json.dumps(obj, ensure_ascii=False)
        text = body[:-1] + (", " if obj else "") + f'"versions": [{entry}]}}'
    else:
        spelled = (
            json.dumps(key) if draw(st.booleans()) else '"' + "".join(f"\\u{ord(c):04x}" for c in key) + '"'
        )
        obj.setdefault(key, "first")
        body = json.dumps(obj, ensure_ascii=False)
        member = f"{spelled}: {value}"
        text = "{" + member + ", " + body[1:] if draw(st.booleans()) else body[:-1] + ", " + member + "}"
    return text.encode("utf-8", errors="surrogatepass")


@SETTINGS
@given(lines_with_a_repeated_key())
def test_a_line_with_a_repeated_key_never_builds(line: bytes) -> None:
    """Which of two values would be signed depends on the reader: never built."""
    item = check_line(line)
    assert isinstance(item, Rejected), item


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


# every free-text field (kept exactly as served) and the token fields (blanks around
# them are layout): what a built record must hold, whatever markup was inside
TEXT_FIELDS = {
    "title": "title",
    "authors": "authors",
    "abstract": "abstract",
    "comments": "comments",
    "journal-ref": "journal_ref",
    "report-no": "report_no",
    "submitter": "submitter",
}
TOKEN_FIELDS = {"doi": "doi", "license": "license"}


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
    names = ("title", "authors", "categories", "comments", "journal-ref", "doi", "license", "abstract")
    for name in (*names, "report-no", "submitter"):
        count = draw(st.sampled_from([1] * 10 + [0, 2]))
        for _ in range(count):
            values = st.sampled_from(["hep-th", "cs.LG math.CO"]) if name == "categories" else xml_text
            xml, want = draw(field_xml(name, values))
            parts.append(xml)
            if count == 1 and name in TOKEN_FIELDS:
                expected[name] = None if want is None else (want.strip() or "")
            elif count == 1 and name in TEXT_FIELDS:
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
    page = parse_page(body, "p")  # well-formed: never a malformed page
    assert len(page.items) + len(page.deleted) == 1
    for d in page.deleted:
        assert isinstance(d, Deleted)
    for item in page.items:
        check_item(item, xml.encode("utf-8"))  # a reject keeps the record's bytes as served
        if isinstance(item, ArxivRecord):  # built: every field whole, never cut at markup
            for name, want in expected.items():
                assert want is not None, f"<{name}> with markup inside was built"
                got = getattr(item, {**TEXT_FIELDS, **TOKEN_FIELDS}[name])
                assert got == (want or None if name in TOKEN_FIELDS else want), name


GOOD_XML = (
    "<record><header><identifier>oai:arXiv.org:{id}</identifier><datestamp>2024-01-02</datestamp>"
    '</header><metadata><arXivRaw xmlns="http://arxiv.org/OAI/arXivRaw/"><id>{id}</id>'
    '<version version="v1"><date>Tue, 2 Jan 2024 10:00:00 GMT</date></version><title>T</title>'
    "<authors>A. Author</authors><categories>hep-th</categories><abstract>X</abstract>"
    "</arXivRaw></metadata></record>"
)


@SETTINGS
@given(record_xml(), st.lists(st.tuples(st.integers(0, 10**6), HOSTILE_BYTES), min_size=1, max_size=3))
def test_a_record_broken_at_the_byte_level_never_breaks_its_page(
    case: tuple[str, dict[str, str | None]], damage: list[tuple[int, bytes]]
) -> None:
    """Bytes that are not UTF-8, characters XML forbids, stray quotes or entity marks in
    one record: its neighbours are built and the page's token read; the record itself
    builds or is one reject keeping its exact bytes. Only where the page holds comments,
    CDATA or processing instructions (which could hide a record boundary) may the
    page be malformed instead, and then it is kept and fetched again."""
    record = bytearray(case[0].encode("utf-8"))
    opening = record.index(b">") + 1  # inside the record, never before its start tag
    closing = len(record) - len(b"</record>")
    for at, junk in damage:
        at = opening + at % (closing - opening + 1)
        record[at:at] = junk.replace(b"<", b"").replace(b">", b"")  # no new tags
    middle = bytes(record)
    body = (
        b'<OAI-PMH xmlns="http://www.openarchives.org/OAI/2.0/"><ListRecords>'
        + GOOD_XML.format(id="2401.00001").encode()
        + middle
        + GOOD_XML.format(id="2401.00009").encode()
        + b'<resumptionToken completeListSize="3" cursor="0">t</resumptionToken></ListRecords></OAI-PMH>'
    )
    try:
        page = parse_page(body, "p")
    except MalformedPageError:
        assert b"<!" in middle or b"<?" in middle, middle
        return
    assert page.resumption_token == "t"
    assert len(page.items) + len(page.deleted) == 3
    built = [r.id for r in page.records]
    assert built[0] == "2401.00001" and built[-1] == "2401.00009"
    for item in page.items:
        if isinstance(item, Rejected) and "well-formed" in item.reason:
            check_reject(item, middle)
            assert item.where == "p record 2"
        else:
            check_item(item)


@SETTINGS
@given(st.binary(max_size=300))
def test_any_bytes_page_parses_or_is_malformed(body: bytes) -> None:
    try:
        page = parse_page(b'<OAI-PMH xmlns="http://www.openarchives.org/OAI/2.0/"><ListRecords>' + body, "p")
    except MalformedPageError:
        return
    for item in page.items:
        check_item(item)
