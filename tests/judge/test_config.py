"""Settings: API keys kept as digests, dumps that reload to the same keys, bad settings named."""

from __future__ import annotations

import hashlib

import pytest

from core.errors import ConfigError
from judge.config import JudgeConfig, JudgeOverrides, Settings, load_settings


def digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def test_plain_keys_are_hashed_even_when_they_look_like_hex():
    hex_key = "ab" * 32  # e.g. `openssl rand -hex 32`: a key, not a digest
    settings = Settings(api_keys=["secret", hex_key, "sha256:" + digest("other")])
    assert settings.api_keys == [digest("secret"), digest(hex_key), digest("other")]
    assert "secret" not in settings.model_dump_json()


def test_dump_reloads_to_the_same_digests():
    settings = Settings(api_keys=["secret"])
    again = Settings(**settings.model_dump(mode="json"))
    assert again.api_keys == settings.api_keys


def test_bad_digest_and_bad_setting_are_named():
    with pytest.raises(ConfigError, match="api_keys"):
        load_settings(api_keys=["sha256:xyz"])
    with pytest.raises(ConfigError, match="temperature"):
        load_settings(judge={"temperature": 9})


def test_overrides_merge_only_what_they_set():
    base = JudgeConfig(model="openai/x", temperature=0.2)
    merged = base.merged(JudgeOverrides(rubric="chartom-paper"))
    assert merged.temperature == 0.2 and merged.rubric == "chartom-paper"
    assert merged.config_hash() != base.config_hash()
    # Concurrency and timeouts do not change what the judge answers: same hash.
    assert (
        base.model_copy(update={"concurrency": 3, "timeout": 5}).config_hash() == base.config_hash()
    )


def test_gemini_models_default_to_json_schema_mode() -> None:
    """litellm drops integer enums from Gemini's function declarations, so in ``tools`` mode
    a Gemini judge never learned which point numbers exist (every coverage call failed
    validation against the strict stand-in): Gemini models default to ``json_schema``."""
    from judge.config import JudgeConfig, JudgeOverrides, load_settings

    assert JudgeConfig(model="gemini/gemini-2.5-flash").mode == "json_schema"
    assert JudgeConfig(model="vertex_ai/gemini-2.5-pro").mode == "json_schema"
    assert JudgeConfig(model="openai/gpt-4o").mode == "tools"
    assert JudgeConfig(model="anthropic/claude-sonnet-4-5").mode == "tools"
    # Asked for, a mode stands.
    assert JudgeConfig(model="gemini/gemini-2.5-flash", mode="tools").mode == "tools"
    # A new model without a mode takes its own default, unless the old mode was chosen.
    base = JudgeConfig(model="openai/gpt-4o")
    assert base.merged(JudgeOverrides(model="gemini/gemini-2.5-flash")).mode == "json_schema"
    chosen = JudgeConfig(model="openai/gpt-4o", mode="json")
    assert chosen.merged(JudgeOverrides(model="gemini/gemini-2.5-flash")).mode == "json"
    # The command line's path: options over the settings.
    settings = load_settings(None, judge={"model": "gemini/gemini-2.5-flash"})
    assert settings.judge.mode == "json_schema"
