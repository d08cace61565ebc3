"""The event-id lookup: `log/index/<first 2 hex of event id>` maps event ids to
leaf indexes, and which events the log already holds.

The lookup is an aid a static log needs (a client holding a bundle knows its event
ids, not their positions); it is unsigned, a hint only: an event counts as logged
only when the entry at that index is inside the signed tree (an inclusion proof) and
hashes to the event (`Hints`), so a wrong or stale line (one a killed append left
past the checkpoint) can only make a check fail, never pass. A whole-store
comparison (`log sync`, a dead run's marker) reads the entries themselves and writes
every lookup object that differs from them again (a lost one too: `entry_ids`).
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait

from pith_pipeline._internal.disk_backed import SpillList
from pith_pipeline.core.canonical_json import loads
from pith_pipeline.core.events import content_sha256
from pith_pipeline.errors import CanonicalJSONError, IntegrityError
from pith_pipeline.storage.base import Store
from pith_pipeline.tlog import merkle
from pith_pipeline.tlog.entry import entry_event_hex, parse_committed
from pith_pipeline.tlog.log import LOG_PREFIX, Fetch, TileReader, iter_entries, store_fetch
from pith_pipeline.tlog.note import Checkpoint
from pith_pipeline.tlog.stored_events import committed_problem, event_key_id
from pith_pipeline.tlog.tiles import TILE_WIDTH

INDEX_DIR = "index/"
# 256 lookup objects: a run rewrites at most 256 of them, whatever its size; each is
# about 570 KB (uncompressed) at 2,000,000 entries
INDEX_HEX = 2


def index_path(event_hex: str) -> str:
    """The lookup object (under the log prefix) holding an event id's line."""
    return f"{INDEX_DIR}{event_hex[:INDEX_HEX]}"


def parse_index(data: bytes | None, size: int) -> dict[str, int]:
    """event id hex -> leaf index, for leaves inside a tree of `size` (lines past it
    are left by an append that did not finish, and do not count)."""
    out: dict[str, int] = {}
    for line in (data or b"").decode("ascii", "replace").splitlines():
        hex_id, _, idx = line.partition(" ")
        if idx.isdigit() and int(idx) < size:
            out[hex_id] = int(idx)
    return out


def lookup(fetch: Fetch, event_hex: str, size: int) -> int | None:
    """The leaf index the lookup names for an event, inside a tree of `size` (a hint:
    the caller proves the entry there is the event)."""
    return parse_index(fetch(index_path(event_hex)), size).get(event_hex)


#: lookup objects read and rewritten at once on S3, where each is a GET and a PUT
#: of its own (up to 256 per append): one at a time they are most of a small run's
#: time behind a distant region (docs/pages/performance.md)
INDEX_S3_CONCURRENCY = 32


def _index_concurrency(store: Store) -> int:
    """Lookup objects written at once: many on S3, one for a directory (its writes
    are local and its group commit is per process)."""
    return INDEX_S3_CONCURRENCY if store.url.startswith("s3://") else 1


def in_flight(work: Callable[[list[str]], None], items: Iterable[list[str]], limit: int) -> None:
    """`work(item)` for every item, at most `limit` at once, each item taken from
    `items` only when a slot is free (so at most `limit` batches are held); the first
    error is raised once the ones in flight have finished, and no new one starts."""
    if limit <= 1:
        for item in items:
            work(item)
        return
    with ThreadPoolExecutor(limit, thread_name_prefix="pith-log-index") as pool:
        running: set[Future[None]] = set()
        for item in items:
            if len(running) >= limit:
                done, running = wait(running, return_when=FIRST_COMPLETED)
                for f in done:
                    f.result()
            running.add(pool.submit(work, item))
        done, _ = wait(running)
        for f in done:
            f.result()


def write_index(store: Store, new_ids: SpillList, old_size: int) -> None:
    """Write the lookup lines of the entries appended from leaf `old_size` on
    (`new_ids`: their event ids in leaf order), grouped by lookup object, before the
    checkpoint that covers them moves (several objects at once on S3)."""
    rows = SpillList(f"{h} {old_size + i}" for i, h in enumerate(new_ids))

    def batches() -> Iterator[list[str]]:
        batch: list[str] = []
        for row in rows.iter_sorted():
            if batch and batch[0][:INDEX_HEX] != row[:INDEX_HEX]:
                yield batch
                batch = []
            batch.append(row)
        if batch:
            yield batch

    limit = _index_concurrency(store)
    reserve = getattr(store, "reserve_connections", None)
    if limit > 1 and reserve is not None:
        reserve(limit + 2)  # S3: a connection each, without the pool's warnings
    in_flight(lambda b: _write_index_object(store, b, old_size), batches(), limit)


