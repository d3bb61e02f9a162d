"""How API keys share the service: per-key quotas and fairness between keys' jobs.

The rules are pure functions of counts; the store supplies the counts (in the transaction that
stores a job, for the quotas) and the worker applies the answers:

* ``Quota``: a key's queued or running jobs, unfinished items and stored bytes stay within the
  configured limits; a job beyond them is refused with 429.
* ``JobStore.claim`` gives the next lease (on a chunk of a job's items) to the owner holding the
  fewest chunks (in SQL, so it holds across processes and replicas).
* ``make_room``: a full process hands a slot of the busiest owner over to a waiting one.
* ``share``: each chunk running here has at most its share of the grader's concurrency in
  flight.
* ``check_request``: the service's own limits on one request (bonus points per item).
* ``RetryPolicy``: which unscored items ``retry-unscored`` re-sends, and how many passes a job
  gets (the job's quota is checked as for a new job).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass
from typing import TypeVar

from api.errors import Conflict, QuotaExceeded
from api.settings import ServiceSettings
from bonusjudge_client.wire.grading import GradeRequest
from bonusjudge_client.wire.vocab import UnscoredReason
from core.errors import InputError

_Slot = TypeVar("_Slot")


@dataclass(frozen=True)
class Usage:
    """What one key holds in the store now.

    Attributes:
        jobs: Its queued or running jobs (any kind).
        queued: Unfinished items across those jobs.
        stored: Bytes of items and results its jobs keep.
    """

    jobs: int
    queued: int
    stored: int


@dataclass(frozen=True)
class Quota:
    """Per-key limits checked when a job is stored (in the same transaction, so across replicas).

    Attributes:
        max_jobs: Queued or running jobs of any kind per key.
        max_queued_items: Unfinished items across a key's queued and running jobs.
        max_stored_bytes: Bytes of items and results a key's jobs keep in the store.
        retry_after: Seconds a caller over the job or item limit is told to wait.
    """

    max_jobs: int
    max_queued_items: int
    max_stored_bytes: int
    retry_after: float = 30.0

    @classmethod
    def from_settings(cls, settings: ServiceSettings) -> Quota:
        """The limits configured in ``settings`` (``max_*_per_key``)."""
        return cls(
            max_jobs=settings.max_jobs_per_key,
            max_queued_items=settings.max_queued_items_per_key,
            max_stored_bytes=settings.max_stored_bytes_per_key,
        )

    def check(self, usage: Usage, items: int, stored: int) -> None:
        """Refuse a new job of ``items`` units and ``stored`` bytes that would break a limit.

        Args:
            usage: What the job's owner holds now.
            items: Units of work the job adds.
            stored: Bytes the job keeps in the store.

        Raises:
            QuotaExceeded: naming the limit and the key's current use.
        """
        if usage.jobs + 1 > self.max_jobs:
            raise QuotaExceeded(
                f"quota exceeded: at most {self.max_jobs} queued or running jobs per API key, "
                f"and this key has {usage.jobs}; wait for one to finish or cancel one",
                retry_after=self.retry_after,
            )
        if usage.queued + items > self.max_queued_items:
            raise QuotaExceeded(
                f"quota exceeded: at most {self.max_queued_items} unfinished items per API key; "
                f"this key has {usage.queued} queued and the job adds {items}",
                retry_after=self.retry_after, field="items",
            )
        if usage.stored + stored > self.max_stored_bytes:
            raise QuotaExceeded(
                f"quota exceeded: at most {self.max_stored_bytes} stored bytes per API key; "
                f"this key's jobs keep {usage.stored} and the job needs {stored}; finished jobs "
                "are removed after the retention period",
            )


FINAL_REASONS: frozenset[UnscoredReason] = frozenset({
    "refusal", "not_supported", "parse_failure", "validation_failure", "truncated_output",
    "empty_output",
})
"""Unscored reasons a retry of the same prompt does not change: the judge answered it.

