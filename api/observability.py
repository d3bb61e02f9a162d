"""Prometheus metrics of one app, in a private registry (never the process-global one).

Request counts and latencies are recorded by an ASGI middleware, labelled with the route
*template* (``/v1/jobs/{job_id}``, ``unmatched`` for unknown paths), never the raw path, and with
the method from a fixed set (anything else is ``OTHER``): the middleware runs before the key check,
so any label taken from the request as sent would let anyone grow the registry without bound.
Engine counters (judge calls, cache hits, retries, tokens, cost, unscored items by reason) are
read from ``grader.stats`` at scrape time by a custom collector, so the engine needs no Prometheus
code; job counts by status come from the jobs database the same way.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, get_args

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram
from prometheus_client import generate_latest as _generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from bonusjudge_client.wire.schemas import JobState, ReadyCheck
from judge.config import JudgeConfig
from judge.engine import Grader
from judge.loading import needs_encoder, warm_up
from judge.metrics import DEFAULT_ENCODER
from judge.stats import ITEM_LEDGER, ItemLedger

log = logging.getLogger("bonusjudge.api")

METRICS_CONTENT_TYPE = CONTENT_TYPE_LATEST
"""Content type of the Prometheus text exposition."""

HTTP_METHODS = frozenset({"GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"})
"""Methods recorded under their own name; any other method is labelled ``OTHER``."""

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)


class _EngineCollector(Collector):
    """Reads the engine's counters and the job counts when Prometheus scrapes."""

    def __init__(self, grader: Grader, job_counts: Callable[[], dict[str, int]] | None) -> None:
        self._grader = grader
        self._job_counts = job_counts

    def collect(self) -> Iterator[Metric]:
        """The families and their values (the job counts read from the store)."""
        return self._families(self._job_counts)

    def describe(self) -> Iterator[Metric]:
        """The families ``collect`` yields, for the registry to check names at registration.

        Without it the registry would call ``collect``, counting the jobs in the store as each
        app starts.
        """
        return self._families(None if self._job_counts is None else dict)

    def _families(self, job_counts: Callable[[], dict[str, int]] | None) -> Iterator[Metric]:
        stats = self._grader.stats
        yield CounterMetricFamily(
            "bonusjudge_judge_calls",
            "Requests sent to the judge provider: first tries, retries, re-asks, failed "
            "requests and probes (what the provider received).",
            value=stats.provider_calls,
        )
        yield CounterMetricFamily(
            "bonusjudge_judge_reasks",
            "Of those, re-asks after an unusable structured answer.", value=stats.reasks,
        )
        yield CounterMetricFamily(
            "bonusjudge_cache_hits", "Judge calls served from the cache.", value=stats.cache_hits
        )
        yield CounterMetricFamily(
            "bonusjudge_cache_errors", "Cache opens, reads and writes that failed (run uncached).",
            value=self._grader.caller.cache.errors,
        )
        yield CounterMetricFamily(
            "bonusjudge_judge_retries", "Retries of failed provider calls.", value=stats.retries
        )
        items = CounterMetricFamily(
            "bonusjudge_items_graded", "Items graded, by outcome.", labels=["status"]
        )
        items.add_metric(["scored"], stats.scored)
        items.add_metric(["unscored"], stats.unscored)
        yield items
        yield CounterMetricFamily(
            "bonusjudge_items_refused",
            "Items graded for a request then answered with an error (no grade given; not in "
            "bonusjudge_items_graded).",
            value=stats.refused,
        )
        unscored = CounterMetricFamily(
            "bonusjudge_unscored", "Unscored judge tasks, by task and reason.",
            labels=["task", "reason"],
        )
        for key, count in sorted(stats.unscored_by_reason.items()):
            task, _, reason = key.partition(": ")
            unscored.add_metric([task, reason or "unknown"], count)
        yield unscored
        tokens = CounterMetricFamily(
            "bonusjudge_tokens",
            "Judge tokens the provider reported, for every request it answered (unusable and "
            "failed calls included).",
            labels=["kind"],
        )
        tokens.add_metric(["prompt"], stats.prompt_tokens)
        tokens.add_metric(["completion"], stats.completion_tokens)
        yield tokens
        # A family of its own, not a third `kind`: these are part of the prompt tokens, and a
        # sum over `kind` would count them twice.
        yield CounterMetricFamily(
            "bonusjudge_cached_prompt_tokens",
            "Of the judge's prompt tokens, those the provider served from its prompt cache "
            "(billed at its cache-read price).",
            value=stats.cached_tokens,
        )
        yield CounterMetricFamily(
            "bonusjudge_cost_usd", "Judge cost in USD (when litellm knows the price).",
            value=stats.cost_usd,
        )
        if job_counts is not None:
            jobs = GaugeMetricFamily("bonusjudge_jobs", "Jobs by status.", labels=["status"])
            try:
                counts = job_counts()
            except Exception:  # a scrape must not fail because the jobs database is busy
                log.warning("could not count jobs for the metrics scrape", exc_info=True)
                counts = {}
            for status in get_args(JobState):  # paused included
                jobs.add_metric([status], counts.get(status, 0))
            yield jobs


