"""Reliability under judge faults: every fault kind over real HTTP, the 1,035-item workload under
30% malformed + 10% 429 + 10% 5xx, retry budget and backoff, and the circuit breaker.

Faults come from the loopback OpenAI stand-in (through litellm + instructor, exactly as in
production) or, for the full workload, from ``tests.helpers.faults.FaultInjector``, which raises
what the LiteLLM provider raises for each fault (the per-kind HTTP tests below pin that mapping).
Each request is traced to its item by a tag in the response, so every result is checked against
the faults its own requests got.
"""

from __future__ import annotations

import asyncio
import random
import statistics
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any, cast

import pytest

import judge.engine
from bonusjudge_client.wire.grading import GradeRequest, GradeResult
from judge.config import JudgeConfig
from judge.engine import Grader
from judge.providers.fake import FakeProvider
from judge.providers.litellm import LiteLLMProvider
from judge.retry import CircuitBreaker, RetryBudget, backoff_delay
from standins.openai_server import FAULT_KINDS, FaultKind, FaultPlan, OpenAIStandIn
from tests.helpers.faults import (
    FAULT_REASON,
    HTTP_FAULTS,
    FaultInjector,
    RecordingSleep,
    Task,
    check_results,
    default_workload,
    ledger_from_standin,
    load_workload,
    tag_response,
)

MIX: dict[FaultKind, float] = {
    "malformed_json": 0.30,
    "rate_limit": 0.05,
    "rate_limit_no_header": 0.05,
    "server_error": 0.10,
}
"""The issue's mix: 30% malformed, 10% 429 (half with Retry-After), 10% 5xx (500/502/503)."""

BASE, CAP = 0.5, 30.0  # backoff_delay's defaults, used by the engine


def item(n: int, points: int = 2) -> GradeRequest:
    return GradeRequest(
        id=str(n),
        question="Why does Miss Havisham encourage Pip's love for Estella?",
        reference="She wants revenge on men; she raised Estella to break hearts.",
        bonus_points=["She wants revenge on men", "She raised Estella to break hearts"][:points],
        response=tag_response("Revenge: Estella was raised to break men's hearts.", n),
        tom_dimension="intention",
    )


