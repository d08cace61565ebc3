"""The bundled sample: real arXiv metadata in `arXivRaw` pages, served as arXiv would.

`--sample` harvests `pith_pipeline/data/arxiv-sample/ListRecords-*.xml` through the
same harvester, parser, raw store and checkpoints as a real window, with one
difference: the HTTP transport is an in-process OAI-PMH responder over those files
instead of a socket to arXiv. arXiv's 3-second limit protects arXiv; a local copy
needs no interval, so the sample runs offline in about a second.

`StaticRepository` is a tiny OAI-PMH responder over a list of `ListRecords` pages
joined by their resumption tokens (and `GetRecord` for any record in them). The
writer half (`list_records_page`) turns snapshot-layout records into arXiv's
`arXivRaw` XML; `python -m pith_pipeline.sources.sample SNAPSHOT.jsonl OUTDIR`
regenerates the bundled pages.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from importlib import resources
from pathlib import Path

import httpx2
from lxml import etree

from pith_pipeline.core.arxiv_record import ArxivRecord
from pith_pipeline.core.timeutil import parse_rfc2822
from pith_pipeline.sources.arxivraw_record import ARXIVRAW_NS, OAI_ID_PREFIX, OAI_NS
from pith_pipeline.sources.jsonl import iter_jsonl

SAMPLE_URL = "http://sample.invalid/oai"
SAMPLE_DIR = "arxiv-sample"
SAMPLE_RAW_ROOT = "raw/sample"
SAMPLE_RESPONSE_DATE = "2026-06-30T00:00:00Z"
XSI = "http://www.w3.org/2001/XMLSchema-instance"
_O = f"{{{OAI_NS}}}"
_A = f"{{{ARXIVRAW_NS}}}"


def sample_pages() -> list[bytes]:
    """The bundled pages, in order."""
    base = resources.files("pith_pipeline") / "data" / SAMPLE_DIR
    names = sorted(
        (p.name for p in base.iterdir() if p.name.startswith("ListRecords-")),
        key=lambda n: int(n.split("-")[1].split(".")[0]),
    )
    return [(base / n).read_bytes() for n in names]


# -- serving -------------------------------------------------------------------
def _envelope(request_attrs: dict[str, str], base_url: str) -> tuple[etree._Element, etree._Element]:
    root = etree.Element(f"{_O}OAI-PMH", nsmap={None: OAI_NS, "xsi": XSI})
    root.set(f"{{{XSI}}}schemaLocation", f"{OAI_NS} http://www.openarchives.org/OAI/2.0/OAI-PMH.xsd")
    etree.SubElement(root, f"{_O}responseDate").text = SAMPLE_RESPONSE_DATE
    req = etree.SubElement(root, f"{_O}request", attrib=request_attrs)
    req.text = base_url
    return root, req


def _serialise(root: etree._Element) -> bytes:
    body: bytes = etree.tostring(root, encoding="UTF-8", xml_declaration=True, pretty_print=True)
    return body


def error_document(code: str, message: str, request_attrs: dict[str, str], base_url: str) -> bytes:
    root, _ = _envelope(request_attrs, base_url)
    err = etree.SubElement(root, f"{_O}error", code=code)
    err.text = message
    return _serialise(root)


class StaticRepository:
    """Answers `ListRecords` and `GetRecord` from fixed pages, like an OAI-PMH server."""

    def __init__(self, pages: Sequence[bytes], base_url: str = SAMPLE_URL) -> None:
        self.pages = list(pages)
        self.base_url = base_url
        self.by_token: dict[str, int] = {}
        self.records: dict[str, etree._Element] = {}
        for i, page in enumerate(self.pages):
            root = etree.fromstring(page)
            token = root.find(f"{_O}ListRecords/{_O}resumptionToken")
            if token is not None and (token.text or "").strip():
                self.by_token[(token.text or "").strip()] = i + 1
            for rec in root.iterfind(f"{_O}ListRecords/{_O}record"):
                ident = (rec.findtext(f"{_O}header/{_O}identifier") or "").strip()
                self.records[ident] = rec

    def respond(self, params: dict[str, str]) -> tuple[int, bytes]:
        verb = params.get("verb", "")
        if verb == "ListRecords":
            token = params.get("resumptionToken")
            if token is not None:
                index = self.by_token.get(token)
                if index is None or index >= len(self.pages):
                    return 200, error_document(
                        "badResumptionToken",
                        "The value of the resumptionToken argument is invalid or expired.",
                        {"verb": verb, "resumptionToken": token},
                        self.base_url,
                    )
                return 200, self.pages[index]
            if params.get("metadataPrefix") != "arXivRaw":
                return 200, error_document(
                    "cannotDisseminateFormat", "only arXivRaw is served here", dict(params), self.base_url
                )
            return 200, self.pages[0]
        if verb == "GetRecord":
            rec = self.records.get(params.get("identifier", ""))
            attrs = dict(params)
            if rec is None:
                return 200, error_document("idDoesNotExist", "No matching identifier", attrs, self.base_url)
            root, _ = _envelope(attrs, self.base_url)
            holder = etree.SubElement(root, f"{_O}GetRecord")
            holder.append(etree.fromstring(etree.tostring(rec)))
            return 200, _serialise(root)
        return 400, error_document("badVerb", f"illegal verb {verb!r}", {}, self.base_url)

    def transport(self) -> httpx2.MockTransport:
        """An in-process HTTP transport answering from these pages."""

        def handle(request: httpx2.Request) -> httpx2.Response:
            status, body = self.respond(dict(request.url.params))
            return httpx2.Response(status, content=body, headers={"Content-Type": "text/xml; charset=utf-8"})

        return httpx2.MockTransport(handle)


# -- writing arXivRaw ----------------------------------------------------------------
def _sub(parent: etree._Element, name: str, text: str | None) -> None:
    if text is not None:
        etree.SubElement(parent, f"{_A}{name}").text = text


def record_element(rec: ArxivRecord, datestamp: str) -> etree._Element:
    """One `<record>` in arXiv's `arXivRaw` layout (element order as arXiv serves it).

    Version sizes and source types are not in the snapshot layout, so they are left out
    rather than invented.
    """
    record = etree.Element(f"{_O}record", nsmap={None: OAI_NS})
    header = etree.SubElement(record, f"{_O}header")
    etree.SubElement(header, f"{_O}identifier").text = f"{OAI_ID_PREFIX}{rec.id}"
    etree.SubElement(header, f"{_O}datestamp").text = datestamp
    metadata = etree.SubElement(record, f"{_O}metadata")
    raw = etree.SubElement(metadata, f"{_A}arXivRaw", nsmap={None: ARXIVRAW_NS, "xsi": XSI})
    raw.set(f"{{{XSI}}}schemaLocation", f"{ARXIVRAW_NS} http://arxiv.org/OAI/arXivRaw.xsd")
    _sub(raw, "id", rec.id)
    _sub(raw, "submitter", rec.submitter)
    for v in rec.versions:
        ver = etree.SubElement(raw, f"{_A}version", version=v.version)
        etree.SubElement(ver, f"{_A}date").text = v.created
    _sub(raw, "title", rec.title)
    _sub(raw, "authors", rec.authors)
    _sub(raw, "categories", rec.categories)
    _sub(raw, "comments", rec.comments)
    _sub(raw, "report-no", rec.report_no)
    _sub(raw, "journal-ref", rec.journal_ref)
    _sub(raw, "doi", rec.doi)
    _sub(raw, "license", rec.license)
    _sub(raw, "abstract", rec.abstract)
    return record


def latest_change(rec: ArxivRecord) -> str:
    """The datestamp we give a record with no `update_date`: its latest version's day."""
    if rec.update_date:
        return rec.update_date
    return max(parse_rfc2822(v.created) for v in rec.versions).strftime("%Y-%m-%d")


