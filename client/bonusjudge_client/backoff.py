"""Backoff arithmetic both sides of the wire share: full-jitter waits and ``Retry-After``.

The engine's retries to a judge provider and the client's retries to the service wait the same
way and read the same header, so one formula and one parser serve both.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

__all__ = ["full_jitter", "parse_retry_after"]


def full_jitter(
    attempt: int, *, base: float, cap: float, rng: random.Random | None = None
) -> float:
    """Seconds to wait before retry number ``attempt`` (1-based), without any floor.

    Uniform in ``[0, min(cap, base * 2**(attempt-1))]``.

    Args:
        attempt: The retry's number, from 1.
        base: Bound of the first retry's wait; it doubles per retry.
        cap: Largest bound.
        rng: Random source (seedable for tests); the module's by default.
    """
    bound = min(cap, base * (2 ** max(0, attempt - 1)))
    return (rng or random).uniform(0.0, bound)


def parse_retry_after(value: object, *, now: datetime | None = None) -> float | None:
    """Seconds a ``Retry-After`` header asks for (delta-seconds or HTTP date), never negative.

    None when the header is absent or unparsable: it only tunes a backoff, so a malformed one is
    ignored rather than failing the call. A date in the past asks for no wait (0).

    Args:
        value: The header's value (a number is taken as seconds).
        now: The current time, for an HTTP date (tests); the clock's by default.
    """
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return max(0.0, float(value))
    if not isinstance(value, str) or not value.strip():
        return None
    text = value.strip()
    try:
        return max(0.0, float(text))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())
