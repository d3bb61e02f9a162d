"""``bonusjudge grade`` in this process: the judge's check, the run's cost cap, the grading."""

from __future__ import annotations

import argparse
import gc
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cli.common import (
    PROG,
)
from core.errors import ConfigError
from judge.config import JudgeConfig, Settings
from judge.resume import JudgeStamp

if TYPE_CHECKING:
    from bonusjudge_client.wire.grading import GradeResult
    from cli.grade import Entry
    from judge.budget import Budget
    from judge.providers.base import Preflight



def _check_judge(
    args: argparse.Namespace, config: JudgeConfig, budget: Budget | None = None
) -> Preflight | None:
    """Say what an option will not do, and find out whether an LLM judge can work at all.

    Returns:
        The preflight (its warning printed), whose probe request goes on the bill and, under
        ``budget``, against the cap; None when no probe could be sent (no LLM judge, or a cap
        already spent).

    Raises:
        ConfigError: the judge cannot work (missing credentials, unknown model, unreachable,
            refused), or a cascade without an LLM or a band; nothing has been written yet.
    """
    from judge.engine import check_cascade

    check_cascade(config)
    if config.is_embedded:
        if config.rubric != "chartom":
            print(
                f"note: --rubric {config.rubric} has no effect on the embedded matcher (it reads "
                "no prompts); pass --model for an LLM judge that uses it",
                file=sys.stderr,
            )
        return None
    if not {"coverage", "defects"} & set(config.metrics):
        return None  # ROUGE-L and BERTScore only: the judge is never called
    from judge.budget import BudgetExhausted
    from judge.providers.routing import preflight

    call = not args.no_preflight
    held = None
    if budget is not None and call:
        # The probe is a billed request like any other: it holds its place under the cap, and
        # a cap already spent (by the runs before, into the same output) sends not even it.
        try:
            held = budget.reserve(0.0)
        except BudgetExhausted:
            return None
    try:
        checked = preflight(config, call=call)
    except BaseException:
        if budget is not None and held is not None:
            budget.settle(held, 0, answered=False)  # the run ends here: nothing to record
        raise
    if budget is not None and held is not None:
        budget.settle(
            held, checked.requests, prompt_tokens=checked.prompt_tokens,
            completion_tokens=checked.completion_tokens, cost_usd=checked.cost_usd,
            answered=checked.prompt_tokens is not None,
        )
    if checked.warning:
        print(checked.warning, file=sys.stderr)
    return checked




class LocalGrading:
    """Grading in this process, with the judge of the settings and options."""

    server = False

    def __init__(self, args: argparse.Namespace, settings: Settings) -> None:
        self._args = args
        self._settings = settings
        self._config = settings.judge
        self._budget: Budget | None = None
        self._preflight: Preflight | None = None
        self.capped: str | None = None
        """What the cost cap stopped (spent, items left), when it did."""

    def start(self, first: Entry | None) -> tuple[JudgeStamp, GradeResult | None]:
        """The cost cap, then the judge's check (``_check_judge``); this configuration's stamp."""
        self._budget = run_budget(self._args, self._config)
        self._preflight = _check_judge(self._args, self._config, self._budget)
        config = self._config
        return JudgeStamp.of(config), None

    def grade(
        self, todo: Iterable[Entry], total: int, emit: Callable[[GradeResult], None]
    ) -> dict[str, Any]:
        """Grade ``todo`` with ``Grader.grade_many`` on an event loop of its own."""
        import asyncio  # here, not at the top: `grade --help` does not need it (~50 ms)

        return asyncio.run(self._grade(todo, total, emit))

    async def _grade(
        self, todo: Iterable[Entry], total: int, emit: Callable[[GradeResult], None]
    ) -> dict[str, Any]:
        from tqdm import tqdm

        from judge.budget import BUDGET
        from judge.cache import open_cache
        from judge.engine import Grader
        from judge.retry import RetryBudget

        config = self._config
        cache = open_cache(self._settings, enabled=config.cache)  # the folder, or a shared Redis
        # A run-wide retry cap: a provider failing for everyone costs at most this many extra
        # calls.
        budget = RetryBudget(limit=max(20, total * 2))
        grader = Grader(config, cache=cache, retry_budget=budget)
        bar = tqdm(total=total, disable=self._args.quiet, unit="item", dynamic_ncols=True)
        try:
            # Heavy imports and model loads before grading: the metric batch threads would
            # otherwise make their first imports concurrently, which crashes on a cold start.
            await grader.prepare(config)
            # What is loaded by now (modules, rubrics, schemas, encoders) lives as long as the
            # run: frozen, the cyclic collector stops walking it on every full collection, which
            # cost 10-20% of the CPU of a judge call. Frozen objects are still freed by reference
            # count.
            gc.freeze()
            fed = [0]
            left = 0
            if self._budget is not None:
                BUDGET.set(self._budget)
                todo = _until_capped(todo, self._budget, fed)
            async for result in grader.grade_many(todo, config=config):
                emit(result)
                bar.update(1)
                left += any(r.endswith(": budget_exhausted") for r in result.unscored_reasons)
        finally:
            bar.close()
            await grader.aclose()
            cache.close()
        if self._budget is not None and self._budget.exhausted:
            left += total - fed[0]
            self.capped = capped_message(self._budget, left, Path(self._args.out))
        stats = grader.stats.as_dict()
        # The preflight's probe is on the bill: the provider charged it like any judge call.
        from judge.providers.base import Preflight

        probe = self._preflight or Preflight()
        cost = (stats["cost_usd"] or 0.0) + (probe.cost_usd or 0.0)
        return {
            "judge_calls": stats["judge_calls"] + probe.requests,
            "cache_hits": stats["cache_hits"],
            "metric_cache_hits": stats["metric_cache_hits"],
            "reasks": stats["reasks"],
            "retries_by_reason": stats["retries_by_reason"],
            "prompt_tokens": stats["prompt_tokens"] + (probe.prompt_tokens or 0),
            "completion_tokens": stats["completion_tokens"] + (probe.completion_tokens or 0),
            "cached_tokens": stats["cached_tokens"],
            "cost_usd": cost or None,
            "retries": stats["retries"],
            "retry_budget": {
                "limit": budget.limit, "spent": budget.spent, "refused": budget.refused
            },
            "breaker": grader.caller.gates.breaker_for(grader.config).snapshot(),
        }

    def close(self) -> None:
        """Nothing to release: ``grade`` closes the grader and the cache it opened."""


