"""Multiple-choice scoring over HTTP: one call, jobs, the CLI's numbers, options, restarts."""

import json
import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from api.app import JOBS_DB
from api.auth import hash_key
from api.jobs import JobItem, JobStore
from api.services.mcq import MCQ, RULES
from bonusjudge_client.wire.mcq import McqItem
from cli.mcq import main as mcq_cli
from judge.config import EMBEDDED_JUDGE
from judge.engine import Grader
from judge.providers.fake import FakeCall, FakeOutput, FakeProvider

DATA = Path(__file__).resolve().parents[2] / "judge" / "data"
CHARTOM = DATA / "mcq_example_chartom.jsonl"
TOMBENCH = DATA / "mcq_example_tombench.jsonl"
KEY = "mcq-key"
OTHER_KEY = "mcq-other-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
OTHER = {"Authorization": f"Bearer {OTHER_KEY}"}


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in path.read_text(encoding="utf-8").splitlines() if raw.strip()]


def item(n: int, **extra: Any) -> dict[str, Any]:
    return {
        "id": f"q{n}",
        "choices": ["In the drawer", "In the fridge", "On the table"],
        "answer": "A",
        "response": "[[A]]",
        "tom_dimension": "belief",
        **extra,
    }


class Reader:
    """Judge double for the LLM extractor: always reads option B, and counts its calls."""

    def __init__(self) -> None:
        self.calls: list[FakeCall] = []

    def __call__(self, call: FakeCall) -> FakeOutput:
        self.calls.append(call)
        assert call.response_model is not None and call.response_model.__name__ == "McqReading"
        return {"chosen": ["B"]}


@pytest.fixture
def build(
    make_app: Callable[..., FastAPI], make_grader: Callable[..., Grader]
) -> Callable[..., FastAPI]:
    """The service with two keys over a judge double for the LLM extractor (no cache).

    ``build(*, model="fake/judge", reader=None, **settings)``.
    """

    def app(*, model: str = "fake/judge", reader: Reader | None = None, **settings: Any) -> FastAPI:
        grader = make_grader(FakeProvider(handler=reader or Reader()), model=model, cache=False)
        return make_app(grader, judge=grader.config, api_keys=[KEY, OTHER_KEY],
                        lease_seconds=30.0, **settings)

    return app


@pytest.fixture
def http(build: Callable[..., FastAPI]) -> Iterator[TestClient]:
    with TestClient(build(), raise_server_exceptions=False) as client:
        yield client


def cli_outputs(path: Path, tmp_path: Path, aggregate: str) -> tuple[list[Any], dict[str, Any]]:
    """What `bonusjudge mcq FILE --out X --summary Y` writes for the file."""
    out, summary = tmp_path / "cli.jsonl", tmp_path / "cli-summary.json"
    code = mcq_cli([str(path), "--out", str(out), "--summary", str(summary),
                    "--aggregate", aggregate, "--quiet"])
    assert code == 0
    return lines(out), json.loads(summary.read_text(encoding="utf-8"))


def wait_done(http: TestClient, path: str, timeout: float = 20.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        status: dict[str, Any] = http.get(path, headers=AUTH).json()
        if status["status"] in ("done", "failed", "cancelled"):
            return status
        assert time.monotonic() < deadline, status
        time.sleep(0.05)


def ndjson(text: str) -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in text.splitlines() if raw.strip()]


# -- POST /v1/mcq ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "aggregate"), [(CHARTOM, "mean"), (TOMBENCH, "majority"), (TOMBENCH, "mean")]
)
def test_scores_like_the_cli(
    http: TestClient, tmp_path: Path, path: Path, aggregate: str
) -> None:
    cli_results, cli_summary = cli_outputs(path, tmp_path, aggregate)
    answer = http.post(
        "/v1/mcq", json={"items": lines(path), "aggregate": aggregate}, headers=AUTH
    )
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert [entry["index"] for entry in body["results"]] == list(range(len(cli_results)))
    assert all(entry["error"] is None for entry in body["results"])
    assert [entry["result"] for entry in body["results"]] == cli_results
    summary = body["summary"]
    dimensions = summary["breakdowns"]["tom_dimension"]
    assert {k: v["accuracy"] for k, v in dimensions.items()} == {
        k: v["accuracy"] for k, v in cli_summary["breakdowns"]["tom_dimension"].items()
    }
    assert summary == cli_summary  # every figure, not only the dimensions


