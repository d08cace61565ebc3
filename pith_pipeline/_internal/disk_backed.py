"""Collections that move to a private temporary SQLite file when they grow large.

A backfill publishes millions of papers in one run; what the run must remember
about each (objects written, subjects touched) is kept in memory only up to a
limit, so the memory of a run does not grow with its size. SQLite's BINARY
collation sorts UTF-8 bytes, which is code point order: the same order as
Python's `sorted` on `str`.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Iterator, MutableMapping
from itertools import islice
from typing import Any, overload

DEFAULT_LIMIT = 100_000


def _temp_db() -> sqlite3.Connection:
    db = sqlite3.connect("")  # "": a private on-disk temporary database, deleted on close
    db.execute("PRAGMA cache_size = -8192")  # 8 MB of page cache, whatever the size
    return db


class Ledger(MutableMapping[str, str]):
    """Storage key -> sha256 of every object a run wrote, in write order.

    Six objects per paper: past `limit` entries the ledger moves to SQLite. Behaves
    as a dict otherwise (and compares equal to one).
    """

    def __init__(self, items: Iterable[tuple[str, str]] = (), *, limit: int = DEFAULT_LIMIT) -> None:
        self._mem: dict[str, str] = {}
        self._db: sqlite3.Connection | None = None
        self._limit = limit
        for k, v in items:
            self[k] = v

    @property
    def spilled(self) -> bool:
        return self._db is not None

    def _spill(self) -> None:
        self._db = _temp_db()
        self._db.execute("CREATE TABLE w (k TEXT PRIMARY KEY, v TEXT NOT NULL)")
        self._db.executemany("INSERT INTO w VALUES (?, ?)", self._mem.items())
        self._mem = {}

    def __setitem__(self, key: str, value: str) -> None:
        if self._db is None:
            self._mem[key] = value
            if len(self._mem) > self._limit:
                self._spill()
        else:
            self._db.execute(
                "INSERT INTO w VALUES (?, ?) ON CONFLICT(k) DO UPDATE SET v = excluded.v", (key, value)
            )

    def __getitem__(self, key: str) -> str:
        if self._db is None:
            return self._mem[key]
        row = self._db.execute("SELECT v FROM w WHERE k = ?", (key,)).fetchone()
        if row is None:
            raise KeyError(key)
        return str(row[0])

    def __delitem__(self, key: str) -> None:
        if self._db is None:
            del self._mem[key]
        elif self._db.execute("DELETE FROM w WHERE k = ?", (key,)).rowcount == 0:
            raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        if self._db is None:
            yield from list(self._mem)
        else:
            for (k,) in self._db.execute("SELECT k FROM w ORDER BY rowid"):
                yield k

    def __len__(self) -> int:
        if self._db is None:
            return len(self._mem)
        return int(self._db.execute("SELECT count(*) FROM w").fetchone()[0])

    def sorted_items(self) -> Iterator[tuple[str, str]]:
        """(key, sha256) in key order, streamed."""
        if self._db is None:
            yield from sorted(self._mem.items())
        else:
            for k, v in self._db.execute("SELECT k, v FROM w ORDER BY k"):
                yield str(k), str(v)

    def clear(self) -> None:
        if self._db is not None:
            self._db.close()
        self._mem, self._db = {}, None

    def __repr__(self) -> str:
        return f"Ledger({len(self)} objects)"

    def __reduce__(self) -> Any:
        return (_ledger_from_items, (list(self.items()),))


def _ledger_from_items(items: list[tuple[str, str]]) -> Ledger:
    return Ledger(items)


class SpillList:
    """An append-only list of strings that moves to SQLite past `limit` items.

    For the Pith numbers a run built and the subjects it saw: one each per paper.
    Supports what a run needs of a list (append, extend, iterate, index, sort in
    place, compare with a list) and streams `iter_sorted` without loading it.
    """

    __slots__ = ("_db", "_limit", "_mem", "_n")

    def __init__(self, items: Iterable[str] = (), *, limit: int = DEFAULT_LIMIT) -> None:
        self._mem: list[str] = []
        self._db: sqlite3.Connection | None = None
        self._limit = limit
        self._n = 0
        self.extend(items)

    @property
    def spilled(self) -> bool:
        return self._db is not None

    def _spill(self) -> None:
        self._db = _temp_db()
        # no index on v: `iter_sorted` sorts once when asked (sqlite's external sort),
        # where an index paid a random B-tree insert for every append (the log's two
        # lists of event ids: 9.3 us an id against 3.8 us, sorted read included)
        self._db.execute("CREATE TABLE l (i INTEGER PRIMARY KEY, v TEXT NOT NULL)")
        self._db.executemany("INSERT INTO l (v) VALUES (?)", ((v,) for v in self._mem))
        self._mem = []

    def append(self, value: str) -> None:
        self._n += 1
        if self._db is None:
            self._mem.append(value)
            if len(self._mem) > self._limit:
                self._spill()
        else:
            self._db.execute("INSERT INTO l (v) VALUES (?)", (value,))

    def extend(self, values: Iterable[str]) -> None:
        for v in values:
            self.append(v)

    def __len__(self) -> int:
        return self._n

    def __iter__(self) -> Iterator[str]:
        if self._db is None:
            yield from list(self._mem)
        else:
            for (v,) in self._db.execute("SELECT v FROM l ORDER BY i"):
                yield str(v)

    @overload
    def __getitem__(self, index: int) -> str: ...
    @overload
    def __getitem__(self, index: slice) -> list[str]: ...
    def __getitem__(self, index: int | slice) -> str | list[str]:
        if self._db is None:
            return self._mem[index]
        if isinstance(index, slice):
            return list(islice(iter(self), *index.indices(self._n)))
        i = index + self._n if index < 0 else index
        row = self._db.execute("SELECT v FROM l WHERE i = ?", (i + 1,)).fetchone()
        if not 0 <= i < self._n or row is None:
            raise IndexError("SpillList index out of range")
        return str(row[0])

    def iter_sorted(self, *, unique: bool = False) -> Iterator[str]:
        """The items in sorted order (optionally each once), streamed from disk."""
        if self._db is None:
            yield from sorted(set(self._mem) if unique else self._mem)
            return
        sql = "SELECT DISTINCT v FROM l ORDER BY v" if unique else "SELECT v FROM l ORDER BY v"
        for (v,) in self._db.execute(sql):
            yield str(v)

    def sort(self) -> None:
        items = list(self.iter_sorted())
        self.clear()
        self.extend(items)

    def clear(self) -> None:
        if self._db is not None:
            self._db.close()
        self._mem, self._db, self._n = [], None, 0

    def __eq__(self, other: object) -> bool:
        if isinstance(other, SpillList | list | tuple):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"SpillList({len(self)} items)"

    def __reduce__(self) -> Any:
        return (SpillList, (list(self),))


def iter_sorted(items: Iterable[str], *, unique: bool = False) -> Iterator[str]:
    """`sorted(items)` (or of the distinct items) for a list or a `SpillList`, streamed."""
    if isinstance(items, SpillList):
        return items.iter_sorted(unique=unique)
    return sorted_unique(items) if unique else iter(sorted(items))


def sorted_unique(items: Iterable[str], *, limit: int = DEFAULT_LIMIT) -> Iterator[str]:
    """The distinct strings of `items` in sorted order.

    In memory up to `limit` distinct values, then in a temporary SQLite table: a
    million subjects of a backfill are never one Python set.
    """
    mem: set[str] = set()
    it = iter(items)
    for v in it:
        mem.add(v)
        if len(mem) > limit:
            break
    else:
        yield from sorted(mem)
        return
    db = _temp_db()
    try:
        db.execute("CREATE TABLE u (v TEXT PRIMARY KEY) WITHOUT ROWID")
        db.executemany("INSERT OR IGNORE INTO u VALUES (?)", ((v,) for v in mem))
        mem.clear()
        while True:
            batch = list(islice(it, 10_000))
            if not batch:
                break
            db.executemany("INSERT OR IGNORE INTO u VALUES (?)", ((v,) for v in batch))
        for (v,) in db.execute("SELECT v FROM u ORDER BY v"):
            yield str(v)
    finally:
        db.close()
