"""The C2SP tlog-tiles layout: which object holds which hashes and entries.

Why static tiles: a checkpoint, full tiles and entry bundles are plain files, so the
store (a directory, a bucket, a CDN in front of it) serves the log as it is, and any
tlog-tiles client (Go's `sumdb/tlog`, Sunlight's tools) reads it without our code.
Full tiles and bundles never change; a partial tile's path names its width, so it
never changes either.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence

from pith_pipeline.tlog.merkle import HASH_SIZE

TILE_HEIGHT = 8
TILE_WIDTH = 1 << TILE_HEIGHT  # 256 hashes, 8,192 bytes
MAX_ENTRY = 0xFFFF  # entries are uint16 length-prefixed in a bundle


def encode_index(n: int) -> str:
    """Tile index `n` as the spec's path: 1234067 -> `x001/x234/067`."""
    if n < 0:
        raise ValueError("a tile index is not negative")
    parts = [f"{n % 1000:03d}"]
    n //= 1000
    while n:
        parts.append(f"x{n % 1000:03d}")
        n //= 1000
    return "/".join(reversed(parts))


def tile_path(level: int, index: int, width: int = TILE_WIDTH) -> str:
    """`tile/<L>/<N>[.p/<W>]`, relative to the log prefix."""
    if not 0 <= level <= 63:
        raise ValueError(f"tile level {level} out of range")
    if not 1 <= width <= TILE_WIDTH:
        raise ValueError(f"tile width {width} out of range")
    suffix = "" if width == TILE_WIDTH else f".p/{width}"
    return f"tile/{level}/{encode_index(index)}{suffix}"


def entries_path(index: int, width: int = TILE_WIDTH) -> str:
    """`tile/entries/<N>[.p/<W>]`, relative to the log prefix."""
    if not 1 <= width <= TILE_WIDTH:
        raise ValueError(f"bundle width {width} out of range")
    suffix = "" if width == TILE_WIDTH else f".p/{width}"
    return f"tile/entries/{encode_index(index)}{suffix}"


def tile_width(level: int, index: int, size: int) -> int:
    """How many hashes tile (level, index) holds in a tree of `size` leaves (0: none)."""
    hashes = size >> (TILE_HEIGHT * level)
    return max(0, min(TILE_WIDTH, hashes - index * TILE_WIDTH))


def tiles_for_size(size: int) -> Iterator[tuple[int, int, int]]:
    """Every (level, index, width) a tree of `size` consists of, level by level."""
    level = 0
    while size >> (TILE_HEIGHT * level):
        hashes = size >> (TILE_HEIGHT * level)
        for index in range((hashes + TILE_WIDTH - 1) // TILE_WIDTH):
            yield level, index, tile_width(level, index, size)
        level += 1


def split_hashes(data: bytes, width: int, what: str) -> list[bytes]:
    if len(data) != width * HASH_SIZE:
        raise ValueError(f"{what} has {len(data)} bytes, expected {width * HASH_SIZE}")
    return [data[i : i + HASH_SIZE] for i in range(0, len(data), HASH_SIZE)]


def encode_bundle(entries: Sequence[bytes]) -> bytes:
    out = bytearray()
    for e in entries:
        if len(e) > MAX_ENTRY:
            raise ValueError(f"a log entry of {len(e)} bytes exceeds the bundle limit of {MAX_ENTRY}")
        out += struct.pack(">H", len(e)) + e
    return bytes(out)


def decode_bundle(data: bytes, width: int, what: str) -> list[bytes]:
    """The entries of a bundle; it must hold exactly `width` of them."""
    out: list[bytes] = []
    pos = 0
    while pos < len(data):
        if pos + 2 > len(data):
            raise ValueError(f"{what} ends inside a length prefix")
        (n,) = struct.unpack_from(">H", data, pos)
        if pos + 2 + n > len(data):
            raise ValueError(f"{what} ends inside entry {len(out)}")
        out.append(data[pos + 2 : pos + 2 + n])
        pos += 2 + n
    if len(out) != width:
        raise ValueError(f"{what} holds {len(out)} entries, expected {width}")
    return out
