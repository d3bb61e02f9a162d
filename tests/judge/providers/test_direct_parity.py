"""Grading through either transport gives the same results, and shares the cache.

The bundled CharToM examples (and the first items of the shared 1,035-item workload, when
``../shared`` is there) are graded with coverage and defects against the strict stand-in, once
with ``transport="litellm"`` (instructor over litellm) and once with ``transport="direct"``, each on
a fresh cache. The ``GradeResult``s must be identical except for the fields that measure wall
time (``elapsed_s`` and each call's ``latency_s``); with injected faults, also except the
unscored ``detail`` text, which quotes each stack's own exception. Grading again with the other
transport on the same cache must be served entirely from the cache (the transport is not part of
the cache key).

The stand-in's answers are a function of the request alone (its item tag, task and re-ask
count), never of arrival order, so both runs see the same answers even though their requests
interleave differently.
"""

from __future__ import annotations

import zlib
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import litellm
import pytest

from bonusjudge_client.wire.grading import GradeRequest, GradeResult
from judge.cache import JudgeCache
from judge.config import JudgeConfig
from judge.engine import Grader
from standins import OpenAIStandIn, Reply, ToolCall, find_embedded_schema
from tests.helpers.faults import (
    default_workload,
    item_of_text,
    load_workload,
    task_of_request,
)

litellm.suppress_debug_info = True
EXAMPLES = Path(__file__).resolve().parents[3] / "judge" / "data" / "examples_chartom.jsonl"
WORKLOAD_SLICE = 16
"""Workload items added to the examples: four of each ToM dimension. The workload's items are
alike in shape (one bonus point, short English text; the examples bring the two-point items),
so more of them only repeated the same comparison; each costs four requests on each stack."""
MODES = ["tools", "json_schema", "json", "md_json", "json_object_schema"]
TIMING = {"elapsed_s", "latency_s"}
"""Fields that measure wall time: the one legitimate difference between two runs."""


def items() -> list[tuple[str, GradeRequest]]:
    """The bundled examples, then a slice of the shared workload when it is present."""
    out = load_workload(EXAMPLES)
    workload = default_workload()
    if workload is not None:
        more = load_workload(workload, limit=WORKLOAD_SLICE)
        out += [(f"w{n}", r.model_copy(update={"id": f"w{r.id}"})) for n, r in more]
    return out


def stable(text: str) -> int:
    return zlib.crc32(text.encode())


def requested(body: Mapping[str, Any]) -> tuple[str | None, dict[str, Any]]:
    """The response model a body asks for (name and schema); (None, {}) for plain text."""
    for tool in body.get("tools") or []:
        return str(tool["function"]["name"]), dict(tool["function"].get("parameters") or {})
    spec = (body.get("response_format") or {}).get("json_schema")
    if isinstance(spec, Mapping):
        return str(spec.get("name")), dict(spec.get("schema") or {})
    for message in body.get("messages") or []:
        content = message.get("content")
        schema = find_embedded_schema(content) if isinstance(content, str) else None
        if schema is not None:
            return str(schema.get("title")), schema
    return None, {}


def answer(body: Mapping[str, Any]) -> Any:
    """A valid answer that depends on the item: covered points and defects vary by item."""
    name, schema = requested(body)
    seed = stable(str(item_of_text(str(body["messages"]))))
    if name == "CoverageJudgement":
        n = int(schema["properties"]["points"]["maxItems"])
        return {"points": [
            {"index": i, "covered": (seed >> i) % 2 == 0, "evidence": "", "rationale": f"r{i}"}
            for i in range(1, n + 1)
        ]}
    if name == "DefectJudgement":
        found = [{"description": "wrong motive", "kind": "factual"}] if seed % 3 == 0 else []
        return {"defects": found}
    if name == "BonusPointsExtraction":
        return {"points": ["first point", "second point"]}
    assert name is None, f"unexpected request for {name!r}"
    # The paper's rubric family: plain text.
    if "[Bonus Points]" in str(body["messages"]):
        return f"[Included Bonus Points]: {1 + seed % 2}"
    return "[Defect]: None" if seed % 3 else "[Defect]: The motive is wrong."


