"""The service's settings (``api.settings``): API keys kept as digests, dumps that reload to the
same keys, bad settings named; the same ``BONUSJUDGE_*`` names as ever, and the commands that
only grade never read them."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from api.settings import SERVICE_ONLY, ServiceSettings, load_service_settings
from core.errors import ConfigError
from judge.config import Settings


def digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def test_plain_keys_are_hashed_even_when_they_look_like_hex() -> None:
    hex_key = "ab" * 32  # e.g. `openssl rand -hex 32`: a key, not a digest
    settings = ServiceSettings(api_keys=["secret", hex_key, "sha256:" + digest("other")])
    assert settings.api_keys == [digest("secret"), digest(hex_key), digest("other")]
    assert "secret" not in settings.model_dump_json()


def test_dump_reloads_to_the_same_digests() -> None:
    settings = ServiceSettings(api_keys=["secret"])
    again = ServiceSettings(**settings.model_dump(mode="json"))
    assert again.api_keys == settings.api_keys


def test_bad_digest_and_bad_setting_are_named() -> None:
    with pytest.raises(ConfigError, match="api_keys") as caught:
        load_service_settings(api_keys=["sha256:xyz"])
    assert caught.value.field == "api_keys"
    with pytest.raises(ConfigError, match="jobs_url") as caught:
        load_service_settings(jobs_url="mysql://db")
    assert caught.value.field == "jobs_url"
    with pytest.raises(ConfigError, match="max_jobs_per_key") as caught:
        load_service_settings(max_jobs_per_key=0)
    assert caught.value.field == "max_jobs_per_key"
    with pytest.raises(ConfigError, match="temperature"):
        load_service_settings(judge={"temperature": 9})


def test_the_service_reads_the_same_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BONUSJUDGE_API_KEYS", '["secret"]')
    monkeypatch.setenv("BONUSJUDGE_MAX_JOBS_PER_KEY", "3")
    monkeypatch.setenv("BONUSJUDGE_CACHE_URL", "redis://cache:6379/0")
    monkeypatch.setenv("BONUSJUDGE_JUDGE__MODEL", "openai/gpt-4o")
    settings = load_service_settings()
    assert settings.api_keys == [digest("secret")] and settings.max_jobs_per_key == 3
    assert settings.cache_url == "redis://cache:6379/0"
    assert settings.judge.model == "openai/gpt-4o"
    assert settings.resolved_cache_scope() == "per_key"


def test_the_service_refuses_a_name_it_does_not_know(tmp_path: Path) -> None:
    path = tmp_path / "settings.json"
    path.write_text(json.dumps({"api_keys": ["k"], "max_job": 3}), encoding="utf-8")
    with pytest.raises(ConfigError, match="max_job") as caught:
        load_service_settings(path)
    assert caught.value.field == "max_job"


def test_the_split_keeps_every_setting_once() -> None:
    """Engine and service together hold the settings there always were, none twice."""
    assert set(Settings.model_fields) | SERVICE_ONLY == set(ServiceSettings.model_fields)
    assert not set(Settings.model_fields) & SERVICE_ONLY
    assert {"api_keys", "operator_keys", "max_cost_per_key_usd", "jobs_url", "cache_scope",
            "data_dir", "retention_days"} <= SERVICE_ONLY
