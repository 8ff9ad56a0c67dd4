"""Inflating gzip input with a cap, so that a small file cannot demand gigabytes (a gzip bomb:
3 MB that inflate to 3 GiB).

The cap on the inflated size defaults to 64 times the compressed size, at least 256 MiB and
at most 4 GiB (HLO text compresses 10-20x; a dump that inflates past the cap is refused with a
clear error, not inflated whole). `set_limit(n)` (the CLI's `--max-inflated-size`) overrides it.
"""

from __future__ import annotations

import zlib

GZIP_MAGIC = b"\x1f\x8b"
_FLOOR, _CEILING, _RATIO = 256 << 20, 4 << 30, 64
_CHUNK = 1 << 20
_user_limit: int | None = None


class InflateError(ValueError):
    """Corrupt gzip data, or data that inflates beyond the cap."""


def set_limit(limit_bytes: int | None) -> None:
    """The cap for every later inflation in this process (None: the default rule)."""
    global _user_limit
    _user_limit = limit_bytes


def limit_for(compressed_size: int, limit_bytes: int | None = None) -> int:
    if limit_bytes is not None:
        return limit_bytes
    if _user_limit is not None:
        return _user_limit
    return min(_CEILING, max(_FLOOR, _RATIO * compressed_size))


def inflate(data: bytes, limit_bytes: int | None = None) -> bytes:
    """The bytes of every gzip member in `data`, streamed: stops as soon as the output would pass
    the cap. Raises InflateError."""
    limit = limit_for(len(data), limit_bytes)
    out: list[bytes] = []
    size = 0
    view = memoryview(data)
    try:
        while view:
            inflater = zlib.decompressobj(wbits=31)
            chunk = inflater.decompress(view, min(_CHUNK, limit - size + 1))
            while True:
                size += len(chunk)
                if size > limit:
                    raise InflateError(f"gzip data inflates beyond {limit:,} bytes; refused (raise the cap with "
                                       "--max-inflated-size BYTES)")
                out.append(chunk)
                if inflater.eof or not inflater.unconsumed_tail:
                    break
                chunk = inflater.decompress(inflater.unconsumed_tail, min(_CHUNK, limit - size + 1))
            if not inflater.eof:
                raise InflateError("corrupt gzip data: Compressed file ended before the end-of-stream marker was "
                                   "reached")
            rest = inflater.unused_data.lstrip(b"\x00")  # zero padding after a member is allowed, as in gzip
            if rest and rest[:2] != GZIP_MAGIC:
                raise InflateError("corrupt gzip data: Not a gzipped file (trailing bytes after the last member)")
            view = memoryview(rest)
    except zlib.error as e:
        raise InflateError(f"corrupt gzip data: {e}") from None
    return b"".join(out)
