"""The log in a store (or behind a URL): read tiles, prove, and append.

Layout, relative to the log prefix (`log/` in a store, served at `<base_url>/log`):
`checkpoint`, `tile/<L>/<N>[.p/<W>]`, `tile/entries/<N>[.p/<W>]` (C2SP tlog-tiles).

Why appends write every tile first and the checkpoint last, with compare-and-swap:
a reader starts from the checkpoint, and every object a checkpoint names already
exists when it appears; two appenders cannot both move the checkpoint from the same
tree (the second one's swap fails), and tiles past the current checkpoint are
unreferenced until it moves, so a crashed append leaves nothing a reader can see.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

from pith_pipeline.core.keys import Signer
from pith_pipeline.errors import IntegrityError
from pith_pipeline.storage.base import Store, barrier
from pith_pipeline.storage.factory import open_store
from pith_pipeline.tlog import merkle
from pith_pipeline.tlog.note import Checkpoint, Verifier, open_checkpoint, sign_note, verifier_key
from pith_pipeline.tlog.tiles import (
    MAX_ENTRY,
    TILE_HEIGHT,
    TILE_WIDTH,
    decode_bundle,
    encode_bundle,
    entries_path,
    split_hashes,
    tile_path,
    tile_width,
)

LOG_PREFIX = "log/"
CHECKPOINT = "checkpoint"

#: reads one object of the log by its path under the prefix; None when absent
Fetch = Callable[[str], bytes | None]


def store_fetch(store: Store, prefix: str = LOG_PREFIX) -> Fetch:
    return lambda path: store.get(prefix + path)


def http_fetch(url: str, *, timeout: float = 30.0) -> Fetch:
    """GET `<url>/<path>`; 404 is None, anything else unexpected is an IntegrityError."""
    import requests  # lazy: 44 ms more to import the log (python -X importtime); only a URL needs it

    base = url.rstrip("/")
    session = requests.Session()

    def get(path: str) -> bytes | None:
        try:
            resp = session.get(f"{base}/{path}", timeout=timeout)
        except requests.RequestException as exc:
            raise IntegrityError(f"cannot read {base}/{path}: {type(exc).__name__}") from None
        if resp.status_code == 404:
            return None
        if resp.status_code != 200:
            raise IntegrityError(f"{base}/{path} answered HTTP {resp.status_code}")
        return bytes(resp.content)

    return get


def open_fetch(location: str) -> tuple[Fetch, str]:
    """A log reader for `http(s)://...` (the log prefix URL) or a store location."""
    if location.startswith(("http://", "https://")):
        return http_fetch(location), location.rstrip("/")
    store = open_store(location)
    return store_fetch(store), f"{store.url.rstrip('/')}/{LOG_PREFIX.rstrip('/')}"


class TileReader:
    """Hashes and entries of one tree size, read tile by tile (each tile once).

    `reads` counts objects fetched, which is what an inclusion proof costs a client.
    """

    def __init__(self, fetch: Fetch, size: int, where: str = "log") -> None:
        self.fetch = fetch
        self.size = size
        self.where = where
        self.reads = 0
        self._tiles: dict[tuple[int, int], list[bytes]] = {}

    def _get(self, path: str) -> bytes:
        data = self.fetch(path)
        self.reads += 1
        if data is None:
            raise IntegrityError(f"{self.where}/{path} is missing (the checkpoint's tree needs it)")
        return data

    def tile(self, level: int, index: int) -> list[bytes]:
        got = self._tiles.get((level, index))
        if got is None:
            width = tile_width(level, index, self.size)
            if width == 0:
                raise IntegrityError(f"tile {level}/{index} is outside a tree of size {self.size}")
            path = tile_path(level, index, width)
            try:
                got = split_hashes(self._get(path), width, f"{self.where}/{path}")
            except ValueError as exc:
                raise IntegrityError(str(exc)) from None
            self._tiles[(level, index)] = got
        return got

    def preload(self, level: int, index: int, hashes: list[bytes]) -> None:
        self._tiles[(level, index)] = hashes

    def hashes(self, level: int, start: int, end: int) -> list[bytes]:
        """Stored hashes start..end-1 of a tile level (subtrees of 256**level leaves)."""
        out: list[bytes] = []
        i = start
        while i < end:
            t = self.tile(level, i // TILE_WIDTH)
            lo = i % TILE_WIDTH
            take = min(end - i, len(t) - lo)
            if take <= 0:
                raise IntegrityError(f"tile {level}/{i // TILE_WIDTH} is shorter than the tree needs")
            out.extend(t[lo : lo + take])
            i += take
        return out

    def mth(self, lo: int, hi: int) -> bytes:
        """MTH(D[lo:hi]) from the fewest tile hashes: aligned power-of-two ranges come
        from the highest tile level that covers them, the rest splits as RFC 6962."""
        n = hi - lo
        if n <= 0 or hi > self.size:
            raise ValueError(f"no subtree [{lo}, {hi}) in a tree of size {self.size}")
        if n & (n - 1) == 0 and lo % n == 0:
            level = (n.bit_length() - 1) // TILE_HEIGHT
            unit = 1 << (TILE_HEIGHT * level)
            return merkle.root_of(self.hashes(level, lo // unit, hi // unit))
        k = merkle.split_point(n)
        return merkle.node_hash(self.mth(lo, lo + k), self.mth(lo + k, hi))

    def root(self) -> bytes:
        return merkle.EMPTY_ROOT if self.size == 0 else self.mth(0, self.size)

    def entries(self, index: int) -> list[bytes]:
        """The entries of bundle `index` in this tree."""
        width = tile_width(0, index, self.size)
        path = entries_path(index, width)
        try:
            return decode_bundle(self._get(path), width, f"{self.where}/{path}")
        except ValueError as exc:
            raise IntegrityError(str(exc)) from None

    def inclusion_proof(self, index: int) -> list[bytes]:
        return merkle.inclusion_proof(index, self.size, self.mth)

    def consistency_proof(self, old: int) -> list[bytes]:
        return merkle.consistency_proof(old, self.size, self.mth)


def iter_entries(reader: TileReader, start: int = 0) -> Iterator[tuple[int, bytes]]:
    """(leaf index, entry) from `start` to the tree's end, each bundle checked against
    the tree's hashes first, so an entry that does not match the tree is named."""
    for b in range(start // TILE_WIDTH, (reader.size + TILE_WIDTH - 1) // TILE_WIDTH):
        lo = b * TILE_WIDTH
        hi = min(lo + TILE_WIDTH, reader.size)
        bundle = reader.entries(b)
        if merkle.root_of([merkle.leaf_hash(e) for e in bundle]) != reader.mth(lo, hi):
            bad = next(
                (
                    lo + i
                    for i, e in enumerate(bundle)
                    if merkle.leaf_hash(e) != reader.hashes(0, lo + i, lo + i + 1)[0]
                ),
                lo,
            )
            raise IntegrityError(f"log entry {bad} does not match the tree the checkpoint signs")
        for i, e in enumerate(bundle):
            if lo + i >= start:
                yield lo + i, e


def read_checkpoint(fetch: Fetch, verifier: Verifier, where: str = "log") -> Checkpoint | None:
    """The verified current checkpoint, or None for a log that does not exist yet."""
    data = fetch(CHECKPOINT)
    if data is None:
        return None
    try:
        return open_checkpoint(data, verifier)
    except ValueError as exc:
        raise IntegrityError(f"{where}/{CHECKPOINT}: {exc}") from None


class LogSigner:
    """The log's identity: origin (also its key name) and a key that signs notes."""

    def __init__(self, origin: str, public_key: bytes, sign: Callable[[bytes], bytes]) -> None:
        self.origin = origin
        self.public_key = public_key
        self._sign = sign
        self.verifier = Verifier.parse(_vkey(origin, public_key))

    @classmethod
    def from_signer(cls, signer: Signer, origin: str) -> LogSigner:
        """From a `Signer` back end (its `sign_message`; a back end that cannot sign
        a note refuses when the first checkpoint is signed)."""
        return cls(origin, signer.public_key, signer.sign_message)

    def sign_checkpoint(self, cp: Checkpoint) -> bytes:
        return sign_note(cp.text(), self.origin, self.public_key, self._sign)

    def __repr__(self) -> str:
        return f"LogSigner({self.verifier.vkey!r})"


def _vkey(origin: str, public_key: bytes) -> str:
    return verifier_key(origin, public_key)


@dataclass(frozen=True, slots=True)
class AppendResult:
    """What an append did: the tree before and after, and the objects it wrote."""

    old_size: int
    size: int
    root: bytes
    checkpoint: bytes
    written: int
    seconds: float

    @property
    def appended(self) -> int:
        return self.size - self.old_size

    @property
    def root_b64(self) -> str:
        return base64.b64encode(self.root).decode()


def append_entries(
    store: Store,
    log: LogSigner,
    entries: Iterable[bytes],
    *,
    prefix: str = LOG_PREFIX,
    on_write: Callable[[str, bytes], None] | None = None,
    before_checkpoint: Callable[[int, int], None] | None = None,
    extends: Checkpoint | None = None,
) -> AppendResult:
    """Append `entries` in the order given; the caller holds the log's writer lease.

    Streams: full tiles and bundles are written as they fill, so memory stays at one
    tile per level whatever the number of entries. `before_checkpoint(old_size, size)`
    runs once every tile is written and before the checkpoint moves (the pipeline
    writes its event-id lookup there). Raises IntegrityError when the
    stored tree does not match its checkpoint, or the checkpoint moved meanwhile.

    `extends`: a checkpoint this log signed before (the newest the store recorded).
    The current tree must contain it (same size and root, or larger with the same
    first `extends.size` leaves), else IntegrityError before anything is written:
    appending onto a tree that does not would sign a fork, and would overwrite tiles
    the newer checkpoint names.
    """
    started = time.perf_counter()
    where = f"{store.url.rstrip('/')}/{prefix.rstrip('/')}"
    tagged = store.get_tagged(prefix + CHECKPOINT)
    old, reader = _current_tree(store, log, prefix, where, tagged[0] if tagged else None)
    if extends is not None:
        refuse_fork(reader, old, extends, where)
    writer = _TileWriter(store, prefix, on_write, reader, old.size)
    for entry in entries:
        if len(entry) > MAX_ENTRY:  # before anything of it is written (`tlog.entry` avoids it)
            raise IntegrityError(
                f"{where}: log entry {writer.size} is {len(entry)} bytes, more than a bundle holds "
                f"({MAX_ENTRY}); nothing was appended"
            )
        writer.add(entry)
    if writer.size == old.size:
        return AppendResult(old.size, old.size, old.root, tagged[0] if tagged else b"", 0, 0.0)
    cp = Checkpoint(log.origin, writer.size, writer.finish(old.size).root())
    if before_checkpoint is not None:
        before_checkpoint(old.size, cp.size)
    signed = log.sign_checkpoint(cp)
    barrier(store)  # tiles, entries and the events they log are durable before the checkpoint
    if not store.put_if_match(
        prefix + CHECKPOINT, signed, tagged[1] if tagged else None, content_type="text/plain; charset=utf-8"
    ):
        raise IntegrityError(
            f"{where}/{CHECKPOINT} changed during this append (another writer); run again: "
            "the next run appends whatever is missing"
        )
    if on_write is not None:
        on_write(prefix + CHECKPOINT, signed)
    elapsed = time.perf_counter() - started
    return AppendResult(old.size, cp.size, cp.root, signed, writer.written + 1, elapsed)


def _current_tree(
    store: Store, log: LogSigner, prefix: str, where: str, signed: bytes | None
) -> tuple[Checkpoint, TileReader]:
    """The checkpoint an append starts from (`signed`, verified; an empty tree when
    None) and a reader of its tree; IntegrityError when the tiles do not hash to it."""
    old = Checkpoint(log.origin, 0, merkle.EMPTY_ROOT)
    if signed is not None:
        try:
            old = open_checkpoint(signed, log.verifier, log.origin)
        except ValueError as exc:
            raise IntegrityError(f"{where}/{CHECKPOINT}: {exc}") from None
    reader = TileReader(store_fetch(store, prefix), old.size, where)
    if reader.root() != old.root:
        raise IntegrityError(f"{where}: the stored tiles do not hash to the checkpoint's root")
    return old, reader


class _TileWriter:
    """The right edge of a growing tree: the partial tile of each level and the
    partial entry bundle, written as each fills (one tile per level in memory).

    Every path written lies past the current checkpoint, so no reader can see it
    yet; a replace heals the leftovers of an append that crashed."""

    def __init__(
        self,
        store: Store,
        prefix: str,
        on_write: Callable[[str, bytes], None] | None,
        reader: TileReader,
        size: int,
    ) -> None:
        self.store, self.prefix, self.on_write, self.reader = store, prefix, on_write, reader
        self.size = size
        self.written = 0
        self.levels: list[list[bytes]] = []
        level = 0
        while size >> (TILE_HEIGHT * level):
            index = (size >> (TILE_HEIGHT * level)) // TILE_WIDTH
            self.levels.append(list(reader.tile(level, index)) if tile_width(level, index, size) else [])
            level += 1
        self.bundle: list[bytes] = reader.entries(size // TILE_WIDTH) if size % TILE_WIDTH else []

    def put(self, path: str, data: bytes) -> None:
        self.store.put(self.prefix + path, data, content_type="application/octet-stream")
        self.written += 1
        if self.on_write is not None:
            self.on_write(self.prefix + path, data)

    def push(self, level: int, h: bytes, index: int) -> None:
        """Add hash number `index` of `level`; a tile that fills is written, and its
        root climbs one level."""
        while len(self.levels) <= level:
            self.levels.append([])
        self.levels[level].append(h)
        if len(self.levels[level]) == TILE_WIDTH:
            full = self.levels[level]
            self.put(tile_path(level, index // TILE_WIDTH), b"".join(full))
            self.levels[level] = []
            self.push(level + 1, merkle.root_of(full), index // TILE_WIDTH)

    def add(self, entry: bytes) -> None:
        self.bundle.append(entry)
        self.push(0, merkle.leaf_hash(entry), self.size)
        if len(self.bundle) == TILE_WIDTH:
            self.put(entries_path(self.size // TILE_WIDTH), _bundle(self.bundle))
            self.bundle = []
        self.size += 1

    def finish(self, old_size: int) -> TileReader:
        """Write the partial bundle and tiles (a level's tile that did not change
        stays as it is); a reader of the new tree, its edge already in memory."""
        size = self.size
        if self.bundle:
            self.put(entries_path(size // TILE_WIDTH, len(self.bundle)), _bundle(self.bundle))
        new = TileReader(self.reader.fetch, size, self.reader.where)
        for level, hashes in enumerate(self.levels):
            index = (size >> (TILE_HEIGHT * level)) // TILE_WIDTH
            if hashes:
                if (index, len(hashes)) != _edge(old_size, level):
                    self.put(tile_path(level, index, len(hashes)), b"".join(hashes))
                new.preload(level, index, hashes)
        return new


class ForkError(IntegrityError):
    """A tree that does not extend a checkpoint this log signed before."""


def refuse_fork(reader: TileReader, current: Checkpoint, signed: Checkpoint, where: str) -> None:
    """ForkError unless the tree `reader` holds (whose root is `current`'s) contains
    the tree `signed` names: a log that was rolled back, replaced or forked."""
    if current.size < signed.size:
        raise ForkError(
            f"{where}/{CHECKPOINT} (size {current.size}) is older than a checkpoint this log "
            f"signed before (size {signed.size}): the log was rolled back"
        )
    if current.size == signed.size:
        same = current.root == signed.root
    else:
        same = signed.size == 0 or reader.mth(0, signed.size) == signed.root
    if not same:
        raise ForkError(
            f"{where}/{CHECKPOINT} (size {current.size}) is inconsistent with a checkpoint this "
            f"log signed before (size {signed.size}): the log was replaced or forked"
        )


def _edge(size: int, level: int) -> tuple[int, int]:
    """(index, width) of a level's partial tile in a tree of `size`."""
    hashes = size >> (TILE_HEIGHT * level)
    return hashes // TILE_WIDTH, hashes % TILE_WIDTH


def _bundle(entries: Sequence[bytes]) -> bytes:
    try:
        return encode_bundle(entries)
    except ValueError as exc:
        raise IntegrityError(str(exc)) from None