def run_budget(args: argparse.Namespace, config: JudgeConfig) -> Budget | None:
    """The budget of ``--max-cost``/``--max-calls`` over the output file, or None.

    The caps are totals for ``--out``: what earlier runs spent into it (its
    :class:`~judge.budget.SpendLog`) counts against them. Every run that sends requests keeps
    those books, capped or not, so None only when no request can be sent and no cap is set.

    Raises:
        ConfigError: a negative or non-finite cap, or ``--max-cost`` for a model without a price
            (no ``--price-in``/``--price-out``); nothing has been written yet.
        InputError: only one of the prices, or a negative one.
    """
    import math

    max_cost, max_calls = args.max_cost, args.max_calls
    for flag, value in (("--max-cost", max_cost), ("--max-calls", max_calls)):
        if value is not None and (value < 0 or not math.isfinite(value)):
            raise ConfigError(
                f"{flag}: a cap is a finite number >= 0 (got {value:g}); leave it out for no cap",
                field=flag[2:].replace("-", "_"),
            )
    sends = not config.is_embedded and bool({"coverage", "defects"} & set(config.metrics))
    if max_cost is None and max_calls is None and not sends:
        return None
    from judge.budget import Budget, Cap, SpendLog

    books = SpendLog(Path(args.out))
    cap = Cap(
        "--max-cost", max_cost=max_cost, max_calls=max_calls,
        spent_cost=books.before_cost, spent_calls=books.before_calls, on_spend=books.add,
    )
    if max_cost is None:
        return Budget([cap])
    from judge.estimate import prices_for, request_cost

    prices = prices_for(config.model, args.price_in, args.price_out)
    if prices is None and not config.is_embedded:
        raise ConfigError(
            f"--max-cost: no price for {config.model}: pass --price-in and --price-out (USD per "
            "million tokens)",
            field="max_cost",
        )
    if prices is None:  # the embedded judge sends nothing: nothing to price
        return Budget([cap])
    return Budget([cap], request_cost(prices), prices)


def _until_capped(todo: Iterable[Entry], budget: Budget, fed: list[int]) -> Iterator[Entry]:
    """``todo`` until ``budget`` refuses a request: no item is started after that.

    ``fed[0]`` counts the items handed over, so the items left can be told.
    """
    for entry in todo:
        if budget.exhausted:
            return
        fed[0] += 1
        yield entry


def capped_message(budget: Budget, left: int, out: Path) -> str:
    """The closing line of a run the cap stopped: what was spent against it, and what is left.

    The caps are totals for ``out``: the spend said is every run's into it.
    """
    cap = next(cap for cap in budget.caps if cap.exhausted)
    limits = []
    if cap.max_cost is not None:
        limits.append(f"${cap.spent_cost:.6f} spent into {out} of --max-cost ${cap.max_cost:g}")
    if cap.max_calls is not None:
        limits.append(
            f"{cap.spent_calls} request(s) sent into {out} of --max-calls {cap.max_calls}"
        )
    return (
        f"{PROG}: stopped at the cost cap: {'; '.join(limits)} (the caps count every run into "
        f"that output); {left} item(s) left (unscored budget_exhausted or not started): re-run "
        "with a higher cap to grade them"
    )


