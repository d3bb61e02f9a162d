"""The client's one retry policy: which attempts are repeated, and how long to wait first.

Idempotent calls (every GET, ``cancel``, and the grading, extraction and metrics POSTs, whose
answers are cached and deterministic per item) are retried on connection errors and on 429/503
answers, with full-jitter exponential backoff floored at the service's ``Retry-After``. A call
that creates state on the server (``submit_job``, ``submit_mcq_job``, ``calibrate``) is retried
only when the request never left (the connection could not be opened): a lost answer is never
resent, which could start the job twice. Read and write timeouts are not retried: the timeout is
the caller's stated patience.

``RetryPolicy.retrying`` states the policy as a tenacity ``Retrying``; the client's flows step
through it (``bonusjudge_client.flows``) rather than letting it call and sleep, so the one
policy serves the sync and the async client alike.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
import tenacity

from bonusjudge_client.backoff import full_jitter, parse_retry_after
from bonusjudge_client.errors import ClientInputError

__all__ = ["NOT_SENT", "RetryPolicy", "parse_retry_after"]

NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
"""Transport errors raised before the request left this machine: any call may be retried."""

# Broken connection after sending: only calls that may be repeated are retried.
_BROKEN = (httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError, httpx.CloseError)


def _never_progressed() -> int:
    return 0


@dataclass(frozen=True)
class RetryPolicy:
    """How the client retries calls that may be repeated safely.

    Args:
        retries: Retries after the first attempt (0 disables retrying).
        backoff_base: Bound of the first backoff, in seconds; it doubles per retry.
        backoff_cap: Largest backoff bound, in seconds.
        max_retry_after: Longest ``Retry-After`` honoured; a longer one is cut to this, so a
            misconfigured proxy cannot stall a run for hours.
        statuses: Answer statuses that are retried (the service is busy or not ready yet).
    """

    retries: int = 3
    backoff_base: float = 0.5
    backoff_cap: float = 30.0
    max_retry_after: float = 120.0
    statuses: frozenset[int] = frozenset({429, 503})

    def __post_init__(self) -> None:
        if self.retries < 0:
            raise ClientInputError("retries must be >= 0", field="retry.retries")
        if self.backoff_base < 0 or self.backoff_cap < 0 or self.max_retry_after < 0:
            raise ClientInputError("backoff times must be >= 0", field="retry")

    def delay(
        self, retry: int, retry_after: float | None = None, rng: random.Random | None = None
    ) -> float:
        """Seconds to wait before retry number ``retry`` (1-based).

        Full jitter (uniform up to the exponential bound) so many clients failing together do
        not come back in lockstep; the service's ``Retry-After`` is a floor.
        """
        delay = full_jitter(retry, base=self.backoff_base, cap=self.backoff_cap, rng=rng)
        if retry_after is not None:
            delay = max(delay, min(retry_after, self.max_retry_after))
        return delay

    def retrying(
        self,
        *,
        idempotent: bool,
        retry_statuses: bool,
        rng: random.Random | None = None,
        progress_at: Callable[[], int] = _never_progressed,
    ) -> tenacity.Retrying:
        """This policy for one call, as a tenacity ``Retrying`` to step through (never to run).

        An attempt's outcome is an answer (retried when its status is one of ``statuses``, if
        ``retry_statuses`` and ``idempotent``) or an ``httpx.TransportError`` (retried when the
        request never left, or when it broke and the call is ``idempotent``). Once the retries
        are spent the last outcome stands: the answer is returned, the error raised.

        Args:
            idempotent: The call may be sent again after it may have reached the service.
            retry_statuses: Busy answers (``statuses``) are retried.
            rng: Random source of the jitter.
            progress_at: Number of the last attempt that made progress (a stream that delivered
                lines); the retry allowance counts from there, so a long stream that breaks now
                and then is resumed every time.
        """

        def counted(state: tenacity.RetryCallState) -> int:
            return state.attempt_number - progress_at()

        def retry(state: tenacity.RetryCallState) -> bool:
            outcome = state.outcome
            if outcome is None or counted(state) > self.retries:
                return False
            if outcome.failed:
                error = outcome.exception()
                if isinstance(error, NOT_SENT):
                    return True
                return idempotent and isinstance(error, _BROKEN)
            status = getattr(outcome.result(), "status_code", None)
            return retry_statuses and idempotent and status in self.statuses

        def wait(state: tenacity.RetryCallState) -> float:
            return self.delay(max(counted(state), 1), _retry_after(state.outcome), rng)

        return tenacity.Retrying(retry=retry, wait=wait, stop=tenacity.stop_never)


def _retry_after(outcome: Any) -> float | None:
    if outcome is None or outcome.failed:
        return None
    headers = getattr(outcome.result(), "headers", None)
    return parse_retry_after(headers.get("Retry-After")) if headers is not None else None