def test_file_has_wrong_and_unparseable_answers(http: TestClient) -> None:
    # Guards the comparison above: a file where everything is right would prove little.
    summary = http.post("/v1/mcq", json={"items": lines(TOMBENCH)}, headers=AUTH).json()["summary"]
    assert 0 < summary["accuracy"] < 1
    assert summary["unparseable"] > 0
    assert summary["permutation"]["aggregate"] == "mean"


def test_bad_items_become_entries_and_the_rest_is_scored(http: TestClient) -> None:
    items = [
        item(1),
        item(2, answer="E"),  # not among the labels
        "not an object",
        item(1),  # duplicate id/language/run of the first
        item(3, response="I cannot tell."),  # valid but unparseable
        item(4, response="[[B]]"),
    ]
    answer = http.post("/v1/mcq", json={"items": items}, headers=AUTH)
    assert answer.status_code == 200, answer.text
    entries = answer.json()["results"]
    assert [e["index"] for e in entries] == list(range(6))
    assert [e["error"] is None for e in entries] == [True, False, False, False, True, True]
    assert entries[1]["error"]["field"] == "answer" and entries[1]["id"] == "q2"
    assert "expected a JSON object" in entries[2]["error"]["message"]
    assert entries[3]["error"]["field"] == "id" and "duplicate" in entries[3]["error"]["message"]
    assert entries[0]["result"]["outcome"] == "correct"
    assert entries[4]["result"]["outcome"] == "unparseable"
    assert entries[5]["result"]["outcome"] == "wrong"
    summary = answer.json()["summary"]
    assert summary["items"] == 3 and summary["unparseable"] == 1
    assert summary["accuracy"] == pytest.approx(1 / 3)
    assert [bad["line"] for bad in summary["bad_lines"]] == [2, 3, 4]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"items": [item(1)], "group_by": ["colour"]}, "group_by"),
        ({"items": [item(1)], "aggregate": "median"}, "aggregate"),
        ({"items": [item(1)], "fuzzy_threshold": 150}, "fuzzy_threshold"),
        ({"items": []}, "items"),
        ({"items": [item(1)], "extra": 1}, "extra"),
    ],
)
def test_invalid_options_are_422_naming_the_field(
    http: TestClient, body: dict[str, Any], field: str
) -> None:
    answer = http.post("/v1/mcq", json=body, headers=AUTH)
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["field"] == field


def test_more_items_than_max_job_items_is_422(build: Callable[..., FastAPI]) -> None:
    with TestClient(build(max_job_items=3), raise_server_exceptions=False) as http:
        answer = http.post("/v1/mcq", json={"items": [item(i) for i in range(4)]}, headers=AUTH)
        assert answer.status_code == 422
        assert answer.json()["error"]["field"] == "items"
        assert http.post("/v1/mcq", json={"items": [item(i) for i in range(3)]},
                         headers=AUTH).status_code == 200


def test_llm_extract_reads_only_unparseable_answers(build: Callable[..., FastAPI]) -> None:
    reader = Reader()
    with TestClient(build(reader=reader), raise_server_exceptions=False) as http:
        items = [item(1), item(2, response="The second place, I suppose, the cold one.")]
        plain = http.post("/v1/mcq", json={"items": items}, headers=AUTH).json()
        assert plain["results"][1]["result"]["method"] == "unparseable"
        assert reader.calls == []  # no judge call unless asked
        body = http.post(
            "/v1/mcq", json={"items": items, "llm_extract": True}, headers=AUTH
        ).json()
        first, second = (entry["result"] for entry in body["results"])
        assert first["method"] == "strict"
        assert second["method"] == "llm" and second["chosen"] == ["B"]
        assert second["outcome"] == "wrong"
        assert len(reader.calls) == 1 and "cold one" in reader.calls[0].user
        assert body["summary"]["llm_extractor"] is True


def test_llm_extract_refused_with_the_embedded_matcher(build: Callable[..., FastAPI]) -> None:
    app = build(model=EMBEDDED_JUDGE)
    with TestClient(app, raise_server_exceptions=False) as http:
        answer = http.post("/v1/mcq", json={"items": [item(1)], "llm_extract": True},
                           headers=AUTH)
        assert answer.status_code == 422
        assert answer.json()["error"]["field"] == "llm_extract"
        assert http.post("/v1/mcq", json={"items": [item(1)]}, headers=AUTH).status_code == 200


