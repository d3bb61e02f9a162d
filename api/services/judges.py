"""The per-request judge selection: the one policy for a request's ``judge`` options.

The model must be the default judge or allow-listed, the overrides must make a valid
configuration, and a request that needs an LLM judge when none is configured gets a 503.
"""

from __future__ import annotations

from api.errors import JudgeNotConfigured
from api.settings import ServiceSettings
from core.errors import ConfigError, InputError, RubricNotFound
from judge.config import JudgeConfig, JudgeOverrides
from judge.engine import Grader

LLM_METRICS = frozenset({"coverage", "defects"})
"""Metrics that need a judge model; ROUGE-L and BERTScore do not."""


def allowed_models(default: str, settings: ServiceSettings) -> list[str]:
    """The models a request may select: the default judge first, then the allow-list."""
    return [default, *(m for m in settings.allowed_models if m != default)]


def select_judge(
    *,
    grader: Grader,
    settings: ServiceSettings,
    overrides: JudgeOverrides | None,
    needs_llm: bool = False,
) -> JudgeConfig:
    """The judge configuration for one request.

    Args:
        grader: The engine; its config is the default judge.
        settings: For the allow-list.
        overrides: The request's ``judge`` field.
        needs_llm: The request needs a judge model whatever its metrics (point extraction).

    Raises:
        InputError: (field ``judge.model``) a model that is not allow-listed.
        InputError / RubricNotFound: invalid overrides, with the field under ``judge.``.
        JudgeNotConfigured: the request needs an LLM judge and the model is empty.
    """
    if overrides is not None and overrides.model is not None:
        allowed = allowed_models(grader.config.model, settings)
        if overrides.model not in allowed:
            raise InputError(
                f"judge.model: model {overrides.model!r} is not allowed; allowed: "
                f"{', '.join(repr(m) for m in allowed)}",
                field="judge.model",
            )
    try:
        config = grader.resolve(overrides)
    except RubricNotFound as exc:
        raise RubricNotFound(str(exc), rubric_id=exc.rubric_id, field=f"judge.{exc.field}") from exc
    except ConfigError as exc:
        # Invalid options sent by the caller: bad input, not a service misconfiguration.
        field = f"judge.{exc.field}" if exc.field else "judge"
        raise InputError(str(exc), field=field) from exc
    if not config.model.strip() and (needs_llm or LLM_METRICS.intersection(config.metrics)):
        raise JudgeNotConfigured(
            "no judge model is configured: set BONUSJUDGE_JUDGE__MODEL (or `judge.model` in the "
            "settings file), or request only the metrics rouge_l/bertscore",
        )
    return config
