"""Prometheus metrics of one app, in a private registry (never the process-global one).

Request counts and latencies are recorded by an ASGI middleware, labelled with the route
*template* (``/v1/jobs/{job_id}``), never the raw path, so job ids cannot blow up the label set.
Engine counters (judge calls, cache hits, retries, tokens, cost, unscored items by reason) are
read from ``grader.stats`` at scrape time by a custom collector, so the engine needs no Prometheus
code; job counts by status come from the jobs database the same way.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram
from prometheus_client import generate_latest as _generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.schemas import ReadyCheck
from judge.engine import Grader

log = logging.getLogger("bonusjudge.api")

METRICS_CONTENT_TYPE = CONTENT_TYPE_LATEST
"""Content type of the Prometheus text exposition."""

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)


class _EngineCollector(Collector):
    """Reads the engine's counters and the job counts when Prometheus scrapes."""

    def __init__(self, grader: Grader, job_counts: Callable[[], dict[str, int]] | None) -> None:
        self._grader = grader
        self._job_counts = job_counts

    def collect(self) -> Iterator[Metric]:
        stats = self._grader.stats
        yield CounterMetricFamily(
            "bonusjudge_judge_calls", "Provider calls made (re-asks included).",
            value=stats.provider_calls,
        )
        yield CounterMetricFamily(
            "bonusjudge_cache_hits", "Judge calls served from the cache.", value=stats.cache_hits
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
        unscored = CounterMetricFamily(
            "bonusjudge_unscored", "Unscored judge tasks, by task and reason.",
            labels=["task", "reason"],
        )
        for key, count in sorted(stats.unscored_by_reason.items()):
            task, _, reason = key.partition(": ")
            unscored.add_metric([task, reason or "unknown"], count)
        yield unscored
        tokens = CounterMetricFamily("bonusjudge_tokens", "Judge tokens spent.", labels=["kind"])
        tokens.add_metric(["prompt"], stats.prompt_tokens)
        tokens.add_metric(["completion"], stats.completion_tokens)
        yield tokens
        yield CounterMetricFamily(
            "bonusjudge_cost_usd", "Judge cost in USD (when litellm knows the price).",
            value=stats.cost_usd,
        )
        if self._job_counts is not None:
            jobs = GaugeMetricFamily("bonusjudge_jobs", "Jobs by status.", labels=["status"])
            try:
                counts = self._job_counts()
            except Exception:  # a scrape must not fail because the jobs database is busy
                log.warning("could not count jobs for the metrics scrape", exc_info=True)
                counts = {}
            for status in ("queued", "running", "done", "cancelled", "failed"):
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
                scope.get("method", "GET"), template, status, time.perf_counter() - started
            )


class EncoderWarmup:
    """Loads the encoder in a background thread at start-up, for the readiness check.

    Loading takes seconds, so ``/readyz`` never loads it itself: it reports this object's state.
    The warm-up is needed only when the default judge uses the encoder (the embedded matcher, or
    BERTScore among the default metrics); otherwise the check passes as "not needed".

    Args:
        bertscore: Whether the default judge computes BERTScore (with ``encoder``/``layer``).
        embedded: Whether the default judge is the embedded matcher grading coverage (it loads
            the packaged encoder and its parameters itself).
        encoder: BERTScore encoder name (None = the packaged default).
        layer: BERTScore layer override.
        rouge: Also warm ROUGE-L: its first call imports rouge-score and nltk (seconds), and the
            engine calls it on the event loop. Not part of readiness.
    """

    def __init__(
        self,
        *,
        bertscore: bool,
        embedded: bool,
        encoder: str | None = None,
        layer: int | None = None,
        rouge: bool = False,
    ) -> None:
        self.bertscore = bertscore
        self.needed = bertscore or embedded
        self.rouge = rouge
        self.encoder = encoder
        self.layer = layer
        self.embedded = embedded
        self.loaded = False
        self.error: str | None = None
        self._thread: threading.Thread | None = None

    @property
    def name(self) -> str:
        """The display name of what is loaded."""
        from judge.metrics import DEFAULT_ENCODER

        names = [self.encoder or DEFAULT_ENCODER] if self.bertscore else []
        if self.embedded:
            names.append(f"embedded-matcher ({DEFAULT_ENCODER})")
        return " + ".join(dict.fromkeys(names)) or DEFAULT_ENCODER

    def start(self) -> None:
        """Start loading in a daemon thread (a no-op when nothing needs it)."""
        if not (self.needed or self.rouge) or self._thread is not None:
            return
        self._thread = threading.Thread(target=self._load, name="bonusjudge-warmup", daemon=True)
        self._thread.start()

    def _load(self) -> None:
        if self.rouge:
            try:
                from judge.metrics import rouge_l

                rouge_l("warm up", "warm up")
            except Exception:  # the first real call will report the problem
                log.warning("ROUGE-L warm-up failed", exc_info=True)
        if not self.needed:
            return
        try:
            if self.bertscore:
                from judge.metrics import get_encoder

                encoder = get_encoder(self.encoder, layer=self.layer)
                encoder.model  # noqa: B018 -- touching the model loads the weights
            if self.embedded:
                from judge.matcher import get_matcher  # type: ignore[import-not-found,unused-ignore]

                get_matcher()
            self.loaded = True
            log.info("encoder %s loaded", self.name)
        except Exception as exc:  # reported by /readyz; the service keeps answering
            self.error = f"{type(exc).__name__}: {exc}"[:300]
            log.error("encoder %s failed to load: %s", self.name, self.error)

    def check(self) -> ReadyCheck:
        """The encoder's readiness check."""
        if not self.needed:
            return ReadyCheck(ok=True, detail="not needed by the default judge (loads on use)")
        if self.loaded:
            return ReadyCheck(ok=True, detail=f"{self.name}: loaded")
        if self.error is not None:
            return ReadyCheck(ok=False, detail=f"{self.name}: failed to load ({self.error})")
        return ReadyCheck(ok=False, detail=f"{self.name}: not loaded yet")