class BackoffRecorder:
    """Wraps ``backoff_delay`` as the engine calls it, recording inputs and the delay."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, float | None, float]] = []

    def __call__(self, attempt: int, *, retry_after: float | None = None, rng: Any = None) -> float:
        delay = backoff_delay(attempt, retry_after=retry_after, rng=rng)
        self.calls.append((attempt, retry_after, delay))
        return delay


@pytest.fixture
def backoff(monkeypatch: pytest.MonkeyPatch) -> BackoffRecorder:
    recorder = BackoffRecorder()
    monkeypatch.setattr(judge.engine, "backoff_delay", recorder)
    return recorder


def assert_backoff_bounded_and_jittered(calls: list[tuple[int, float | None, float]]) -> None:
    assert calls, "no retry happened"
    for attempt, retry_after, delay in calls:
        bound = min(CAP, BASE * 2 ** (attempt - 1))
        if retry_after is None:
            assert 0.0 <= delay <= bound, (attempt, delay)
        else:
            assert min(retry_after, CAP) <= delay <= max(bound, min(retry_after, CAP))
    free = [d for a, r, d in calls if r is None and a == 1]
    if len(free) >= 20:
        # Full jitter: first retries spread over [0, 0.5], not in lockstep.
        assert len(set(free)) == len(free)
        assert statistics.pstdev(free) > 0.05
        assert min(free) < 0.15 and max(free) > 0.35


# -- backoff -------------------------------------------------------------------------------------


def test_backoff_delay_is_full_jitter_bounded_and_honours_retry_after() -> None:
    rng = random.Random(7)
    for attempt in range(1, 12):
        bound = min(CAP, BASE * 2 ** (attempt - 1))
        draws = [backoff_delay(attempt, rng=rng) for _ in range(500)]
        assert all(0.0 <= d <= bound for d in draws)
        assert statistics.pstdev(draws) > bound / 5  # uniform over [0, bound]: sd ~ 0.29 bound
        floored = [backoff_delay(attempt, retry_after=7.0, rng=rng) for _ in range(200)]
        assert all(7.0 <= d <= max(bound, 7.0) for d in floored)
    # A hostile Retry-After (an hour) is capped: the run is never parked for it.
    assert backoff_delay(1, retry_after=3600.0, rng=rng) == CAP


# -- every fault kind over real HTTP ---------------------------------------------------------------


@pytest.fixture(scope="module")
def server() -> Iterator[OpenAIStandIn]:
    with OpenAIStandIn(record_requests=10_000) as srv:
        yield srv


def http_grader(srv: OpenAIStandIn, sleep: RecordingSleep, **config: Any) -> Grader:
    defaults: dict[str, Any] = {
        "metrics": ("coverage",),
        "retries": 1,
        "reasks": 1,
        "timeout": 5.0,
        "cache": False,
    }
    cfg = JudgeConfig(model="openai/standin", api_base=srv.base_url, **{**defaults, **config})
    return Grader(cfg, provider=LiteLLMProvider(), sleep=sleep, rng=random.Random(0))


# Requests one judge call makes when every request gets the fault (retries=1, reasks=1):
# transport faults are retried once, validation faults re-asked once, truncation and refusal end
# at once (a judge that declined the prompt declines a re-ask too).
_REQUESTS = {kind: 2 for kind in FAULT_KINDS} | {"truncated": 1, "refusal": 1}


@pytest.mark.parametrize("kind", [k for k in FAULT_KINDS if k != "timeout"])
async def test_each_fault_kind_ends_unscored_with_its_reason(
    server: OpenAIStandIn, backoff: BackoffRecorder, kind: Any
) -> None:
    server.faults = FaultPlan({kind: 1.0}, retry_after=2.0, seed=1)
    server.clear_requests()
    sleep = RecordingSleep()
    grader = http_grader(server, sleep)
    result = await grader.grade(item(1))
    coverage = result.coverage
    assert coverage is not None
    assert result.status == "unscored"
    assert coverage.status == "unscored" and coverage.reason == FAULT_REASON[kind]
    assert coverage.covered is None and coverage.coverage is None
    assert all(v.covered is None for v in coverage.verdicts)
    assert result.unscored_reasons == [f"coverage: {FAULT_REASON[kind]}"]
    # Exactly the requests the policy allows, and the result says how many were made.
    assert len(server.requests) == _REQUESTS[kind]
    assert result.provenance.calls[0].attempts == _REQUESTS[kind]
    if kind in HTTP_FAULTS:
        assert grader.stats.retries == 1 and len(sleep.delays) == 1
        ((_, retry_after, delay),) = backoff.calls
        assert sleep.delays == [delay]
        # Retry-After reaches the engine from the 429's header, and floors the delay.
        assert retry_after == (2.0 if kind == "rate_limit" else None)
        if kind == "rate_limit":
            assert delay >= 2.0
    else:
        assert grader.stats.retries == 0 and sleep.delays == []


@pytest.mark.parametrize("variant", ["out_of_range", "duplicate", "missing"])
async def test_invalid_verdicts_are_reasked_then_accepted(
    server: OpenAIStandIn, variant: Any
) -> None:
    # Valid JSON that fails validation (index out of range, a point twice, a point missing):
    # instructor re-asks with the error, and a valid second answer is scored.
    server.faults = FaultPlan(sequence=["invalid", "ok"], invalid_variant=variant)
    server.clear_requests()
    result = await http_grader(server, RecordingSleep()).grade(item(2))
    assert result.status == "scored", result.unscored_reasons
    assert result.coverage is not None and result.coverage.total == 2
    assert [v.index for v in result.coverage.verdicts] == [1, 2]
    assert len(server.requests) == 2 and result.provenance.calls[0].attempts == 2


@pytest.mark.parametrize("kind", ["rate_limit", "rate_limit_no_header", "server_error", "reset"])
async def test_transport_fault_then_success_is_scored(server: OpenAIStandIn, kind: Any) -> None:
    server.faults = FaultPlan(sequence=[kind, kind, "ok"], retry_after=0.01)
    server.clear_requests()
    sleep = RecordingSleep()
    result = await http_grader(server, sleep, retries=2).grade(item(3))
    assert result.status == "scored"
    assert len(server.requests) == 3 and len(sleep.delays) == 2
    assert result.provenance.calls[0].attempts == 3


async def test_timeout_is_retried_then_unscored_timeout(server: OpenAIStandIn) -> None:
    server.faults = FaultPlan({"timeout": 1.0}, timeout_hold=30.0)
    server.clear_requests()
    result = await http_grader(server, RecordingSleep(), timeout=0.3).grade(item(4))
    assert result.coverage is not None and result.coverage.reason == "timeout"
    assert len(server.requests) == 2  # the first try and one retry, each cut off by our timeout


async def test_faithful_mode_faults_are_unscored_not_counted(server: OpenAIStandIn) -> None:
    # The public scorer counted "Null" as 3 covered points and "[Defect]" as a penalty.
    kinds: list[FaultKind] = ["malformed_json", "invalid"]
    for kind in kinds:
        server.faults = FaultPlan({kind: 1.0})
        result = await http_grader(
            server, RecordingSleep(), rubric="chartom-paper", metrics=("coverage", "defects")
        ).grade(item(5))
        assert result.coverage is not None and result.defects is not None
        assert (result.coverage.status, result.coverage.reason) == ("unscored", "parse_failure")
        assert result.coverage.covered is None
        assert result.defects.status == "unscored" and result.defects.penalized is None
    server.faults = None


# -- mixed faults, traced per item -----------------------------------------------------------------


def _run_figures(report: Any, ledger: Any, grader: Grader) -> dict[str, Any]:
    return {
        "items": report.items,
        "faults": dict(ledger.fault_counts()),
        "lost": len(report.lost),
        "graded_twice": len(report.duplicated),
        "coverage_over_1": len(report.coverage_over_one),
        "unscored": report.summary.unscored,
        "reasons": dict(report.reasons),
        "retries": grader.stats.retries,
        "bpc": report.summary.bpc,
    }


async def test_mixed_faults_over_http_every_item_traced(
    server: OpenAIStandIn, backoff: BackoffRecorder
) -> None:
    """A sample through the real client stack: each result matches its own requests' faults."""
    plan = FaultPlan(MIX, seed=11, retry_after=1.0)
    server.faults = plan
    server.clear_requests()
    requests = {str(n): item(n, points=1 + n % 2) for n in range(64)}
    sleep = RecordingSleep()
    budget = RetryBudget(limit=400)
    grader = http_grader(
        server, sleep, retries=4, reasks=2, concurrency=64, metrics=("coverage", "defects")
    )
    grader.caller.retry_budget = budget
    results = [r async for r in grader.grade_many(list(requests.items()))]
    sent = server.requests
    server.faults = None
    ledger = ledger_from_standin(sent, plan)
    assert ledger.untraced == 0 and ledger.total() == len(sent)
    report = check_results(results, requests, ledger=ledger)
    assert report.violations == []
    # Every request the server saw is accounted for by the engine, per item and task: no
    # hidden retries (litellm's own retries are off), and no request of one item for another.
    for result in results:
        for call in result.provenance.calls:
            task = cast("Task", call.task)
            assert call.attempts == ledger.requests(result.id, task), (result.id, call)
    assert budget.spent == grader.stats.retries == sum(
        ledger.retries(i, t) for i in requests for t in ("coverage", "defects")
    )
    assert_backoff_bounded_and_jittered(backoff.calls)
    assert sleep.delays == [d for _, _, d in backoff.calls]
    assert {r for _, r, _ in backoff.calls} <= {None, 1.0}


