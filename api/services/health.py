"""The readiness checks behind ``/readyz``: encoder, job store, cache and judge.

The job store check is what is true now: a write transaction that runs ``SELECT 1`` (so a
Postgres that is down, or a SQLite file another process keeps locked, fails it) within
``STORE_TIMEOUT`` seconds, and for a SQLite file the room it has to grow (free bytes on its
volume, and this process's file-size limit): under ``STORE_MIN_ROOM`` the store is full, and
every job route would answer 503. The answer is kept ``STORE_CHECK_TTL`` seconds and one probe
runs at a time, so a flood of probes costs the store at most one transaction a second.

The judge check reports the default judge's state as its judge calls left it, so answering
``/readyz`` costs no judge call: its circuit breaker open (an outage: ``circuit_open``) or its
last answer a refusal of the credentials (``credentials_refused``) make it fail. A load balancer
that stops sending traffic to a service that is not ready would keep it there, since only an
answer closes the breaker; so while the judge is in trouble, ``/readyz`` sends one probe request
(the preflight's one-token call) in the background when one is due, and never waits for it: at
most one at a time, once per breaker cool-down (5 s, doubling up to 60 s) or every 30 s after a
refusal.
"""

from __future__ import annotations

import asyncio
import math
import os
import resource
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import text

from api.errors import store_cause
from api.jobs import JobStore
from api.observability import EncoderWarmup
from api.services.judges import LLM_METRICS
from bonusjudge_client.wire.schemas import Readiness, ReadyCheck
from judge.engine import Grader

_PROBES: set[asyncio.Task[None]] = set()
"""Probe requests in flight, held so the event loop does not drop them before they end."""

STORE_TIMEOUT = 2.0
"""Seconds the job store check may take before the store counts as unavailable."""

STORE_CHECK_TTL = 1.0
"""Seconds a job store check's answer is reused (a probe flood costs one transaction a second)."""

STORE_MIN_ROOM = 1_000_000
"""Bytes a SQLite job store needs room to grow by to be ready: one large job's items."""


@dataclass
class _StoreProbe:
    """The last job store check of one store, and the check under way, if any."""

    checked_at: float = -math.inf
    answer: ReadyCheck | None = None
    running: asyncio.Task[ReadyCheck] | None = field(default=None, repr=False)


_STORE_PROBES: weakref.WeakKeyDictionary[JobStore, _StoreProbe] = weakref.WeakKeyDictionary()
"""Each store's probe state (weak: an app's store goes with the app, in tests too)."""


async def readiness(warmup: EncoderWarmup, grader: Grader, store: JobStore) -> Readiness:
    """Encoder loaded (if needed), job store writable now, judge answering; cache degradation.

    The judge answers when it is configured, its circuit breaker is closed and its last answer
    was no refusal of the credentials.
    """
    cache, degraded = await _cache_check(grader)
    checks = {"encoder": warmup.check(), "store": await store_check(store), "cache": cache,
              "judge": _judge_check(grader)}
    ready = all(check.ok for check in checks.values())
    return Readiness(ready=ready, checks=checks, degraded=degraded)


async def store_check(store: JobStore) -> ReadyCheck:
    """The job store's check: reachable and writable within ``STORE_TIMEOUT``, with room to grow.

    Reuses an answer younger than ``STORE_CHECK_TTL``, and joins a check under way rather than
    starting another; a check that outlives its timeout ends on its thread meanwhile. The detail
    names the kind of failure, never the URL, the path or the driver's text (``/readyz`` needs
    no key).
    """
    probe = _STORE_PROBES.setdefault(store, _StoreProbe())
    if probe.answer is not None and time.monotonic() - probe.checked_at < STORE_CHECK_TTL:
        return probe.answer
    if probe.running is None or probe.running.done():
        probe.running = asyncio.create_task(asyncio.to_thread(_probe_store, store))
    try:
        answer = await asyncio.wait_for(asyncio.shield(probe.running), STORE_TIMEOUT)
    except TimeoutError:
        # A SQLite write waits for a lock held elsewhere; a Postgres one for its server.
        why = ("its write lock is held elsewhere, or its disk stalls" if store.path is not None
               else "its database is slow or out of reach")
        answer = ReadyCheck(
            ok=False, detail=f"store_unavailable: no answer within {STORE_TIMEOUT:g} s ({why})"
        )
    probe.answer, probe.checked_at = answer, time.monotonic()
    return answer


