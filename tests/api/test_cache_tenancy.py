"""The judge-call cache between API keys: no key learns from a result that another key graded
the same item (issue: cross-key cache oracle)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from judge.engine import Grader
from judge.providers.fake import FakeCall, FakeOutput, FakeProvider
from tests.helpers.engine import levin_item

ITEM = levin_item(bonus_points=["Levin feels humiliated"])
KEY_A, KEY_B = "key-a-0123456789", "key-b-9876543210"


@pytest.fixture
def client_for(
    make_app: Callable[..., FastAPI], make_grader: Callable[..., Grader],
    fake_judge: Callable[[FakeCall], FakeOutput],
) -> Callable[[str], tuple[TestClient, FakeProvider]]:
    """A client (not yet opened) of the service with this cache scope, and its fake judge."""

    def build(scope: str) -> tuple[TestClient, FakeProvider]:
        fake = FakeProvider(handler=fake_judge)
        grader = make_grader(fake, metrics=("coverage", "defects"), cache_scope=scope)
        app = make_app(grader, api_keys=[KEY_A, KEY_B], cache_scope=scope)
        return TestClient(app), fake

    return build


def grade(client: TestClient, key: str) -> list[dict[str, Any]]:
    answer = client.post("/v1/grade", json=ITEM, headers={"Authorization": f"Bearer {key}"})
    assert answer.status_code == 200, answer.text
    calls: list[dict[str, Any]] = answer.json()["provenance"]["calls"]
    return calls


def test_shared_cache_never_tells_a_key_what_another_key_graded(
    client_for: Callable[[str], tuple[TestClient, FakeProvider]],
) -> None:
    client, fake = client_for("shared")
    with client:
        first = grade(client, KEY_A)
        assert all(not c["cached"] and c["attempts"] == 1 for c in first)
        paid = len(fake.calls)
        other = grade(client, KEY_B)  # served from A's entries, but reported as fresh calls
        assert all(not c["cached"] and c["attempts"] == 1 for c in other), other
        assert len(fake.calls) == paid  # the judge was not asked again
        again = grade(client, KEY_A)  # A's own entries are A's cache hits
        assert all(c["cached"] and c["attempts"] == 0 for c in again)


def test_shared_cache_masks_hits_in_jobs_too(
    client_for: Callable[[str], tuple[TestClient, FakeProvider]],
) -> None:
    client, _ = client_for("shared")
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
def test_per_key_cache_keeps_keys_apart(
    client_for: Callable[[str], tuple[TestClient, FakeProvider]], scope: str
) -> None:
    client, fake = client_for(scope)
    with client:
        grade(client, KEY_A)
        paid = len(fake.calls)
        other = grade(client, KEY_B)
        assert all(not c["cached"] for c in other)
        assert len(fake.calls) == 2 * paid  # B pays for its own calls
        again = grade(client, KEY_B)
        assert all(c["cached"] for c in again)