def list_records_page(
    records: Sequence[ArxivRecord],
    *,
    token: str | None,
    cursor: int,
    complete_list_size: int,
    request_attrs: dict[str, str],
    base_url: str = SAMPLE_URL,
) -> bytes:
    """A `ListRecords` response page; `token` None marks the last page (empty token)."""
    root, _ = _envelope(request_attrs, base_url)
    body = etree.SubElement(root, f"{_O}ListRecords")
    for rec in records:
        body.append(record_element(rec, latest_change(rec)))
    rt = etree.SubElement(
        body, f"{_O}resumptionToken", cursor=str(cursor), completeListSize=str(complete_list_size)
    )
    rt.text = token
    return _serialise(root)


def build_pages(records: Sequence[ArxivRecord], page_size: int, token_prefix: str = "sample") -> list[bytes]:
    pages = []
    total = len(records)
    for i, start in enumerate(range(0, total, page_size)):
        chunk = records[start : start + page_size]
        last = start + page_size >= total
        token = None if last else f"{token_prefix}|{start + page_size}"
        attrs = (
            {"verb": "ListRecords", "metadataPrefix": "arXivRaw"}
            if i == 0
            else {"verb": "ListRecords", "resumptionToken": f"{token_prefix}|{start}"}
        )
        pages.append(
            list_records_page(chunk, token=token, cursor=start, complete_list_size=total, request_attrs=attrs)
        )
    return pages


def main(argv: list[str] | None = None) -> int:
    """Regenerate the bundled pages: `python -m pith_pipeline.sources.sample IN.jsonl OUTDIR`."""
    args = argv if argv is not None else sys.argv[1:]
    if len(args) != 2:
        print(main.__doc__, file=sys.stderr)
        return 2
    records = [r for r in iter_jsonl(args[0]) if isinstance(r, ArxivRecord)]
    out = Path(args[1])
    out.mkdir(parents=True, exist_ok=True)
    for n, page in enumerate(build_pages(records, page_size=12), start=1):
        (out / f"ListRecords-{n}.xml").write_bytes(page)
    print(f"{len(records)} records -> {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
