"""An estimate before any call: the judge calls, tokens and price of a run, without sending one.

``estimate`` runs the engine's own path (``Grader.grade_many``: language, length control, the
judge picked once, extraction before coverage, blank answers answered without a call) with a
``Caller`` that sends nothing. Each call the judge asks for is looked up in the cache under the
key the real ``Caller`` would use (the service's cache scope and ``TENANT`` included), so a call
already cached costs nothing; every other one is counted, its first request built exactly as
the transports build it (``judge.providers.wire``: instructor's messages for the mode, plus the
tool or schema definition), and its prompt tokens counted with the model's tokenizer
(``litellm.token_counter``, offline). Nothing is written to the cache and nothing is graded.

What cannot be known before the calls is estimated, and the answer says so:

* completion tokens, from each task's typical answer size (:func:`expected_completion`);
* the coverage prompt of an item whose bonus points are still to be extracted: the extracted
  points are stood in for by the reference's sentences (what extraction splits);
* a call another caller's entry would answer in a ``shared`` cache is counted as sent, as the
  real run reports it to this caller as a fresh call (no caller learns what another graded).

The price is litellm's offline model cost map, or the caller's (``price_in``/``price_out``, USD
per million tokens).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import json
from collections.abc import AsyncIterable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from bonusjudge_client.wire.grading import CallRecord, GradeRequest, GradeResult
from bonusjudge_client.wire.schemas import EstimateResponse, EstimateTaskName, TaskEstimate
from core.errors import InputError
from judge.cache import Cache
from judge.calls import TENANT, Caller, CallOutcome, CallSpec, rubric_ref
from judge.config import JudgeConfig
from judge.engine import Entry, Grader, iterate_entries
from judge.providers.base import Completion
from judge.stats import EngineStats
from judge.verdicts import MAX_EXTRACTED_POINTS
from rubrics.loader import RubricLibrary

__all__ = [
    "COMPLETION_METHOD",
    "TASKS",
    "Prices",
    "check_prices",
    "estimate",
    "expected_completion",
    "model_prices",
    "prices_for",
    "request_cost",
]

TASKS: tuple[EstimateTaskName, ...] = ("extract_points", "coverage", "defects")
"""The judge tasks, in the order a run makes an item's calls."""

# Typical answer sizes in tokens (OpenAI tokenizers, English). A structured coverage verdict is
# {"index", "covered", "rationale" (one sentence), "evidence" (a quote)}: about 50 tokens per
# point with its JSON; a structured defects answer is {"defects": []} or one defect of about 60
# tokens, and the paper reports 48-70% of answers with a defect, hence 40 on average. The
# paper's plain-text answers are one line ("[Included Bonus Points]: 1, 2").
_COVERAGE_PER_POINT = 50
_COVERAGE_BASE = 10
_DEFECTS_STRUCTURED = 40
_TEXT_COVERAGE = 12
_TEXT_DEFECTS = 25
_EXTRACTION_PER_POINT = 8

COMPLETION_METHOD = (
    "typical answer sizes, not measured on a hosted judge: coverage "
    f"{_COVERAGE_BASE} + {_COVERAGE_PER_POINT} tokens per bonus point (a verdict with a "
    f"one-sentence rationale and a quote), defects {_DEFECTS_STRUCTURED} (none or one defect), "
    "extraction the reference's tokens plus "
    f"{_EXTRACTION_PER_POINT} per point; the paper's text rubrics {_TEXT_COVERAGE} "
    f"(coverage) and {_TEXT_DEFECTS} (defects)"
)
"""How the completion tokens of an estimate are estimated (its ``completion_method``)."""


@dataclass(frozen=True)
class Prices:
    """USD per million tokens, and where the figures come from.

    Attributes:
        prompt: USD per million prompt tokens.
        completion: USD per million completion tokens.
        source: ``litellm`` (its offline model cost map) or ``given`` (by the caller).
    """

    prompt: float
    completion: float
    source: Literal["litellm", "given"]

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        """The price of these tokens, in USD."""
        return (prompt_tokens * self.prompt + completion_tokens * self.completion) / 1e6


