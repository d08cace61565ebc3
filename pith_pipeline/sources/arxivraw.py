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

Text is kept exactly as served (TeX, line breaks, leading spaces): the canonical
record hashes its own canonical form, and the snapshot keeps the same text. The
header datestamp is the last *modification* date, which the snapshot calls
`update_date`. Parsing never raises for one bad record: it becomes a `Rejected`
carrying the record's raw XML, so the rest of the page is still built.
"""

from __future__ import annotations

import codecs
from dataclasses import dataclass, field

from lxml import etree

from pith_pipeline.core.arxiv_record import ArxivRecord, Version
from pith_pipeline.core.limits import DEFAULT_LIMITS, InputLimits
from pith_pipeline.errors import InputError
from pith_pipeline.items import Item, Rejected

OAI_NS = "http://www.openarchives.org/OAI/2.0/"
ARXIVRAW_NS = "http://arxiv.org/OAI/arXivRaw/"
OAI_ID_PREFIX = "oai:arXiv.org:"
_O = f"{{{OAI_NS}}}"
_A = f"{{{ARXIVRAW_NS}}}"

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


@dataclass(frozen=True, slots=True)
class Deleted:
    """A record arXiv reports as withdrawn from OAI (`<header status="deleted">`)."""

    arxiv_id: str
    datestamp: str | None
    where: str


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


def _int_attr(el: etree._Element, name: str) -> int | None:
    value = el.get(name)
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


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


def parse_xml(data: bytes, where: str, limits: InputLimits = DEFAULT_LIMITS) -> etree._Element:
    """The root of an XML document from the outside world, or `MalformedPageError`.

    One place for what every response from arXiv (OAI-PMH pages, the search API's
    Atom feeds) must be: well-formed, without a DTD (so no entity is expanded and no
    file or URL read), UTF-8, and with at most `limits.response_markup` pieces of
    markup (counted before parsing: the tree of a response of tiny elements is many
    times its size).
    """
    markup = data.count(b"<")
    if markup > limits.response_markup:
        raise MalformedPageError(
            f"refused: {markup} pieces of markup, over the limit of {limits.response_markup} "
            "for one response (see docs/pages/input-limits.md)",
            where=where,
        )
    try:
        root = etree.fromstring(data, parser=_PARSER)
    except etree.XMLSyntaxError as exc:
        head = data[:80].decode("utf-8", errors="replace").replace("\n", " ")
        raise MalformedPageError(f"not an XML document ({exc}); starts with {head!r}", where=where) from None
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


def parse_page(data: bytes, where: str, *, limits: InputLimits = DEFAULT_LIMITS) -> Page:
    """Parse a `ListRecords` or `GetRecord` response into records, deletions and rejects.

    Raises `MalformedPageError` (naming `where`) when the bytes are not an OAI-PMH
    XML document; a bad record inside a good page is a `Rejected` item instead.
    """
    root = parse_xml(data, where, limits)
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
    if len(records) > limits.page_records:
        raise MalformedPageError(
            f"refused: {len(records)} records in one page, over the limit of {limits.page_records} "
            "(see docs/pages/input-limits.md)",
            where=where,
        )
    for n, rec in enumerate(records, start=1):
        parsed = parse_record(rec, f"{where} record {n}")
        if isinstance(parsed, Deleted):
            page.deleted.append(parsed)
        else:
            page.items.append(parsed)
    token = body.find(f"{_O}resumptionToken")
    if token is not None:
        try:
            page.resumption_token = content(token, "resumptionToken").strip() or None
        except _FieldError as exc:
            raise MalformedPageError(exc.reason, where=where) from None
        size = len((page.resumption_token or "").encode("utf-8", "surrogatepass"))
        if size > limits.field_limit("resumptionToken"):
            raise MalformedPageError(
                f"refused: a resumption token of {size} bytes, over the limit of "
                f"{limits.field_limit('resumptionToken')}",
                where=where,
            )
        page.complete_list_size = _int_attr(token, "completeListSize")
        page.cursor = _int_attr(token, "cursor")
    return page


class _FieldError(Exception):
    """A field whose text cannot be taken whole; becomes the record's reject reason."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(field, reason)
        self.field = field
        self.reason = reason


