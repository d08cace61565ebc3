"""A run's quarantine, spilled to a temporary file as rejects come.

Why: each reject keeps its raw input (up to a record's size limit, megabytes), so a
large hostile file quarantines gigabytes; held in a list until the run ends, they
would exhaust memory. Each entry is written out as one JSON line when it arrives;
memory keeps only where it lies and its place in input order (three integers).

Entries may arrive out of input order (threads of the `Loader`, worker processes'
chunks): each carries a sort key (batch, sequence number), and `ordered_file`
copies them into input order once, at the end of the run. A batch is one publish
loop's numbering (`Loader.run`, `ParallelPublisher.publish`), so loops that restart
their numbering (one per page of a harvest) still keep the order they ran in.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from array import array
from collections.abc import Callable, Iterator
from typing import IO, Any

import orjson

#: (input sequence number, quarantine entry) -> None
AddReject = Callable[[int, dict[str, Any]], None]


class QuarantineSpool:
    """The run's quarantine entries as JSON lines on disk, in input order when read."""

    def __init__(self) -> None:
        self._file: IO[bytes] | None = None
        self._batch = array("q")
        self._seq = array("q")
        self._offset = array("q")
        self._size = 0
        self._batches = 0
        self._ordered = True  # arrived in input order so far: the file needs no copy

    def __len__(self) -> int:
        return len(self._seq)

    def __bool__(self) -> bool:
        return len(self._seq) > 0

    def batch(self) -> AddReject:
        """A function adding entries numbered by one loop (sorted after earlier loops')."""
        self._batches += 1
        number = self._batches
        return lambda seq, entry: self._add(number, seq, entry)

    def append(self, entry: dict[str, Any]) -> None:
        """Add one entry after every entry so far (its own batch)."""
        self.batch()(0, entry)

    def _add(self, batch: int, seq: int, entry: dict[str, Any]) -> None:
        line = orjson.dumps(entry) + b"\n"  # our own entries: plain JSON values
        if self._file is None:
            self._file = tempfile.TemporaryFile(prefix="pith-quarantine-")  # noqa: SIM115 (lives as long as the run)
        if self._seq and (batch, seq) < (self._batch[-1], self._seq[-1]):
            self._ordered = False
        self._file.seek(self._size)
        self._file.write(line)
        self._batch.append(batch)
        self._seq.append(seq)
        self._offset.append(self._size)
        self._size += len(line)

    def _lines(self) -> Iterator[bytes]:
        """Each entry's JSON line, in input order (one line in memory at a time)."""
        if self._file is None:
            return
        self._file.flush()
        n = len(self._seq)
        order: Any = range(n)
        if not self._ordered:
            order = sorted(range(n), key=lambda i: (self._batch[i], self._seq[i]))
        for i in order:
            end = self._offset[i + 1] if i + 1 < n else self._size
            self._file.seek(self._offset[i])
            yield self._file.read(end - self._offset[i])

    def __iter__(self) -> Iterator[dict[str, Any]]:
        """The entries, in input order."""
        for line in self._lines():
            yield orjson.loads(line)

    @contextlib.contextmanager
    def ordered_file(self) -> Iterator[str]:
        """The path of a temporary file holding every entry's line in input order:
        the bytes of the run's `quarantine/<run_id>.jsonl`."""
        with tempfile.TemporaryDirectory(prefix="pith-quarantine-") as tmp:
            path = os.path.join(tmp, "quarantine.jsonl")
            with open(path, "wb") as out:
                if self._ordered and self._file is not None:
                    self._file.flush()
                    self._file.seek(0)
                    shutil.copyfileobj(self._file, out, 1 << 20)
                else:
                    for line in self._lines():
                        out.write(line)
            yield path

    def close(self) -> None:
        """Remove the spill file (the entries are gone)."""
        if self._file is not None:
            self._file.close()
        self._file = None
        self._batch, self._seq, self._offset = array("q"), array("q"), array("q")
        self._size = 0
        self._ordered = True
