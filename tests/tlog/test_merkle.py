"""Merkle hashing and proofs against the published RFC 6962/9162 vectors
(transparency-dev/merkle's testdata; see tests/data/README.md) and against a
brute-force tree built straight from the RFC's recursive definition."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from pith_pipeline.tlog import merkle

VECTORS = json.loads((Path(__file__).parents[1] / "data" / "tlog" / "merkle-vectors.json").read_text())
LEAVES = [bytes.fromhex(x) for x in ("", "00", "10", "2021", "3031", "40414243", "5051525354555657",
                                     "606162636465666768696a6b6c6d6e6f")]  # fmt: skip
ROOTS = [
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
]


def b64(x: str | None) -> bytes:
    return base64.b64decode(x) if x else b""


def mth_reference(leaves: list[bytes]) -> bytes:
    """RFC 6962 section 2.1, written as the recursion it is."""
    n = len(leaves)
    if n == 0:
        return hashlib.sha256(b"").digest()
    if n == 1:
        return hashlib.sha256(b"\x00" + leaves[0]).digest()
    k = 1
    while k * 2 < n:
        k *= 2
    return hashlib.sha256(b"\x01" + mth_reference(leaves[:k]) + mth_reference(leaves[k:])).digest()


def test_roots_match_the_published_vectors() -> None:
    hashes = [merkle.leaf_hash(x) for x in LEAVES]
    for size, want in enumerate(ROOTS):
        assert merkle.root_of(hashes[:size]).hex() == want


@pytest.mark.parametrize("case", VECTORS["inclusion"], ids=lambda c: c["file"].split("testdata/")[1])
def test_inclusion_vectors(case: dict[str, Any]) -> None:
    ok = merkle.verify_inclusion(
        case["leafIdx"], case["treeSize"], b64(case["leafHash"]), [b64(p) for p in case["proof"] or []],
        b64(case["root"]),
    )  # fmt: skip
    assert ok is not case["wantErr"]


@pytest.mark.parametrize("case", VECTORS["consistency"], ids=lambda c: c["file"].split("testdata/")[1])
def test_consistency_vectors(case: dict[str, Any]) -> None:
    ok = merkle.verify_consistency(
        case["size1"], case["size2"], b64(case["root1"]), b64(case["root2"]),
        [b64(p) for p in case["proof"] or []],
    )  # fmt: skip
    assert ok is not case["wantErr"]


def test_generated_proofs_match_the_vectors_and_verify_for_every_size() -> None:
    happy = {
        (c["leafIdx"], c["treeSize"]): [b64(p) for p in c["proof"] or []]
        for c in VECTORS["inclusion"]
        if c["desc"] == "happy path"
    }
    leaves = [hashlib.sha256(b"x%d" % i).digest() for i in range(70)]
    vec = [merkle.leaf_hash(x) for x in LEAVES]
    for (i, n), proof in happy.items():
        assert merkle.inclusion_proof(i, n, merkle.list_range_hash(vec)) == proof
    for n in range(1, len(leaves) + 1):
        root = mth_reference(leaves[:n])
        mth = merkle.list_range_hash([merkle.leaf_hash(x) for x in leaves[:n]])
        assert mth(0, n) == root
        for i in range(n):
            p = merkle.inclusion_proof(i, n, mth)
            assert merkle.verify_inclusion(i, n, merkle.leaf_hash(leaves[i]), p, root)
            assert not merkle.verify_inclusion(i, n, merkle.leaf_hash(b"other"), p, root)
        for m in range(0, n + 1):
            old = mth_reference(leaves[:m])
            p = merkle.consistency_proof(m, n, mth)
            assert merkle.verify_consistency(m, n, old, root, p) is (m > 0)
            if 0 < m < n:
                assert not merkle.verify_consistency(m, n, hashlib.sha256(b"forged").digest(), root, p)