def _litellm() -> Any:
    """litellm, imported on first use (~3 s), with its "Provider List" banner silenced."""
    import litellm

    litellm.suppress_debug_info = True
    return litellm


def model_prices(model: str) -> Prices | None:
    """The price litellm's offline model cost map gives ``model``, or None when it has none."""
    litellm = _litellm()
    try:
        info = litellm.get_model_info(model)
    except Exception:  # litellm raises its own "not mapped" errors, and ValueError / KeyError
        return None
    given = info.get("input_cost_per_token"), info.get("output_cost_per_token")
    if not all(isinstance(price, int | float) for price in given):
        return None
    return Prices(float(given[0]) * 1e6, float(given[1]) * 1e6, "litellm")


def check_prices(price_in: float | None, price_out: float | None) -> None:
    """Check a caller's prices: both or neither, neither negative.

    Raises:
        InputError: only one of ``price_in`` and ``price_out`` was given, or a negative one.
    """
    if (price_in is None) != (price_out is None):
        missing = "price_out" if price_out is None else "price_in"
        raise InputError(
            f"{missing}: give both price_in and price_out (USD per million tokens)", field=missing
        )
    if price_in is not None and price_out is not None:
        for name, value in (("price_in", price_in), ("price_out", price_out)):
            if value < 0:
                raise InputError(f"{name}: a price cannot be negative", field=name)


def prices_for(model: str, price_in: float | None, price_out: float | None) -> Prices | None:
    """The prices an estimate uses: the caller's when given (both), else litellm's, else None.

    Raises:
        InputError: see :func:`check_prices`.
    """
    check_prices(price_in, price_out)
    if price_in is not None and price_out is not None:
        return Prices(price_in, price_out, "given")
    return model_prices(model)


# -- prompt tokens -------------------------------------------------------------------------------


def first_request(spec: CallSpec) -> dict[str, Any]:
    """The first request of ``spec`` as the transports send it: messages and the fixed fields.

    ``judge.providers.wire`` is what the direct transport sends and what instructor sends over
    litellm (a test pins the two), so the count is of the very request.
    """
    from judge.providers.wire import prepared_messages, request_body, request_plan

    name = spec.config.model.partition("/")[2] or spec.config.model
    sampling = tuple(spec.config.sampling().items())
    plan = request_plan(name, spec.response_model, spec.config.mode, sampling, "{}")
    messages = spec.messages
    if spec.response_model is not None:
        messages = prepared_messages(list(messages), plan, spec.validation_context)
    body: dict[str, Any] = json.loads(request_body(messages, plan))
    return body


def prompt_tokens(spec: CallSpec) -> int:
    """Prompt tokens of ``spec``'s first request, counted with its model's tokenizer.

    The messages as OpenAI counts a chat (``litellm.token_counter``: each message's text and
    its overhead, and the reply's priming); the tool or schema definition as the JSON sent.
    OpenAI renders a definition into the prompt in a format it does not publish; litellm's
    rendering of it drops nested types (a list of verdicts becomes ``any[]``), which counted
    a coverage tool at 65 tokens where its JSON is 240, so the JSON is the closer figure.
    """
    litellm = _litellm()
    body = first_request(spec)
    model = counting_model(spec.config.model)
    tokens = int(litellm.token_counter(model=model, messages=body["messages"]))
    for key in ("tools", "response_format"):
        if body.get(key):
            definition = json.dumps(body[key], ensure_ascii=False, separators=(",", ":"))
            tokens += int(litellm.token_counter(model=model, text=definition))
    return tokens


@functools.lru_cache(maxsize=64)
def counting_model(model: str) -> str:
    """The name ``litellm.token_counter`` picks ``model``'s tokenizer by: without its provider.

    litellm looks the tokenizer up by the bare name: ``openai/gpt-4o`` would count with
    ``cl100k_base`` (its fallback), ``gpt-4o`` counts with ``o200k_base``, as OpenAI does.
    """
    litellm = _litellm()
    try:
        return str(litellm.get_llm_provider(model)[0])
    except Exception:  # litellm's own "provider not found" errors: the name as given
        return model