@pytest.mark.skipif(default_workload() is None, reason="1,035-item workload not present")
async def test_workload_1035_under_30pct_malformed_10pct_429_10pct_5xx(
    backoff: BackoffRecorder,
) -> None:
    path = default_workload()
    assert path is not None
    workload = load_workload(path)
    assert len(workload) == 1035
    requests = dict(workload)
    injector = FaultInjector(MIX, seed=2024)
    sleep = RecordingSleep()
    budget = RetryBudget(limit=2 * len(workload))  # the CLI's run-wide cap
    cfg = JudgeConfig(
        model="fake/judge", metrics=("coverage", "defects", "rouge_l"), concurrency=64, cache=False
    )
    grader = Grader(
        cfg,
        provider=FakeProvider(handler=injector),
        retry_budget=budget,
        sleep=sleep,
        rng=random.Random(5),
    )
    results: list[GradeResult] = [r async for r in grader.grade_many(workload)]
    ledger = injector.ledger
    report = check_results(results, requests, ledger=ledger)
    figures = _run_figures(report, ledger, grader)
    print("\nworkload-1035 in-process fault run:", figures)
    assert report.violations == []
    assert report.lost == [] and report.duplicated == [] and report.coverage_over_one == []
    assert len(results) == 1035
    # The mix really was injected, at about the configured rates.
    faults = ledger.fault_counts()
    total = ledger.total()
    for kind, p in MIX.items():
        assert abs(faults[kind] / total - p) < 0.03, (kind, faults[kind], total)
    # Some items end unscored, with reasons the aggregate states, and BPC stays within [0, 1].
    assert 0 < report.summary.unscored < 150
    assert report.summary.bpc is not None and 0 <= report.summary.bpc <= 1
    assert report.summary.coverage_scored + report.summary.coverage_unscored == 1035
    # Retries: within the per-call limit and the run's budget, and no more than the faults.
    assert budget.limit is not None and budget.spent == grader.stats.retries <= budget.limit
    per_call = [ledger.retries(i, t) for i in requests for t in ("coverage", "defects")]
    assert max(per_call) <= cfg.retries and sum(per_call) == grader.stats.retries
    for result in results:
        for call in result.provenance.calls:
            assert call.attempts == ledger.requests(result.id, cast("Task", call.task))
    assert_backoff_bounded_and_jittered(backoff.calls)
    assert len(sleep.delays) == grader.stats.retries