def _write_index_object(store: Store, rows: list[str], old_size: int) -> None:
    key = LOG_PREFIX + index_path(rows[0])
    kept = parse_index(store.get(key), old_size)
    for row in rows:
        hex_id, _, idx = row.partition(" ")
        kept[hex_id] = int(idx)
    body = "".join(f"{h} {i}\n" for h, i in sorted(kept.items()))
    store.put(key, body.encode("ascii"), content_type="text/plain; charset=utf-8")


class IdFilter:
    """A set of event ids held as their first 64 bits, sorted (8 bytes an id, where a
    set of the hex strings takes about 120): a run of two million events asks "is this
    id one of them?" without holding two million strings.

    `in` has no false negatives; a false positive needs two of the ids to share their
    first 64 bits (about one in 10^7 for 2 M against 2 M), so callers use it where a
    positive is then confirmed on the full id (`logged_ids`), or only to skip re-reading
    an event the run's entries already appended (`sync_log`).
    """

    def __init__(self, hex_ids: Iterable[str]) -> None:
        prefixes = array("Q")
        shards: set[str] = set()
        for h in hex_ids:
            prefixes.append(int(h[:16], 16))
            shards.add(h[:INDEX_HEX])
        self._sorted = array("Q", sorted(prefixes))
        self.shards = frozenset(shards)

    def __len__(self) -> int:
        return len(self._sorted)

    def __contains__(self, hex_id: object) -> bool:
        if not isinstance(hex_id, str) or len(hex_id) < 16:
            return False
        p = int(hex_id[:16], 16)
        i = bisect_left(self._sorted, p)
        return i < len(self._sorted) and self._sorted[i] == p


class Hints:
    """Lookup lines checked against the signed tree.

    A line `<id> <index>` counts only when the index is inside the checkpoint's tree,
    the entry there is proven included (an inclusion proof to the signed root), and
    that entry is the event (its content hashes to the id). Why: lines are written
    before the checkpoint moves, so an append killed in between leaves lines past
    the checkpoint in objects no later append rewrites; once the tree grows past
    their indexes they point at other events. Only lines that claim an event is
    logged are checked (a run's new events cost nothing); entry bundles are cached.
    """

    def __init__(self, store: Store, cp: Checkpoint | None) -> None:
        self.store = store
        self.cp = cp
        self.size = cp.size if cp else 0
        where = f"{store.url.rstrip('/')}/{LOG_PREFIX.rstrip('/')}"
        self._reader = TileReader(store_fetch(store), self.size, where)
        self._bundles: dict[int, list[bytes]] = {}
        self._entries: dict[str, int] | None = None

    def read(self, shard: str) -> dict[str, int]:
        """The lines of one lookup object inside the tree (still to be confirmed).

        A missing object is not taken for "none of these ids is logged": a lost one
        would make the run append its stored events again. The ids are then read from
        the tree's entries themselves (once per append; on a small log a shard no
        event falls in yet is missing too, and a small log is cheap to read)."""
        if self.size == 0:
            return {}
        data = self.store.get(LOG_PREFIX + INDEX_DIR + shard)
        if data is None:
            return {h: i for h, i in self._from_entries().items() if h[:INDEX_HEX] == shard}
        return parse_index(data, self.size)

    def _from_entries(self) -> dict[str, int]:
        if self._entries is None:
            self._entries = {}
            for idx, entry in iter_entries(self._reader):
                hex_id = entry_event_hex(entry)
                if hex_id is not None:
                    self._entries.setdefault(hex_id, idx)
        return self._entries

    def holds(self, hex_id: str, idx: int) -> bool:
        if self.cp is None or not 0 <= idx < self.size:
            return False
        b = idx // TILE_WIDTH
        bundle = self._bundles.get(b)
        if bundle is None:
            if len(self._bundles) >= 64:
                self._bundles.clear()
            bundle = self._bundles[b] = self._reader.entries(b)
        if idx % TILE_WIDTH >= len(bundle):
            return False
        entry = bundle[idx % TILE_WIDTH]
        proof = self._reader.inclusion_proof(idx)
        if not merkle.verify_inclusion(idx, self.size, merkle.leaf_hash(entry), proof, self.cp.root):
            return False
        c = parse_committed(entry)
        if c is not None:  # the stored event is the one committed to
            return c.event_hex == hex_id and committed_problem(c, self.store.get) is None
        try:
            ev = loads(entry)
            return isinstance(ev, dict) and content_sha256(ev) == hex_id == str(
                ev.get("event_id", "")
            ).removeprefix("sha256:")
        except (ValueError, TypeError, CanonicalJSONError):
            return False