A refusal, a task the judge cannot do, and an answer that stayed unusable after the caller's
own re-asks (unparseable, invalid, cut off at the token limit, empty) are the judge's reply to
that exact prompt; with the same judge configuration (a job's cannot change) sending it again
mostly buys the same reply: 100 refusing items over 6 passes cost 3,600 provider requests. The
other reasons (provider errors, rate limits, timeouts, an open circuit, a spent retry budget,
a cancelled call) say nothing about the item and are re-sent.
"""


@dataclass(frozen=True)
class RetryPolicy:
    """What one ``retry-unscored`` pass re-sends, and how many passes a job may have.

    Attributes:
        max_passes: Passes per job (``ServiceSettings.max_retry_passes``).
        include: Reasons of :data:`FINAL_REASONS` the request asks to re-send all the same.
    """

    max_passes: int
    include: frozenset[str] = frozenset()

    @classmethod
    def from_settings(cls, settings: ServiceSettings, include: Sequence[str] = ()) -> RetryPolicy:
        """The service's pass limit, with the reasons a request includes."""
        return cls(max_passes=settings.max_retry_passes, include=frozenset(include))

    def resends(self, reasons: Sequence[str]) -> bool:
        """Whether an unscored result with these ``task: reason`` entries is graded again.

        It is when any of its tasks failed for a reason that may change (or one included).
        """
        if not reasons:
            return True  # no reason recorded: nothing says a retry is pointless
        for entry in reasons:
            reason = entry.rpartition(": ")[2]
            if reason not in FINAL_REASONS or reason in self.include:
                return True
        return False

    def check(self, job_id: str, passes: int) -> None:
        """Refuse a pass beyond the job's limit.

        Raises:
            Conflict: ``passes`` already made is the limit (409, naming it).
        """
        if passes >= self.max_passes:
            raise Conflict(
                f"job {job_id} has had its {passes} retry pass(es): at most "
                f"{self.max_passes} per job (max_retry_passes); submit its unscored items as "
                "a new job to grade them again",
                field="job_id",
            )


def share(concurrency: int, running: int) -> int:
    """Items one running chunk may have in flight: its share of the grader's concurrency.

    Chunks running in one process share the grader's slots; were each to queue as many items
    as it can, a chunk started later would wait behind all of theirs. With at most its share in
    flight, each gets about the same number of slots whenever one frees up.

    Args:
        concurrency: The grader's concurrency.
        running: Chunks (of any jobs) running in this process.
    """
    return max(1, math.ceil(concurrency / max(1, running)))


def make_room(
    candidates: Mapping[_Slot, str], waiting: Set[str], held: Mapping[str, int]
) -> _Slot | None:
    """The slot (a chunk) to hand over when this process is full and another owner waits.

    The chunk of the owner holding the most chunks stops feeding items and goes back to the
    queue, where the fair claim order gives the slot to the waiting owner. Only while that
    owner holds at least two chunks more than the waiting one, so shares even out without
    chunks changing hands back and forth.

    Args:
        candidates: Chunks running here that may yield, with their owners; among equals the
            first listed is chosen.
        waiting: Owners with a chunk nobody holds.
        held: Chunks held by a live lease (in any process), per owner.
    """
    if not waiting:
        return None
    fewest = min(held.get(owner, 0) for owner in waiting)
    choices = [
        (held.get(owner, 0), slot)
        for slot, owner in candidates.items()
        if held.get(owner, 0) >= fewest + 2
    ]
    return max(choices, key=lambda choice: choice[0])[1] if choices else None


def check_request(request: GradeRequest, settings: ServiceSettings) -> GradeRequest:
    """Apply the service's own limits to a valid request.

    Raises:
        InputError: (field ``bonus_points``) more points than ``settings.max_bonus_points``.
    """
    points = request.bonus_points
    if points is not None and len(points) > settings.max_bonus_points:
        raise InputError(
            f"bonus_points: {len(points)} points exceed the limit of "
            f"{settings.max_bonus_points} per item",
            field="bonus_points",
        )
    return request
