"""Reading job submissions: JSONL lines through the one reader, the judge as query parameters or a
multipart field, and the sharing rules (quota, share, hand-over) as pure functions."""

import json
import time
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api.errors import QuotaExceeded
from api.jobs import Quota, Usage, jsonl_items
from api.jobs.policy import make_room, share
from tests.helpers.engine import levin_item

ITEM = levin_item()
NDJSON = {"content-type": "application/x-ndjson"}


def finished(client: TestClient, job_id: str) -> list[dict[str, Any]]:
    deadline = time.monotonic() + 30
    while client.get(f"/v1/jobs/{job_id}").json()["status"] not in ("done", "failed"):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    return [json.loads(x) for x in client.get(f"/v1/jobs/{job_id}/results").text.splitlines()]


def test_jsonl_lines_are_read_one_by_one() -> None:
    data = b"\xef\xbb\xbf" + b"\n".join([
        json.dumps({"id": "a"}).encode(),
        b"",
        b'{"id": "caf\xe9"}',  # Latin-1: that line alone is bad
        b"{torn",
        json.dumps(["not", "an", "object"]).encode() + b"\r",
        json.dumps({"id": "sep", "text": "a\u2028b"}, ensure_ascii=False).encode(),
    ])
    raw = jsonl_items(data)
    assert [(line, value is not None, error is None) for line, value, error in raw] == [
        (1, True, True), (3, False, False), (4, False, False), (5, True, True), (6, True, True)
    ]
    assert raw[0][1] == {"id": "a"}  # the byte-order mark is not part of the first line
    assert raw[1][2] is not None and raw[1][2].startswith("line 3: not valid UTF-8")
    assert raw[2][2] is not None and raw[2][2].startswith("line 4: not valid JSON")
    assert raw[3][1] == ["not", "an", "object"]  # whether it must be an object: the kind's rule
    assert raw[4][1] == {"id": "sep", "text": "a\u2028b"}


def test_a_line_of_invalid_utf8_costs_that_line_not_the_upload(client: TestClient) -> None:
    lines = [json.dumps({**ITEM, "id": "ok"}).encode(), b'{"id": "caf\xe9"}']
    created = client.post("/v1/jobs", content=b"\n".join(lines), headers=NDJSON)
    assert created.status_code == 202, created.text
    assert (created.json()["total"], created.json()["invalid"]) == (1, 1)
    entries = finished(client, created.json()["id"])
    bad = next(e for e in entries if e["error"] is not None)
    assert bad["error"]["line"] == 2 and "UTF-8" in bad["error"]["message"]


@pytest.mark.parametrize(
    "query",
    ["metrics=rouge_l,defects", "metrics=rouge_l&metrics=defects", "metrics=rouge_l, defects"],
)
def test_metrics_in_the_query_are_comma_separated_or_repeated(
    client: TestClient, query: str
) -> None:
    created = client.post(
        f"/v1/jobs?{query}&unknown=1", content=json.dumps(ITEM).encode(), headers=NDJSON
    )
    assert created.status_code == 202, created.text
    result = finished(client, created.json()["id"])[0]["result"]
    assert result["coverage"] is None and result["rouge_l"] is not None
    assert result["defects"] is not None


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("temperature=9", "temperature"),
        ("metrics=accuracy", "metrics.0"),
        ("context_window=5", "context_window"),
        ("length_control=maybe", "length_control"),
    ],
)
def test_invalid_judge_query_parameters_name_the_field(
    client: TestClient, query: str, field: str
) -> None:
    answer = client.post(f"/v1/jobs?{query}", content=json.dumps(ITEM).encode(), headers=NDJSON)
    assert answer.status_code == 422, answer.text
    error = answer.json()["error"]
    assert error["type"] == "invalid_input" and error["field"] == field
    assert error["message"].startswith(f"{field}: ")


@pytest.mark.parametrize(
    ("judge", "field"),
    [("{nope", "judge"), ("42", "judge"), ('{"metrics": ["accuracy"]}', "judge.metrics.0")],
)
def test_a_bad_multipart_judge_field_is_named(client: TestClient, judge: str, field: str) -> None:
    answer = client.post(
        "/v1/jobs", files={"file": ("items.jsonl", json.dumps(ITEM).encode())},
        data={"judge": judge},
    )
    assert answer.status_code == 422, answer.text
    error = answer.json()["error"]
    assert error["field"] == field and error["message"].startswith(f"{field}: ")


def test_a_bad_json_body_is_named(client: TestClient) -> None:
    json_body = {"content-type": "application/json"}
    torn = client.post("/v1/jobs", content=b'{"items": [', headers=json_body)
    assert torn.status_code == 422
    assert torn.json()["error"]["field"] == "body"
    assert torn.json()["error"]["message"].startswith("body: invalid JSON")
    empty = client.post("/v1/mcq/jobs", json={"items": []})
    assert empty.status_code == 422 and empty.json()["error"]["field"] == "items"


def test_quota_checks_usage_against_the_limits() -> None:
    quota = Quota(max_jobs=2, max_queued_items=10, max_stored_bytes=100)
    quota.check(Usage(jobs=1, queued=5, stored=50), items=5, stored=50)
    for usage, items, stored, field in [
        (Usage(jobs=2, queued=0, stored=0), 1, 1, None),
        (Usage(jobs=0, queued=6, stored=0), 5, 1, "items"),
        (Usage(jobs=0, queued=0, stored=90), 1, 11, None),
    ]:
        with pytest.raises(QuotaExceeded) as refused:
            quota.check(usage, items, stored)
        assert refused.value.field == field


def test_share_and_make_room() -> None:
    assert [share(16, running) for running in (0, 1, 3, 16, 40)] == [16, 16, 6, 1, 1]
    held = {"a": 4, "b": 1, "c": 2}
    # The busiest owner's job makes room for a waiting owner holding two jobs fewer.
    assert make_room({"j1": "a", "j2": "c"}, {"b"}, held) == "j1"
    assert make_room({"j2": "c"}, {"b"}, held) is None  # 2 vs 1: not worth a hand-over
    assert make_room({"j1": "a"}, set(), held) is None
    assert make_room({"j1": "a"}, {"d"}, held) == "j1"  # an owner holding nothing yet
