"""Task bodies for the Airflow DAGs (and for `pith-pipeline backfill`).

The DAG files in `dags/` stay thin: they declare schedules, pools, retries and
assets, and call these functions. Everything here is plain Python, testable
without a scheduler, and imports Airflow only where it reads Airflow Variables.

A run owns one *window* of OAI datestamps `[start, end)`. Each step is a
transaction for its window, so a retry or a re-run gives the same result:

1. harvest   raw OAI-PMH pages into `raw/` (write-once, replayable);
2. plan      split the window's input into at most `MAX_CHUNKS` chunks, so the
             mapped build stays under Airflow's `max_map_length`;
3. build     per chunk: build and sign against the published store, keeping every
             write in memory, then stage them as one object
             `staging/<run_id>/chunk-NNNN.jsonl` (replaced atomically);
4. publish   copy staged objects into place: events write-once first, then bundles
             and states, then arXiv pointers. An object already there with the same
             bytes is skipped, so a publish that died half-way completes on retry
             without duplicates;
5. index     bring the Parquet indexes up to date with the window's records;
6. manifest  `runs/<run_id>/manifest.json`, deterministic for the window (no
             wall-clock time), then the staging objects are removed.

Values passed between steps (Airflow XComs) are keys and counts only: never
records, bundles or signer material.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

# Only the standard library and the error classes at import time: DAG files import
# this module while the scheduler parses them. Everything else is imported lazily.
from pith_pipeline.errors import InputError, StorageError, WriteConflictError

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from pith_pipeline.core.arxiv_record import ArxivRecord
    from pith_pipeline.core.keys import Signer
    from pith_pipeline.pipeline import BuildConfig
    from pith_pipeline.sources.jsonl import Item
    from pith_pipeline.storage.base import Store

#: Below Airflow's default `max_map_length` (1024), with room to spare.
MAX_CHUNKS = 1000
#: Snapshot byte ranges are at least this big, so small files are one chunk.
MIN_SNAPSHOT_CHUNK_BYTES = 64 * 1024 * 1024
DEFAULT_OAI_URL = "https://oaipmh.arxiv.org/oai"
DEFAULT_BASE_URL = "https://pith.example.org"  # = pith_pipeline.pipeline.DEFAULT_BASE_URL
DEFAULT_STORE = "./pith-store"
#: The Airflow pool every arXiv request goes through (one slot: arXiv asks for one
#: client connection at a time).
ARXIV_POOL = "arxiv_oai"

#: Setting name -> (environment variable / Airflow Variable name, default).
SETTINGS_ENV: dict[str, tuple[str, str | None]] = {
    "store": ("PITH_STORE", DEFAULT_STORE),
    "signer": ("PITH_SIGNER", None),
    "oai_url": ("PITH_OAI_URL", DEFAULT_OAI_URL),
    "base_url": ("PITH_BASE_URL", DEFAULT_BASE_URL),
    "registry_name": ("PITH_REGISTRY_NAME", "Pith Pipeline"),
    "signer_id": ("PITH_SIGNER_ID", "pith-pipeline"),
    "oai_min_interval": ("PITH_OAI_MIN_INTERVAL", None),
    "lease_wait": ("PITH_LEASE_WAIT", None),
}

#: Seconds a task waits for another writer of the same papers before failing (and
#: being retried by Airflow): long, because waiting is the normal case when
#: `backfill create` runs windows at once.
DEFAULT_TASK_LEASE_WAIT = 1800.0
#: The mapped build of an OAI window runs one task per page group and shard group, so
#: tasks of different shard groups publish at once and tasks of one group take turns.
SHARD_GROUPS = 4


@dataclass(frozen=True, slots=True, kw_only=True)
class Settings:
    """Where to read, write and sign; from PITH_* variables (see `load_settings`)."""

    store: str = DEFAULT_STORE
    signer: str | None = None
    oai_url: str = DEFAULT_OAI_URL
    base_url: str = DEFAULT_BASE_URL
    registry_name: str = "Pith Pipeline"
    signer_id: str = "pith-pipeline"
    #: Seconds between OAI-PMH requests; unset means arXiv's policy (3 s). Lower it
    #: only for a local mirror or test server.
    oai_min_interval: str | None = None
    #: Seconds to wait for a busy writer lease (unset: DEFAULT_TASK_LEASE_WAIT).
    lease_wait: str | None = None

    @property
    def lease_wait_seconds(self) -> float:
        return float(self.lease_wait) if self.lease_wait else DEFAULT_TASK_LEASE_WAIT

    def __repr__(self) -> str:  # the signer spec may name a key file or KMS key: keep it out
        return (
            f"Settings(store={self.store!r}, oai_url={self.oai_url!r}, "
            f"base_url={self.base_url!r}, signer={'set' if self.signer else 'unset'})"
        )

    @property
    def build_config(self) -> BuildConfig:
        from pith_pipeline.pipeline import BuildConfig

        return BuildConfig(base_url=self.base_url, registry_name=self.registry_name, signer_id=self.signer_id)


def load_settings(
    env: Mapping[str, str] | None = None, *, airflow_variables: bool = False, **overrides: str | None
) -> Settings:
    """Settings from Airflow Variables (when asked), then environment, then defaults.

    The names are the same everywhere: `PITH_STORE`, `PITH_SIGNER`, `PITH_OAI_URL`,
    `PITH_BASE_URL`, `PITH_REGISTRY_NAME`, `PITH_SIGNER_ID`. An Airflow Variable of
    that name wins over the worker's environment, so operators can change a
    deployment from the UI.
    """
    env = os.environ if env is None else env
    lookup: Callable[[str], str | None] = lambda _name: None  # noqa: E731
    if airflow_variables:
        from airflow.sdk import Variable

        def lookup(name: str) -> str | None:
            value = Variable.get(name, default=None)
            return value if isinstance(value, str) and value else None

    values: dict[str, Any] = {}
    for field_name, (var, default) in SETTINGS_ENV.items():
        value = overrides.get(field_name) or lookup(var) or env.get(var) or default
        values[field_name] = value
    return Settings(**values)


def default_args(env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Owner, retries with exponential backoff, and no retry for terminal errors.

    `PITH_RETRIES` (3) and `PITH_RETRY_DELAY_SECONDS` (60, doubling up to an hour)
    tune them per deployment. A `TerminalError` (bad configuration, a write-once
    conflict) fails at once: retrying cannot fix it.
    """
    from airflow.sdk import ExceptionRetryPolicy, RetryAction, RetryRule

    env = os.environ if env is None else env
    return {
        "owner": "pith-pipeline",
        "retries": int(env.get("PITH_RETRIES", "3")),
        "retry_delay": timedelta(seconds=float(env.get("PITH_RETRY_DELAY_SECONDS", "60"))),
        "retry_exponential_backoff": 2.0,
        "max_retry_delay": timedelta(hours=1),
        "retry_policy": ExceptionRetryPolicy(
            rules=[
                RetryRule(
                    exception="pith_pipeline.errors.TerminalError",
                    action=RetryAction.FAIL,
                    reason="terminal error: a retry cannot fix it",
                )
            ]
        ),
    }


