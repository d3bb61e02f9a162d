"""How items, results and errors are stored: JSON text, zlib-compressed when that is smaller.

The items of one job share their keys and much of their values (a result's provenance is the
same for every item), so each job keeps one request and one result as a zlib preset dictionary
(``jobs.request_dict``, ``jobs.result_dict``), and a blob compressed with it is a fraction of one
compressed alone: what keeps a job of small items within a few times its upload. A compressed
blob is a ``BLOB`` starting with its tag byte; a text stays ``TEXT``, so rows written before
compression (schema version 2 and older) read as they are. Since version 4 a text that does
not compress is stored as its UTF-8 bytes (Postgres keeps one type per column): JSON never
starts with a tag byte, so such a value reads as text.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping

PLAIN, REQUESTS, RESULTS = 1, 2, 3
"""First byte of a compressed blob: zlib alone, or with the job's request or result dictionary."""

Dicts = Mapping[int, bytes]
"""A job's compression dictionaries by tag (``REQUESTS``, ``RESULTS``), as far as it has any."""


def pack(text: str, dicts: Dicts | None = None, tag: int = PLAIN) -> str | bytes:
    """A request, result or error JSON as stored: compressed when that is smaller.

    Args:
        text: The JSON text.
        dicts: The job's dictionaries; ``tag``'s is used when present, else plain zlib.
        tag: ``REQUESTS`` or ``RESULTS`` to use that dictionary.
    """
    raw = text.encode("utf-8")
    zdict = (dicts or {}).get(tag)
    if zdict is None:
        tag = PLAIN
        compressor = zlib.compressobj(6)
    else:
        compressor = zlib.compressobj(6, zlib.DEFLATED, 15, 9, zlib.Z_DEFAULT_STRATEGY, zdict)
    packed = bytes([tag]) + compressor.compress(raw) + compressor.flush()
    return packed if len(packed) < len(raw) else text


def unpack(value: str | bytes, dicts: Dicts | None = None) -> str:
    """The JSON text of a stored value: text, its UTF-8 bytes, or ``pack``'s blob (``dicts``)."""
    if isinstance(value, str):
        return value
    tag = value[0] if value else 0
    if tag not in (PLAIN, REQUESTS, RESULTS):
        return value.decode("utf-8")
    if tag == PLAIN:
        return zlib.decompress(value[1:]).decode("utf-8")
    decompressor = zlib.decompressobj(zdict=(dicts or {})[tag])
    return (decompressor.decompress(value[1:]) + decompressor.flush()).decode("utf-8")


def stored_size(value: str | bytes | None) -> int:
    """Bytes a stored value takes (what counts towards its owner's quota)."""
    if value is None:
        return 0
    return len(value) if isinstance(value, bytes) else len(value.encode("utf-8"))