def _probe_store(store: JobStore) -> ReadyCheck:
    """One check of ``store``, on a worker thread (never raises)."""
    kind = "postgres" if store.path is None else "sqlite"
    try:
        with store.db.tx() as conn:  # SQLite: takes the write lock, as a job write would
            conn.execute(text("SELECT 1"))
    except Exception as exc:
        # Which cause, as a job route's 503 says it: locked elsewhere, out of reach, full.
        cause, sentence = store_cause(exc)
        code = "store_full" if cause == "full" else "store_unavailable"
        return ReadyCheck(ok=False, detail=f"{code}: {sentence}")
    if store.path is not None:
        room = _room(store.path)
        if room < STORE_MIN_ROOM:
            return ReadyCheck(
                ok=False, detail=f"store_full: the sqlite job store has {room:,} bytes left to "
                "grow (its disk, or this process's file-size limit); job routes answer 503",
            )
    return ReadyCheck(ok=True, detail=f"{kind}: writable")


def _room(database: Path) -> int:
    """Bytes ``database`` (a SQLite file) can still grow by.

    Its volume's free space, and the process's file-size limit (``RLIMIT_FSIZE``) less the size
    of its largest file.
    """
    stats = os.statvfs(database.parent)
    room = stats.f_bavail * stats.f_frsize
    limit, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
    if limit != resource.RLIM_INFINITY:
        sizes = [p.stat().st_size for p in (database, database.with_name(database.name + "-wal"))
                 if p.exists()]
        room = min(room, limit - max(sizes, default=0))
    return max(room, 0)


async def _cache_check(grader: Grader) -> tuple[ReadyCheck, bool]:
    """The cache check and whether the cache is degraded.

    Always ok: a failing cache only costs repeated judge calls, so the service keeps serving.
    Degraded while the cache cannot be written now (probed here), not for a past error.
    The detail counts errors and never names the folder or quotes an error (``/readyz`` needs no
    key, and an OSError's text carries the path).
    """
    cache = grader.caller.cache
    if not cache.enabled and cache.directory is None:
        return ReadyCheck(ok=True, detail="disabled: judge calls are not cached"), False
    writable = cache.enabled and await asyncio.to_thread(cache.writable)
    if writable:
        # What is true now: a cache that failed once and works again is not degraded (it was
        # until restart); the errors since start stay in the detail and in /metrics.
        since = f" ({cache.errors} cache error(s) since start)" if cache.errors else ""
        return ReadyCheck(ok=True, detail=f"writable{since}"), False
    state = "could not be opened" if not cache.enabled else "not writable now"
    detail = (
        f"degraded: {cache.errors} cache error(s) since start, cache {state}; grading goes on "
        "uncached where the cache fails"
    )
    return ReadyCheck(ok=True, detail=detail), True


def _judge_check(grader: Grader) -> ReadyCheck:
    """The default judge's check: configured, and neither in an outage nor refused.

    The detail names the model and the status only: ``/readyz`` needs no key, and a provider's
    error text may quote part of the key.
    """
    config = grader.config
    model = config.model
    if not model.strip():
        if LLM_METRICS.intersection(config.metrics):
            return ReadyCheck(ok=False, detail="no judge model configured")
        return ReadyCheck(ok=True, detail="no judge model needed (reference metrics only)")
    if config.is_embedded:
        return ReadyCheck(ok=True, detail=model)
    breaker = grader.caller.gates.breaker_for(config)
    if breaker.claim_probe():
        task = asyncio.create_task(grader.caller.probe(config))
        _PROBES.add(task)
        task.add_done_callback(_PROBES.discard)
    state = breaker.snapshot()
    if state["state"] != "closed":
        # Half-open: a probe request is out (this one's, or a judge call's) and decides.
        again = (
            "a probe request is under way" if state["state"] == "half_open"
            else f"next try in {math.ceil(breaker.retry_in())} s"
        )
        return ReadyCheck(
            ok=False,
            detail=f"circuit_open: {model} is in an outage ({state['consecutive_failures']} "
            f"failed requests in a row, for {breaker.open_for():.0f} s); {again}",
        )
    if state["refused_status"] is not None:
        return ReadyCheck(
            ok=False,
            detail=f"credentials_refused: the provider of {model} answered "
            f"{state['refused_status']} to the last call (its API key is wrong, revoked or "
            "not allowed this model); every call fails until it accepts the key",
        )
    return ReadyCheck(ok=True, detail=model)
