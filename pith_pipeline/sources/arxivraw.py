"""arXiv's `arXivRaw` OAI-PMH metadata format -> the typed arXiv record.

`arXivRaw` (namespace `http://arxiv.org/OAI/arXivRaw/`) is the only OAI format that
carries both the licence and every version with its submission time. A record looks
like:

    <record><header><identifier>oai:arXiv.org:0704.0001</identifier>
      <datestamp>2008-11-13</datestamp><setSpec>physics:hep-ph</setSpec></header>
    <metadata><arXivRaw xmlns="http://arxiv.org/OAI/arXivRaw/">
      <id>0704.0001</id><submitter>...</submitter>
      <version version="v1"><date>Mon, 2 Apr 2007 19:18:42 GMT</date><size>810kb</size>
        <source_type>D</source_type></version> ...
      <title>...</title><authors>...</authors><categories>hep-ph</categories>
      <comments/><proxy/><report-no/><msc-class/><acm-class/><journal-ref/><doi/>
      <license/><abstract>...</abstract></arXivRaw></metadata></record>

A page is read here (its envelope, resumption token and error, and a page the XML
parser refuses read record by record); each record by `sources.arxivraw_record`.
Parsing never raises for one bad record: it becomes a `Rejected` carrying the
record's raw XML, so the rest of the page is still built.
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass, field
from itertools import pairwise

from lxml import etree

from pith_pipeline.core.arxiv_record import ArxivRecord, is_arxiv_id
from pith_pipeline.core.limits import DEFAULT_LIMITS, InputLimits
from pith_pipeline.errors import InputError
from pith_pipeline.items import Item, Rejected
from pith_pipeline.sources.arxivraw_record import (
    OAI_ID_PREFIX,
    OAI_NS,
    Deleted,
    FieldError,
    content,
    parse_record,
)

_O = f"{{{OAI_NS}}}"

# No DTDs, no entities, no network: pages come from the outside world. A page with a
# DOCTYPE is refused outright (OAI-PMH never uses one); `resolve_entities=False` and
# `load_dtd=False` make sure nothing is fetched or expanded before that check.
_PARSER = etree.XMLParser(
    resolve_entities=False,
    no_network=True,
    load_dtd=False,
    dtd_validation=False,
    huge_tree=True,
    remove_blank_text=False,
)


class MalformedPageError(InputError):
    """A response that is not an OAI-PMH document (HTML error page, truncated XML)."""


@dataclass(slots=True)
class Page:
    """One parsed OAI-PMH response."""

    where: str
    items: list[Item] = field(default_factory=list)
    deleted: list[Deleted] = field(default_factory=list)
    resumption_token: str | None = None
    complete_list_size: int | None = None
    cursor: int | None = None
    error_code: str | None = None
    error_message: str = ""

    @property
    def records(self) -> list[ArxivRecord]:
        return [i for i in self.items if isinstance(i, ArxivRecord)]

    @property
    def rejected(self) -> list[Rejected]:
        return [i for i in self.items if isinstance(i, Rejected)]


def oai_identifier(arxiv_id: str) -> str:
    return f"{OAI_ID_PREFIX}{arxiv_id}"


#: a count in a resumption token: ASCII digits only, at most 18 (no sign, blank,
#: underscore or other script's digit, all of which `int()` would take)
_COUNT = re.compile(r"[0-9]{1,18}", re.ASCII)


def _int_attr(el: etree._Element, name: str, where: str) -> int | None:
    """A resumption token's count attribute (`completeListSize`, `cursor`), or None
    when absent. Anything but ASCII digits fails the page, naming the attribute:
    the harvest's loop checks rely on these counts, so a guess would be unsafe."""
    value = el.get(name)
    if value is None:
        return None
    if not _COUNT.fullmatch(value):
        shown = value if len(value) <= 40 else value[:40] + "..."
        raise MalformedPageError(
            f"resumptionToken {name}={shown!r} is not a count in ASCII digits", where=where
        )
    return int(value)


def _one_line(text: str, limit: int) -> str:
    """Server text for a message: one line, printable, at most `limit` characters.

    Why: an OAI `<error>` text goes into the error a person reads; as served, a server
    could print any number of lines (or megabytes, or terminal controls) there.
    """
    flat = " ".join(text.split())
    flat = "".join(c if c.isprintable() else "?" for c in flat)
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _not_utf8(data: bytes, declared: str | None) -> str | None:
    """The encoding a page is in when it is not UTF-8 (else None).

    lxml reports the declaration, or UTF-8 when there is none, even for UTF-16 with a
    byte order mark; UTF-16 and UTF-32 are told by their NUL bytes (XML never has one).
    """
    if data[:2] in (b"\xff\xfe", b"\xfe\xff") or b"\x00" in data[:4]:
        return "UTF-16 or UTF-32"
    try:
        if declared is None or codecs.lookup(declared).name == "utf-8":
            return None
    except LookupError:
        pass
    return repr(declared)


