"""Which settings a command reads: ``serve`` the service's (``api.settings.ServiceSettings``),
every other command the engine's alone, so grading never needs or reads an API key setting,
even a broken one in the environment or in the settings file it shares with the service."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from api.settings import ServiceSettings
from cli.common import settings_from_args
from cli.main import build_parser
from core.errors import ConfigError
from judge.config import Settings


@pytest.fixture
def broken_service_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A settings file and environment whose service settings are all invalid."""
    monkeypatch.setenv("BONUSJUDGE_API_KEYS", '["sha256:not-a-digest"]')
    monkeypatch.setenv("BONUSJUDGE_MAX_SYNC_BYTES", "1")
    path = tmp_path / "settings.json"
    path.write_text(json.dumps({
        "cache_dir": str(tmp_path / "cache"),
        "operator_keys": ["sha256:xyz"],
        "jobs_url": "mysql://db",
    }), encoding="utf-8")
    return path


def test_grade_reads_the_engine_settings_only(broken_service_settings: Path) -> None:
    args = build_parser().parse_args(
        ["grade", "x.jsonl", "--out", "o", "--settings", str(broken_service_settings)]
    )
    settings = settings_from_args(args)
    assert type(settings) is Settings
    assert settings.cache_dir == broken_service_settings.parent / "cache"
    assert not hasattr(settings, "api_keys")


def test_serve_reads_and_checks_the_service_settings(broken_service_settings: Path) -> None:
    args = build_parser().parse_args(["serve", "--settings", str(broken_service_settings)])
    with pytest.raises(ConfigError) as caught:
        settings_from_args(args, ServiceSettings, jobs_url=args.jobs_url)
    assert caught.value.field in {"api_keys", "operator_keys", "jobs_url", "max_sync_bytes"}
    assert caught.value.field is not None and caught.value.field in str(caught.value)


def test_serve_takes_the_jobs_url_option(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("BONUSJUDGE_SETTINGS_FILE", raising=False)
    args = build_parser().parse_args(
        ["serve", "--jobs-url", "postgresql://u@h/db", "--cache-dir", str(tmp_path)]
    )
    settings = settings_from_args(args, ServiceSettings, jobs_url=args.jobs_url)
    assert isinstance(settings, ServiceSettings)
    assert settings.jobs_url == "postgresql://u@h/db" and settings.cache_dir == tmp_path


def test_a_name_no_command_knows_is_still_refused(tmp_path: Path) -> None:
    path = tmp_path / "settings.json"
    path.write_text(json.dumps({"cahce_dir": "x"}), encoding="utf-8")
    args = build_parser().parse_args(["grade", "x.jsonl", "--out", "o", "--settings", str(path)])
    with pytest.raises(ConfigError, match="cahce_dir"):
        settings_from_args(args)
