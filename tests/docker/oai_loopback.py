"""A loopback arXiv OAI-PMH server to run *inside* the scheduler container.

The live stack test copies this file and a JSON file of recorded arXivRaw records
(`{"YYYY-MM-DD": ["<record>...</record>", ...]}`) into the container and starts it
there, bound to 127.0.0.1: LocalExecutor tasks run in that container, so the stack
harvests over loopback and nothing listens beyond it. `ListRecords` with from/until
(inclusive days) and resumption tokens, four records a page; every request is
appended to a log file with its time so the test can read what the stack asked for.
Standard library only: the image needs nothing extra.

    python3 oai_loopback.py PORT RECORDS.json LOG
"""

from __future__ import annotations

import json
import sys
import time
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl, urlsplit

OAI_NS = "http://www.openarchives.org/OAI/2.0/"
PAGE = 4


def respond(days: dict[str, list[str]], params: dict[str, str]) -> str:
    now = datetime.now(tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    head = (
        f'<?xml version="1.0" encoding="UTF-8"?>\n<OAI-PMH xmlns="{OAI_NS}">'
        f'<responseDate>{now}</responseDate><request verb="ListRecords">http://127.0.0.1/oai</request>'
    )
    if params.get("verb") != "ListRecords":
        return head + '<error code="badVerb">only ListRecords here</error></OAI-PMH>'
    if "resumptionToken" in params:
        from_, until, offset = params["resumptionToken"].split("|")
        start = int(offset)
    else:
        from_, until, start = params.get("from", ""), params.get("until", ""), 0
    records = [r for day in sorted(days) if from_[:10] <= day <= until[:10] for r in days[day]]
    if not records:
        return head + '<error code="noRecordsMatch">empty list</error></OAI-PMH>'
    nxt = start + PAGE
    attrs = f'cursor="{start}" completeListSize="{len(records)}"'
    token = (
        f"<resumptionToken {attrs}>{from_}|{until}|{nxt}</resumptionToken>"
        if nxt < len(records)
        else f"<resumptionToken {attrs}/>"
    )
    return head + "<ListRecords>" + "".join(records[start:nxt]) + token + "</ListRecords></OAI-PMH>"


def main(port: int, records: str, log: str) -> None:
    with open(records, encoding="utf-8") as f:
        days: dict[str, list[str]] = json.load(f)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            params = dict(parse_qsl(urlsplit(self.path).query))
            with open(log, "a", encoding="utf-8") as f:
                f.write(json.dumps({"at": time.time(), "params": params}) + "\n")
            body = respond(days, params).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/xml; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2], sys.argv[3])