def test_llm_extract_without_a_judge_is_503(build: Callable[..., FastAPI]) -> None:
    with TestClient(build(model=""), raise_server_exceptions=False) as http:
        answer = http.post("/v1/mcq", json={"items": [item(1)], "llm_extract": True},
                           headers=AUTH)
        assert answer.status_code == 503
        assert answer.json()["error"]["type"] == "judge_not_configured"


def test_needs_an_api_key(http: TestClient) -> None:
    assert http.post("/v1/mcq", json={"items": [item(1)]}).status_code == 401
    assert http.post("/v1/mcq/jobs", json={"items": [item(1)]}).status_code == 401


# -- jobs ----------------------------------------------------------------------------------------


def test_jsonl_job_matches_the_cli_and_reports_bad_lines(
    http: TestClient, tmp_path: Path
) -> None:
    text = TOMBENCH.read_text(encoding="utf-8")
    upload = "{not json\n" + text + json.dumps(item(9, answer="Z")) + "\n"
    answer = http.post(
        "/v1/mcq/jobs?aggregate=majority", content=upload.encode(),
        headers={**AUTH, "Content-Type": "application/x-ndjson"},
    )
    assert answer.status_code == 202, answer.text
    job = answer.json()
    assert job["kind"] == MCQ and job["judge"] == RULES and job["invalid"] == 2
    assert answer.headers["Location"] == f"/v1/mcq/jobs/{job['id']}"
    status = wait_done(http, f"/v1/mcq/jobs/{job['id']}")
    assert status["status"] == "done" and status["done"] == status["total"] == 60
    assert status["scored"] + status["unscored"] == 60 and status["unscored"] > 0

    entries = ndjson(http.get(f"/v1/mcq/jobs/{job['id']}/results", headers=AUTH).text)
    assert len(entries) == 62
    errors = {e["index"]: e["error"] for e in entries if e["error"] is not None}
    assert set(errors) == {0, 61}
    assert errors[0]["line"] == 1 and errors[61]["line"] == 62
    assert errors[61]["field"] == "answer"

    cli_results, cli_summary = cli_outputs(TOMBENCH, tmp_path, "majority")
    by_index = {e["index"]: e["result"] for e in entries if e["result"] is not None}
    assert [by_index[i] for i in sorted(by_index)] == cli_results
    summary = http.get(f"/v1/mcq/jobs/{job['id']}/summary", headers=AUTH).json()
    assert [b["line"] for b in summary.pop("bad_lines")] == [1, 62]
    cli_summary.pop("bad_lines")
    assert summary == cli_summary

    tail = ndjson(http.get(f"/v1/mcq/jobs/{job['id']}/results?offset=60", headers=AUTH).text)
    assert tail == entries[60:]


def test_json_job_options_and_multipart_upload(http: TestClient) -> None:
    body = {"items": lines(CHARTOM), "group_by": ["language"]}
    job = http.post("/v1/mcq/jobs", json=body, headers=AUTH).json()
    wait_done(http, f"/v1/mcq/jobs/{job['id']}")
    summary = http.get(f"/v1/mcq/jobs/{job['id']}/summary", headers=AUTH).json()
    assert list(summary["breakdowns"]) == ["language"]

    files = {"file": ("run.jsonl", CHARTOM.read_bytes(), "application/x-ndjson")}
    answer = http.post("/v1/mcq/jobs?group_by=tom_dimension", files=files, headers=AUTH)
    assert answer.status_code == 202, answer.text
    wait_done(http, f"/v1/mcq/jobs/{answer.json()['id']}")
    summary = http.get(f"/v1/mcq/jobs/{answer.json()['id']}/summary", headers=AUTH).json()
    assert list(summary["breakdowns"]) == ["tom_dimension"]

    both = http.post("/v1/mcq/jobs?aggregate=majority", json=body, headers=AUTH)
    assert both.status_code == 422 and both.json()["error"]["field"] == "options"
    bad = http.post("/v1/mcq/jobs?group_by=colour", files=files, headers=AUTH)
    assert bad.status_code == 422 and bad.json()["error"]["field"] == "group_by"
    text = http.post("/v1/mcq/jobs", content=b"x", headers={**AUTH, "Content-Type": "text/plain"})
    assert text.status_code == 415