class Observability:
    """The app's registry and request instruments.

    Args:
        grader: Whose counters are exported.
        job_counts: Returns the number of jobs per status (optional).
    """

    def __init__(
        self, grader: Grader, job_counts: Callable[[], dict[str, int]] | None = None
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "bonusjudge_http_requests", "HTTP requests, by route template and status.",
            ["method", "route", "status"], registry=self.registry,
        )
        self.latency = Histogram(
            "bonusjudge_http_request_duration_seconds", "HTTP request latency.",
            ["method", "route"], buckets=_LATENCY_BUCKETS, registry=self.registry,
        )
        self.registry.register(_EngineCollector(grader, job_counts))

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        """Record one finished request."""
        self.requests.labels(method, route, str(status)).inc()
        self.latency.labels(method, route).observe(seconds)

    def render(self) -> bytes:
        """The Prometheus text exposition of every metric."""
        return _generate_latest(self.registry)


class MetricsMiddleware:
    """ASGI middleware timing every HTTP request into an ``Observability``.

    Args:
        app: The wrapped app.
        observability: Where to record.
    """

    def __init__(self, app: ASGIApp, observability: Observability) -> None:
        self.app = app
        self.observability = observability

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Handle one ASGI connection."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def send_wrapper(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            route: Any = scope.get("route")
            # The template, not the path: one label value per route whatever the ids.
            template = getattr(route, "path", None) or "unmatched"
            self.observability.observe(
                method_label(scope.get("method", "GET")), template, status,
                time.perf_counter() - started,
            )


