"""Harvesting a local OAI-PMH server that serves arXiv's real formats, end to end.

Pith numbers are computed here by hand from the spec (section 3) with hashlib, json
and base64 only, from the titles and abstracts as the recorded pages serve them.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import shutil
import unicodedata
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from oai_server import (
    DROP,
    FIRST,
    FakeArxiv,
    Fault,
    data,
    refused_token,
    retry_after_date,
    retry_after_seconds,
    standard_repository,
    truncated,
)

from pith_pipeline.core.keys import Signer
from pith_pipeline.errors import TerminalError, TransientError, WriteConflictError
from pith_pipeline.ingest import Ingest
from pith_pipeline.runs.windows import window_from_options
from pith_pipeline.signing.local import generate_key, load_signer
from pith_pipeline.sources.oai import Harvester, OAIClient
from pith_pipeline.sources.politeness import Gate, Politeness
from pith_pipeline.storage.local import LocalStore
from pith_pipeline.window import Window

W1 = window_from_options("2024-01-01", None, through="2024-01-03")
W2 = window_from_options("2024-01-10", None, through="2024-01-10")
T2, T3 = "7134892|4", "7134892|7"  # the resumption tokens written in pages 1 and 2
INTERVAL = 0.3
FAST = Politeness(min_interval=0.05, backoff_initial=0.05, max_retries=3, timeout=5.0)
NONEXCLUSIVE = "http://arxiv.org/licenses/nonexclusive-distrib/1.0/"

# id -> (latest version, licence, categories as served, v1 time) from the recorded pages
EXPECTED = {
    "1909.11150": (
        1,
        NONEXCLUSIVE,
        "cs.LG cond-mat.mtrl-sci cs.DC physics.comp-ph stat.ML",
        "2019-09-24T19:40:59Z",
    ),
    "hep-th/9901001": (3, "", "hep-th", "1999-01-01T01:01:10Z"),
    "0704.0248": (4, "", "physics.optics math-ph math.MP", "2007-04-02T17:42:00Z"),
    "2401.00001": (
        1,
        "http://creativecommons.org/licenses/by/4.0/",
        "quant-ph physics.hist-ph quant-ph",
        "2024-01-01T09:00:00Z",
    ),
    "0704.0199": (3, NONEXCLUSIVE, "math.CO math.GR", "2007-04-02T14:10:05Z"),
    "2606.18380": (1, "http://creativecommons.org/publicdomain/zero/1.0/", "hep-th", "2026-06-16T18:27:57Z"),
    "math-ph/0509021": (2, "", "math-ph math.MP", "2005-09-12T04:33:25Z"),
}
# published by the public Pith registry
REGISTRY = {
    "1909.11150": "pith:2019:CDU3BX5RMZUBC43H42ZNV4JXNI",
    "2606.18380": "pith:2026:SG6QNWFIOVZEMA3A2RIEOEVPD6",
}
PAGES = ("listrecords-2024-01-01-p1.xml", "listrecords-2024-01-01-p2.xml", "listrecords-2024-01-01-p3.xml")


# -- the spec, by hand ---------------------------------------------------------------
def served_text(arxiv_id: str) -> tuple[str, str]:
    """Title and abstract of a record as the recorded pages serve them (stdlib XML)."""
    ns = {"o": "http://www.openarchives.org/OAI/2.0/", "a": "http://arxiv.org/OAI/arXivRaw/"}
    for name in PAGES:
        for rec in ET.fromstring(data(name)).iterfind(".//o:record", ns):
            if rec.findtext("o:metadata/a:arXivRaw/a:id", namespaces=ns) == arxiv_id:
                return (
                    rec.findtext("o:metadata/a:arXivRaw/a:title", namespaces=ns) or "",
                    rec.findtext("o:metadata/a:arXivRaw/a:abstract", namespaces=ns) or "",
                )
    raise KeyError(arxiv_id)


def by_hand(arxiv_id: str) -> tuple[str, dict[str, Any]]:
    version, lic, cats, v1 = EXPECTED[arxiv_id]
    title, abstract = served_text(arxiv_id)

    def canon_sha(t: str) -> str:
        return hashlib.sha256(
            " ".join(unicodedata.normalize("NFC", t).lower().split()).encode("utf-8")
        ).hexdigest()

    c = cats.split()
    record = {
        "source": {"id": arxiv_id, "kind": "arxiv", "version": version},
        "metadata": {
            "license": lic,
            "primary_cat": c[0],
            "submitted_at": v1,
            "cross_cats_sorted": sorted(set(c[1:]) - {c[0]}),
            "title_canon_sha256": canon_sha(title),
            "abstract_canon_sha256": canon_sha(abstract),
        },
        "schema_version": "1.0",
    }
    jcs = json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    digest = hashlib.sha256(jcs.encode("utf-8")).digest()
    body = base64.b32encode(digest).decode("ascii").rstrip("=")[:26]
    return f"pith:{v1[:4]}:{body}", record


# -- fixtures --------------------------------------------------------------------------
@pytest.fixture
def server() -> Iterator[FakeArxiv]:
    with FakeArxiv(standard_repository()) as s:
        yield s


@pytest.fixture
def signer(tmp_path: Path) -> Signer:
    priv, _, _ = generate_key(tmp_path / "keys", key_id="test-key")
    return load_signer(priv)


def latest(store: LocalStore, arxiv_id: str) -> dict[str, Any]:
    pointer = json.loads(store.get(f"arxiv/{arxiv_id}.json") or b"null")
    body = pointer["latest"].split(":")[2]
    return json.loads(store.get(f"pith/{body}/bundle.json") or b"null")


def harvest(
    store: LocalStore,
    signer: Signer,
    server: FakeArxiv,
    *windows: Window,
    policy: Politeness = FAST,
    **kw: Any,
) -> Ingest:
    run = Ingest(store, signer)
    run.windows(list(windows) or [W1], oai_url=server.oai_url, politeness=policy, **kw)
    return run


def raw_keys(store: LocalStore) -> list[str]:
    return [k for k in store.list("raw/") if k.endswith(".gz")]


# -- tests -------------------------------------------------------------------------------
def test_window_with_faults_builds_hand_computed_pith_numbers_politely(
    tmp_path: Path, signer: Signer, server: FakeArxiv
) -> None:
    server.fail(
        T2, retry_after_seconds(1), retry_after_date(2), truncated(data("listrecords-2024-01-01-p2.xml"))
    )
    store = LocalStore(tmp_path / "store")
    policy = Politeness(min_interval=INTERVAL, backoff_initial=0.05, max_retries=4, timeout=5)
    run = harvest(store, signer, server, policy=policy)
    r = run.report

    assert r.counts() == {
        "fetched": 8,
        "built": 7,
        "unchanged": 0,
        "superseded": 0,
        "quarantined": 1,
        "deleted": 1,
    }
    assert r.deleted_ids == ["0704.0999"]
    assert r.harvest.malformed_pages == 1 and r.harvest.requests == 6

    for arxiv_id in EXPECTED:
        pith, record = by_hand(arxiv_id)
        bundle = latest(store, arxiv_id)
        assert bundle["pith_number"] == pith, arxiv_id
        assert bundle["canonical_record"] == record, arxiv_id
        if arxiv_id in REGISTRY:
            assert pith == REGISTRY[arxiv_id]
    assert latest(store, "0704.0248")["source"]["version"] == 4
    assert store.get("arxiv/0704.0999.json") is None  # deleted: reported, not built

    # the server saw no two requests closer than the interval, and our User-Agent
    times = [x.at for x in server.log]
    gaps = [b - a for a, b in pairwise(times)]
    assert len(server.log) == 6 and min(gaps) >= INTERVAL, gaps
    assert all(x.user_agent.startswith("pith-pipeline/") for x in server.log)
    page2 = server.requests_for(T2)
    assert len(page2) == 4
    assert page2[1].at - page2[0].at >= 1.0  # Retry-After: 1
    assert page2[2].at - page2[1].at >= 1.0  # Retry-After: <HTTP-date 2 s ahead>

    # raw pages stored gzip, before parsing; the truncated response kept as evidence
    keys = raw_keys(store)
    prefix = "raw/oai/arXivRaw/2024-01-01_2024-01-03/attempt-001/"
    assert keys == [
        prefix + "page-00001.xml.gz",
        prefix + "page-00002.malformed-01.xml.gz",
        prefix + "page-00002.xml.gz",
        prefix + "page-00003.xml.gz",
    ]
    for n, name in enumerate(PAGES, start=1):
        assert gzip.decompress(store.get(f"{prefix}page-{n:05d}.xml.gz") or b"") == data(name)
    cp = json.loads(store.get("raw/oai/arXivRaw/2024-01-01_2024-01-03/checkpoint.json") or b"")
    assert cp["complete"] and cp["pages_done"] == 3 and cp["records"] == 8
    assert cp["deleted"] == 1 and cp["resumption_token"] is None

    # the malformed record: quarantined with its raw XML and reason
    [q] = [json.loads(line) for line in (store.get(f"quarantine/{run.run_id}.jsonl") or b"").splitlines()]
    assert q["record_id"] == "2401.00002" and q["field"] == "versions[v1].created"
    assert "31 Feb 2024" in q["reason"] and "<id>2401.00002</id>" in q["raw"]
    assert q["where"] == prefix + "page-00002.xml.gz record 2"


def _published(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in root.rglob("*")
        # a run's own records: its raw pages, its rejects, and the log's pending marker
        # of a run that has not finished (`tlog.pending`)
        if p.is_file() and not str(p.relative_to(root)).startswith(("raw", "quarantine", "log/pending"))
    }


def test_replay_is_byte_identical_and_offline(
    tmp_path: Path, signer: Signer, server: FakeArxiv, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1767225600")
    a = LocalStore(tmp_path / "a")
    harvest(a, signer, server, W1, W2)
    served = len(server.log)
    b = LocalStore(tmp_path / "b")
    shutil.copytree(tmp_path / "a" / "raw", tmp_path / "b" / "raw")
    run = Ingest(b, signer)
    run.replay()
    assert len(server.log) == served  # no request
    assert run.report.counts()["built"] == 8 and run.report.counts()["superseded"] == 1
    pa, pb = _published(tmp_path / "a"), _published(tmp_path / "b")
    assert pa == pb and len(pa) > 30
    # replaying one window into a third store: that window's bundles only
    c = LocalStore(tmp_path / "c")
    shutil.copytree(tmp_path / "a" / "raw", tmp_path / "c" / "raw")
    Ingest(c, signer).replay(W1)
    assert latest(c, "2401.00001")["source"]["version"] == 1


def test_refused_token_restarts_the_window_without_loss_or_duplicates(
    tmp_path: Path, signer: Signer, server: FakeArxiv
) -> None:
    server.fail(T3, refused_token())
    store = LocalStore(tmp_path / "s")
    r = harvest(store, signer, server).report
    assert r.harvest.refused_tokens == 1 and r.harvest.restarts == 1
    assert r.counts()["built"] == 7  # every paper once
    assert r.counts()["unchanged"] == 5  # pages 1-2 seen again in the restart
    keys = raw_keys(store)
    base = "raw/oai/arXivRaw/2024-01-01_2024-01-03/"
    assert base + "attempt-001/page-00003.refused.xml.gz" in keys
    assert [k for k in keys if "/attempt-002/" in k] == [
        base + f"attempt-002/page-0000{n}.xml.gz" for n in (1, 2, 3)
    ]
    for arxiv_id in EXPECTED:
        body = latest(store, arxiv_id)["pith_number"].split(":")[2]
        created = [k for k in store.list(f"events/{body}/")]
        assert len(created) == 2  # record_created + graph_snapshot, once each
    cp = json.loads(store.get(base + "checkpoint.json") or b"")
    assert cp["attempt"] == 2 and cp["restarts"] == 1 and cp["complete"]


def test_killed_mid_window_resumes_from_checkpoint(tmp_path: Path, signer: Signer, server: FakeArxiv) -> None:
    server.fail(T3, DROP, DROP)  # the connection dies on page 3, past the retry budget
    store = LocalStore(tmp_path / "s")
    policy = Politeness(min_interval=0.05, backoff_initial=0.05, max_retries=1, timeout=5)
    run1 = Ingest(store, signer)
    with pytest.raises(TransientError, match="gave up after 2 tries"):
        run1.windows([W1], oai_url=server.oai_url, politeness=policy)
    assert run1.report.counts()["built"] == 5
    cp = json.loads(store.get("raw/oai/arXivRaw/2024-01-01_2024-01-03/checkpoint.json") or b"")
    assert cp["pages_done"] == 2 and cp["resumption_token"] == T3 and not cp["complete"]

    before = len(server.log)
    run2 = harvest(store, signer, server)
    assert [x.params.get("resumptionToken") for x in server.log[before:]] == [T3]
    assert run2.report.counts()["built"] == 2 and run2.report.counts()["unchanged"] == 0
    assert len({latest(store, i)["pith_number"] for i in EXPECTED}) == len(EXPECTED)
    assert sum(1 for k in store.list("events/")) == 2 * len(EXPECTED)


class DiesAfter(LocalStore):
    """A store whose process 'dies' after N more event writes."""

    def __init__(self, root: Path, n: int) -> None:
        super().__init__(root)
        self.left = n

    def put_once(self, key: str, data: bytes, *, content_type: str = "application/json") -> bool:
        if key.startswith("events/"):
            if self.left == 0:
                raise KeyboardInterrupt("killed")
            self.left -= 1
        return super().put_once(key, data, content_type=content_type)


def test_killed_mid_page_reuses_the_stored_page(tmp_path: Path, signer: Signer, server: FakeArxiv) -> None:
    dying = DiesAfter(tmp_path / "s", n=2 * 3 + 2)  # page 1 (3 records), then one more
    with pytest.raises(KeyboardInterrupt):
        harvest(dying, signer, server)
    assert len(server.requests_for(T2)) == 1
    store = LocalStore(tmp_path / "s")
    r = harvest(store, signer, server).report
    assert len(server.requests_for(T2)) == 1  # page 2 came from the store
    assert r.harvest.pages_from_store == 1
    assert r.counts()["built"] == 3 and r.counts()["unchanged"] == 1
    assert sum(1 for k in store.list("events/")) == 2 * len(EXPECTED)


def test_new_version_supersedes_and_unchanged_is_not_rebuilt(
    tmp_path: Path, signer: Signer, server: FakeArxiv
) -> None:
    store = LocalStore(tmp_path / "s")
    harvest(store, signer, server, W1)
    old = latest(store, "2401.00001")["pith_number"]
    r = harvest(store, signer, server, W2).report
    assert r.counts() == {
        "fetched": 2,
        "built": 1,
        "unchanged": 1,
        "superseded": 1,
        "quarantined": 0,
        "deleted": 0,
    }
    new = latest(store, "2401.00001")
    assert new["pith_number"] != old and new["source"]["version"] == 2
    assert new["canonical_record"]["metadata"]["submitted_at"] == "2024-01-01T09:00:00Z"
    old_bundle = json.loads(store.get(f"pith/{old.split(':')[2]}/bundle.json") or b"")
    [corr] = [e for e in old_bundle["events"] if e["event_type"] == "correction"]
    assert corr["payload"]["pith_number"] == new["pith_number"]
    assert corr["payload"]["arxiv_version"] == "2401.00001v2"


def test_complete_window_costs_no_request_unless_refreshed(
    tmp_path: Path, signer: Signer, server: FakeArxiv
) -> None:
    store = LocalStore(tmp_path / "s")
    harvest(store, signer, server)
    n = len(server.log)
    r = harvest(store, signer, server).report
    assert len(server.log) == n and r.harvest.windows_already_complete == 1
    r = harvest(store, signer, server, refresh=True).report
    assert len(server.log) == n + 3 and r.counts()["unchanged"] == 7
    assert any("/attempt-002/page-00003.xml.gz" in k for k in raw_keys(store))


def test_empty_window_and_oai_errors(tmp_path: Path, signer: Signer, server: FakeArxiv) -> None:
    store = LocalStore(tmp_path / "s")
    r = harvest(store, signer, server, window_from_options("1980-01-01", "1980-01-03")).report
    assert r.counts()["fetched"] == 0
    cp = json.loads(store.get("raw/oai/arXivRaw/1980-01-01_1980-01-02/checkpoint.json") or b"")
    assert cp["complete"] and cp["pages_done"] == 1


def test_harvester_api_and_write_once_raw(tmp_path: Path, server: FakeArxiv) -> None:
    store = LocalStore(tmp_path / "s")
    with OAIClient(server.oai_url, gate=Gate(FAST)) as client:
        h = Harvester(store, client)
        pages = list(h.harvest(W1))
    assert [p.number for p in pages] == [1, 2, 3] and pages[0].complete_list_size == 9
    assert h.stored_pages(W1) == [p.key for p in pages]
    # raw objects are write-once: different bytes under a page key are refused
    with pytest.raises(WriteConflictError):
        store.put_once(pages[0].key, gzip.compress(b"<other/>", mtime=0))
    replayed = list(Harvester(store, None).replay(W1))
    assert [len(p.page.items) for p in replayed] == [len(p.page.items) for p in pages]


def test_politeness_limit_holds_at_the_server_across_windows(
    tmp_path: Path, signer: Signer, server: FakeArxiv
) -> None:
    store = LocalStore(tmp_path / "s")
    harvest(
        store,
        signer,
        server,
        W1,
        W2,
        policy=Politeness(min_interval=INTERVAL, backoff_initial=0.05, timeout=5),
    )
    times = [x.at for x in server.log]
    assert len(times) == 4
    assert min(b - a for a, b in pairwise(times)) >= INTERVAL


def test_redirects_are_not_followed_silently(tmp_path: Path, signer: Signer, server: FakeArxiv) -> None:
    server.fail(FIRST, Fault(301, (("Location", "https://oaipmh.example/oai"),)))
    with pytest.raises(TerminalError, match=r"redirected to https://oaipmh\.example/oai"):
        harvest(LocalStore(tmp_path / "s"), signer, server)
    assert len(server.log) == 1


def test_other_oai_errors_stop_the_window_and_are_kept(
    tmp_path: Path, signer: Signer, server: FakeArxiv
) -> None:
    body = data("error-badResumptionToken.xml").replace(
        b'code="badResumptionToken"', b'code="noSetHierarchy"'
    )
    server.fail(FIRST, Fault(200, (), body))
    store = LocalStore(tmp_path / "s")
    with pytest.raises(TerminalError, match="noSetHierarchy"):
        harvest(store, signer, server)
    assert raw_keys(store) == [
        "raw/oai/arXivRaw/2024-01-01_2024-01-03/attempt-001/page-00001.error-01.xml.gz"
    ]


@pytest.mark.parametrize("status", [404, 410, 204, 299])
def test_a_page_is_taken_only_from_a_200_response(
    tmp_path: Path, signer: Signer, server: FakeArxiv, status: int
) -> None:
    """A 404 whose body happens to be an OAI-PMH page was harvested and signed: the
    status was looked at only when the body did not parse. OAI-PMH answers 200 and puts
    its errors in the body, so only a 200 is a page (429 and 5xx are retried first)."""
    server.fail(FIRST, Fault(status, (("Content-Type", "text/xml"),), data("listrecords-2024-01-01-p1.xml")))
    store = LocalStore(tmp_path / "s")
    with pytest.raises(TerminalError) as err:
        harvest(store, signer, server)
    assert f"HTTP {status}" in str(err.value) and "\n" not in str(err.value)
    assert not [k for k in store.list("pith/")]
    assert raw_keys(store) == [
        "raw/oai/arXivRaw/2024-01-01_2024-01-03/attempt-001/page-00001.malformed-01.xml.gz"
    ]


def test_a_redirect_without_location_names_its_status(
    tmp_path: Path, signer: Signer, server: FakeArxiv
) -> None:
    server.fail(FIRST, Fault(302))
    with pytest.raises(TerminalError) as err:
        harvest(LocalStore(tmp_path / "s"), signer, server)
    assert "HTTP 302" in str(err.value) and "None" not in str(err.value)


def test_a_window_whose_tokens_were_refused_before_can_still_complete(
    tmp_path: Path, signer: Signer, server: FakeArxiv
) -> None:
    """The restart budget is per run: once a window had used up its restarts, every
    later run met the (by then expired) token's refusal and gave up at once, for good."""
    server.fail(T2, *[refused_token()] * 4)  # a bad hour: every restart is refused too
    store = LocalStore(tmp_path / "s")
    with pytest.raises(TransientError, match="refused again"):
        harvest(store, signer, server)
    server.fail(T2, refused_token())  # later: the stored token has expired meanwhile
    r = harvest(store, signer, server).report
    assert r.harvest.restarts == 1 and r.counts()["built"] + r.counts()["unchanged"] == 7
    cp = json.loads(store.get("raw/oai/arXivRaw/2024-01-01_2024-01-03/checkpoint.json") or b"")
    assert cp["complete"] and cp["restarts"] == 4  # the count is kept, as evidence
