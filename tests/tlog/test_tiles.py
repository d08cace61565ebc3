"""Tile paths and the tile set of a tree, against the C2SP tlog-tiles text."""

from __future__ import annotations

import pytest

from pith_pipeline.tlog.tiles import (
    decode_bundle,
    encode_bundle,
    encode_index,
    entries_path,
    tile_path,
    tiles_for_size,
)


def test_index_encoding_is_the_specs() -> None:
    assert encode_index(1234067) == "x001/x234/067"  # the spec's example
    assert encode_index(0) == "000"
    assert encode_index(999) == "999"
    assert encode_index(1000) == "x001/000"
    assert tile_path(0, 1234067) == "tile/0/x001/x234/067"
    assert tile_path(2, 5, 17) == "tile/2/005.p/17"
    assert entries_path(3, 112) == "tile/entries/003.p/112"
    with pytest.raises(ValueError):
        tile_path(0, 0, 0)


def test_tree_of_70000_is_the_specs_example() -> None:
    tiles = list(tiles_for_size(70_000))
    level0 = [t for t in tiles if t[0] == 0]
    assert sum(1 for t in level0 if t[2] == 256) == 273
    assert [t for t in level0 if t[2] != 256] == [(0, 273, 112)]
    assert [t for t in tiles if t[0] == 1] == [(1, 0, 256), (1, 1, 17)]
    assert [t for t in tiles if t[0] == 2] == [(2, 0, 1)]
    assert list(tiles_for_size(256)) == [(0, 0, 256), (1, 0, 1)]


def test_bundles_round_trip_and_refuse_damage() -> None:
    entries = [b"", b"a", bytes(300)]
    data = encode_bundle(entries)
    assert data[:2] == b"\x00\x00" and data[2:4] == b"\x00\x01"
    assert decode_bundle(data, 3, "b") == entries
    with pytest.raises(ValueError, match="expected 2"):
        decode_bundle(data, 2, "b")
    with pytest.raises(ValueError, match="inside"):
        decode_bundle(data[:-1], 3, "b")
    with pytest.raises(ValueError, match="exceeds"):
        encode_bundle([bytes(70_000)])
