"""`pith-pipeline report`: one static HTML page of what a store holds, readable offline.

Every figure is drawn by matplotlib as SVG and inlined in the page, with its CSS; the
page fetches nothing (no script, no font, no CDN), so it opens from a file, an e-mail
or an S3 console alike. Each figure's numbers are also in the page as a table whose
rows carry `data-key` and `data-count`, so the page can be read (and checked) without
reading the pictures.

Sources, read the way `pith-pipeline query` and `status` read them:

- the index tables through `index.query.run_query` (DuckDB over the Delta tables),
  so every count agrees with `query`. A *paper* is the latest version of an arXiv id,
  a `records` row with `superseded_by IS NULL`; figures that count versions say so;
- the run manifests `runs/<run_id>/manifest.json` (their `run_id`, `finished_at`
  and `counts`);
- the quarantine files `quarantine/<run_id>.jsonl`, one JSON entry a line with its
  `reason` (`items.Rejected.to_json`), read a piece at a time (an entry keeps its raw
  input, megabytes).
"""

from __future__ import annotations

import html
import io
import json
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pith_pipeline.core.canonical_json import loads_stored
from pith_pipeline.core.layout import QUARANTINE, RUNS, is_run_manifest
from pith_pipeline.errors import StorageError, TerminalError
from pith_pipeline.runs.steps import run_store
from pith_pipeline.storage.base import Store, read_into

if TYPE_CHECKING:
    from pith_pipeline.config import Settings

#: where `write_report` (the weekly maintenance task) puts the page in the store
STORE_KEY = "report/index.html"
#: a quarantine reason longer than this is cut in the figure (the table keeps it whole)
REASON_WIDTH = 60


@dataclass(frozen=True, slots=True)
class Figure:
    """One figure: its id (the `data-figure` attribute), title, what it counts, rows."""

    id: str
    title: str
    counts: str
    rows: list[tuple[str, int]]
    note: str = ""


@dataclass(frozen=True, slots=True)
class RunRow:
    run_id: str
    finished_at: str
    counts: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ReportData:
    store: str
    papers: int
    versions: int
    figures: list[Figure]
    runs: list[RunRow]


#: (figure id, title, what is counted, SQL giving (label, count) rows in display order)
QUERIES: tuple[tuple[str, str, str, str], ...] = (
    (
        "papers_per_month",
        "Papers per month",
        "papers, by their latest version's submitted_month",
        "SELECT submitted_month, count(*) FROM records WHERE superseded_by IS NULL GROUP BY ALL ORDER BY 1",
    ),
    (
        "papers_per_day",
        "Papers per day",
        "papers, by their latest version's submitted_at (UTC date)",
        "SELECT strftime(submitted_at AT TIME ZONE 'UTC', '%Y-%m-%d'), count(*) FROM records "
        "WHERE superseded_by IS NULL GROUP BY ALL ORDER BY 1",
    ),
    (
        "primary_archive",
        "Papers by primary archive",
        "papers, by primary_archive",
        "SELECT coalesce(nullif(primary_archive, ''), '(none)'), count(*) FROM records "
        "WHERE superseded_by IS NULL GROUP BY ALL ORDER BY 2 DESC, 1",
    ),
    (
        "primary_cat",
        "Papers by primary category",
        "papers, by primary_cat",
        "SELECT coalesce(nullif(primary_cat, ''), '(none)'), count(*) FROM records "
        "WHERE superseded_by IS NULL GROUP BY ALL ORDER BY 2 DESC, 1",
    ),
    (
        "license",
        "Papers by licence",
        "papers, by license ((none): no licence given)",
        "SELECT coalesce(nullif(license, ''), '(none)'), count(*) FROM records "
        "WHERE superseded_by IS NULL GROUP BY ALL ORDER BY 2 DESC, 1",
    ),
    (
        "versions_per_paper",
        "Versions per paper",
        "papers, by their latest version number",
        "SELECT CAST(version AS VARCHAR), count(*) FROM records WHERE superseded_by IS NULL "
        "GROUP BY version ORDER BY version",
    ),
)


def _rows(store: Store, sql: str) -> list[tuple[str, int]]:
    # lazy: nacl, pith_pipeline.index, pyarrow, 303 ms at import
    from pith_pipeline.index.query import run_query

    return [("" if r[0] is None else str(r[0]), int(r[1])) for r in run_query(store, sql).rows]


#: bytes read from the start of a run manifest for its `run_id` and `counts` (its first
#: fields; the objects it lists, millions for a backfill, come after them)
MANIFEST_HEAD = 64 * 1024
_RUN_ID = re.compile(rb'\n  "run_id": ("(?:[^"\\\n]|\\.)*")')
_COUNTS = re.compile(rb'\n  "counts": (\{[^{}]*\})')


