"""The clients end to end against the real app, in-process, with a FakeProvider judge.

The sync client runs on ``fastapi.testclient.TestClient(app)`` (entered, so the lifespan starts
the job runner); the async client on ``httpx.ASGITransport(app=app)`` with the lifespan entered
by hand (ASGITransport does not run it).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from bonusjudge_client import (
    AsyncJudgeClient,
    ClientHTTPError,
    ClientItemError,
    JudgeClient,
    RetryPolicy,
)
from judge.engine import Grader
from judge.providers.fake import FakeCall, FakeOutput, FakeProvider, covering, defects

KEY = "client-test-key"
OPERATOR_KEY = "client-test-operator-key"
"""Reads /metrics, which a tenant's key may not (403)."""
OTHER_KEY = "someone-else"


def handler(call: FakeCall) -> FakeOutput:
    name = call.response_model.__name__ if call.response_model else "text"
    if name == "BonusPointsExtraction":
        return {"points": ["Levin feels humiliated", "He wants to go home"]}
    if name == "CoverageJudgement":
        return covering(1, n=2)
    # Defect call: a response mentioning "Moscow" is judged wrong, anything else is fine.
    return defects("Levin does not go to Moscow") if "Moscow" in call.user else defects()


def item(i: int, **kw: Any) -> dict[str, Any]:
    base = {
        "id": f"q{i}",
        "question": "How does Levin feel after Kitty refuses him?",
        "reference": "He feels humiliated and wants to return to his estate.",
        "bonus_points": ["Levin feels humiliated", "He wants to return to his estate"],
        "response": f"He is ashamed ({i}) and longs for the countryside.",
        "tom_dimension": "emotion",
        "language": "en",
    }
    base.update(kw)
    return base


@pytest.fixture
def app_and_fake(
    make_grader: Callable[..., Grader], make_app: Callable[..., FastAPI]
) -> tuple[FastAPI, FakeProvider]:
    """The service over a fake judge that coverage, defects and ROUGE-L are asked of."""
    fake = FakeProvider(handler=handler)
    grader = make_grader(fake, cache=False, metrics=("coverage", "defects", "rouge_l"))
    app = make_app(
        grader,
        judge=grader.config,
        api_keys=[KEY, OTHER_KEY],
        operator_keys=[OPERATOR_KEY],
        allowed_models=[],
        max_batch=8,
        max_bonus_points=4,  # below the client-side limit (32): lets a valid item fail service-side
    )
    return app, fake


@pytest.fixture
def served(
    app_and_fake: tuple[FastAPI, FakeProvider],
) -> Iterator[tuple[JudgeClient, TestClient, FakeProvider]]:
    app, fake = app_and_fake
    with TestClient(app, raise_server_exceptions=False) as http:
        client = JudgeClient(api_key=KEY, http_client=http, retry=RetryPolicy(retries=0))
        yield client, http, fake


@pytest.fixture
async def aserved(app_and_fake: tuple[FastAPI, FakeProvider]) -> AsyncIterator[AsyncJudgeClient]:
    app, _ = app_and_fake
    async with app.router.lifespan_context(app):
        client = AsyncJudgeClient(
            "http://bonusjudge.test",
            api_key=KEY,
            transport=httpx.ASGITransport(app=app),
            retry=RetryPolicy(retries=0),
        )
        async with client:
            yield client


# -- sync ---------------------------------------------------------------------------------------


def test_health_ready_and_rubrics(served: tuple[JudgeClient, TestClient, FakeProvider]) -> None:
    client, _, _ = served
    assert client.health().status == "ok"
    ready = client.ready()
    assert set(ready.checks) == {"encoder", "store", "cache", "judge"}
    listing = client.rubrics()
    assert "chartom" in listing.families
    first = listing.rubrics[0]
    detail = client.rubric(first.id)
    assert detail.id == first.id and detail.prompts
    with pytest.raises(ClientHTTPError) as err:
        client.rubric("no-such-rubric")
    assert err.value.status == 404


