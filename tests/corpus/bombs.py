"""gzip bombs built without ever holding their inflated content (tests/test_bad_input.py, bench/hostile.py)."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path


def write_bomb(path: Path, prefix: bytes, fill: bytes, total: int) -> int:
    """A valid gzip file whose content is `prefix` then `total` bytes of `fill`, at deflate's maximum
    ratio (~1030x), built without ever holding the inflated content: one full-flushed 16 MiB block
    is independent of what precedes it, so it can be repeated. Returns the inflated size."""
    unit = fill * ((16 << 20) // len(fill))
    n = max(1, total // len(unit))
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    head = c.compress(prefix) + c.flush(zlib.Z_FULL_FLUSH)
    block = c.compress(unit) + c.flush(zlib.Z_FULL_FLUSH)
    crc = zlib.crc32(prefix)
    for _ in range(n):
        crc = zlib.crc32(unit, crc)
    size = len(prefix) + n * len(unit)
    with open(path, "wb") as f:
        f.write(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff" + head)
        for _ in range(n):
            f.write(block)
        f.write(c.flush() + struct.pack("<II", crc & 0xFFFFFFFF, size & 0xFFFFFFFF))
    return size
