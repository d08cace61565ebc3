"""RFC 6962 / RFC 9162 Merkle tree hashing, proofs and their verification.

Why a module of its own: the hashing and the two proof checks are what an outside
auditor must trust, so they are written straight from RFC 9162 sections 2.1.1-2.1.4,
over any source of subtree hashes (`RangeHash`), and tested against the published
vectors and Go's `sumdb/tlog`. Nothing here knows about tiles or stores.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence

HASH_SIZE = 32
EMPTY_ROOT = hashlib.sha256(b"").digest()

#: MTH(D[lo:hi]): the Merkle tree hash of the leaves lo..hi-1 (hi > lo)
RangeHash = Callable[[int, int], bytes]


def leaf_hash(entry: bytes) -> bytes:
    """SHA-256(0x00 || entry): a leaf can never be mistaken for an interior node."""
    return hashlib.sha256(b"\x00" + entry).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """SHA-256(0x01 || left || right)."""
    return hashlib.sha256(b"\x01" + left + right).digest()


def split_point(n: int) -> int:
    """The largest power of two smaller than n (n > 1): where RFC 6962 splits a tree."""
    return 1 << ((n - 1).bit_length() - 1)


def root_of(hashes: Sequence[bytes]) -> bytes:
    """MTH of a list of leaf hashes (or of subtree hashes of equal, power-of-two size).

    Iterative: pairs are hashed level by level; an odd last node is carried up
    unchanged, which is exactly RFC 6962's split at the largest power of two.
    """
    if not hashes:
        return EMPTY_ROOT
    level = list(hashes)
    while len(level) > 1:
        nxt = [node_hash(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            nxt.append(level[-1])
        level = nxt
    return level[0]


def list_range_hash(leaves: Sequence[bytes]) -> RangeHash:
    """A `RangeHash` over leaf hashes in memory (tests, small trees)."""
    return lambda lo, hi: root_of(leaves[lo:hi])


def inclusion_proof(index: int, size: int, mth: RangeHash) -> list[bytes]:
    """PATH(index, D[0:size]) of RFC 9162 section 2.1.3.1."""
    if not 0 <= index < size:
        raise ValueError(f"leaf {index} is not in a tree of size {size}")
    out: list[bytes] = []
    lo, hi, m = 0, size, index
    while hi - lo > 1:
        k = split_point(hi - lo)
        if m < k:
            out.append(mth(lo + k, hi))
            hi = lo + k
        else:
            out.append(mth(lo, lo + k))
            lo, m = lo + k, m - k
    out.reverse()  # collected top-down; the proof lists the leaf's sibling first
    return out


def consistency_proof(old: int, new: int, mth: RangeHash) -> list[bytes]:
    """PROOF(old, D[0:new]) of RFC 9162 section 2.1.4.1 (empty for old == new or 0)."""
    if not 0 <= old <= new:
        raise ValueError(f"no consistency proof from size {old} to size {new}")
    if old in (0, new):
        return []
    out: list[bytes] = []
    lo, hi, m, whole = 0, new, old, True
    while True:
        n = hi - lo
        if m == n:
            if not whole:
                out.append(mth(lo, hi))
            break
        k = split_point(n)
        if m <= k:
            out.append(mth(lo + k, hi))
            hi = lo + k
        else:
            out.append(mth(lo, lo + k))
            lo, m, whole = lo + k, m - k, False
    out.reverse()
    return out


def _lsb(x: int) -> bool:
    return bool(x & 1)


def root_from_inclusion(index: int, size: int, leaf: bytes, proof: Sequence[bytes]) -> bytes | None:
    """The root an inclusion proof leads to, or None if the proof is malformed
    (RFC 9162 section 2.1.3.2)."""
    if not 0 <= index < size or len(leaf) != HASH_SIZE:
        return None
    fn, sn, r = index, size - 1, leaf
    for p in proof:
        if sn == 0 or len(p) != HASH_SIZE:
            return None
        if _lsb(fn) or fn == sn:
            r = node_hash(p, r)
            if not _lsb(fn):
                while not _lsb(fn) and fn != 0:
                    fn >>= 1
                    sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    return r if sn == 0 else None


def verify_inclusion(index: int, size: int, leaf: bytes, proof: Sequence[bytes], root: bytes) -> bool:
    return root_from_inclusion(index, size, leaf, proof) == root


def verify_consistency(old: int, new: int, old_root: bytes, new_root: bytes, proof: Sequence[bytes]) -> bool:
    """RFC 9162 section 2.1.4.2: does the tree (new, new_root) extend (old, old_root)?"""
    if not 0 <= old <= new:
        return False
    if old == 0:
        return False  # a proof from the empty tree proves nothing; callers need none
    if old == new:
        return not proof and old_root == new_root
    if not proof or any(len(p) != HASH_SIZE for p in proof):
        return False
    path = list(proof)
    if old & (old - 1) == 0:  # an exact power of two: the old root is itself a node
        path.insert(0, old_root)
    fn, sn = old - 1, new - 1
    while _lsb(fn):
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            return False
        if _lsb(fn) or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            if not _lsb(fn):
                while not _lsb(fn) and fn != 0:
                    fn >>= 1
                    sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    return fr == old_root and sr == new_root and sn == 0