def test_jobs_are_private_and_kinds_do_not_mix(http: TestClient) -> None:
    job = http.post("/v1/mcq/jobs", json={"items": [item(1)]}, headers=AUTH).json()
    wait_done(http, f"/v1/mcq/jobs/{job['id']}")
    for path in ("", "/results", "/summary"):
        assert http.get(f"/v1/mcq/jobs/{job['id']}{path}", headers=OTHER).status_code == 404
        # A multiple-choice job is not a grading job, and the other way round.
        assert http.get(f"/v1/jobs/{job['id']}{path}", headers=AUTH).status_code == 404
    assert http.delete(f"/v1/jobs/{job['id']}", headers=AUTH).status_code == 404
    grading = {"question": "Q?", "reference": "R.", "response": "R.", "bonus_points": ["R"]}
    graded = http.post("/v1/jobs", json={"items": [grading]}, headers=AUTH).json()
    assert graded["kind"] == "grade"
    assert http.get(f"/v1/mcq/jobs/{graded['id']}", headers=AUTH).status_code == 404
    cancelled = http.delete(f"/v1/mcq/jobs/{job['id']}", headers=AUTH)
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "done"


def test_a_stored_job_is_run_by_the_next_service(
    tmp_path: Path, build: Callable[..., FastAPI]
) -> None:
    """A job left queued (its service stopped before running it) is finished after a restart."""
    store = JobStore(tmp_path / "data" / JOBS_DB)
    items = [
        JobItem(i, f"q{i}", None, McqItem.model_validate(item(i, response=f"[[{'AB'[i % 2]}]]")),
                None)
        for i in range(5)
    ]
    store.create(job_id="left", owner=hash_key(KEY), items=items, overrides=None, config=None,
                 lease_owner=None, lease_seconds=30.0, kind=MCQ, model=RULES, config_hash="",
                 options={"aggregate": "mean", "group_by": None, "llm_extract": False,
                          "fuzzy_threshold": 90.0})
    store.close()
    with TestClient(build(), raise_server_exceptions=False) as http:
        status = wait_done(http, "/v1/mcq/jobs/left")
        assert status["status"] == "done" and status["done"] == 5
        summary = http.get("/v1/mcq/jobs/left/summary", headers=AUTH).json()
        assert summary["accuracy"] == pytest.approx(3 / 5)


def test_a_version_1_database_gains_the_kind_column(tmp_path: Path) -> None:
    path = tmp_path / JOBS_DB
    conn = sqlite3.connect(path)
    conn.executescript(
        """
        CREATE TABLE jobs (id TEXT PRIMARY KEY, owner TEXT NOT NULL, status TEXT NOT NULL,
            total INTEGER NOT NULL, invalid INTEGER NOT NULL, done INTEGER NOT NULL DEFAULT 0,
            scored INTEGER NOT NULL DEFAULT 0, unscored INTEGER NOT NULL DEFAULT 0,
            next_seq INTEGER NOT NULL DEFAULT 0, overrides TEXT NOT NULL, model TEXT NOT NULL,
            config_hash TEXT NOT NULL, detail TEXT, created_at REAL NOT NULL,
            updated_at REAL NOT NULL, run_started_at REAL,
            run_start_done INTEGER NOT NULL DEFAULT 0, lease_owner TEXT,
            lease_expires REAL NOT NULL DEFAULT 0);
        INSERT INTO jobs (id, owner, status, total, invalid, overrides, model, config_hash,
            created_at, updated_at) VALUES ('old', '', 'queued', 1, 0, '{}', 'm', 'h', 1, 1);
        """
    )
    conn.commit()
    conn.close()
    store = JobStore(path)
    try:
        row = store.get("old")
        assert row is not None and row["kind"] == "grade" and row["options"] == "{}"
        assert store.get("old", kind=MCQ) is None
        assert store.claim("me", 30.0, 4, kinds=(MCQ,)) == []
        assert [chunk.job_id for chunk in store.claim("me", 30.0, 4)] == ["old"]
        JobStore(path).close()  # opening it again is a no-op
    finally:
        store.close()