def tokenizer_name(model: str) -> str:
    """What ``litellm.token_counter`` counts ``model``'s tokens with, for the answer."""
    model = counting_model(model)
    try:
        from litellm.litellm_core_utils.token_counter import openai_tokenizer_encoding_name
        from litellm.utils import huggingface_tokenizer_kind

        kind = huggingface_tokenizer_kind(model)
        if kind is not None:
            return f"{kind} tokenizer (Hugging Face, through litellm)"
        return f"tiktoken {openai_tokenizer_encoding_name(model)} (through litellm)"
    except (ImportError, AttributeError):  # another litellm: its token counter, by name only
        return f"litellm.token_counter({model!r})"


def expected_completion(spec: CallSpec, points: int) -> int:
    """The completion tokens ``spec``'s answer typically takes (see :data:`COMPLETION_METHOD`).

    Args:
        spec: The call.
        points: The item's bonus points (coverage), or the reference's tokens (extraction).
    """
    structured = spec.response_model is not None
    if spec.task == "coverage":
        return _COVERAGE_BASE + _COVERAGE_PER_POINT * points if structured else _TEXT_COVERAGE
    if spec.task == "defects":
        return _DEFECTS_STRUCTURED if structured else _TEXT_DEFECTS
    return points


def request_cost(prices: Prices) -> Callable[[CallSpec], float]:
    """A request's estimated cost at ``prices``: what a budget reserves before sending it.

    The same figures as an estimate's: prompt tokens on the exact first request and the task's
    typical answer size (coverage by the item's points). An extraction's answer is the
    reference's statements, which the prompt holds: half the prompt's tokens, at most
    ``_EXTRACTION_CAP``, stands in for it (a cap reserves rather too much than too little).
    """

    def cost(spec: CallSpec) -> float:
        prompt = prompt_tokens(spec)
        if spec.task == "extract_points":
            size = min(prompt // 2, _EXTRACTION_CAP)
        else:
            context = spec.validation_context or {}
            size = int(context.get("n_points", 0))
        return prices.cost(prompt, expected_completion(spec, size))

    return cost


_EXTRACTION_CAP = 600
"""The most completion tokens a budget expects an extraction to answer with."""


# -- the run without calls -----------------------------------------------------------------------


class _Unsent:
    """A provider that is never asked: the estimating caller answers every call itself."""

    async def complete(self, *args: Any, **kwargs: Any) -> Completion:
        """Never called (see ``_DryCaller.call``)."""
        raise AssertionError("an estimate sends no judge call")


@dataclass
class _Tally:
    """One task's running counts."""

    calls: int = 0
    cached: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0


@dataclass
class _Books:
    """What the estimating caller found, per task."""

    tasks: dict[str, _Tally] = field(default_factory=lambda: {t: _Tally() for t in TASKS})
    sent: set[str] = field(default_factory=set)
    repeated: int = 0


class _DryCaller(Caller):
    """A ``Caller`` that answers from the cache and counts, instead of sending, every miss.

    A miss answers as a failed call (the grade is thrown away), but for extraction, whose points
    the item's coverage call needs: the reference's sentences stand in for them.
    """

    def __init__(self, cache: Cache, cache_scope: Literal["shared", "per_key"]) -> None:
        super().__init__(_Unsent(), cache, EngineStats(), cache_scope=cache_scope)
        self.books = _Books()

    async def call(self, spec: CallSpec) -> CallOutcome:
        """Look ``spec`` up as ``Caller.call`` would; count it as sent when it is not cached."""
        tally = self.books.tasks.setdefault(spec.task, _Tally())
        tenant = TENANT.get() or None
        key = spec.cache_key(tenant if self.cache_scope == "per_key" else None)
        ref = rubric_ref(spec.rubric, spec.language)
        if spec.config.cache:
            hit = await self.cache.aget(key)
            # Another caller's entry is a fresh call to this one (``Caller._cached``): counted as
            # sent, and its value not used, so an estimate tells no caller what another graded.
            if hit is not None and (tenant is None or hit.get("tenant") == tenant):
                tally.cached += 1
                record = CallRecord(task=spec.task, rubric=ref, cached=True, attempts=0,
                                    outcome="ok", cache_key=key)
                return CallOutcome(hit["value"], record)
        value: Any = None
        size = 0
        if spec.task == "extract_points":
            value = _stand_in_points()
        else:
            size = spec.validation_context.get("n_points", 0) if spec.validation_context else 0
        if key in self.books.sent:
            self.books.repeated += 1
        else:
            self.books.sent.add(key)
            # Tokenizing is CPU work: off the event loop, which a service shares.
            tokens = await asyncio.to_thread(prompt_tokens, spec)
            if value is not None:
                size = tokens_of(spec.config.model, json.dumps({"points": value}))
                size += _EXTRACTION_PER_POINT * len(value)
            tally.calls += 1
            tally.prompt_tokens += tokens
            tally.completion_tokens += expected_completion(spec, size)
        record = CallRecord(task=spec.task, rubric=ref, cached=False, attempts=0,
                            outcome="ok" if value is not None else "not_sent", cache_key=key)
        if value is not None:
            return CallOutcome(value, record)
        return CallOutcome(None, record, "provider_error", "an estimate sends no judge call")


def tokens_of(model: str, text: str) -> int:
    """Tokens of ``text`` with ``model``'s tokenizer."""
    litellm = _litellm()
    return int(litellm.token_counter(model=counting_model(model), text=text))


_REFERENCE: contextvars.ContextVar[str] = contextvars.ContextVar("estimate_reference", default="")
"""The reference of the item being estimated (each item runs in a task of its own)."""


def _stand_in_points() -> list[str]:
    """What stands in for the points extraction would find: the reference's sentences.

    Extraction splits the reference into its statements, at most ``MAX_EXTRACTED_POINTS``; the
    reference's sentences are the closest thing knowable before the call.
    """
    # core.text, not judge.matcher.text: importing the matcher's package loads it and numpy,
    # which an estimate never uses.
    from core.text import split_sentences

    reference = _REFERENCE.get()
    sentences = split_sentences(reference) or [reference]
    return sentences[:MAX_EXTRACTED_POINTS]


class _DryGrader(Grader):
    """The engine with an estimating caller: the same path, no call sent, no value written."""

    def __init__(
        self,
        config: JudgeConfig,
        *,
        cache: Cache,
        library: RubricLibrary | None,
        cache_scope: Literal["shared", "per_key"],
    ) -> None:
        self.dry = _DryCaller(cache, cache_scope)
        super().__init__(config, library=library, caller=self.dry)

    async def grade(
        self, request: GradeRequest, *, config: JudgeConfig | None = None,
        item_id: str | None = None, max_outage: float | None = None,
    ) -> GradeResult:
        """``Grader.grade``, with the item's reference at hand for a stand-in extraction."""
        _REFERENCE.set(request.reference)
        return await super().grade(
            request, config=config, item_id=item_id, max_outage=max_outage
        )


def _judge_only(config: JudgeConfig) -> JudgeConfig | None:
    """``config`` reduced to its judge tasks (no metric computed, no mapping loaded).

    None when it asks no judge task (ROUGE-L and BERTScore only), or when the judge is the
    embedded matcher, which makes no call.
    """
    wanted = tuple(m for m in config.metrics if m in ("coverage", "defects"))
    if not wanted or config.is_embedded:
        return None
    return config.model_copy(update={"metrics": wanted, "calibration": None})


async def estimate(
    entries: Iterable[Entry] | AsyncIterable[Entry],
    config: JudgeConfig,
    *,
    cache: Cache,
    library: RubricLibrary | None = None,
    cache_scope: Literal["shared", "per_key"] = "shared",
    price_in: float | None = None,
    price_out: float | None = None,
    invalid: int = 0,
) -> EstimateResponse:
    """What grading ``entries`` with ``config`` would cost, without a call sent or a value kept.

    Args:
        entries: The valid items (requests, or ``(item_id, request)`` pairs), read once.
        config: The judge configuration of the run.
        cache: The cache the run would read (only read here).
        library: The rubric library (default: the shipped one).
        cache_scope: The cache scope the run would use (the service's setting).
        price_in: USD per million prompt tokens, for a model without a price (with
            ``price_out``; :func:`prices_for`).
        price_out: USD per million completion tokens.
        invalid: Items of the input that would not be graded, for the answer.

    Raises:
        InputError: only one of ``price_in`` and ``price_out``, or a negative one.
    """
    check_prices(price_in, price_out)
    notes: list[str] = []
    judged = _judge_only(config)
    items = 0
    books = _Books()
    if judged is None:
        async for _ in iterate_entries(entries):
            items += 1
        if config.is_embedded:
            notes.append(f"the judge is {config.model} (offline): it makes no judge call")
        else:
            notes.append("only ROUGE-L and BERTScore were asked: no judge call")
    else:
        grader = _DryGrader(judged, cache=cache, library=library, cache_scope=cache_scope)
        try:
            async for _ in grader.grade_many(entries, config=judged):
                items += 1
        finally:
            await grader.aclose()
        books = grader.dry.books
        if not judged.cache:
            notes.append("the cache is off: every call is counted as sent")
        if "extract_points" in books.tasks and books.tasks["extract_points"].calls:
            notes.append(
                "items without bonus points: their coverage prompts are counted with the "
                "reference's sentences standing in for the points extraction would find"
            )
    sending = judged is not None and any(t.calls for t in books.tasks.values())
    # Priced only when something is sent: litellm is not even imported for the embedded judge.
    prices = prices_for(config.model, price_in, price_out) if sending else None
    if sending and prices is None:
        notes.append(
            f"no price for {config.model}: pass --price-in/--price-out (price_in/price_out), "
            "USD per million tokens"
        )
    tasks = [
        _task(name, books.tasks[name], prices, llm=True)
        for name in TASKS
        if judged is not None and _asked(name, judged, books)
    ]
    total = _task("all", _sum(books.tasks.values()), prices, llm=judged is not None)
    return EstimateResponse(
        judge=config.model,
        items=items,
        invalid=invalid,
        tasks=tasks,
        total=total,
        repeated=books.repeated,
        tokenizer=tokenizer_name(config.model) if sending else None,
        price_in=prices.prompt if prices else None,
        price_out=prices.completion if prices else None,
        price_source=prices.source if prices else None,
        completion_method=COMPLETION_METHOD,
        notes=notes,
    )


def _asked(task: str, config: JudgeConfig, books: _Books) -> bool:
    """Whether the run asks ``task`` at all (extraction: only when some item needed it)."""
    if task == "extract_points":
        tally = books.tasks["extract_points"]
        return bool(tally.calls or tally.cached)
    return task in config.metrics


def _sum(tallies: Iterable[_Tally]) -> _Tally:
    total = _Tally()
    for tally in tallies:
        total.calls += tally.calls
        total.cached += tally.cached
        total.prompt_tokens += tally.prompt_tokens
        total.completion_tokens += tally.completion_tokens
    return total


def _task(
    name: EstimateTaskName | Literal["all"], tally: _Tally, prices: Prices | None, *, llm: bool
) -> TaskEstimate:
    """One row of the answer; an LLM task with no call to send costs 0, priced or not."""
    cost = 0.0 if llm and not tally.calls else None
    if prices is not None:
        cost = round(prices.cost(tally.prompt_tokens, tally.completion_tokens), 6)
    return TaskEstimate(
        task=name,
        calls=tally.calls,
        cached=tally.cached,
        prompt_tokens=tally.prompt_tokens,
        completion_tokens=tally.completion_tokens,
        cost_usd=cost,
    )
