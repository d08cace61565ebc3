"""One `arXivRaw` record (`<record>` of an OAI-PMH page) -> the typed arXiv record, a
reject carrying the record's raw XML, or a deletion notice (`sources.arxivraw` reads
the pages around them).

Text is kept exactly as served (TeX, line breaks, leading spaces): the canonical
record hashes its own canonical form, and the snapshot keeps the same text. The
header datestamp is the last *modification* date, which the snapshot calls
`update_date`. A record is never guessed at: a field that cannot be read whole
rejects the record, and the rest of the page is still built.
"""

from __future__ import annotations

from dataclasses import dataclass

from lxml import etree

from pith_pipeline.core.arxiv_record import ArxivRecord, Version
from pith_pipeline.errors import InputError
from pith_pipeline.items import Rejected

OAI_NS = "http://www.openarchives.org/OAI/2.0/"
ARXIVRAW_NS = "http://arxiv.org/OAI/arXivRaw/"
OAI_ID_PREFIX = "oai:arXiv.org:"
_O = f"{{{OAI_NS}}}"
_A = f"{{{ARXIVRAW_NS}}}"


@dataclass(frozen=True, slots=True)
class Deleted:
    """A record arXiv reports as withdrawn from OAI (`<header status="deleted">`)."""

    arxiv_id: str
    datestamp: str | None
    where: str


class FieldError(Exception):
    """A field whose text cannot be taken whole (`field`, `reason`): becomes the
    record's reject reason, or the page's problem for a page-level element."""

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
            raise FieldError(field, f"a processing instruction <?{child.target}?> inside <{field}>")
        elif isinstance(child, etree._Entity):
            raise FieldError(field, f"an entity reference {child.text} inside <{field}>")
        else:
            raise FieldError(field, f"an element <{etree.QName(child).localname}> inside <{field}>")
        parts.append(child.tail or "")
    return "".join(parts)


def _text(parent: etree._Element, name: str, field: str | None = None) -> str | None:
    found = parent.findall(f"{_A}{name}")
    if not found:
        return None
    if len(found) > 1:
        raise FieldError(field or name, f"more than one <{name}>")
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
        raise FieldError("header", f"more than one <{name}> in the header")
    return content(found[0], "header").strip() or None


def raw_xml(el: etree._Element) -> str:
    return str(etree.tostring(el, encoding="unicode"))


def _versions(meta: etree._Element) -> tuple[Version, ...]:
    """The record's `<version>`s, each label as written (a label is a token, and
    `"v1 "` is refused in a snapshot line too) with its `<date>`."""
    versions = []
    for v in meta.iterfind(f"{_A}version"):
        label = v.get("version") or ""
        date = _text(v, "date", "versions")
        if not label or date is None:
            raise FieldError("versions", "a <version> needs a version attribute and a <date>")
        versions.append(Version(version=label, created=date.strip()))
    return tuple(versions)


def _fields(meta: etree._Element) -> dict[str, str | None]:
    """The record's text fields by their element names: tokens stripped, text as served."""
    texts = ("title", "abstract", "categories", "authors", "submitter", "comments", "journal-ref")
    return {
        **{name: _text(meta, name) for name in (*texts, "report-no")},
        "doi": _token(meta, "doi"),
        "license": _token(meta, "license"),
    }


def parse_record(
    rec: etree._Element, where: str, raw: bytes | None = None
) -> ArxivRecord | Rejected | Deleted:
    """One `<record>` element -> record, reject (with its raw XML) or deletion notice.

    `raw`: the record's bytes as served, kept by a reject (base64 when not UTF-8) and
    by the record; without it, lxml's serialisation of the element."""
    header = rec.find(f"{_O}header")
    header_id: str | None = None

    def reject(reason: str, fld: str | None = None, rid: str | None = None) -> Rejected:
        if raw is not None:
            return Rejected.of_bytes(where, reason, raw, rid or header_id, fld)
        return Rejected(where, reason, raw_xml(rec), rid or header_id, fld)

    # a block given twice says two things at once, as a field given twice does
    for path, name in ((f"{_O}header", "header"), (f"{_O}metadata", "metadata")):
        if len(rec.findall(path)) > 1:
            return reject(f"more than one <{name}> in the record", name)
    if len(rec.findall(f"{_O}metadata/{_A}arXivRaw")) > 1:
        return reject("more than one <arXivRaw> in the record's metadata", "metadata")
    try:
        oai_id = _header_text(header, "identifier") or ""
        header_id = oai_id[len(OAI_ID_PREFIX) :] if oai_id.startswith(OAI_ID_PREFIX) else None
        datestamp = _header_text(header, "datestamp")
    except FieldError as exc:
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
        versions = _versions(meta)
        fields = _fields(meta)
    except FieldError as exc:
        return reject(exc.reason, exc.field, arxiv_id)
    try:
        return ArxivRecord(
            id=arxiv_id,
            title=fields["title"],  # type: ignore[arg-type]  # checked by ArxivRecord
            abstract=fields["abstract"],  # type: ignore[arg-type]
            categories=fields["categories"],  # type: ignore[arg-type]
            versions=versions,
            authors=fields["authors"] or "",
            submitter=fields["submitter"],
            comments=fields["comments"],
            journal_ref=fields["journal-ref"],
            doi=fields["doi"],
            report_no=fields["report-no"],
            license=fields["license"],
            update_date=datestamp,
            authors_parsed=None,
            source_where=where,
            source_raw=raw if raw is not None else raw_xml(rec),
        )
    except InputError as exc:
        return reject(exc.message, exc.field, arxiv_id)
