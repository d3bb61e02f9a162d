"""An upload's items validated and encoded in batches, off the event loop, before it is stored.

A job's items are read one at a time (``api.jobs.spool``), validated by the job kind's checker,
and encoded into the rows that store them (``api.jobs.items.ItemEncoder``); every
``BATCH_ITEMS`` rows go to a temporary file. Only then is the job stored, in one transaction
that inserts the rows batch by batch (``JobStore.create``), so the store's write lock (SQLite)
is held for the inserts alone, never while an upload is parsed, and the quota is checked against
what the job really writes. Memory holds a batch, the ids seen so far (duplicates are refused)
and the listed invalid items; never the upload's items or rows.

All of it runs in ``UPLOAD_THREADS`` threads of their own (``in_upload_thread``): uploads wait
for one there, so they neither hold the event loop nor take the threads that store calls and
other requests use (``asyncio.to_thread``).
"""

from __future__ import annotations

import asyncio
import functools
import marshal
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import IO, Any, ParamSpec, TypeVar

from api.jobs.items import EncodedItems, ItemEncoder, JobItem
from api.jobs.spool import GilCourtesy, RawItem, spooled
from core.errors import InputError

__all__ = [
    "BATCH_ITEMS",
    "UPLOAD_THREADS",
    "ItemCheck",
    "ItemLimit",
    "StagedItems",
    "in_upload_thread",
    "stage_items",
]

BATCH_ITEMS = 500
"""Rows encoded, written to the temporary file and inserted at a time."""

UPLOAD_THREADS = 2
"""Uploads read, validated and encoded at once per process (one per core of a small host);
others wait their turn, their bodies already on disk and counted in flight (``api.limits``)."""

ItemCheck = Callable[[int, RawItem], JobItem]
"""A job kind's validation of one item: ``check(index, raw item) -> JobItem`` (keeps state,
e.g. the ids seen, across calls)."""

_ROW_KEYS = ("job_id", "idx", "item_id", "line", "request", "error")
"""The columns of an ``items`` row (``ItemEncoder.add``), in the order they are written."""

_P = ParamSpec("_P")
_T = TypeVar("_T")
_executor: ThreadPoolExecutor | None = None


async def in_upload_thread(fn: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs) -> _T:
    """Run ``fn(*args, **kwargs)`` in one of the upload threads and wait for it."""
    global _executor
    if _executor is None:  # one pool per process, made at its first upload
        _executor = ThreadPoolExecutor(UPLOAD_THREADS, thread_name_prefix="bonusjudge-upload")
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(_executor, functools.partial(fn, *args, **kwargs))


@dataclass(frozen=True)
class ItemLimit:
    """How many items a job may have, and how a job kind says it has none or too many.

    Attributes:
        most: Most items per job (``max_job_items``).
        empty: The message of a job without items.
        over: The message of one with too many (``{count}`` and ``{most}`` filled in).
    """

    most: int
    empty: str
    over: str

    def counted(self, raw: Iterable[RawItem]) -> Iterator[RawItem]:
        """The items of ``raw``, refused when there are none or too many.

        Past ``most`` the rest are counted, not yielded, so the message says how many there were.

        Raises:
            InputError: (field ``items``) no items, or more than ``most``.
        """
        count = 0
        for entry in raw:
            count += 1
            if count <= self.most:
                yield entry
        if not count:
            raise InputError(self.empty, field="items")
        if count > self.most:
            raise InputError(self.over.format(count=count, most=self.most), field="items")


class StagedItems:
    """Encoded rows of an upload in a temporary file, with what they count (``encoded``).

    Close it once the job is stored (or refused): that deletes the file.
    """

    def __init__(self) -> None:
        self._file: IO[bytes] = spooled()
        self._batches = 0
        self._encoded: EncodedItems | None = None

    @property
    def encoded(self) -> EncodedItems:
        """What the rows count, and the rows batch by batch (read back from the file)."""
        if self._encoded is None:
            raise RuntimeError("the items are still being staged")
        return self._encoded

    def write(self, batch: Sequence[dict[str, Any]]) -> None:
        """Add a batch of ``items`` rows."""
        if batch:
            # Values of our own making (str, int, bytes, None): marshal is the cheapest codec.
            marshal.dump([tuple(row[key] for key in _ROW_KEYS) for row in batch], self._file)
            self._batches += 1

    def batches(self) -> Iterator[list[dict[str, Any]]]:
        """The rows written, batch by batch."""
        self._file.seek(0)
        for _ in range(self._batches):
            yield [dict(zip(_ROW_KEYS, row, strict=True)) for row in marshal.load(self._file)]

    def close(self) -> None:
        """Delete the rows."""
        self._file.close()


def stage_items(
    job_id: str, raw: Iterable[RawItem], check: ItemCheck, limit: ItemLimit
) -> StagedItems:
    """Validate and encode an upload's items in batches, into a temporary file.

    Blocking: run it with :func:`in_upload_thread`.

    Args:
        job_id: The job the rows will belong to.
        raw: The items as read (``SpooledLines``, or a list).
        check: The job kind's validation of one item.
        limit: How many items a job may have.

    Returns:
        The staged rows; ``encoded`` is what ``JobManager.submit`` stores.

    Raises:
        InputError: (``items``) no items, or too many.
    """
    encoder = ItemEncoder(job_id)
    staged = StagedItems()
    try:
        batch: list[dict[str, Any]] = []
        courtesy = GilCourtesy()  # the event loop's thread is never kept waiting for long
        for index, entry in enumerate(limit.counted(raw)):
            courtesy()
            row = encoder.add(check(index, entry))
            if row is None:
                continue
            batch.append(row)
            if len(batch) >= BATCH_ITEMS:
                staged.write(batch)
                batch = []
        staged.write(batch)
    except BaseException:
        staged.close()
        raise
    staged._encoded = encoder.encoded(staged.batches())
    return staged