def content(el: etree._Element, field: str) -> str:
    """The whole text of a text-only element.

    Why not `el.text`: that is only the text before the first child node, so a comment
    or an element inside `<title>` would cut the title short, and a truncated title
    would be signed. Comments are dropped and the text around them joined; any other
    child node (element, entity reference, processing instruction) makes the field
    unreadable, so the record is rejected rather than guessed at.
    """
    parts = [el.text or ""]
    for child in el:
        if isinstance(child, etree._Comment):
            pass
        elif isinstance(child, etree._ProcessingInstruction):
            raise _FieldError(field, f"a processing instruction <?{child.target}?> inside <{field}>")
        elif isinstance(child, etree._Entity):
            raise _FieldError(field, f"an entity reference {child.text} inside <{field}>")
        else:
            raise _FieldError(field, f"an element <{etree.QName(child).localname}> inside <{field}>")
        parts.append(child.tail or "")
    return "".join(parts)


def _text(parent: etree._Element, name: str, field: str | None = None) -> str | None:
    found = parent.findall(f"{_A}{name}")
    if not found:
        return None
    if len(found) > 1:
        raise _FieldError(field or name, f"more than one <{name}>")
    return content(found[0], field or name)


def _token(parent: etree._Element, name: str) -> str | None:
    """A single-token field (id, doi, licence): surrounding whitespace is layout."""
    value = _text(parent, name)
    if value is None:
        return None
    value = value.strip()
    return value or None


def _header_text(header: etree._Element | None, name: str) -> str | None:
    if header is None:
        return None
    found = header.findall(f"{_O}{name}")
    if not found:
        return None
    if len(found) > 1:
        raise _FieldError("header", f"more than one <{name}> in the header")
    return content(found[0], "header").strip() or None


def raw_xml(el: etree._Element) -> str:
    return str(etree.tostring(el, encoding="unicode"))


def parse_record(rec: etree._Element, where: str) -> ArxivRecord | Rejected | Deleted:
    """One `<record>` element -> record, reject (with its raw XML) or deletion notice."""
    header = rec.find(f"{_O}header")
    header_id: str | None = None

    def reject(reason: str, fld: str | None = None, rid: str | None = None) -> Rejected:
        return Rejected(where, reason, raw_xml(rec), rid or header_id, fld)

    try:
        oai_id = _header_text(header, "identifier") or ""
        header_id = oai_id[len(OAI_ID_PREFIX) :] if oai_id.startswith(OAI_ID_PREFIX) else None
        datestamp = _header_text(header, "datestamp")
    except _FieldError as exc:
        return reject(exc.reason, exc.field)
    if header is not None and header.get("status") == "deleted":
        return Deleted(header_id or oai_id, datestamp, where)
    if header is None or not oai_id:
        return reject("record without a header identifier", "header")
    meta = rec.find(f"{_O}metadata/{_A}arXivRaw")
    if meta is None:
        return reject("record has no arXivRaw metadata", "metadata")
    arxiv_id: str | None = None
    try:
        arxiv_id = _token(meta, "id")
        if arxiv_id is None:
            return reject("missing <id>", "id")
        if header_id is not None and header_id != arxiv_id:
            return reject(f"header identifier {oai_id!r} does not match <id> {arxiv_id!r}", "id", arxiv_id)
        versions = []
        for v in meta.iterfind(f"{_A}version"):
            label = (v.get("version") or "").strip()
            date = _text(v, "date", "versions")
            if not label or date is None:
                return reject("a <version> needs a version attribute and a <date>", "versions", arxiv_id)
            versions.append(Version(version=label, created=date.strip()))
        fields = {
            "title": _text(meta, "title"),
            "abstract": _text(meta, "abstract"),
            "categories": _text(meta, "categories"),
            "authors": _text(meta, "authors"),
            "submitter": _text(meta, "submitter"),
            "comments": _text(meta, "comments"),
            "journal-ref": _text(meta, "journal-ref"),
            "doi": _token(meta, "doi"),
            "report-no": _text(meta, "report-no"),
            "license": _token(meta, "license"),
        }
    except _FieldError as exc:
        return reject(exc.reason, exc.field, arxiv_id)
    try:
        return ArxivRecord(
            id=arxiv_id,
            title=fields["title"],  # type: ignore[arg-type]  # checked by ArxivRecord
            abstract=fields["abstract"],  # type: ignore[arg-type]
            categories=fields["categories"],  # type: ignore[arg-type]
            versions=tuple(versions),
            authors=fields["authors"] or "",
            submitter=fields["submitter"],
            comments=fields["comments"],
            journal_ref=fields["journal-ref"],
            doi=fields["doi"],
            report_no=fields["report-no"],
            license=fields["license"],
            update_date=datestamp,
            authors_parsed=None,
        )
    except InputError as exc:
        return reject(exc.message, exc.field, arxiv_id)
