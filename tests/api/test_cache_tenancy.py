"""The judge-call cache between API keys: no key learns from a result that another key graded
the same item (issue: cross-key cache oracle)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from judge.cache import JudgeCache
from judge.config import JudgeConfig, Settings
from judge.engine import Grader
from judge.fake import FakeCall, FakeOutput, FakeProvider, covering, defects
from judge.verdicts import DefectJudgement

ITEM = {
    "question": "How does Levin feel?",
    "reference": "He feels humiliated and hurt.",
    "bonus_points": ["Levin feels humiliated"],
    "response": "Levin is humiliated.",
}
KEY_A, KEY_B = "key-a-0123456789", "key-b-9876543210"


def handler(call: FakeCall) -> FakeOutput:
    return defects() if call.response_model is DefectJudgement else covering(1, n=1)


def client_for(tmp_path: Path, scope: str) -> tuple[TestClient, FakeProvider]:
    fake = FakeProvider(handler=handler)
    grader = Grader(
        JudgeConfig(model="fake/judge", metrics=("coverage", "defects")),
        provider=fake, cache=JudgeCache(tmp_path / "cache"), cache_scope=scope,  # type: ignore[arg-type]
    )
    settings = Settings(cache_dir=tmp_path / "cache", data_dir=tmp_path / "data",
                        api_keys=[KEY_A, KEY_B], cache_scope=scope)  # type: ignore[arg-type]
    return TestClient(create_app(settings, grader=grader, poll_seconds=0.05)), fake


def grade(client: TestClient, key: str) -> list[dict[str, Any]]:
    answer = client.post("/v1/grade", json=ITEM, headers={"Authorization": f"Bearer {key}"})
    assert answer.status_code == 200, answer.text
    calls: list[dict[str, Any]] = answer.json()["provenance"]["calls"]
    return calls


def test_shared_cache_never_tells_a_key_what_another_key_graded(tmp_path: Path) -> None:
    client, fake = client_for(tmp_path, "shared")
    with client:
        first = grade(client, KEY_A)
        assert all(not c["cached"] and c["attempts"] == 1 for c in first)
        paid = len(fake.calls)
        other = grade(client, KEY_B)  # served from A's entries, but reported as fresh calls
        assert all(not c["cached"] and c["attempts"] == 1 for c in other), other
        assert len(fake.calls) == paid  # the judge was not asked again
        again = grade(client, KEY_A)  # A's own entries are A's cache hits
        assert all(c["cached"] and c["attempts"] == 0 for c in again)


def test_shared_cache_masks_hits_in_jobs_too(tmp_path: Path) -> None:
    client, _ = client_for(tmp_path, "shared")
    with client:
        grade(client, KEY_A)
        job = client.post("/v1/jobs", json={"items": [ITEM]},
                          headers={"Authorization": f"Bearer {KEY_B}"}).json()
        headers = {"Authorization": f"Bearer {KEY_B}"}
        deadline = time.monotonic() + 30
        while client.get(f"/v1/jobs/{job['id']}", headers=headers).json()["status"] != "done":
            assert time.monotonic() < deadline
            time.sleep(0.02)
        line = client.get(f"/v1/jobs/{job['id']}/results", headers=headers).text
        assert '"cached":true' not in line.replace(" ", "")


@pytest.mark.parametrize("scope", ["per_key"])
def test_per_key_cache_keeps_keys_apart(tmp_path: Path, scope: str) -> None:
    client, fake = client_for(tmp_path, scope)
    with client:
        grade(client, KEY_A)
        paid = len(fake.calls)
        other = grade(client, KEY_B)
        assert all(not c["cached"] for c in other)
        assert len(fake.calls) == 2 * paid  # B pays for its own calls
        again = grade(client, KEY_B)
        assert all(c["cached"] for c in again)