def _head(store: Store, key: str, size: int) -> bytes | None:
    """The first `size` bytes of an object, by a ranged read where the store can."""
    # lazy: nacl, pith_pipeline.index, pyarrow, 238 ms at import
    from pith_pipeline.index.dataset import arrow_source

    try:
        fs, root = arrow_source(store)
        with fs.open_input_file(f"{root}/{key}") as fh:
            return bytes(fh.read_at(min(size, fh.size()), 0))
    except (StorageError, OSError, ValueError):
        return None  # read whole by the caller, whose errors name the object


def _counts(value: object) -> dict[str, int]:
    if not isinstance(value, dict):
        return {}
    return {str(k): v for k, v in value.items() if isinstance(v, int) and not isinstance(v, bool)}


def _manifest(store: Store, key: str) -> RunRow | None:
    """A run's id, finish time and counts, from the manifest's first and last bytes
    (`index.status.finished_at`); a manifest whose head does not hold them is read whole."""
    # lazy: nacl, pith_pipeline.index, pyarrow, 141 ms at import
    from pith_pipeline.index.status import finished_at

    fallback = key[len(RUNS) : -len("/manifest.json")]
    head = _head(store, key, MANIFEST_HEAD)
    found_id = _RUN_ID.search(head) if head else None
    found_counts = _COUNTS.search(head) if head else None
    if found_id and found_counts:
        when = finished_at(store, key)
        return RunRow(
            run_id=str(json.loads(found_id[1]) or fallback),
            finished_at="" if when.year == 1 else when.strftime("%Y-%m-%dT%H:%M:%SZ"),
            counts=_counts(json.loads(found_counts[1])),
        )
    data = store.get(key)
    if data is None:
        return None  # deleted while listed
    doc = loads_stored(data, key)
    if not isinstance(doc, dict):
        return None
    return RunRow(
        run_id=str(doc.get("run_id") or fallback),
        finished_at=str(doc.get("finished_at") or ""),
        counts=_counts(doc.get("counts")),
    )


def runs(store: Store) -> list[RunRow]:
    """Every finished run (its manifest), in the order they finished."""
    out = [r for k in store.list(RUNS) if is_run_manifest(k) and (r := _manifest(store, k))]
    return sorted(out, key=lambda r: (r.finished_at, r.run_id))


class _Reasons:
    """Counts the `reason` of each JSON line written to it, one piece at a time."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.counts: Counter[str] = Counter()
        self._line = bytearray()

    def write(self, data: bytes) -> int:
        *done, rest = bytes(data).split(b"\n")
        for piece in done:
            self._line += piece
            self._take()
        self._line += rest
        return len(data)

    def _take(self) -> None:
        line, self._line = bytes(self._line), bytearray()
        if not line.strip():
            return
        try:
            entry = json.loads(line)
        except ValueError:
            entry = None
        reason = entry.get("reason") if isinstance(entry, dict) else None
        self.counts[str(reason) if reason else "(unreadable entry)"] += 1

    def end(self) -> None:
        self._take()


def quarantine_reasons(store: Store) -> list[tuple[str, int]]:
    """(reason, entries) over every quarantine file, most frequent first."""
    total: Counter[str] = Counter()
    for key in sorted(k for k in store.list(QUARANTINE) if k.endswith(".jsonl")):
        counter = _Reasons(key)
        read_into(store, key, counter)
        counter.end()
        total.update(counter.counts)
    return sorted(total.items(), key=lambda kv: (-kv[1], kv[0]))


def gather(store: Store) -> ReportData:
    """The report's numbers: index tables (via `run_query`), run manifests, quarantine."""
    papers = _rows(store, "SELECT 'papers', count(*) FROM records WHERE superseded_by IS NULL")[0][1]
    versions = _rows(store, "SELECT 'versions', count(*) FROM records")[0][1]
    figures = [Figure(fid, title, what, _rows(store, sql)) for fid, title, what, sql in QUERIES]
    run_rows = runs(store)
    figures.append(
        Figure(
            "runs",
            "Runs",
            "records built in each run (its manifest's counts.built)",
            [(r.run_id, r.counts.get("built", 0)) for r in run_rows],
        )
    )
    figures.append(
        Figure(
            "quarantine_reasons",
            "Quarantine reasons",
            "quarantined entries, by reason (quarantine/*.jsonl)",
            quarantine_reasons(store),
        )
    )
    return ReportData(store.url, papers, versions, figures, run_rows)


