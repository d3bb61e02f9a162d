"""Cost budgets in the service (issue 32.2, the service half): a key's USD per UTC day and a
job's own ``max_cost``. Over the key's budget, submissions get 429 ``budget_exhausted`` and a
running job pauses with its items pending, never failed; the spend lives in the job store."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from pydantic import ValidationError
from sqlalchemy import select, update

from api.jobs.schema import jobs, key_spend
from api.jobs.spend import next_midnight, utc_day
from api.settings import ServiceSettings
from bonusjudge_client import ClientInputError, JudgeClient
from core.errors import ConfigError
from judge.engine import Grader
from judge.providers.fake import FakeProvider
from tests.helpers.engine import plain_answer

KEYS = {"a": "budget-key-a", "b": "budget-key-b"}
MODEL = "openai/gpt-4o-mini"
"""A model litellm's offline cost map prices ($0.15 / $0.60 per million tokens)."""
REQUEST_USD = (100 * 0.15 + 20 * 0.6) / 1e6
"""What one fake request costs: 100 prompt and 20 completion tokens at those prices."""


def auth(who: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {KEYS[who]}"}


def item(n: int) -> dict[str, Any]:
    return {
        "id": f"i{n}", "question": "How does Levin feel?", "reference": "He feels humiliated.",
        "bonus_points": ["Levin feels humiliated"], "response": f"He is ashamed ({n}).",
    }


def priced(make_grader: Callable[..., Grader], provider: FakeProvider, **judge: Any) -> Grader:
    return make_grader(provider, model=MODEL, metrics=("coverage", "defects"), **judge)


def spend_rows(app: FastAPI) -> dict[str, tuple[str, float, int]]:
    """The store's key_spend rows, owner -> (day, USD, requests), after a flush."""
    app.state.budgets.flush()
    with app.state.jobs.store.db.read() as conn:
        rows = conn.execute(select(key_spend)).all()
    return {row.owner: (row.day, row.cost_usd, row.requests) for row in rows}


def wait_job(http: TestClient, job_id: str, who: str, until: Callable[[dict[str, Any]], bool]
             ) -> dict[str, Any]:
    deadline = time.monotonic() + 30
    while True:
        status: dict[str, Any] = http.get(f"/v1/jobs/{job_id}", headers=auth(who)).json()
        if until(status):
            return status
        assert time.monotonic() < deadline, (status["done"], status["paused"], status["detail"])
        time.sleep(0.05)


def test_a_key_over_its_day_budget_gets_429_budget_exhausted_and_another_key_does_not(
    make_app: Callable[..., FastAPI], make_grader: Callable[..., Grader]
) -> None:
    provider = FakeProvider(handler=plain_answer)
    limit = 10 * REQUEST_USD
    app = make_app(priced(make_grader, provider), api_keys=list(KEYS.values()),
                   max_cost_per_key_usd=limit)
    with TestClient(app) as http:
        answers = [http.post("/v1/grade", json=item(n), headers=auth("a")) for n in range(12)]
        codes = [r.status_code for r in answers]
        assert 200 in codes and codes[-1] == 429, codes
        first = codes.index(429)
        assert set(codes[first:]) == {429}  # once refused, the key stays refused today
        refused = answers[-1]
        error = refused.json()["error"]
        assert error["type"] == "budget_exhausted"
        assert f"max_cost_per_key_usd ${limit:g}" in error["message"]
        assert "spent" in error["message"]
        midnight = next_midnight(time.time())
        assert abs(int(refused.headers["Retry-After"]) - (midnight - time.time())) < 5
        # Every submission is refused; the estimate and reads are not.
        assert http.post("/v1/grade/batch", json={"items": [item(50)]},
                         headers=auth("a")).json()["error"]["type"] == "budget_exhausted"
        job = http.post("/v1/jobs", json={"items": [item(51)]}, headers=auth("a"))
        assert job.status_code == 429 and job.json()["error"]["type"] == "budget_exhausted"
        assert "Retry-After" in job.headers
        assert http.post("/v1/estimate", json={"items": [item(52)]},
                         headers=auth("a")).status_code == 200
        assert http.get("/v1/usage", headers=auth("a")).status_code == 200
        # The other key is not touched by A's budget.
        assert http.post("/v1/grade", json=item(60), headers=auth("b")).status_code == 200
        rows = spend_rows(app)
    sent_for_a = len(provider.calls) - 2  # B's item: two requests
    owner_a = max(rows, key=lambda owner: rows[owner][2])
    day, spent, requests = rows[owner_a]
    assert day == utc_day(time.time())
    # The store holds what A's requests cost, every one counted, and no more than the limit
    # plus what was in flight (the requests are sequential here: one at most).
    assert requests == sent_for_a
    assert math.isclose(spent, sent_for_a * REQUEST_USD, rel_tol=1e-9)
    assert spent <= limit  # each answer cost less than its reservation


def test_a_job_pauses_at_the_key_budget_keeps_its_items_and_resumes_with_a_higher_limit(
    make_app: Callable[..., FastAPI], make_grader: Callable[..., Grader]
) -> None:
    provider = FakeProvider(handler=plain_answer)
    items = [item(n) for n in range(12)]
    app = make_app(priced(make_grader, provider, concurrency=1),
                   api_keys=list(KEYS.values()), max_cost_per_key_usd=9 * REQUEST_USD)
    with TestClient(app) as http:
        job = http.post("/v1/jobs", json={"items": items}, headers=auth("a")).json()
        paused = wait_job(http, job["id"], "a", lambda s: s["paused"])
        # Not failed, not done: the items the budget refused are pending, not stored.
        assert paused["status"] == "paused"
        assert 0 < paused["done"] < len(items) and paused["unscored"] == 0
        assert paused["detail"].startswith("paused: budget_exhausted")
        assert "max_cost_per_key_usd" in paused["detail"]
        results = http.get(f"/v1/jobs/{job['id']}/results", headers=auth("a")).text
        assert "budget_exhausted" not in results
        with app.state.jobs.store.db.read() as conn:
            until = conn.execute(
                select(jobs.c.paused_until).where(jobs.c.id == job["id"])
            ).scalar_one()
        assert until == next_midnight(time.time())
        time.sleep(0.5)  # it stays paused: no claim before its time
        assert http.get(f"/v1/jobs/{job['id']}", headers=auth("a")).json()["done"] == \
            paused["done"]
    # A restart with a higher limit: the job goes on and finishes, every item scored.
    app = make_app(priced(make_grader, provider, concurrency=1),
                   api_keys=list(KEYS.values()), max_cost_per_key_usd=100 * REQUEST_USD)
    with TestClient(app) as http:
        done = wait_job(http, job["id"], "a", lambda s: s["status"] == "done")
        assert (done["scored"], done["unscored"], done["paused"], done["detail"]) == (
            len(items), 0, False, None)
    # Each item's two calls were sent once (what was paid before the pause was cached).
    assert len(provider.calls) == 2 * len(items)


def test_a_job_paused_at_the_key_budget_resumes_on_the_next_day(
    make_app: Callable[..., FastAPI], make_grader: Callable[..., Grader]
) -> None:
    provider = FakeProvider(handler=plain_answer)
    app = make_app(priced(make_grader, provider, concurrency=1),
                   api_keys=list(KEYS.values()), max_cost_per_key_usd=12 * REQUEST_USD)
    budgets = app.state.budgets
    with TestClient(app) as http:
        job = http.post("/v1/jobs", json={"items": [item(n) for n in range(30)]},
                        headers=auth("a")).json()
        first = wait_job(http, job["id"], "a", lambda s: s["paused"])
        deadline = time.monotonic() + 30
        while app.state.jobs.store.holders(job["id"]):  # every chunk's runner has paused
            assert time.monotonic() < deadline
            time.sleep(0.05)
        first = http.get(f"/v1/jobs/{job['id']}", headers=auth("a")).json()
        # The day rolls over: a new day's budget, and the pause's time has come.
        tomorrow = next_midnight(time.time()) + 1
        budgets.clock = lambda: tomorrow + time.time() % 60
        with app.state.jobs.store.db.tx() as conn:
            conn.execute(update(jobs).where(jobs.c.id == job["id"]).values(paused_until=1.0))
        app.state.jobs.worker.wake()
        # It grades more items on the new day's budget, then pauses again.
        again = wait_job(http, job["id"], "a",
                         lambda s: s["paused"] and s["done"] > first["done"])
        assert again["unscored"] == 0 and again["status"] != "failed"
        assert again["done"] < 30
        assert f"opens again at {utc_day(next_midnight(tomorrow))}T00:00:00Z" in again["detail"]
        rows = spend_rows(app)
    with app.state.jobs.store.db.read() as conn:
        days = {row.day: row.requests for row in conn.execute(select(key_spend)).all()}
    assert set(days) == {utc_day(time.time()), utc_day(tomorrow)}, rows
    # Every request was counted on the day it was sent, and none was sent twice (an item
    # paused halfway kept its paid call in the cache).
    assert sum(days.values()) == len(provider.calls)
    assert days[utc_day(time.time())] >= 2 * first["done"]
    assert days[utc_day(tomorrow)] > 0
    assert len({str(call.messages) for call in provider.calls}) == len(provider.calls)


def test_a_job_pauses_at_its_own_max_cost_and_stays_paused(
    make_app: Callable[..., FastAPI], make_grader: Callable[..., Grader]
) -> None:
    provider = FakeProvider(handler=plain_answer)
    app = make_app(priced(make_grader, provider, concurrency=1),
                   api_keys=list(KEYS.values()))
    with TestClient(app) as http:
        job = http.post("/v1/jobs", json={"items": [item(n) for n in range(40)],
                                          "max_cost": 20 * REQUEST_USD}, headers=auth("a"))
        assert job.status_code == 202, job.text
        status = wait_job(http, job.json()["id"], "a", lambda s: s["paused"])
        deadline = time.monotonic() + 30
        while app.state.jobs.store.holders(job.json()["id"]):  # every chunk has paused
            assert time.monotonic() < deadline
            time.sleep(0.05)
        time.sleep(0.3)  # and nothing claims it again
        assert not app.state.jobs.store.holders(job.json()["id"])
        status = http.get(f"/v1/jobs/{job.json()['id']}", headers=auth("a")).json()
        assert status["paused"] and 0 < status["done"] < 40 and status["unscored"] == 0
        assert "max_cost $" in status["detail"] and "stays paused" in status["detail"]
        # Only its stored results count as graded in the key's usage: the items its cap
        # refused stay pending (graded again when it goes on) and count as refused.
        usage = http.get("/v1/usage", headers=auth("a")).json()
        assert (usage["items"], usage["unscored"]) == (status["done"], 0), usage
        assert usage["refused"] > 0, usage
        # Its status says so (it read "queued", and a poller for done or failed waited forever),
        # wherever a status is shown: the job, the list and its filter, the key's usage.
        assert status["status"] == "paused"
        job_id = job.json()["id"]
        listed = http.get("/v1/jobs", headers=auth("a")).json()["jobs"]
        assert [(j["id"], j["status"], j["paused"]) for j in listed] == [(job_id, "paused", True)]
        assert [j["id"] for j in http.get(
            "/v1/jobs?status=paused", headers=auth("a")).json()["jobs"]] == [job_id]
        for other in ("queued", "running"):
            assert http.get(f"/v1/jobs?status={other}", headers=auth("a")).json()["jobs"] == []
        assert http.get("/v1/usage", headers=auth("a")).json()["jobs"] == {
            "queued": 0, "running": 0, "paused": 1, "done": 0, "cancelled": 0, "failed": 0}
        with JudgeClient("http://testserver", api_key=KEYS["a"], http_client=http) as client:
            waited = client.wait(job_id, poll_interval=0.05, timeout=10)  # returns, not hangs
        assert (waited.status, waited.paused, waited.done) == ("paused", True, status["done"])
        # Cancelled, it is no longer paused.
        cancelled = http.delete(f"/v1/jobs/{job_id}", headers=auth("a")).json()
        assert (cancelled["status"], cancelled["paused"]) == ("cancelled", False)
        # The key has no budget: its other submissions go on.
        assert http.post("/v1/grade", json=item(20), headers=auth("a")).status_code == 200
        app.state.budgets.flush()
        with app.state.jobs.store.db.read() as conn:
            cost = conn.execute(
                select(jobs.c.cost_usd).where(jobs.c.id == job.json()["id"])
            ).scalar_one()
        # Each answer cost less than its reservation (the estimate): the cap was not passed.
        assert 10 * REQUEST_USD < cost <= 20 * REQUEST_USD
        # A cap on a model without a price is refused before anything is stored.
        unpriced = http.post("/v1/jobs", json={"items": [item(1)], "max_cost": 1.0,
                                               "judge": {"model": "fake/other"}},
                             headers=auth("a"))
        assert unpriced.status_code == 422, unpriced.text
        assert unpriced.json()["error"]["field"] == "judge.model"


def test_the_client_sends_a_jobs_max_cost_with_items_and_with_a_file(
    make_app: Callable[..., FastAPI], make_grader: Callable[..., Grader]
) -> None:
    provider = FakeProvider(handler=plain_answer)
    app = make_app(priced(make_grader, provider, concurrency=1), api_keys=list(KEYS.values()))
    lines = "".join(json.dumps(item(n)) + "\n" for n in range(40)).encode()
    with TestClient(app) as http, \
            JudgeClient("http://testserver", api_key=KEYS["a"], http_client=http) as client:
        jobs = [client.submit_job([item(n) for n in range(40)], max_cost=8 * REQUEST_USD),
                client.submit_job(file=lines, max_cost=8 * REQUEST_USD),
                client.submit_job(file=lines, judge={"temperature": 0.0},
                                  max_cost=8 * REQUEST_USD)]
        for job in jobs:
            status = wait_job(http, job.id, "a", lambda s: s["paused"])
            assert status["done"] < 40 and "max_cost" in status["detail"]
            assert client.job(job.id).paused


def test_a_key_budget_with_a_default_judge_without_a_price_stops_start_up(
    make_app: Callable[..., FastAPI], make_grader: Callable[..., Grader]
) -> None:
    with pytest.raises(ConfigError, match="no price for the judge model fake/judge") as caught:
        make_app(make_grader(), max_cost_per_key_usd=1.0)
    assert caught.value.field == "max_cost_per_key_usd"
    make_app(make_grader(model="embedded-matcher"), max_cost_per_key_usd=1.0)  # sends nothing


NON_FINITE = ("1e999", "Infinity", "-Infinity", "NaN")
"""How a JSON body can say infinity or NaN: an overflowing number, or the literals Python's
parser (the service's) accepts though JSON has none."""


def with_literal(body: dict[str, Any], field: str, literal: str) -> str:
    """``body`` as JSON text with ``field`` set to ``literal``, written as it is."""
    return json.dumps({**body, field: "LITERAL"}).replace('"LITERAL"', literal)


@pytest.mark.parametrize("value", NON_FINITE)
def test_a_non_finite_max_cost_or_price_is_refused_naming_the_field(
    make_app: Callable[..., FastAPI], make_grader: Callable[..., Grader], value: str
) -> None:
    # max_cost=inf was accepted as a job without a cap (NaN was refused only as "not >= 0").
    app = make_app(priced(make_grader, FakeProvider(handler=plain_answer)),
                   api_keys=list(KEYS.values()))
    lines = json.dumps(item(1)) + "\n"
    with TestClient(app) as http:
        body = with_literal({"items": [item(1)]}, "max_cost", value)
        refused = [
            ("max_cost", http.post("/v1/jobs", content=body, headers={
                **auth("a"), "content-type": "application/json"})),
            ("max_cost", http.post(f"/v1/jobs?max_cost={value}", content=lines, headers={
                **auth("a"), "content-type": "application/x-ndjson"})),
            ("max_cost", http.post(f"/v1/jobs?max_cost={value}", headers=auth("a"),
                                   files={"file": ("items.jsonl", lines.encode())})),
            ("max_cost", http.post("/v1/estimate", content=body, headers={
                **auth("a"), "content-type": "application/json"})),
        ]
        for price in ("price_in", "price_out"):
            priced_body = with_literal(
                {"items": [item(1)], "price_in": 1, "price_out": 1}, price, value)
            refused.append((price, http.post("/v1/estimate", content=priced_body, headers={
                **auth("a"), "content-type": "application/json"})))
        for field, reply in refused:
            assert reply.status_code == 422, (field, reply.status_code, reply.text)
            error = reply.json()["error"]
            assert error["type"] == "invalid_input" and error["field"] == field, error
            assert "finite number" in error["message"], error
        # Nothing was stored.
        assert http.get("/v1/jobs", headers=auth("a")).json()["jobs"] == []
        # The client refuses it before sending anything.
        with JudgeClient("http://testserver", api_key=KEYS["a"], http_client=http) as client:
            for call in (lambda: client.submit_job([item(1)], max_cost=float(value)),
                         lambda: client.submit_job(file=lines.encode(), max_cost=float(value)),
                         lambda: client.estimate([item(1)], price_in=float(value), price_out=1)):
                with pytest.raises(ClientInputError, match="finite number") as caught:
                    call()
                assert caught.value.field in ("max_cost", "price_in")
        assert http.get("/v1/jobs", headers=auth("a")).json()["jobs"] == []


@pytest.mark.parametrize("value", ["inf", "nan", "1e999"])
def test_a_non_finite_key_budget_is_a_bad_setting(value: str) -> None:
    with pytest.raises(ValidationError, match="finite number") as caught:
        ServiceSettings(max_cost_per_key_usd=float(value))
    assert caught.value.errors()[0]["loc"] == ("max_cost_per_key_usd",)
