"""The engine's settings: bad settings named, the service's names left to the service; the
judge configuration's overrides and default modes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from core.errors import ConfigError
from judge.config import JudgeConfig, JudgeOverrides, Settings, load_settings


def test_a_bad_setting_is_named() -> None:
    with pytest.raises(ConfigError, match="temperature"):
        load_settings(judge={"temperature": 9})
    with pytest.raises(ConfigError, match="cache_url") as caught:
        load_settings(cache_url="http://cache")
    assert caught.value.field == "cache_url"


def test_the_engine_settings_hold_no_service_setting() -> None:
    """The service's policy (keys, quotas, the job store) lives in ``api.settings``."""
    assert set(Settings.model_fields) == {"judge", "cache_dir", "cache_url", "calibration_dir"}
    with pytest.raises(ValidationError, match="api_keys"):
        Settings(api_keys=["secret"])  # type: ignore[call-arg]


def test_the_engine_skips_the_service_names_of_a_shared_settings_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One settings file serves ``grade`` and ``serve``: the engine reads its own names and
    leaves the service's unread (a bad key digest there is the service's to refuse), but a name
    no settings model owns is refused, naming it."""
    monkeypatch.delenv("BONUSJUDGE_API_KEYS", raising=False)
    shared = tmp_path / "settings.json"
    shared.write_text(json.dumps({
        "cache_dir": str(tmp_path / "c"), "api_keys": ["sha256:xyz"], "max_batch": 0,
    }), encoding="utf-8")
    settings = load_settings(shared, also_known={"api_keys", "max_batch"})
    assert settings.cache_dir == tmp_path / "c"
    assert load_settings(shared).cache_dir == tmp_path / "c"  # also_known=None: all skipped
    typo = tmp_path / "typo.json"
    typo.write_text(json.dumps({"cahce_dir": "x"}), encoding="utf-8")
    with pytest.raises(ConfigError, match="cahce_dir") as caught:
        load_settings(typo, also_known={"api_keys"})
    assert caught.value.field == "cahce_dir"


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