def _signer(settings: Settings) -> Signer:
    from pith_pipeline.signing.factory import open_signer

    if not settings.signer:
        raise InputError(
            "no signer configured: set PITH_SIGNER (file:PATH or "
            "kms-envelope:...) in the environment or as an Airflow Variable"
        )
    return open_signer(settings.signer)


def _store(settings: Settings) -> Store:
    """The run's store. Tests replace this to inject faults."""
    from pith_pipeline.storage.base import open_store

    return open_store(settings.store)


# ---------------------------------------------------------------- windows
@dataclass(frozen=True, slots=True, order=True)
class Window:
    """OAI datestamps `[start, end)` in whole UTC days."""

    start: date
    end: date

    def __post_init__(self) -> None:
        if self.end <= self.start:
            raise InputError(f"empty window: until {self.end} is not after from {self.start}")

    @property
    def id(self) -> str:
        if self.end - self.start == timedelta(days=1):
            return self.start.isoformat()
        return f"{self.start.isoformat()}--{self.end.isoformat()}"

    @property
    def oai_from(self) -> str:
        """OAI-PMH `from` (inclusive, day granularity)."""
        return self.start.isoformat()

    @property
    def oai_until(self) -> str:
        """OAI-PMH `until` is inclusive: the window's last day."""
        return (self.end - timedelta(days=1)).isoformat()

    def days(self) -> Iterator[Window]:
        d = self.start
        while d < self.end:
            yield Window(d, d + timedelta(days=1))
            d += timedelta(days=1)

    def to_json(self) -> dict[str, str]:
        return {"from": self.start.isoformat(), "until": self.end.isoformat()}

    @classmethod
    def from_json(cls, obj: Mapping[str, str]) -> Window:
        return cls(parse_day(obj["from"], "from"), parse_day(obj["until"], "until"))


def parse_day(value: str | date | datetime, what: str) -> date:
    """`2024-01-31` (or a datetime, taken in UTC) -> a date; errors name the parameter."""
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise InputError(f"{what}: datetime {value} has no time zone")
        return value.astimezone(UTC).date()
    if isinstance(value, date):
        return value
    try:
        return date.fromisoformat(str(value).strip()[:10])
    except ValueError:
        raise InputError(f"{what}: not a date YYYY-MM-DD: {value!r}") from None


def window_from_interval(start: datetime, end: datetime) -> Window:
    """The window an Airflow data interval owns (days; both ends must be midnight UTC)."""
    s, e = start.astimezone(UTC), end.astimezone(UTC)
    for name, dt in (("data_interval_start", s), ("data_interval_end", e)):
        if (dt.hour, dt.minute, dt.second, dt.microsecond) != (0, 0, 0, 0):
            raise InputError(
                f"{name} {dt.isoformat()} is not midnight UTC; OAI-PMH "
                "windows are whole days (use the daily timetable)"
            )
    return Window(s.date(), e.date())


#: arXiv's first day: no window may start before it.
ARXIV_FIRST_DAY = date(1991, 8, 14)


