"""One error tree for bonusjudge; every failure the engine can name is a ``JudgeError``.

::

    JudgeError
    ├── ConfigError              a setting or option is invalid (named in ``field``)
    ├── InputError               a grading request or input line is invalid (``field``, ``line``)
    ├── RubricError
    │   ├── RubricNotFound       no rubric with that id (or language)
    │   └── RubricInvalid        a rubric file failed validation (``path``, ``field``)
    ├── SpendingError            a judge call failed after requests that may be billed (usage)
    │   ├── ProviderError        the judge provider failed (``reason``, ``retryable``, ``status``)
    │   └── JudgeOutputError     the judge answered, but not in a usable form (``reason``)
    └── CacheError               the cache folder cannot be opened or written

Grading turns ``ProviderError`` and ``JudgeOutputError`` into an *unscored* verdict with the
error's ``reason``; they only escape to callers of the low-level provider API. The HTTP mapping of
this tree lives in one place, ``api/errors.py``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Self

from pydantic import ValidationError

from bonusjudge_client.wire.vocab import UnscoredReason as UnscoredReason


class JudgeError(Exception):
    """Root of every error bonusjudge raises on purpose."""


class ConfigError(JudgeError):
    """A setting, option or judge configuration is invalid.

    Attributes:
        field: The name of the offending setting, when known.
    """

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class InputError(JudgeError):
    """A grading request, or one line of an input file, is invalid.

    Attributes:
        field: Dotted path of the offending field, when known.
        line: 1-based line number in the input file, when the input is a file.
    """

    def __init__(self, message: str, *, field: str | None = None, line: int | None = None) -> None:
        super().__init__(message)
        self.field = field
        self.line = line


class RubricError(JudgeError):
    """Base for rubric lookup and validation failures."""


class RubricNotFound(RubricError):
    """No rubric exists with the requested id, or not in the requested language."""

    def __init__(self, message: str, *, rubric_id: str, field: str = "rubric") -> None:
        super().__init__(message)
        self.rubric_id = rubric_id
        self.field = field


class RubricInvalid(RubricError):
    """A rubric file failed validation when loaded; the message names the file and field.

    Attributes:
        path: The rubric file.
        field: The offending field inside the file.
    """

    def __init__(self, message: str, *, path: str, field: str | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.field = field


class SpendingError(JudgeError):
    """A judge call that failed after requests the provider may have billed.

    The provider bills every answered request, an unusable answer or a re-ask before a transport
    failure included; the engine counts them (``/metrics``, provenance, budgets) only if the
    error says so, with :meth:`with_usage`.

    Attributes:
        reason: The unscored reason this failure maps to.
        attempts: Requests sent before the failure, re-asks included.
        prompt_tokens: Prompt tokens the provider reported for the answered requests among
            them, when it reported any.
        completion_tokens: Completion tokens reported for them, likewise.
        cost_usd: Their cost, when the model's price is known.
        cached_tokens: Of ``prompt_tokens``, those the provider served from its prompt cache
            (billed at its cache-read price), when it reported them.
    """

    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cost_usd: float | None = None
    cached_tokens: int | None = None

    def __init__(self, message: str, *, reason: UnscoredReason, attempts: int = 1) -> None:
        super().__init__(message)
        self.reason: UnscoredReason = reason
        self.attempts = attempts

    def with_usage(
        self,
        prompt_tokens: int | None,
        completion_tokens: int | None,
        cost_usd: float | None = None,
        cached_tokens: int | None = None,
    ) -> Self:
        """This error, carrying the usage the provider reported for the requests it ends."""
        self.prompt_tokens = prompt_tokens
        self.completion_tokens = completion_tokens
        self.cost_usd = cost_usd
        self.cached_tokens = cached_tokens
        return self


class ProviderError(SpendingError):
    """The judge provider failed to answer (network, HTTP status, timeout, refusal...).

    Its usage (:class:`SpendingError`) is that of the answered requests before the failure (a
    re-ask that then failed in transport); the failed request itself reported none.

    Attributes:
        retryable: Whether trying again later may succeed (429, 5xx, timeouts, resets).
        status: The HTTP status code, when there was one.
        retry_after: Seconds the provider asked us to wait (``Retry-After``), when given.
    """

    def __init__(
        self,
        message: str,
        *,
        reason: UnscoredReason = "provider_error",
        retryable: bool = False,
        status: int | None = None,
        retry_after: float | None = None,
        attempts: int = 1,
    ) -> None:
        super().__init__(message, reason=reason, attempts=attempts)
        self.retryable = retryable
        self.status = status
        self.retry_after = retry_after


class JudgeOutputError(SpendingError):
    """The judge answered but the answer is unusable (unparseable, invalid, truncated, empty).

    Its usage (:class:`SpendingError`) covers every attempt: the provider bills unusable answers
    too.

    Attributes:
        raw: The judge's raw text, kept (truncated) for diagnosis.
    """

    def __init__(
        self,
        message: str,
        *,
        reason: UnscoredReason = "parse_failure",
        raw: str | None = None,
        attempts: int = 1,
    ) -> None:
        super().__init__(message, reason=reason, attempts=attempts)
        self.raw = raw[:2000] if raw else raw


class CacheError(JudgeError):
    """The cache folder cannot be opened or written."""


def every_error(errors: ValidationError, *, whole: str | None = None) -> str:
    """Every pydantic validation error on one line: ``"answer: ...; options.1: ..."``.

    For inputs whose reader reports all that is wrong with a line at once (MCQ items, calibration
    rows). pydantic's ``"Value error, "`` prefix is dropped; model-level checks already start
    with the field they name.

    Args:
        errors: The validation error.
        whole: The name to give an error about the whole object (an empty location); None
            leaves such a message unprefixed.
    """
    parts: list[str] = []
    for detail in errors.errors():
        where = ".".join(str(part) for part in detail["loc"]) or whole
        message = str(detail["msg"]).removeprefix("Value error, ")
        parts.append(f"{where}: {message}" if where else message)
    return "; ".join(parts)


def unset_variable(name: str, environ: Mapping[str, str] | None = None) -> str | None:
    """Why environment variable ``name`` gives no value, for a message; None when it gives one.

    ``X is not set`` or ``X is set but empty`` (or ``holds only whitespace``): the fixes differ
    (export it; give it a value, often a shell's ``export X=$UNDEFINED``), so a message says which.

    Args:
        name: The variable.
        environ: The environment to read; default ``os.environ``.
    """
    value = (os.environ if environ is None else environ).get(name)
    if value is None:
        return f"{name} is not set"
    if not value:
        return f"{name} is set but empty"
    if not value.strip():
        return f"{name} is set but holds only whitespace"
    return None