def place(body: Mapping[str, Any], payload: str, finish: Any = None) -> Reply:
    """A payload where the body's mode expects it (a tool call, a code block or the content)."""
    name, _ = requested(body)
    if body.get("tools"):
        return Reply(tool_calls=(ToolCall(name=str(name), arguments=payload),),
                     finish_reason=finish)
    if "response_format" not in body:
        return Reply(content=f"```json\n{payload}\n```", finish_reason=finish)
    return Reply(content=payload, finish_reason=finish)


class Faulty:
    """Answers with faults chosen per (item, task), by re-ask number and by resend.

    A resend (the engine's retry after a 500) repeats a body already seen, so it is counted per
    body; the fault of a request never depends on when it arrives.
    """

    PLANS = (
        "ok", "ok", "invalid once", "malformed", "refusal", "empty", "truncated",
        "500 once", "500 always", "invalid then 500 once",
    )

    def __init__(self) -> None:
        self.seen: Counter[tuple[Any, ...]] = Counter()

    def __call__(self, body: dict[str, Any]) -> Any:
        import json

        item = item_of_text(str(body["messages"]))
        task = task_of_request(body)
        reasks = sum(1 for m in body["messages"] if m.get("role") == "assistant")
        key = (item, task, stable(json.dumps(body, sort_keys=True)))
        resend = self.seen[key]
        self.seen[key] += 1
        plan = self.PLANS[stable(f"{item}:{task}") % len(self.PLANS)]
        good = json.dumps(answer(body))
        if plan == "invalid once" and reasks == 0:
            return place(body, json.dumps({"points": [{"index": 99}], "defects": [{}]}))
        if plan == "malformed":
            return place(body, "{'points': [,}")
        if plan == "refusal":
            return Reply(content=None, refusal="I can't help with that.", finish_reason="stop")
        if plan == "empty":
            return Reply(content="", finish_reason="stop")
        if plan == "truncated":
            return place(body, good[: len(good) // 2], finish="length")
        if plan == "500 always" or (plan == "500 once" and resend == 0):
            raise RuntimeError("injected server error")  # the stand-in answers 500
        if plan == "invalid then 500 once":
            if reasks == 0:
                return place(body, json.dumps({"points": [{"index": 99}], "defects": [{}]}))
            if resend == 0:
                raise RuntimeError("injected server error")
        return place(body, good)


def comparable(result: GradeResult, *, details: bool = True) -> dict[str, Any]:
    """The result without its timings (and without unscored details, if asked)."""

    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {
                k: strip(v) for k, v in value.items()
                if k not in TIMING and (details or k != "detail")
            }
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    return strip(result.model_dump(mode="json"))


async def grade(
    base_url: str,
    transport: str,
    cache: Path,
    work: list[tuple[str, GradeRequest]],
    **options: Any,
) -> tuple[dict[str, GradeResult], Grader]:
    async def no_wait(seconds: float) -> None:
        return None

    options.setdefault("concurrency", 8)
    config = JudgeConfig(
        model="openai/standin", api_base=base_url, metrics=("coverage", "defects"),
        transport=transport, **options,
    )
    disk = JudgeCache(cache)
    grader = Grader(config, cache=disk, sleep=no_wait)
    try:
        results = {r.id: r async for r in grader.grade_many(work)}
    finally:
        await grader.aclose()
        disk.close()
    return results, grader


@pytest.mark.parametrize("mode", [*MODES, "chartom-paper"])
async def test_both_transports_grade_alike_and_share_the_cache(tmp_path: Path, mode: str) -> None:
    work = items() if mode == "tools" else load_workload(EXAMPLES)
    options = {"rubric": mode} if mode == "chartom-paper" else {"mode": mode}
    async with OpenAIStandIn(handler=answer, record_requests=0) as srv:
        lite, lite_grader = await grade(srv.base_url, "litellm", tmp_path / "a", work, **options)
        direct, direct_grader = await grade(srv.base_url, "direct", tmp_path / "b", work, **options)
        assert srv.rejections == [] and srv.stats().requests == 4 * len(work)
        # The other transport on each cache: every call a hit, nothing sent.
        again_direct, hits_direct = await grade(srv.base_url, "direct", tmp_path / "a", work,
                                                **options)
        again_lite, hits_lite = await grade(srv.base_url, "litellm", tmp_path / "b", work,
                                            **options)
        assert srv.stats().requests == 4 * len(work)

    assert sorted(direct) == sorted(lite) and len(lite) == len(work)
    assert all(r.status == "scored" for r in lite.values())
    assert {k: comparable(v) for k, v in direct.items()} == {
        k: comparable(v) for k, v in lite.items()
    }
    for run in (lite_grader, direct_grader):
        assert run.stats.provider_calls == 2 * len(work) and run.stats.cache_hits == 0
    for run in (hits_direct, hits_lite):
        assert run.stats.provider_calls == 0 and run.stats.cache_hits == 2 * len(work)
    for cached, fresh in ((again_direct, lite), (again_lite, direct)):
        for key, result in cached.items():
            served = comparable(result)
            for call in served["provenance"]["calls"]:
                assert call["cached"] is True
            expected = comparable(fresh[key])
            for call in expected["provenance"]["calls"]:
                # A hit reports no attempts, tokens or cost of its own.
                call.update(cached=True, attempts=0, prompt_tokens=None,
                            completion_tokens=None, cost_usd=None)
            assert served == expected


@pytest.mark.parametrize("mode", ["tools", "md_json"])
async def test_both_transports_fail_alike(tmp_path: Path, mode: str) -> None:
    """Re-asks, retries and unscored reasons agree call by call under injected faults."""
    work = load_workload(EXAMPLES)
    work += [
        (f"x{n}", r.model_copy(update={"id": f"x{r.id}", "bonus_points": None}))
        for n, r in load_workload(EXAMPLES, limit=4)
    ]  # references split by the extraction call too
    runs = []
    # One server for both runs: its URL is part of the cache keys and config hash in the results.
    async with OpenAIStandIn(record_requests=0) as srv:
        for transport in ("litellm", "direct"):
            srv.handler = Faulty()
            srv.reset_stats()
            # One item at a time: items x<n> send item <n>'s coverage request again, and which
            # of the two reaches the server first (and so meets which fault, or the cache)
            # must not depend on scheduling, or the two runs differ for no fault of a transport.
            # One retry: a call failing twice while the provider answers its item's other
            # calls stops there (judge.calls.ITEM_FAILURES), and whether the other call was
            # answered in between is a matter of scheduling; with one retry both stop after two.
            results, grader = await grade(
                srv.base_url, transport, tmp_path / transport, work, mode=mode, retries=1,
                concurrency=1,
            )
            runs.append((results, grader, srv.stats().requests))
    (lite, lite_grader, lite_sent), (direct, direct_grader, direct_sent) = runs

    assert {k: comparable(v, details=False) for k, v in direct.items()} == {
        k: comparable(v, details=False) for k, v in lite.items()
    }
    assert direct_sent == lite_sent
    assert direct_grader.stats.retries == lite_grader.stats.retries > 0
    assert direct_grader.stats.reasks == lite_grader.stats.reasks > 0
    reasons = Counter(reason for r in lite.values() for reason in r.unscored_reasons)
    # Every failure kind happened, so the comparison above covered each.
    # ("malformed" is not JSON at all: a parse failure, not a validation failure.)
    for reason in ("parse_failure", "refusal", "empty_output", "truncated_output",
                   "provider_error"):
        assert any(reason in key for key in reasons), dict(reasons)


def test_the_transport_is_not_part_of_the_cache_key() -> None:
    from judge.calls import CallSpec
    from rubrics.loader import load_library

    library = load_library()
    rubric = library.for_task("chartom", "defects")
    base = JudgeConfig(model="openai/standin", api_base="http://127.0.0.1:1/v1")
    keys = set()
    for transport in ("auto", "direct", "litellm"):
        config = base.model_copy(update={"transport": transport})
        assert config.output_fields() == base.output_fields()
        assert config.config_hash() == base.config_hash()
        spec = CallSpec(
            task="defects", rubric=rubric, language="en",
            messages=[{"role": "user", "content": "x"}], config=config, convert=lambda v: v,
        )
        keys.add(spec.cache_key())
    assert len(keys) == 1