class ItemLedgerMiddleware:
    """ASGI middleware counting a request's graded items once it is answered (``ITEM_LEDGER``).

    A request answered with a success status counts them as graded (scored or unscored); one
    answered with an error (a 429 when the key's budget ran out midway, a 503 when the judge's
    breaker opened, a 500) gave its caller no grade, so they are counted as refused: in
    ``/v1/usage`` and the engine's counters alike.

    Args:
        app: The wrapped app.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Handle one ASGI connection."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        ledger = ItemLedger()
        status = 500  # no answer started: the request failed

        async def send_wrapper(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            elif message["type"] == "http.response.body" and not message.get("more_body"):
                # Counted before the caller has the whole answer, so its next request (a
                # /v1/usage) sees them.
                ledger.settle(answered=status < 400)
            await send(message)

        token = ITEM_LEDGER.set(ledger)
        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            ITEM_LEDGER.reset(token)
            if not ledger.settled:  # no whole answer was sent: an error, a broken connection
                ledger.settle(answered=False)


def freeze_heap() -> None:
    """Collect once, then move every live object out of the cyclic collector's reach.

    What start-up loads (FastAPI, pydantic models, the engine; torch and an encoder: hundreds of
    thousands of objects) lives as long as the process. Left in the collector's generations, each
    full collection walks all of it, a pause of 0.1-0.5 s that lands on whichever requests are in
    flight. Frozen (``gc.freeze``), full collections walk only what serving allocates. The one
    collection here runs before the service reports ready. ``bonusjudge grade`` does the same.
    """
    gc.collect()
    gc.freeze()


def method_label(method: str) -> str:
    """The ``method`` label of a request: its method if standard, else ``OTHER``.

    Args:
        method: The method as the client sent it (any token the HTTP parser accepts).

    Returns:
        One of ``HTTP_METHODS`` or ``OTHER``, so invented methods share one series.
    """
    return method if method in HTTP_METHODS else "OTHER"


class EncoderWarmup:
    """Loads what the default judge needs in a background thread at start-up, for readiness.

    Loading takes seconds, so ``/readyz`` never loads anything itself: it reports this object's
    state, and the grading routes answer 503 (``Retry-After``) while a request would need an
    encoder that is still loading. The thread runs :func:`judge.loading.warm_up`, the function
    ``Grader.prepare`` runs too: one serialized warm-up path, so requests, job workers and this
    thread never make first imports concurrently. ROUGE-L's import is warmed as well (seconds,
    and the engine calls it on the event loop) but is not part of readiness.

    Args:
        config: The default judge configuration.
        loader: The warm-up function (default :func:`judge.loading.warm_up`; tests inject a slow
            one to hold the service in its warm-up).
    """

    def __init__(
        self, config: JudgeConfig, *, loader: Callable[[JudgeConfig], None] | None = None
    ) -> None:
        self.config = config
        self.bertscore = "bertscore" in config.metrics
        # The embedded matcher reads the encoder only when it judges (coverage; the cascade's
        # routing); BERTScore always does.
        self.embedded = config.uses_matcher
        self.needed = needs_encoder(config)
        self.encoder = config.encoder
        self.loaded = False
        self.error: str | None = None
        self._loader = loader or warm_up
        self._thread: threading.Thread | None = None
        self._finished = threading.Event()

    @property
    def name(self) -> str:
        """The display name of what is loaded."""
        names = [self.encoder or DEFAULT_ENCODER] if self.bertscore else []
        if self.embedded:
            names.append(f"embedded-matcher ({DEFAULT_ENCODER})")
        return " + ".join(dict.fromkeys(names)) or DEFAULT_ENCODER

    @property
    def loading(self) -> bool:
        """Whether the encoder warm-up has started and not finished (loaded or failed)."""
        return self.needed and self._thread is not None and not self._finished.is_set()

    def start(self) -> None:
        """Start loading in a daemon thread (once); a daemon, so a shutdown never waits for it."""
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._load, name="bonusjudge-warmup", daemon=True)
        self._thread.start()

    def _load(self) -> None:
        try:
            self._loader(self.config)
            if self.needed:
                freeze_heap()
            self.loaded = True
            if self.needed:
                log.info("encoder %s loaded", self.name)
        except Exception as exc:  # reported by /readyz; the service keeps answering
            self.error = f"{type(exc).__name__}: {exc}"[:300]
            log.error("warm-up of %s failed: %s", self.name, self.error)
        finally:
            self._finished.set()

    def check(self) -> ReadyCheck:
        """The encoder's readiness check."""
        if not self.needed:
            return ReadyCheck(ok=True, detail="not needed by the default judge (loads on use)")
        if self.loaded:
            return ReadyCheck(ok=True, detail=f"{self.name}: loaded")
        if self.error is not None:
            return ReadyCheck(ok=False, detail=f"{self.name}: failed to load ({self.error})")
        return ReadyCheck(ok=False, detail=f"{self.name}: not loaded yet")
