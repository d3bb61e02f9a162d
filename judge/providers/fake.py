"""``FakeProvider``: a scripted judge that ships in the package, for tests and dry runs.

Give it a list of outputs (consumed in order) or a handler (called per attempt). Each output may
be a dict or pydantic object (validated against the call's response model, as instructor would:
an invalid one triggers a re-ask that consumes the next output), a string (plain-text answer), or
an exception (raised, e.g. ``ProviderError(retryable=True)`` to exercise retries). Every attempt
is recorded in ``calls`` with the exact messages, so tests can assert on the prompts sent. When
the outputs run out it raises ``FakeProviderExhausted``, which the engine never swallows.
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ValidationError

from core.errors import JudgeOutputError, SpendingError
from judge.config import JudgeConfig
from judge.providers.base import Completion, failure_reason_of

FakeOutput = BaseModel | dict[str, Any] | str | BaseException
"""What a scripted attempt yields."""


class FakeProviderExhausted(RuntimeError):
    """The fake provider was called more often than it had outputs for."""

    fatal = True  # the engine re-raises errors marked fatal instead of scoring them


@dataclass
class FakeCall:
    """One recorded attempt."""

    messages: list[dict[str, str]]
    response_model: type[BaseModel] | None
    config: JudgeConfig
    validation_context: dict[str, Any] | None = None

    @property
    def user(self) -> str:
        """The user message's text."""
        return next((m["content"] for m in self.messages if m["role"] == "user"), "")

    @property
    def system(self) -> str:
        """The system message's text."""
        return next((m["content"] for m in self.messages if m["role"] == "system"), "")


@dataclass
class FakeProvider:
    """A scripted ``Provider``.

    Args:
        outputs: Outputs consumed one per attempt, in order.
        handler: Alternatively, ``handler(call) -> FakeOutput`` decides each attempt.
        latency: Seconds to sleep per attempt (to exercise concurrency).
        prompt_tokens: Tokens reported per attempt.
    """

    outputs: Iterable[FakeOutput] | None = None
    handler: Callable[[FakeCall], FakeOutput] | None = None
    latency: float = 0.0
    prompt_tokens: int = 100
    completion_tokens: int = 20
    calls: list[FakeCall] = field(default_factory=list)
    _iter: Iterator[FakeOutput] | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.outputs is None and self.handler is None:
            raise ValueError("FakeProvider needs outputs or a handler")
        if self.outputs is not None:
            self._iter = iter(self.outputs)

    def _next(self, call: FakeCall) -> FakeOutput:
        if self.handler is not None:
            return self.handler(call)
        assert self._iter is not None
        try:
            return next(self._iter)
        except StopIteration:
            raise FakeProviderExhausted(
                f"FakeProvider ran out of outputs after {len(self.calls) - 1} call(s)"
            ) from None

    async def complete(
        self,
        messages: list[dict[str, str]],
        response_model: type[BaseModel] | None,
        config: JudgeConfig,
        *,
        validation_context: dict[str, Any] | None = None,
    ) -> Completion:
        """Answer from the script; see ``judge.providers.base.Provider.complete``."""
        attempts = 0
        last_error = ""
        last_raw: str | None = None
        for _ in range(config.reasks + 1):
            attempts += 1
            call = FakeCall(list(messages), response_model, config, validation_context)
            self.calls.append(call)
            if self.latency:
                await asyncio.sleep(self.latency)
            output = self._next(call)
            if isinstance(output, BaseException):
                raise self._spent(output, attempts)
            if response_model is None:
                if not isinstance(output, str):
                    raise TypeError("a plain-text call needs a string output")
                return self._completion(output, output, attempts)
            try:
                parsed = self._parse(output, response_model, validation_context)
            except (ValidationError, ValueError) as exc:
                last_error = str(exc)[:300]
                last_raw = output if isinstance(output, str) else json.dumps(self._dump(output))
                continue  # re-ask, as instructor does
            raw = output if isinstance(output, str) else json.dumps(self._dump(output))
            return self._completion(parsed, raw, attempts)
        raise JudgeOutputError(
            f"no valid answer after {attempts} attempt(s): {last_error}",
            # The transports' classification: text that is not JSON failed to parse.
            reason=failure_reason_of(refused=False, finish_reason=None, raw=last_raw),
            attempts=attempts,
        ).with_usage(self.prompt_tokens * attempts, self.completion_tokens * attempts)

    def _spent(self, error: BaseException, attempts: int) -> BaseException:
        """A scripted error with the usage the transports would report with it.

        An unusable answer (``JudgeOutputError``) was billed, as were the invalid answers this
        call re-asked before a scripted failure; a ``ProviderError`` itself was not. The error's
        ``attempts`` stay the script's (a script that re-asks sets them, as the transports
        would). The script's object may be reused, so it is copied rather than changed.
        """
        if not isinstance(error, SpendingError) or error.prompt_tokens:
            return error
        answered = attempts - 1 + (1 if isinstance(error, JudgeOutputError) else 0)
        if not answered:
            return error
        return copy.copy(error).with_usage(
            self.prompt_tokens * answered, self.completion_tokens * answered,
            error.cost_usd, error.cached_tokens,
        )

    @staticmethod
    def _dump(output: BaseModel | dict[str, Any]) -> Any:
        return output.model_dump() if isinstance(output, BaseModel) else output

    def _parse(
        self,
        output: FakeOutput,
        response_model: type[BaseModel],
        context: dict[str, Any] | None,
    ) -> BaseModel:
        if isinstance(output, str):
            return response_model.model_validate_json(output, context=context)
        return response_model.model_validate(self._dump(output), context=context)  # type: ignore[arg-type]

    def _completion(self, output: BaseModel | str, raw: str, attempts: int) -> Completion:
        return Completion(
            output=output,
            raw_text=raw,
            prompt_tokens=self.prompt_tokens * attempts,
            completion_tokens=self.completion_tokens * attempts,
            cost_usd=None,
            attempts=attempts,
        )


def covering(*indices: int, n: int) -> dict[str, Any]:
    """A coverage answer marking ``indices`` covered out of ``n`` points (test helper)."""
    return {
        "points": [
            {"index": i, "covered": i in indices, "rationale": "", "evidence": ""}
            for i in range(1, n + 1)
        ]
    }


def defects(*descriptions: str) -> dict[str, Any]:
    """A defect answer listing ``descriptions`` as factual errors (test helper)."""
    return {"defects": [{"description": d, "kind": "factual"} for d in descriptions]}
