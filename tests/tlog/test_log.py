"""Appending to and proving from the tiled log in a store."""

from __future__ import annotations

import hashlib

import pytest

from pith_pipeline.core.keys import Ed25519Signer
from pith_pipeline.errors import IntegrityError
from pith_pipeline.storage.memory import MemoryStore
from pith_pipeline.tlog import merkle
from pith_pipeline.tlog.log import LogSigner, TileReader, append_entries, read_checkpoint, store_fetch
from pith_pipeline.tlog.note import Checkpoint, open_checkpoint

ORIGIN = "pith.example.org/log"


def log_signer(key: Ed25519Signer | None = None) -> LogSigner:
    key = key or Ed25519Signer.generate("log")
    return LogSigner(ORIGIN, key.public_key, lambda m: key._sk.sign(m).signature)


def entries(lo: int, hi: int) -> list[bytes]:
    return [b"entry %d " % i + bytes(i % 7) for i in range(lo, hi)]


def test_appends_of_any_size_give_the_rfc_root_and_checkable_proofs() -> None:
    store, log = MemoryStore(), log_signer()
    all_entries: list[bytes] = []
    heads: list[Checkpoint] = []
    for chunk in (1, 2, 253, 1, 255, 256, 300, 65_536 - 1068, 1, 600):
        new = entries(len(all_entries), len(all_entries) + chunk)
        result = append_entries(store, log, new)
        all_entries += new
        leaves = [merkle.leaf_hash(e) for e in all_entries]
        assert result.size == len(all_entries) and result.root == merkle.root_of(leaves)
        cp = open_checkpoint(store.get("log/checkpoint") or b"", log.verifier, ORIGIN)
        assert (cp.size, cp.root) == (result.size, result.root)
        heads.append(cp)
    size = len(all_entries)
    reader = TileReader(store_fetch(store), size)
    assert reader.root() == heads[-1].root
    for i in (0, 1, 255, 256, 1000, 65_535, 65_536, size - 1):
        proof = reader.inclusion_proof(i)
        assert merkle.verify_inclusion(i, size, merkle.leaf_hash(all_entries[i]), proof, heads[-1].root)
        assert reader.entries(i // 256)[i % 256] == all_entries[i]
    for old in heads:
        proof = reader.consistency_proof(old.size)
        assert merkle.verify_consistency(old.size, size, old.root, heads[-1].root, proof)


def test_an_inclusion_proof_reads_few_tiles() -> None:
    store, log = MemoryStore(), log_signer()
    size = 256 * 256 + 256 * 3 + 17
    append_entries(store, log, entries(0, size))
    worst = 0
    for i in range(0, size, 997):
        reader = TileReader(store_fetch(store), size)
        reader.inclusion_proof(i)
        worst = max(worst, reader.reads)
    # one tile per level on the leaf's path, plus the partial tile of each lower level
    assert worst <= 5


def test_nothing_changes_when_there_is_nothing_to_append() -> None:
    store, log = MemoryStore(), log_signer()
    append_entries(store, log, entries(0, 5))
    before = dict(store.objects)
    result = append_entries(store, log, [])
    assert result.appended == 0 and store.objects == before


def test_a_crashed_append_leaves_nothing_a_reader_sees_and_the_next_one_heals() -> None:
    store, log = MemoryStore(), log_signer()
    append_entries(store, log, entries(0, 300))
    cp = store.get("log/checkpoint")

    class Crash(Exception):
        pass

    def crash_at_checkpoint(key: str, data: bytes) -> None:
        if key.startswith("log/tile/entries/001"):
            raise Crash

    with pytest.raises(Crash):
        append_entries(store, log, [b"lost %d" % i for i in range(10)], on_write=crash_at_checkpoint)
    assert store.get("log/checkpoint") == cp
    # a different continuation overwrites the unreferenced leftovers
    result = append_entries(store, log, entries(300, 320))
    assert result.root == merkle.root_of([merkle.leaf_hash(e) for e in entries(0, 320)])


def test_damaged_tiles_or_a_foreign_checkpoint_stop_the_append() -> None:
    store, log = MemoryStore(), log_signer()
    append_entries(store, log, entries(0, 10))
    good = store.objects["log/tile/0/000.p/10"]
    store.objects["log/tile/0/000.p/10"] = hashlib.sha256(b"x").digest() + good[32:]
    with pytest.raises(IntegrityError, match="do not hash to the checkpoint"):
        append_entries(store, log, entries(10, 11))
    store.objects["log/tile/0/000.p/10"] = good
    with pytest.raises(IntegrityError, match="not signed by"):
        append_entries(store, log_signer(), entries(10, 11))
    fetch = store_fetch(store)
    assert read_checkpoint(fetch, log.verifier) is not None


def test_a_moved_checkpoint_fails_the_compare_and_swap() -> None:
    store, log = MemoryStore(), log_signer()
    append_entries(store, log, entries(0, 3))
    other = MemoryStore()
    other.objects = dict(store.objects)
    append_entries(other, log, entries(3, 4))

    def race(key: str, data: bytes) -> None:
        if key.startswith("log/tile/0/000.p/"):
            store.objects["log/checkpoint"] = other.objects["log/checkpoint"]

    with pytest.raises(IntegrityError, match="changed during this append"):
        append_entries(store, log, entries(3, 5), on_write=race)