def check_window_dates(window: Window, *, today: date | None = None) -> Window:
    """Refuse windows arXiv cannot have data for, loudly, instead of doing nothing.

    Why: a run that harvested nothing because its day was out of range must not be
    marked success (it would also block that day for `backfill create`).
    """
    today = today or datetime.now(tz=UTC).date()
    if window.start < ARXIV_FIRST_DAY:
        raise InputError(
            f"window {window.id} starts before arXiv's first day ({ARXIV_FIRST_DAY}); choose a later day"
        )
    if window.start > today:
        raise InputError(f"window {window.id} starts after today ({today}); nothing to harvest yet")
    return window


def window_for_run(
    data_interval_start: datetime | None,
    data_interval_end: datetime | None,
    *,
    logical_date: datetime | None = None,
    run_type: str | None = None,
    conf: Mapping[str, Any] | None = None,
    today: date | None = None,
) -> Window:
    """The day a `pith_ingest` run owns, for scheduled, backfill and manual runs alike.

    - `conf {"day": "YYYY-MM-DD"}` names it outright (any run type);
    - a manual run with a logical date owns that date's day: in Airflow 3 a manual
      run's data interval comes from the trigger time, so
      `airflow dags trigger pith_ingest --logical-date 2019-09-26` would otherwise
      harvest yesterday instead;
    - otherwise the data interval, which must be whole days.
    Days before arXiv's first or after today fail loudly.
    """
    conf = conf or {}
    if conf.get("day") is not None:
        text = str(conf["day"])
        try:
            day = date.fromisoformat(text)
        except ValueError:
            raise InputError(f"conf day {text!r}: expected YYYY-MM-DD") from None
        window = Window(day, day + timedelta(days=1))
    elif run_type == "manual" and logical_date is not None:
        day = logical_date.astimezone(UTC).date()
        window = Window(day, day + timedelta(days=1))
    else:
        if data_interval_start is None or data_interval_end is None:
            raise InputError('this run has no data interval; trigger it with conf {"day": "YYYY-MM-DD"}')
        window = window_from_interval(data_interval_start, data_interval_end)
    return check_window_dates(window, today=today)


def mapped_results(results: Any) -> list[Any]:
    """The results of a mapped task, read by index up to its length.

    Why not `list(results)`: iterating Airflow's lazy XCom sequence fetches one index
    past the end and logs an `XCom not found` error on every run.
    """
    return [results[i] for i in range(len(results))]


def split_windows(window: Window, max_windows: int = MAX_CHUNKS) -> list[Window]:
    """Day windows, merged into longer ones when there would be more than `max_windows`."""
    n_days = (window.end - window.start).days
    step = max(1, math.ceil(n_days / max_windows))
    out = []
    d = window.start
    while d < window.end:
        out.append(Window(d, min(window.end, d + timedelta(days=step))))
        d += timedelta(days=step)
    return out


def run_id_for(kind: str, window: Window) -> str:
    """Deterministic per window, so a re-run finds (and rewrites identically) its files."""
    return f"{kind}-{window.id}"


# ---------------------------------------------------------------- harvest
_ATTEMPT = re.compile(r"/attempt-(\d+)/page-\d+\.xml\.gz$")


def harvest_window(settings: Settings, window: Window, *, store: Store | None = None) -> dict[str, Any]:
    """Harvest the window's raw pages (resuming from the harvester's checkpoint).

    A window harvested before costs no request. Returns the run id, the window, the
    keys of the pages to build from (the latest complete attempt: a refused
    resumption token restarts a window, and the restart lists every record again)
    and counts: no records.
    """
    from pith_pipeline.sources.oai import Harvester, OAIClient
    from pith_pipeline.sources.oai import Window as OAIWindow

    store = store or _store(settings)
    oai_window = OAIWindow(from_=window.oai_from, until=window.oai_until)
    gate = None
    if settings.oai_min_interval:
        from pith_pipeline.sources.politeness import Gate, Politeness

        gate = Gate(Politeness(min_interval=float(settings.oai_min_interval)))
    with OAIClient(settings.oai_url, gate=gate) as client:
        harvester = Harvester(store, client)
        for _page in harvester.harvest(oai_window):
            pass  # stored write-once as they arrive; the build reads them back
        checkpoint = harvester.load_checkpoint(oai_window)
    if checkpoint is None or not checkpoint.complete:
        raise StorageError(
            f"harvest of {window.id} ended without a complete checkpoint in {store.url}", transient=True
        )
    pages = [
        k
        for k in harvester.stored_pages(oai_window)
        if (m := _ATTEMPT.search(k)) and int(m.group(1)) == checkpoint.attempt
    ]
    return {
        "run_id": run_id_for("ingest", window),
        "window": window.to_json(),
        "source": "oai",
        "pages": pages,
        "records": checkpoint.records,
        "deleted": checkpoint.deleted,
        "requests": harvester.stats.requests,
    }


# ---------------------------------------------------------------- chunks
def chunk_list(items: list[Any], max_chunks: int = MAX_CHUNKS) -> list[list[Any]]:
    """Split into at most `max_chunks` contiguous, non-empty, near-equal parts."""
    if not items:
        return []
    size = max(1, math.ceil(len(items) / max_chunks))
    return [items[i : i + size] for i in range(0, len(items), size)]