async def test_retry_budget_caps_a_retry_storm() -> None:
    """A provider failing for everyone costs at most the run's budget in extra calls."""
    injector = FaultInjector({"server_error": 0.7, "rate_limit_no_header": 0.2}, seed=3)
    budget = RetryBudget(limit=25)
    cfg = JudgeConfig(model="fake/judge", metrics=("coverage",), concurrency=32, cache=False)
    grader = Grader(
        cfg,
        provider=FakeProvider(handler=injector),
        retry_budget=budget,
        breaker=CircuitBreaker(threshold=10_000),  # the budget alone is under test here
        sleep=RecordingSleep(),
    )
    requests = {str(n): item(n) for n in range(200)}
    results = [r async for r in grader.grade_many(list(requests.items()))]
    assert budget.spent == 25 and budget.refused > 0
    assert injector.ledger.total() == 200 + 25  # one call per item, plus the budget, no more
    unscored = [r for r in results if r.status == "unscored"]
    assert unscored and all(r.coverage and r.coverage.covered is None for r in unscored)
    details = [r.coverage.detail or "" for r in unscored if r.coverage]
    assert any("retry budget is exhausted" in d for d in details)
    assert check_results(results, requests, metrics=("coverage",)).violations == []


# -- circuit breaker ----------------------------------------------------------------------------


async def test_an_outage_pauses_grading_and_every_item_is_scored_after_it(
    server: OpenAIStandIn,
) -> None:
    """A provider outage at the start of a run: the breaker opens, items wait (the provider is
    only probed), and when it comes back every item is graded; none is stored as circuit_open."""
    server.faults = FaultPlan({"server_error": 1.0})
    server.clear_requests()
    breaker = CircuitBreaker(threshold=5, cooldown=0.2, max_cooldown=0.4)
    grader = http_grader(server, RecordingSleep(), retries=4, concurrency=4)
    grader.caller.gates.set_breaker(grader.config, breaker)
    # Four times the concurrency, and more than the threshold and the probes: most items wait.
    requests = {str(n): item(n) for n in range(20)}

    async def heal() -> None:
        # The outage lasts until the breaker has opened and a probe has failed (not a fixed
        # time: the first call's imports can take longer than any outage we would script).
        deadline = time.monotonic() + 60
        while breaker.snapshot()["opened_count"] < 1 and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.5)
        server.faults = None  # the provider comes back

    healer = asyncio.create_task(heal())
    results = [r async for r in grader.grade_many(list(requests.items()))]
    await healer
    assert Counter(r.status for r in results) == {"scored": len(requests)}
    snapshot = breaker.snapshot()
    assert snapshot["opened_count"] >= 1 and snapshot["state"] == "closed"
    failed = sum(1 for r in server.requests if r.get("_fault") == "server_error") or None
    sent = len(server.requests)
    # During the outage only the threshold, what was in flight and the probes reached it.
    assert sent <= len(requests) + breaker.threshold + 2 * 4 + 8, (sent, failed)
    report = check_results(results, requests, metrics=("coverage",))
    assert report.violations == [] and report.summary.bpc is not None


async def test_an_outage_longer_than_max_outage_ends_items_circuit_open(
    server: OpenAIStandIn,
) -> None:
    server.faults = FaultPlan({"server_error": 1.0})
    server.clear_requests()
    breaker = CircuitBreaker(threshold=5, cooldown=0.1, max_cooldown=0.2)
    grader = http_grader(server, RecordingSleep(), retries=4, concurrency=4, max_outage=0.5)
    grader.caller.gates.set_breaker(grader.config, breaker)
    requests = {str(n): item(n) for n in range(20)}
    started = time.monotonic()
    results = [r async for r in grader.grade_many(list(requests.items()))]
    server.faults = None
    assert time.monotonic() - started < 10
    reasons = Counter(r.coverage.reason for r in results if r.coverage)
    assert reasons["circuit_open"] >= 15 and sum(reasons.values()) == 20, reasons
    assert len(server.requests) <= breaker.threshold + 2 * 4 + 8
    assert grader.stats.unscored_by_reason["coverage: circuit_open"] == reasons["circuit_open"]