def test_grade_returns_typed_result(served: tuple[JudgeClient, TestClient, FakeProvider]) -> None:
    client, _, fake = served
    result = client.grade(item(1, response="He goes to Moscow at once."))
    assert result.id == "q1" and result.status == "scored"
    assert result.coverage is not None and result.coverage.covered == 1
    assert result.defects is not None and result.defects.penalized is True
    assert result.rouge_l is not None
    assert any("Moscow" in c.user for c in fake.calls)


def test_auth_is_required_and_reported(
    served: tuple[JudgeClient, TestClient, FakeProvider],
) -> None:
    _, http, _ = served
    anonymous = JudgeClient(http_client=http, api_key="", retry=RetryPolicy(retries=0))
    with pytest.raises(ClientHTTPError) as err:
        anonymous.grade(item(1))
    assert err.value.status == 401
    assert anonymous.health().status == "ok"  # liveness needs no key


def test_disallowed_judge_model_names_the_field(
    served: tuple[JudgeClient, TestClient, FakeProvider],
) -> None:
    client, _, _ = served
    with pytest.raises(ClientHTTPError) as err:
        client.grade(item(1), judge={"model": "openai/gpt-4o"})
    assert err.value.status == 422 and err.value.field == "judge.model"
    assert "judge.model" in str(err.value)


def too_many_points(i: int) -> dict[str, Any]:
    return item(i, bonus_points=[f"point {n}" for n in range(5)])


def test_batch_keeps_a_bad_item_apart(
    served: tuple[JudgeClient, TestClient, FakeProvider],
) -> None:
    client, _, _ = served
    entries = client.grade_batch([item(0), too_many_points(1), item(2)])
    assert [e.index for e in entries] == [0, 1, 2]
    assert [e.result.id for e in entries if e.result] == ["q0", "q2"]
    error = entries[1].error
    assert entries[1].result is None and error is not None
    assert error.field == "bonus_points" and "limit of 4" in error.message


def test_grade_many_raises_the_service_item_error(
    served: tuple[JudgeClient, TestClient, FakeProvider],
) -> None:
    client, _, _ = served
    items = [item(0), item(1), item(2), too_many_points(3), item(4)]
    with pytest.raises(ClientItemError) as err:
        client.grade_many(items, batch_size=2, progress=False)
    assert err.value.index == 3 and err.value.id == "q3" and err.value.field == "bonus_points"
    out = client.grade_many(items, batch_size=2, progress=False, return_exceptions=True)
    assert [isinstance(o, ClientItemError) for o in out] == [False, False, False, True, False]


def test_grade_many_in_order_across_batches(
    served: tuple[JudgeClient, TestClient, FakeProvider],
) -> None:
    client, _, _ = served
    items = [item(i) for i in range(7)]
    results = client.grade_many(items, batch_size=3, concurrency=2, progress=False)
    assert [r.id for r in results] == [f"q{i}" for i in range(7)]
    assert all(r.status == "scored" for r in results)


def test_grade_many_batch_over_service_limit_raises(
    served: tuple[JudgeClient, TestClient, FakeProvider],
) -> None:
    client, _, _ = served
    with pytest.raises(ClientHTTPError) as err:
        client.grade_many([item(i) for i in range(9)], batch_size=9, progress=False)
    assert err.value.status == 422 and err.value.field == "items"


def test_extract_points(served: tuple[JudgeClient, TestClient, FakeProvider]) -> None:
    client, _, _ = served
    out = client.extract_points(
        {"question": "How does Levin feel?", "reference": "Humiliated; wants to go home."}
    )
    assert out.status == "scored"
    assert out.bonus_points == ["Levin feels humiliated", "He wants to go home"]