def plan_page_chunks(
    page_keys: list[str], max_chunks: int = MAX_CHUNKS, groups: int = SHARD_GROUPS
) -> list[dict[str, Any]]:
    """Chunks of raw OAI pages for the mapped build (each a small JSON-able dict).

    Each page group is split into `groups` shard groups: a task publishes only the
    papers of its shards, under their writer leases, so tasks of different groups run
    at once and never write the same paper. Rejected records are counted and
    quarantined by the group that holds shard 0 only.
    """
    from pith_pipeline.storage.lease import SHARDS

    parts = chunk_list(sorted(page_keys), max(1, max_chunks // max(1, groups))) or [[]]
    groups = max(1, min(groups, SHARDS))
    bounds = [(g * SHARDS // groups, (g + 1) * SHARDS // groups - 1) for g in range(groups)]
    return [  # an empty window still gets its (empty) manifest
        {
            "index": i * groups + g,
            "kind": "oai",
            "pages": part,
            "shards": f"{lo}-{hi}",
            "rejects": g == 0,
        }
        for i, part in enumerate(parts)
        for g, (lo, hi) in enumerate(bounds)
    ]


def plan_snapshot_chunks(
    path: str | Path, window: Window, max_chunks: int = MAX_CHUNKS, min_bytes: int | None = None
) -> list[dict[str, Any]]:
    """Byte ranges of a snapshot file, each starting on a line (gzip files: one chunk).

    Every worker reads only its range, so a multi-GB snapshot is read once in total.
    """
    p = Path(path)
    if not p.is_file():
        raise InputError(f"snapshot file not found: {p}")
    size = p.stat().st_size
    base = {"kind": "snapshot", "path": str(p), "window": window.to_json()}
    with p.open("rb") as fh:
        gz = fh.read(2) == b"\x1f\x8b"
    if gz or size == 0:
        return [{**base, "index": 0, "start": 0, "end": None}]
    if min_bytes is None:
        min_bytes = int(os.environ.get("PITH_SNAPSHOT_CHUNK_BYTES", MIN_SNAPSHOT_CHUNK_BYTES))
    step = max(1, min_bytes, math.ceil(size / max_chunks))
    chunks = []
    for i, start in enumerate(range(0, size, step)):
        end = min(size, start + step)
        chunks.append({**base, "index": i, "start": start, "end": end})
    return chunks


def record_datestamp(rec: ArxivRecord) -> date:
    """The snapshot's `update_date` (≈ OAI datestamp), else the latest version's date."""
    if rec.update_date:
        try:
            return date.fromisoformat(rec.update_date[:10])
        except ValueError:
            pass
    from pith_pipeline.core.timeutil import parse_rfc2822

    latest = max(rec.versions, key=lambda v: v.number)
    return parse_rfc2822(latest.created).date()


def _iter_snapshot_range(chunk: Mapping[str, Any]) -> Iterator[Item]:
    """Lines that *start* in [start, end): each line belongs to exactly one chunk."""
    import gzip

    from pith_pipeline.core.arxiv_record import ArxivRecord
    from pith_pipeline.sources.jsonl import parse_line

    path = Path(chunk["path"])
    window = Window.from_json(chunk["window"])
    start, end = int(chunk["start"]), chunk["end"]
    with path.open("rb") as raw:
        magic = raw.read(2)
        raw.seek(0)
        fh: Any = gzip.GzipFile(fileobj=raw) if magic == b"\x1f\x8b" else raw
        pos = 0
        if start > 0:
            fh.seek(start - 1)
            fh.readline()  # finish the line that started before us
            pos = fh.tell()
        line_no = None  # byte offsets name lines; numbering would need a full scan
        while end is None or pos < end:
            line = fh.readline()
            if not line:
                break
            where = f"{path.name}@{pos}" if line_no is None else f"{path.name}:{line_no}"
            pos += len(line)
            if not line.strip():
                continue
            item = parse_line(line, where)
            if isinstance(item, ArxivRecord) and not (window.start <= record_datestamp(item) < window.end):
                continue
            yield item


def iter_chunk_items(store: Store, chunk: Mapping[str, Any]) -> Iterator[Item]:
    """The records (and rejects) of one planned chunk."""
    if chunk["kind"] == "snapshot":
        yield from _iter_snapshot_range(chunk)
    elif chunk["kind"] == "oai":
        from pith_pipeline.sources.arxivraw import parse_page
        from pith_pipeline.sources.oai import gunzip

        for key in chunk["pages"]:
            data = store.get(key)
            if data is None:
                raise StorageError(
                    f"raw page {key} is missing from {store.url}; re-run the harvest task for this window"
                )
            yield from parse_page(gunzip(data), key).items
    else:
        raise InputError(f"unknown chunk kind {chunk['kind']!r}")


# ---------------------------------------------------------------- staging
class StagingStore:
    """Reads through to the published store; keeps every write in memory.

    Building against it sees exactly what a direct publish would, yet publishes
    nothing: the writes become one staged object that `publish` replays.
    """

    def __init__(self, base: Store) -> None:
        self.base = base
        self.url = base.url
        self.writes: dict[str, tuple[bytes, bool]] = {}

    def __repr__(self) -> str:
        return f"StagingStore({self.base!r}, {len(self.writes)} writes)"

    def get(self, key: str) -> bytes | None:
        if key in self.writes:
            return self.writes[key][0]
        return self.base.get(key)

    def exists(self, key: str) -> bool:
        return key in self.writes or self.base.exists(key)

    def put(self, key: str, data: bytes, *, content_type: str = "application/json") -> None:
        once = self.writes.get(key, (b"", False))[1]
        self.writes[key] = (data, once)

    def put_once(self, key: str, data: bytes, *, content_type: str = "application/json") -> bool:
        existing = self.get(key)
        if existing is not None:
            if existing == data:
                return False
            raise WriteConflictError(
                f"{key} already exists in {self.url} with different "
                "content; write-once objects are never overwritten"
            )
        self.writes[key] = (data, True)
        return True

    def list(self, prefix: str) -> Iterator[str]:
        keys = set(self.base.list(prefix)) | {k for k in self.writes if k.startswith(prefix)}
        return iter(sorted(keys))

    def delete(self, key: str) -> None:
        raise StorageError("a build never deletes; staging is append-only")

    def get_tagged(self, key: str) -> tuple[bytes, str] | None:
        data = self.get(key)
        return None if data is None else (data, sha256_hex(data))

    def put_if_match(
        self, key: str, data: bytes, tag: str | None, *, content_type: str = "application/json"
    ) -> bool:
        current = self.get_tagged(key)
        if (current[1] if current else None) != tag:
            return False
        self.put(key, data)
        return True


def staging_prefix(run_id: str) -> str:
    return f"staging/{run_id}/"


def staged_key(run_id: str, index: int) -> str:
    return f"{staging_prefix(run_id)}chunk-{index:04d}.jsonl"


def _publish_rank(key: str) -> int:
    """Events first, then bundles and states, then pointers: readers never see a
    pointer to a bundle that is not there, or a bundle whose events are missing."""
    if key.startswith("events/"):
        return 0
    if key.startswith(("pith/", ".well-known/")):
        return 1
    if key.startswith("arxiv/"):
        return 3
    return 2


def build_chunk(
    settings: Settings,
    run_id: str,
    chunk: Mapping[str, Any],
    *,
    signer: Signer | None = None,
    store: Store | None = None,
) -> dict[str, Any]:
    """Build, sign and publish one chunk, holding the writer leases of its shards.

    Why publish here rather than stage for a later task: the decision "this paper is
    new" is only sound while nobody else can write the paper, so deciding and writing
    happen under one lease (a concurrent window of `backfill create` waits its turn).
    The staged object now holds only the chunk's counts, the objects it wrote and its
    quarantine entries; `publish` merges the quarantine, `index` and `manifest` read
    the counts. Returns `{"staged": key, "records": n, "built": n, ...}`.
    """
    from pith_pipeline.core.canonical_json import dumps_compact
    from pith_pipeline.pipeline import Publisher
    from pith_pipeline.sources.jsonl import Rejected
    from pith_pipeline.storage.lease import parse_shards, writer_lease

    base = store or _store(settings)
    signer = signer or _signer(settings)
    shards = parse_shards(str(chunk["shards"])) if chunk.get("shards") else None
    rejects = bool(chunk.get("rejects", True))
    pub = Publisher(base, signer, settings.build_config, run_id=run_id, shards=shards)
    with writer_lease(
        base,
        command=f"airflow build chunk {int(chunk['index'])}",
        run_id=run_id,
        shards=shards,
        wait=settings.lease_wait_seconds,
        on_wait=log.info,
    ) as lease:
        pub.lease = lease
        pub.publish_key_document()
        for item in iter_chunk_items(base, chunk):
            if isinstance(item, Rejected) and not rejects:
                continue  # another shard group's task quarantines it
            entry = pub.publish_item(item)
            if entry is not None:
                pub.quarantine.append(entry)
    identities = sorted(pub.summary.seen)
    counts = {"records": len(identities), **pub.summary.counts()}
    header: dict[str, Any] = {
        "chunk": int(chunk["index"]),
        "run_id": run_id,
        "counts": counts,
        "identities": identities,
        "built": sorted(pub.summary.pith_numbers),
        "quarantine": pub.quarantine,
        "problems": pub.summary.problems,
        "written": dict(sorted(pub.summary.written.items())),
    }
    key = staged_key(run_id, int(chunk["index"]))
    base.put(key, dumps_compact(header) + b"\n", content_type="application/x-ndjson")
    return {"staged": key, "objects": len(header["written"]), **counts}


def _read_staged(store: Store, key: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    from pith_pipeline.core.canonical_json import loads

    data = store.get(key)
    if data is None:
        raise StorageError(
            f"staged chunk {key} is missing from {store.url}; re-run the build task for this window"
        )
    lines = [loads(line) for line in data.splitlines() if line.strip()]
    return lines[0], lines[1:]


def quarantine_key(run_id: str) -> str:
    return f"quarantine/{run_id}.jsonl"


def publish_staged(
    settings: Settings, staged_keys: Iterable[str], *, store: Store | None = None
) -> dict[str, int]:
    """Copy staged objects into place; safe to repeat after any failure.

    Write-once objects (events) that are there already count as done; derived
    objects are replaced only when their bytes differ. Returns counts.
    """
    from pith_pipeline.core.canonical_json import dumps_compact

    store = store or _store(settings)
    objects: dict[str, dict[str, Any]] = {}
    rejects: dict[str, list[dict[str, Any]]] = {}
    for key in sorted(set(staged_keys)):
        header, staged = _read_staged(store, key)
        rejects.setdefault(header["run_id"], []).extend(header.get("quarantine", []))
        for obj in staged:
            objects.setdefault(obj["key"], obj)  # same key: same bytes (pointer key docs)
    written = skipped = 0
    for obj in sorted(objects.values(), key=lambda o: (_publish_rank(o["key"]), o["key"])):
        data = obj["data"].encode("utf-8")
        if obj["once"]:
            if store.put_once(obj["key"], data):
                written += 1
            else:
                skipped += 1
        elif store.get(obj["key"]) == data:
            skipped += 1
        else:
            store.put(obj["key"], data)
            written += 1
    quarantined = 0
    for run_id, entries in sorted(rejects.items()):
        if not entries:
            continue
        quarantined += len(entries)
        body = b"".join(dumps_compact(e) + b"\n" for e in entries)
        if store.get(quarantine_key(run_id)) != body:
            store.put(quarantine_key(run_id), body, content_type="application/x-ndjson")
            written += 1
    return {"objects": len(objects), "written": written, "already_there": skipped, "quarantined": quarantined}


def window_summary(store: Store, run_id: str, staged_keys: Iterable[str]) -> Any:
    """The window's `RunSummary`, rebuilt from its staged chunks (same on every retry)."""
    from pith_pipeline.pipeline import RunSummary

    summary = RunSummary(run_id)
    for key in sorted(set(staged_keys)):
        header, staged = _read_staged(store, key)
        c = header["counts"]
        # a record outside a task's shards is counted by the task that owns it
        summary.fetched += c["fetched"] - c.get("skipped", 0)
        summary.built += c["built"]
        summary.unchanged += c["unchanged"]
        summary.superseded += c["superseded"]
        summary.quarantined += c["quarantined"]
        summary.failed += c.get("failed", 0)
        summary.problems.extend(str(p) for p in header.get("problems", []))
        summary.pith_numbers.extend(header["built"])
        summary.seen.extend(header["identities"])
        summary.written.update(header.get("written", {}))
        for obj in staged:  # staged objects of a run started before the upgrade
            summary.written[obj["key"]] = sha256_hex(obj["data"].encode("utf-8"))
        if header.get("quarantine"):
            from pith_pipeline.core.canonical_json import dumps_compact

            summary.written[quarantine_key(run_id)] = sha256_hex(
                b"".join(dumps_compact(e) + b"\n" for e in header["quarantine"])
            )
    summary.pith_numbers.sort()
    summary.seen = sorted(set(summary.seen))
    return summary


def index_window(
    settings: Settings, run_id: str, staged_keys: Iterable[str], *, store: Store | None = None
) -> dict[str, Any]:
    """Update the Parquet indexes for every record of the window (idempotent)."""
    from pith_pipeline.index.runs import touched_subjects
    from pith_pipeline.index.writer import update_indexes
    from pith_pipeline.storage.lease import writer_lease

    store = store or _store(settings)
    summary = window_summary(store, run_id, staged_keys)
    with writer_lease(
        store,
        command="airflow index",
        run_id=run_id,
        papers=False,
        index=True,
        wait=settings.lease_wait_seconds,
        on_wait=log.info,
    ):
        update = update_indexes(store, touched_subjects(summary), run_id=run_id)
    return {
        "versions": dict(update.versions),
        "rows": dict(update.rows),
        "subjects_checked": update.subjects_checked,
        "subjects_changed": update.subjects_changed,
        "commits": dict(update.commits),
    }


def finish_window(
    settings: Settings,
    harvested: Mapping[str, Any],
    staged_keys: Iterable[str],
    indexed: Mapping[str, Any],
    published: Mapping[str, Any],
    *,
    store: Store | None = None,
) -> dict[str, Any]:
    """Write the window's run manifest, then remove its staging objects.

    The manifest `runs/<run_id>/manifest.json` is write-once. Re-running a complete
    window that published nothing new leaves it as it is; a re-run that did
    publish something (a repair) gets its own `runs/<run_id>-rerun-N/manifest.json`.
    """
    from pith_pipeline.errors import WriteConflictError as Conflict
    from pith_pipeline.index.runs import run_manifest_key, write_manifest
    from pith_pipeline.index.writer import IndexUpdate

    store = store or _store(settings)
    staged_keys = sorted(set(staged_keys))
    run_id = str(harvested["run_id"])
    summary = window_summary(store, run_id, staged_keys)
    update = IndexUpdate(
        versions={str(k): int(v) for k, v in dict(indexed["versions"]).items()},
        subjects_checked=int(indexed["subjects_checked"]),
        subjects_changed=int(indexed["subjects_changed"]),
        rows=dict(indexed["rows"]),
        commits={str(k): [int(v) for v in vs] for k, vs in dict(indexed["commits"]).items()},
    )
    window = {
        **harvested["window"],
        "source": harvested["source"],
        "pages": list(harvested.get("pages", [])),
        **({"snapshot": harvested["snapshot"]} if "snapshot" in harvested else {}),
    }
    key = run_manifest_key(run_id)
    changed = int(published.get("written", 0)) or update.subjects_changed
    status = "written"
    try:
        write_manifest(store, summary, window=window, index=update)
    except Conflict:
        if not changed:
            status = "unchanged"  # a complete window, run again: nothing new to record
        else:
            n = 2
            while store.exists(run_manifest_key(f"{run_id}-rerun-{n}")):
                n += 1
            summary.run_id = f"{run_id}-rerun-{n}"
            key = write_manifest(store, summary, window=window, index=update)
            status = "rerun"
    for staged in store.list(staging_prefix(run_id)):
        store.delete(staged)
    if summary.failed:
        from pith_pipeline.errors import IncompleteRunError

        for problem in summary.problems:
            log.error("not published: %s", problem)
        raise IncompleteRunError(
            f"run {summary.run_id}: {summary.failed} papers were not published because stored objects "
            f"failed their checks (logged above; run manifest {key}); inspect them with "
            "`pith-pipeline verify STORE`"
        )
    return {"manifest": key, "status": status, **summary.counts()}


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


#: The Parquet index tables, published as Airflow Assets by the tasks that change them.
INDEX_ASSET_NAMES = ("pith_index_records", "pith_index_events", "pith_index_aliases")


# ---------------------------------------------------------------- backfills
SOURCES = ("oai", "snapshot")


def chunk_checkpoint_key(run_id: str, index: int) -> str:
    return f"runs/backfill/{run_id}/chunk-{index:04d}.json"


def plan_backfill(
    settings: Settings,
    start: str | date,
    until: str | date,
    source: str,
    snapshot_path: str | None = None,
    *,
    store: Store | None = None,
    max_windows: int = MAX_CHUNKS,
) -> list[dict[str, Any]]:
    """The windows a backfill still has to run, each `{"run_id", "window", "source"}`.

    OAI: one window per day (longer when there would be more than `max_windows`),
    named like the daily runs (`ingest-<day>`), so a day the daily DAG already did is
    skipped. Snapshot: one window over the whole range. A window whose run
    manifest exists is complete and left out: that is what makes a backfill resumable.
    """
    from pith_pipeline.index.runs import run_manifest_key

    if source not in SOURCES:
        raise InputError(f"source must be one of {', '.join(SOURCES)}, not {source!r}")
    whole = Window(parse_day(start, "from"), parse_day(until, "until"))
    store = store or _store(settings)
    if source == "snapshot":
        if not snapshot_path:
            raise InputError(
                "source 'snapshot' needs a snapshot path "
                "(arXiv's arxiv-metadata-oai-snapshot.json, or .jsonl[.gz])"
            )
        if not Path(snapshot_path).is_file():
            raise InputError(f"snapshot file not found: {snapshot_path}")
        windows, kind = [whole], "snapshot"
    else:
        windows, kind = split_windows(whole, max_windows), "ingest"
    out = []
    for w in windows:
        run_id = run_id_for(kind, w)
        if store.exists(run_manifest_key(run_id)):
            continue
        req: dict[str, Any] = {"run_id": run_id, "window": w.to_json(), "source": source}
        if source == "snapshot":
            req["snapshot"] = str(snapshot_path)
        out.append(req)
    return out


def harvest_for(
    settings: Settings, request: Mapping[str, Any], *, store: Store | None = None
) -> dict[str, Any]:
    """A planned window's input: OAI pages harvested into raw/, or snapshot byte ranges."""
    window = Window.from_json(request["window"])
    if request["source"] == "oai":
        return harvest_window(settings, window, store=store)
    chunks = plan_snapshot_chunks(request["snapshot"], window)
    return {
        "run_id": request["run_id"],
        "window": window.to_json(),
        "source": "snapshot",
        "snapshot": request["snapshot"],
        "pages": [],
        "chunks": chunks,
    }


def plan_chunks_for(harvested: list[Mapping[str, Any]], max_chunks: int = MAX_CHUNKS) -> list[dict[str, Any]]:
    """`{"run_id", "chunk"}` for every chunk of every window, at most `max_chunks`.

    OAI windows get one chunk per page group; when that would be too many, one
    chunk per window (there are at most `max_chunks` windows).
    """
    per_window: list[tuple[str, list[dict[str, Any]]]] = []
    for h in harvested:
        if h["source"] == "snapshot":
            per_window.append((h["run_id"], list(h["chunks"])))
        else:
            per_window.append((h["run_id"], plan_page_chunks(h["pages"], max_chunks)))
    if sum(len(c) for _, c in per_window) > max_chunks:
        per_window = [
            (run_id, plan_page_chunks(h["pages"], 1)) if h["source"] == "oai" else (run_id, chunks)
            for h, (run_id, chunks) in zip(harvested, per_window, strict=True)
        ]
    items = [{"run_id": run_id, "chunk": c} for run_id, chunks in per_window for c in chunks]
    if len(items) > max_chunks:
        raise InputError(
            f"{len(items)} chunks exceed max_map_length headroom ({max_chunks}); "
            "backfill a shorter range at a time"
        )
    return items


def staged_by_run(built: Iterable[Mapping[str, Any]]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for b in built:
        run_id = str(b["staged"]).split("/")[1]
        out.setdefault(run_id, []).append(str(b["staged"]))
    return out


def finish_windows(
    settings: Settings,
    harvested: list[Mapping[str, Any]],
    built: list[Mapping[str, Any]],
    published: Mapping[str, Any],
    *,
    store: Store | None = None,
) -> list[dict[str, Any]]:
    """Index, then write the run manifest, for each window of a backfill."""
    store = store or _store(settings)
    staged = staged_by_run(built)
    results = []
    for h in harvested:
        keys = staged.get(str(h["run_id"]), [])
        indexed = index_window(settings, str(h["run_id"]), keys, store=store)
        results.append(finish_window(settings, h, keys, indexed, published, store=store))
    return results


# ---------------------------------------------------------------- maintenance
def compact_indexes(
    settings: Settings, *, store: Store | None = None, retention_hours: float | None = None
) -> dict[str, Any]:
    """Compact each index table; vacuum files no version younger than `retention_hours` needs."""
    from pith_pipeline.index.writer import DEFAULT_RETENTION_HOURS, compact
    from pith_pipeline.storage.lease import writer_lease

    store = store or _store(settings)
    hours = DEFAULT_RETENTION_HOURS if retention_hours is None else retention_hours
    with writer_lease(
        store, command="airflow compact", papers=False, index=True, wait=settings.lease_wait_seconds
    ):
        update = compact(store, retention_hours=hours)
    return {
        "versions": dict(update.versions),
        "files_compacted": update.files_compacted,
        "rows": dict(update.rows),
        "deleted": len(update.deleted),
    }


def rebuild_from_events(
    settings: Settings, *, bundles: bool, indexes: bool, store: Store | None = None
) -> dict[str, Any]:
    """Re-derive bundles from the event store (when `bundles`), then the indexes."""
    from pith_pipeline.errors import IncompleteRunError
    from pith_pipeline.index.writer import reindex
    from pith_pipeline.pipeline import rebuild
    from pith_pipeline.storage.lease import writer_lease

    store = store or _store(settings)
    out: dict[str, Any] = {"bundles_rebuilt": 0, "reindexed": False}
    failures: list[str] = []
    with writer_lease(
        store, command="airflow rebuild", papers=bundles, index=True, wait=settings.lease_wait_seconds
    ) as lease:
        if bundles:
            out["bundles_rebuilt"] = sum(
                1
                for _ in rebuild(
                    store, _signer(settings), settings.build_config, lease=lease, failures=failures
                )
            )
        if bundles or indexes:
            update = reindex(store)
            out.update(reindexed=True, versions=dict(update.versions), rows=dict(update.rows))
    if failures:
        for problem in failures:
            log.error("not rebuilt: %s", problem)
        raise IncompleteRunError(f"{len(failures)} papers not rebuilt: stored events failed their checks")
    return out


def published_bundle_keys(store: Store) -> list[str]:
    return [k for k in store.list("pith/") if k.endswith("/bundle.json") and k.count("/") == 2]


def verify_sample(settings: Settings, *, size: int, seed: str, store: Store | None = None) -> dict[str, Any]:
    """Verify a random sample of published bundles; raise naming every mismatch.

    Each sampled bundle must pass every check of the spec against the registry's
    key document, its `.well-known` copy must be byte-identical, and `state.json`
    must equal the bundle's state.
    """
    import random

    from pith_pipeline.core.bundle import PUBLIC_KEY_FILE, bundle_paths
    from pith_pipeline.core.canonical_json import loads
    from pith_pipeline.core.keys import PublicKey
    from pith_pipeline.core.verify import verify_bundle
    from pith_pipeline.errors import VerificationError

    store = store or _store(settings)
    keys = published_bundle_keys(store)
    sample = sorted(random.Random(seed).sample(keys, min(max(size, 0), len(keys))))
    trusted = None
    doc_raw = store.get(PUBLIC_KEY_FILE)
    if doc_raw is not None:
        doc = loads(doc_raw)
        trusted = [PublicKey.from_json(k) for k in doc.get("keys", [doc])]
    failures: list[str] = []
    for key in sample:
        body = key.split("/")[1]
        data = store.get(key)
        if data is None:
            failures.append(f"{key}: listed but unreadable")
            continue
        try:
            bundle = loads(data)
        except ValueError as exc:
            failures.append(f"{key}: not JSON ({exc})")
            continue
        report = verify_bundle(bundle, source=key, trusted_keys=trusted)
        failures.extend(f"{key}: {c.name}: {c.detail}" for c in report.failed)
        _bkey, skey, wkey = bundle_paths(body)
        if store.get(wkey) != data:
            failures.append(f"{wkey}: differs from {key}")
        state = store.get(skey)
        if state is None or not isinstance(bundle, dict) or loads(state) != bundle.get("state"):
            failures.append(f"{skey}: differs from the state in {key}")
    if failures:
        shown = "\n  ".join(failures[:50])
        more = f"\n  ... and {len(failures) - 50} more" if len(failures) > 50 else ""
        raise VerificationError(
            f"{len(failures)} mismatches in {len(sample)} sampled bundles of {store.url}:\n  {shown}{more}"
        )
    return {"bundles": len(keys), "checked": len(sample), "failures": 0}