def _check_markup(data: bytes, where: str, limits: InputLimits) -> None:
    """Refuse a response with more than `limits.response_markup` pieces of markup,
    counted before parsing: the tree of a response of tiny elements is many times its
    size."""
    markup = data.count(b"<")
    if markup > limits.response_markup:
        raise MalformedPageError(
            f"refused: {markup} pieces of markup, over the limit of {limits.response_markup} "
            "for one response (see docs/pages/input-limits.md)",
            where=where,
        )


def _not_xml(exc: etree.XMLSyntaxError, data: bytes, where: str) -> MalformedPageError:
    head = data[:80].decode("utf-8", errors="replace").replace("\n", " ")
    return MalformedPageError(f"not an XML document ({exc}); starts with {head!r}", where=where)


def _checked_root(root: etree._Element, data: bytes, where: str) -> etree._Element:
    """`root`, parsed from `data`, unless the document declares a DTD or is not UTF-8."""
    docinfo = root.getroottree().docinfo
    if docinfo.doctype or docinfo.internalDTD is not None or docinfo.externalDTD is not None:
        raise MalformedPageError("refused: the response declares a DTD (arXiv never sends one)", where=where)
    other = _not_utf8(data, docinfo.encoding)
    if other is not None:
        # decoded by its declaration, UTF-8 bytes declared ISO-8859-1 turn `café` into
        # `cafÃ©`: text that would be signed as if arXiv had served it
        raise MalformedPageError(
            f"refused: the response is in {other}, not UTF-8 (arXiv answers in UTF-8)", where=where
        )
    return root


def parse_xml(data: bytes, where: str, limits: InputLimits = DEFAULT_LIMITS) -> etree._Element:
    """The root of an XML document from the outside world, or `MalformedPageError`.

    One place for what every response from arXiv (OAI-PMH pages, the search API's
    Atom feeds) must be: well-formed, without a DTD (so no entity is expanded and no
    file or URL read), UTF-8, and with at most `limits.response_markup` pieces of
    markup.
    """
    _check_markup(data, where, limits)
    try:
        root = etree.fromstring(data, parser=_PARSER)
    except etree.XMLSyntaxError as exc:
        raise _not_xml(exc, data, where) from None
    return _checked_root(root, data, where)


def parse_page(data: bytes, where: str, *, limits: InputLimits = DEFAULT_LIMITS) -> Page:
    """Parse a `ListRecords` or `GetRecord` response into records, deletions and rejects.

    Raises `MalformedPageError` (naming `where`) when the bytes are not an OAI-PMH
    XML document (see `parse_xml`); a bad record inside a good page is a `Rejected`
    item instead, and so is a record that is not well-formed XML inside a page that
    is otherwise sound (see `_read_records_apart`).
    """
    _check_markup(data, where, limits)
    try:
        root = etree.fromstring(data, parser=_PARSER)
    except etree.XMLSyntaxError as exc:
        page = _read_records_apart(data, where, limits)
        if page is not None:
            return page
        raise _not_xml(exc, data, where) from None
    return _page_of(_checked_root(root, data, where), where, limits, data=data)


def _check_record_count(count: int, where: str, limits: InputLimits) -> None:
    if count > limits.page_records:
        raise MalformedPageError(
            f"refused: {count} records in one page, over the limit of {limits.page_records} "
            "(see docs/pages/input-limits.md)",
            where=where,
        )


def _page_of(
    root: etree._Element,
    where: str,
    limits: InputLimits,
    first: int = 1,
    *,
    data: bytes | None = None,
    raws: list[bytes] | None = None,
) -> Page:
    """The page of a checked document. Each record's exact bytes (`raws`, or found in
    `data`, the document) go with it, for the quarantine; lxml's re-serialisation
    only when they cannot be told apart for sure."""
    if root.tag != f"{_O}OAI-PMH":
        raise MalformedPageError(f"not an OAI-PMH response (root element {root.tag!r})", where=where)
    page = Page(where)
    error = root.find(f"{_O}error")
    if error is not None:
        page.error_code = _one_line(error.get("code") or "unknown", 64)
        page.error_message = _one_line(error.text or "", 300)
        return page
    body = root.find(f"{_O}ListRecords")
    if body is None:
        body = root.find(f"{_O}GetRecord")
    if body is None:
        raise MalformedPageError("neither ListRecords nor GetRecord nor error in the response", where=where)
    records = body.findall(f"{_O}record")
    _check_record_count(len(records), where, limits)
    if raws is None and data is not None:
        raws = _record_bytes(data, len(records))
    for n, rec in enumerate(records, start=first):
        raw = raws[n - first] if raws is not None and len(raws) == len(records) else None
        parsed = parse_record(rec, f"{where} record {n}", raw)
        if isinstance(parsed, Deleted):
            page.deleted.append(parsed)
        else:
            page.items.append(parsed)
    token = body.find(f"{_O}resumptionToken")
    if token is not None:
        try:
            page.resumption_token = content(token, "resumptionToken").strip() or None
        except FieldError as exc:
            raise MalformedPageError(exc.reason, where=where) from None
        size = len((page.resumption_token or "").encode("utf-8", "surrogatepass"))
        if size > limits.field_limit("resumptionToken"):
            raise MalformedPageError(
                f"refused: a resumption token of {size} bytes, over the limit of "
                f"{limits.field_limit('resumptionToken')}",
                where=where,
            )
        page.complete_list_size = _int_attr(token, "completeListSize", where)
        page.cursor = _int_attr(token, "cursor", where)
    return page