def logged_ids(store: Store, wanted: IdFilter, hints: Hints) -> set[str]:
    """Which of the `wanted` event ids are in the tree (exact: full ids whose lookup
    line the entry confirms; one lookup object at a time)."""
    out: set[str] = set()
    if hints.size == 0:
        return out  # an empty log holds none of them
    for shard in sorted(wanted.shards):
        known = hints.read(shard)
        out.update(h for h, i in known.items() if h in wanted and hints.holds(h, i))
    return out


def entry_ids(store: Store, cp: Checkpoint) -> SpillList:
    """`<event id hex> <leaf index>` of every entry of the tree, sorted (the first
    index of an id logged twice), read from the entries themselves; every lookup
    object that differs from them is written again (a lost one, stale lines)."""
    where = f"{store.url.rstrip('/')}/{LOG_PREFIX.rstrip('/')}"
    reader = TileReader(store_fetch(store), cp.size, where)
    if reader.root() != cp.root:
        raise IntegrityError(f"{where}: the stored tiles do not hash to the checkpoint's root")
    rows = SpillList()
    for idx, entry in iter_entries(reader):
        hex_id = entry_event_hex(entry)
        if hex_id is None:
            continue  # not an event: nothing to look up
        rows.append(f"{hex_id} {idx:020d}")
    out = SpillList()
    batch: dict[str, int] = {}
    for row in rows.iter_sorted():
        hex_id, _, padded = row.partition(" ")
        if batch and next(iter(batch))[:INDEX_HEX] != hex_id[:INDEX_HEX]:
            _repair_index_object(store, batch, cp.size)
            batch = {}
        if hex_id not in batch:
            batch[hex_id] = int(padded)
            out.append(f"{hex_id} {int(padded)}")
    if batch:
        _repair_index_object(store, batch, cp.size)
    return out


def _repair_index_object(store: Store, lines: dict[str, int], size: int) -> None:
    key = LOG_PREFIX + index_path(next(iter(lines)))
    stored = store.get(key)
    if stored != _index_body(lines):
        store.put(key, _index_body(lines), content_type="text/plain; charset=utf-8")


def _index_body(lines: Mapping[str, int]) -> bytes:
    return "".join(f"{h} {i}\n" for h, i in sorted(lines.items())).encode("ascii")


def not_in_entries(store: Store, keys: Iterable[str], logged: SpillList) -> Iterator[str]:
    """The keys among `keys` whose event ids are not among `logged` (sorted rows of
    `entry_ids`): a merge of two sorted streams, nothing held but a row of each."""
    rows = SpillList(f"{h} {k}" for k in keys if (h := event_key_id(k)))
    have = iter(logged.iter_sorted())
    cur = next(have, None)
    for row in rows.iter_sorted(unique=True):
        hex_id, _, key = row.partition(" ")
        while cur is not None and cur.partition(" ")[0] < hex_id:
            cur = next(have, None)
        if cur is None or cur.partition(" ")[0] != hex_id:
            yield key


def not_logged(store: Store, keys: Iterable[str], hints: Hints) -> Iterator[str]:
    """The event keys among `keys` whose events the log does not hold (each once,
    except from an empty log, where all of `keys` are).

    Why sorted by lookup object: a whole-store comparison (`log sync`, a dead run's
    marker) may hold millions of keys, almost all logged; going through them in the
    order of their ids holds one lookup object's ids at a time (and reads each
    object once), where a set of every logged id would grow with the store.
    """
    if hints.size == 0:  # an empty log lacks every one of them (`_order` drops repeats)
        yield from keys
        return
    rows = SpillList(f"{h} {k}" for k in keys if (h := event_key_id(k)))
    shard, known = "", dict[str, int]()
    for row in rows.iter_sorted(unique=True):
        hex_id, _, key = row.partition(" ")
        if hex_id[:INDEX_HEX] != shard:
            shard = hex_id[:INDEX_HEX]
            known = hints.read(shard)
        idx = known.get(hex_id)
        if idx is None or not hints.holds(hex_id, idx):
            yield key
