"""Synthetic arXiv records in the snapshot JSON-lines layout, shaped like the real ones.

The real records in tests/data/arxiv-sample.jsonl are the templates: title and
abstract lengths, author counts, category lists, version counts, licences, DOI
presence and the text itself (words, TeX, non-ASCII names) are drawn from them, so
a benchmark on these records does the work real records cause. Identifiers are
new-style, unique and valid for their month (`YYMM.NNNN` up to 2014, `YYMM.NNNNN`
from 2015, as arXiv issues them), every record is valid, and the output is
deterministic for a seed. Records are written as they are made: a million of
them never sit in memory.

    python benchmarks/gen_records.py --n 100000 --out /tmp/records-100k.jsonl
"""

from __future__ import annotations

import argparse
import random
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path
from typing import IO, Any

import orjson

SAMPLE = Path(__file__).resolve().parent.parent / "tests" / "data" / "arxiv-sample.jsonl"
# new-style ids carry four digits after the dot up to December 2014, five from 2015
PER_MONTH_TO_2014 = 9_999
PER_MONTH = 99_999


@dataclass(frozen=True)
class Templates:
    """What the real records look like, as lists to draw from."""

    title_lens: list[int]
    abstract_lens: list[int]
    author_counts: list[int]
    categories: list[str]
    version_counts: list[int]
    licenses: list[str | None]
    doi_rate: float
    title_words: list[str]
    abstract_words: list[str]
    names: list[list[str]]
    comments: list[str | None]

    @classmethod
    def load(cls, path: Path = SAMPLE) -> Templates:
        recs = [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]
        names = [list(e) for r in recs for e in (r.get("authors_parsed") or [])]
        # a few names with characters outside Latin-1 and outside the BMP keep the
        # text paths honest (real metadata has both)
        names += [
            ["Дмитриев", "Алексей", ""],
            ["Müller-Lüdenscheidt", "Jürgen", ""],
            ["李", "小龙", ""],
            ["Ŝtefan", "Ŭ.", "Jr"],
            ["𝔊auss", "Carl", ""],
        ]
        return cls(
            title_lens=[len(r["title"]) for r in recs],
            abstract_lens=[len(r["abstract"]) for r in recs],
            author_counts=[max(1, len(r.get("authors_parsed") or [])) for r in recs],
            categories=[r["categories"] for r in recs],
            version_counts=[len(r["versions"]) for r in recs],
            licenses=[r.get("license") for r in recs],
            doi_rate=sum(1 for r in recs if r.get("doi")) / len(recs),
            title_words=[w for r in recs for w in r["title"].split()],
            abstract_words=[w for r in recs for w in r["abstract"].split()],
            names=names,
            comments=[r.get("comments") for r in recs],
        )


def _text(rng: random.Random, words: list[str], target: int, wrap: int) -> str:
    """Words up to about `target` characters, line-wrapped the way arXiv wraps."""
    out: list[str] = []
    size = line = 0
    while size < target:
        w = rng.choice(words)
        if line and line + len(w) + 1 > wrap:
            out.append("\n ")
            line = 0
        elif out:
            out.append(" ")
        out.append(w)
        size += len(w) + 1
        line += len(w) + 1
    return "".join(out)


def _author_string(parsed: list[list[str]]) -> str:
    full = [" ".join(p for p in (e[1], e[0], e[2]) if p) for e in parsed]
    if len(full) == 1:
        return full[0]
    return ", ".join(full[:-1]) + " and " + full[-1]


def _month_and_number(index: int, start: datetime) -> tuple[int, int, int]:
    """(months after `start`'s month, number within that month, its digit count) of the
    `index`-th id: months before 2015 hold 9,999 four-digit numbers, later ones 99,999
    five-digit numbers, so every id is one arXiv's scheme allows for its month."""
    short_months = max(0, (2015 - start.year) * 12 - (start.month - 1))
    if index < short_months * PER_MONTH_TO_2014:
        return index // PER_MONTH_TO_2014, index % PER_MONTH_TO_2014 + 1, 4
    rest = index - short_months * PER_MONTH_TO_2014
    return short_months + rest // PER_MONTH, rest % PER_MONTH + 1, 5


def make_record(rng: random.Random, t: Templates, index: int, start: datetime) -> dict[str, Any]:
    # the identifier's month is the submission month: unique ids, as arXiv's are
    month, seq, digits = _month_and_number(index, start)
    months = start.month - 1 + month
    first = start.replace(year=start.year + months // 12, month=months % 12 + 1, day=1)
    when = first + timedelta(seconds=rng.randrange(28 * 86400))
    arxiv_id = f"{when:%y%m}.{seq:0{digits}d}"
    tl = max(8, int(rng.choice(t.title_lens) * rng.uniform(0.8, 1.2)))
    al = max(20, int(rng.choice(t.abstract_lens) * rng.uniform(0.8, 1.2)))
    parsed = [list(rng.choice(t.names)) for _ in range(rng.choice(t.author_counts))]
    nver = rng.choice(t.version_counts)
    versions = []
    created = when
    for v in range(1, nver + 1):
        versions.append({"version": f"v{v}", "created": format_datetime(created, usegmt=True)})
        created += timedelta(days=rng.randrange(1, 400), seconds=rng.randrange(86400))
    return {
        "id": arxiv_id,
        "submitter": " ".join(p for p in (parsed[0][1], parsed[0][0]) if p),
        "authors": _author_string(parsed),
        "title": _text(rng, t.title_words, tl, 70),
        "comments": rng.choice(t.comments),
        "journal-ref": None,
        "doi": f"10.5555/synthetic.{index}" if rng.random() < t.doi_rate else None,
        "report-no": None,
        "categories": rng.choice(t.categories),
        "license": rng.choice(t.licenses),
        "abstract": "  " + _text(rng, t.abstract_words, al, 78) + "\n",
        "versions": versions,
        "update_date": f"{created:%Y-%m-%d}",
        "authors_parsed": parsed,
    }


def generate(n: int, *, seed: int = 1909, start: datetime | None = None) -> Iterator[bytes]:
    """`n` JSON lines (with trailing newline), deterministic for `seed`."""
    rng = random.Random(seed)
    t = Templates.load()
    begin = start or datetime(2012, 1, 1, tzinfo=UTC)
    for i in range(n):
        yield orjson.dumps(make_record(rng, t, i, begin)) + b"\n"


def write(n: int, out: IO[bytes], *, seed: int = 1909) -> int:
    size = 0
    for line in generate(n, seed=seed):
        out.write(line)
        size += len(line)
    return size


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, required=True, help="how many records")
    ap.add_argument("--out", type=Path, default=None, help="output file (default: stdout)")
    ap.add_argument("--seed", type=int, default=1909)
    args = ap.parse_args(argv)
    if args.out is None:
        write(args.n, sys.stdout.buffer, seed=args.seed)
    else:
        with args.out.open("wb") as fh:
            size = write(args.n, fh, seed=args.seed)
        print(f"{args.n} records, {size / 1e6:.1f} MB -> {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