# A record's bytes in a page: `<record>` .. the first `</record>` (records do not nest).
_RECORD_SPAN = re.compile(rb"<record(?:[ \t\r\n][^<>]*)?>.*?</record[ \t\r\n]*>", re.DOTALL)
_HEADER_ID = re.compile(rb"<identifier>[ \t\r\n]*oai:arXiv\.org:([!-~]{1,64}?)[ \t\r\n]*</identifier>")


#: the most of a page outside its records (a real one: a few hundred bytes) for which the
#: page is read record by record
_ENVELOPE_BYTES = 16 * 1024


def _record_bytes(data: bytes, count: int) -> list[bytes] | None:
    """The exact bytes of the `count` records of a well-formed page, or None.

    Sure only when the page holds `<record` and `</record` exactly `count` times each
    and the spans found are as many: then every occurrence is a real tag (one inside a
    comment, CDATA or text would make a count too high, an empty `<record/>` or a `>`
    in an attribute the spans too few), and records do not nest.
    """
    spans = _record_spans(data) if count else None
    return [data[a:b] for a, b in spans] if spans is not None and len(spans) == count else None


def _record_spans(data: bytes) -> list[tuple[int, int]] | None:
    """Where each `<record>` .. `</record>` of a page lies, or None when that cannot be
    told for sure: every `<record` and `</record` in the page must be a real tag of one
    span found (one inside a comment, CDATA or text makes a count too high, an empty
    `<record/>` or a `>` in an attribute the spans too few)."""
    spans = [m.span() for m in _RECORD_SPAN.finditer(data)]
    if not spans or data.count(b"<record") != len(spans) or data.count(b"</record") != len(spans):
        return None
    return spans


def _read_records_apart(data: bytes, where: str, limits: InputLimits) -> Page | None:
    """A page the XML parser refused as a whole, read record by record; None when it
    cannot be split safely (then the page is malformed, kept and retried).

    Why: one record with a byte that is not UTF-8, a character XML forbids or an
    undeclared entity made the whole page malformed, so the window stopped there on
    every rerun. No per-record problem may stop a run, so such a record becomes one
    reject with its exact bytes and the rest of the page is read.

    Only a page whose damage is inside cleanly separated records is read this way:
    the page without its records (head, token, closing tags) must be a sound OAI-PMH
    document, only blanks may lie between records, and the page may hold no comment,
    CDATA section, processing instruction or declaration, which could hide a
    `</record>` that is not one. A truncated page stays malformed, so it is fetched
    again rather than read in part.
    """
    decl = re.match(rb"<\?xml[^<>]*\?>", data)
    rest = data[decl.end() :] if decl else data
    if b"<!" in rest or b"<?" in rest:
        return None
    spans = _record_spans(data)
    if spans is None:
        return None
    if any(data[end:start].strip(b" \t\r\n") for (_, end), (start, _) in pairwise(spans)):
        return None
    _check_record_count(len(spans), where, limits)
    head, tail = data[: spans[0][0]], data[spans[-1][1] :]
    if len(head) + len(tail) > _ENVELOPE_BYTES:
        return None  # parsed again around every record: a huge one would cost that many times
    try:
        envelope = _page_of(_parsed(head + tail, where), where, limits)
    except (etree.XMLSyntaxError, MalformedPageError):
        return None
    if envelope.error_code is not None or envelope.items or envelope.deleted:
        return None
    page = envelope
    for n, (start, end) in enumerate(spans, start=1):
        chunk = data[start:end]
        try:
            one = _page_of(_parsed(head + chunk + tail, where), where, limits, n, raws=[chunk])
        except (etree.XMLSyntaxError, MalformedPageError) as exc:
            found = _HEADER_ID.search(chunk)
            rid = found.group(1).decode("ascii") if found else None
            rid = rid if rid is not None and is_arxiv_id(rid) else None
            reason = f"not well-formed XML ({exc}); the page's other records were read"
            page.items.append(Rejected.of_bytes(f"{where} record {n}", reason, chunk, rid, "record"))
            continue
        page.items.extend(one.items)
        page.deleted.extend(one.deleted)
    return page


def _parsed(doc: bytes, where: str) -> etree._Element:
    return _checked_root(etree.fromstring(doc, parser=_PARSER), doc, where)