def test_job_life_cycle(served: tuple[JudgeClient, TestClient, FakeProvider]) -> None:
    client, http, _ = served
    items: list[Any] = [item(0), {"question": "no reference or response"}, item(2)]
    status = client.submit_job(items)
    assert status.status in ("queued", "running", "done")
    final = client.wait(status.id, poll_interval=0.05, timeout=60)
    assert final.status == "done" and final.invalid == 1
    entries = list(client.results(status.id))
    assert len(entries) == 3
    by_index = {e.index: e for e in entries}
    assert by_index[1].error is not None and by_index[1].result is None
    assert {e.result.id for e in entries if e.result} == {"q0", "q2"}
    assert len(list(client.results(status.id, offset=2))) == 1
    summary = client.summary(status.id)
    assert summary.items == 2 and summary.bpc == 0.5
    assert client.cancel(status.id).id == status.id
    # Jobs belong to the key that created them.
    other = JudgeClient(http_client=http, api_key=OTHER_KEY, retry=RetryPolicy(retries=0))
    with pytest.raises(ClientHTTPError) as err:
        other.job(status.id)
    assert err.value.status == 404


def test_job_from_jsonl_file_with_judge(
    served: tuple[JudgeClient, TestClient, FakeProvider], tmp_path: Path
) -> None:
    import json

    client, _, _ = served
    path = tmp_path / "items.jsonl"
    path.write_text(json.dumps(item(0)) + "\n{broken\n" + json.dumps(item(1)) + "\n")
    status = client.submit_job(file=path, judge={"metrics": ["coverage"]})
    final = client.wait(status.id, poll_interval=0.05, timeout=60)
    assert final.status == "done" and final.invalid == 1
    errors = [e.error for e in client.results(status.id) if e.error]
    assert len(errors) == 1 and errors[0].line == 2
    results = [e.result for e in client.results(status.id) if e.result]
    assert all(r.defects is None for r in results)  # the judge selection reached the job


def test_prometheus_text(served: tuple[JudgeClient, TestClient, FakeProvider]) -> None:
    _, http, _ = served
    operator = JudgeClient(api_key=OPERATOR_KEY, http_client=http, retry=RetryPolicy(retries=0))
    assert "# HELP" in operator.prometheus()


# -- async --------------------------------------------------------------------------------------


async def test_async_grade_and_grade_many(aserved: AsyncJudgeClient) -> None:
    client = aserved
    assert (await client.health()).status == "ok"
    result = await client.grade(item(1))
    assert result.id == "q1" and result.status == "scored"
    # Awaited, as the README shows it: the list of results in input order, as the sync client's.
    many = await client.grade_many(
        [item(i) for i in range(5)], batch_size=2, concurrency=2, progress=False
    )
    assert [r.id for r in many] == [f"q{i}" for i in range(5)]
    streamed = [
        (position, outcome.id)
        async for position, outcome in client.grade_stream(
            [item(i) for i in range(5)], batch_size=2, progress=False, ordered=True
        )
    ]
    assert streamed == [(i, f"q{i}") for i in range(5)]


async def test_async_item_error_from_service(aserved: AsyncJudgeClient) -> None:
    items = [item(0), too_many_points(1), item(2)]
    out = await aserved.grade_many(items, batch_size=2, progress=False, return_exceptions=True)
    assert [type(r).__name__ for r in out] == ["GradeResult", "ClientItemError", "GradeResult"]
    with pytest.raises(ClientItemError) as err:
        await aserved.grade_many(items, batch_size=2, progress=False)
    assert err.value.index == 1 and err.value.field == "bonus_points"


async def test_async_metrics_and_job(aserved: AsyncJudgeClient) -> None:
    client = aserved
    scores = await client.metrics(
        [("He feels humiliated.", "He feels humiliated and hurt.")], metrics=["rouge_l"]
    )
    assert scores[0].rouge_l is not None and 0 < scores[0].rouge_l.f1 <= 1
    assert scores[0].bertscore is None
    status = await client.submit_job([item(0), item(1)])
    final = await client.wait(status.id, poll_interval=0.05, timeout=60)
    assert final.status == "done"
    entries = [e async for e in client.results(status.id)]
    assert sorted(e.index for e in entries) == [0, 1]