def _svg(fig: Figure) -> str:
    """The figure as an inline SVG (text kept as text, no metadata, stable ids)."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure as MplFigure
    from matplotlib.ticker import MaxNLocator

    labels = [k if len(k) <= REASON_WIDTH else k[: REASON_WIDTH - 1] + "…" for k, _ in fig.rows]
    values = [v for _, v in fig.rows]
    horizontal = fig.id not in ("papers_per_month", "papers_per_day", "versions_per_paper")
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": fig.id, "font.size": 9}):
        if horizontal:
            mf = MplFigure(figsize=(8, max(1.6, 0.6 + 0.25 * len(labels))))
            ax = mf.add_subplot()
            ax.barh(range(len(values)), values, color="#3b6ea8")
            ax.set_yticks(range(len(values)), labels)
            ax.invert_yaxis()
            ax.set_xlabel(fig.counts)
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        else:
            mf = MplFigure(figsize=(8, 3))
            ax = mf.add_subplot()
            ax.bar(range(len(values)), values, color="#3b6ea8")
            step = max(1, len(labels) // 24)
            ax.set_xticks(range(0, len(labels), step), labels[::step], rotation=60, ha="right")
            ax.set_ylabel("papers")
            ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.spines[["top", "right"]].set_visible(False)
        mf.tight_layout()
        buf = io.StringIO()
        mf.savefig(buf, format="svg", metadata={"Date": None, "Creator": None})
    text = buf.getvalue()
    return text[text.index("<svg") :]  # inline: no XML prolog or DOCTYPE


CSS = """
body { font-family: system-ui, sans-serif; margin: 2em auto; padding: 0 1.5em; max-width: 60em; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; }
svg { max-width: 100%; height: auto; }
table { border-collapse: collapse; font-size: 0.85em; margin: 0.5em 0; }
td, th { border: 1px solid #ccc; padding: 0.2em 0.5em; text-align: left; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
details { margin: 0.5em 0; } .note { color: #555; }
"""


def _table(fig: Figure) -> str:
    body = "".join(
        f'<tr data-key="{html.escape(k)}" data-count="{v}">'
        f'<td>{html.escape(k)}</td><td class="n">{v}</td></tr>'
        for k, v in fig.rows
    )
    return (
        f'<table class="figure-data" data-figure="{fig.id}"><thead><tr><th>{html.escape(fig.title)}'
        f"</th><th>count</th></tr></thead><tbody>{body}</tbody></table>"
    )


def _runs_table(data: ReportData) -> str:
    kinds = sorted({k for r in data.runs for k in r.counts})
    head = "".join(f"<th>{html.escape(k)}</th>" for k in kinds)
    rows = "".join(
        f'<tr data-run="{html.escape(r.run_id)}"><td>{html.escape(r.run_id)}</td>'
        f"<td>{html.escape(r.finished_at)}</td>"
        + "".join(
            f'<td class="n" data-{html.escape(k)}="{r.counts[k]}">{r.counts[k]}</td>'
            if k in r.counts
            else "<td></td>"
            for k in kinds
        )
        + "</tr>"
        for r in data.runs
    )
    return (
        f'<table class="runs"><thead><tr><th>run</th><th>finished</th>{head}</tr></thead>'
        f"<tbody>{rows}</tbody></table>"
    )


def render(data: ReportData) -> str:
    """The page: a summary, then per figure its SVG and the table of its numbers."""
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>pith-pipeline report: {html.escape(data.store)}</title>",
        f"<style>{CSS}</style></head><body>",
        f"<h1>pith-pipeline report</h1><p>Store <code>{html.escape(data.store)}</code>: "
        f'<span data-total="papers">{data.papers}</span> papers (latest versions), '
        f'<span data-total="versions">{data.versions}</span> versions, '
        f'<span data-total="runs">{len(data.runs)}</span> runs.</p>',
    ]
    for fig in data.figures:
        parts.append(f'<section id="{fig.id}"><h2>{html.escape(fig.title)}</h2>')
        parts.append(f'<p class="note">Counts {html.escape(fig.counts)}.</p>')
        if fig.rows:
            parts.append(_svg(fig))
        else:
            parts.append('<p class="note">Nothing to show.</p>')
        parts.append(f"<details><summary>numbers</summary>{_table(fig)}</details>")
        if fig.id == "runs" and data.runs:
            parts.append(
                f"<details open><summary>every count of every run</summary>{_runs_table(data)}</details>"
            )
        parts.append("</section>")
    parts.append("</body></html>\n")
    return "\n".join(parts)


def report_html(store: Store) -> str:
    """The whole page for a store."""
    return render(gather(store))


def publish_report(store: Store) -> str:
    """Write the page into the store at `STORE_KEY`; returns the key. The page is
    derived (drawn again from the store at any time), so each one replaces the last."""
    store.put(STORE_KEY, report_html(store).encode("utf-8"), content_type="text/html; charset=utf-8")
    return STORE_KEY


def write_report(settings: Settings) -> dict[str, Any]:
    """The maintenance DAG's weekly `report` task: the page of `settings.store`, written
    into it (`publish_report`). matplotlib missing is a `TerminalError` naming the extra
    (retrying cannot install it)."""

    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise TerminalError(
            "report: matplotlib is not installed; install it with: pip install 'pith-pipeline[report]'"
        ) from None
    store = run_store(settings)
    return {"key": publish_report(store), "store": store.url}
