"""The judge cache: stable keys (existing caches must keep hitting), hits and misses, entries that
do not read back, and a cache that fails, which grading must survive.

Damage to the database file itself (garbage, truncation, a full disk) is in
``test_cache_damage.py``; caching apart per API key in ``tests/api/test_cache_tenancy.py``.
"""

from __future__ import annotations

import json
from typing import Any

import diskcache

from judge.cache import JudgeCache, judge_call_key, metric_key, schema_hash
from judge.calls import MAX_STORED_RAW
from judge.config import JudgeConfig
from judge.providers.fake import FakeProvider, covering, defects
from judge.verdicts import DefectJudgement, coverage_model
from rubrics.loader import load_library
from tests.helpers.engine import ENGINE_CONFIG as CFG
from tests.helpers.engine import by_task
from tests.helpers.engine import levin_request as request
from tests.helpers.engine import quiet_grader as grader


def answers(n: int = 10) -> FakeProvider:
    return FakeProvider(handler=by_task([covering(1, n=2)] * n, [defects()] * n))


# -- keys ----------------------------------------------------------------------------------------

KEY_PARTS: dict[str, Any] = {
    "output_fields": {"model": "fake/judge", "temperature": 0.0},
    "messages": [{"role": "user", "content": "Grade this."}],
    "rubric": {"id": "r", "version": 1, "hash": "abc"},
    "response_schema": "0123456789abcdef",
}


def test_judge_call_keys_are_pinned() -> None:
    """A changed key silently empties every existing cache: these values must never move."""
    assert judge_call_key(**KEY_PARTS) == (
        "2e75c9b83acf643908420bfa41dc9bc431fda414b3bb188dfd3516e51644aa95"
    )
    assert judge_call_key(**KEY_PARTS, tenant=None) == judge_call_key(**KEY_PARTS)
    assert judge_call_key(**KEY_PARTS, tenant="t1") == (
        "dbe85de606f5e1f5d6b28e8471c4ec9a40ce3c6c1586c39ee8f885dd30c48148"
    )
    assert metric_key("rouge_l", {"segmenter": "auto"}, "a cat", "the cat") == (
        "fcdb37121d33ccb521d6c74f4f45840f30bb2019882ddeb295adb8eca2edb2b9"
    )


def test_every_part_of_the_key_matters() -> None:
    base = judge_call_key(**KEY_PARTS)
    changes = {
        "output_fields": {"model": "fake/judge", "temperature": 0.2},
        "messages": [{"role": "user", "content": "Grade that."}],
        "rubric": {"id": "r", "version": 2, "hash": "abc"},
        "response_schema": None,
    }
    for part, value in changes.items():
        assert judge_call_key(**{**KEY_PARTS, part: value}) != base, part
    assert judge_call_key(**KEY_PARTS, tenant="t1") != judge_call_key(**KEY_PARTS, tenant="t2")


def test_only_settings_that_change_the_answer_are_in_the_key() -> None:
    same = CFG.model_copy(
        update={"timeout": 5, "retries": 1, "concurrency": 3, "max_outage": 1, "reasks": 0}
    )
    assert same.output_fields() == CFG.output_fields()
    for changed in ({"model": "fake/other"}, {"temperature": 0.3}, {"api_base": "http://x/v1"}):
        assert CFG.model_copy(update=changed).output_fields() != CFG.output_fields(), changed


def test_schema_hash_follows_the_response_model() -> None:
    assert schema_hash(None) is None
    assert schema_hash(coverage_model(2)) == schema_hash(coverage_model(2))
    assert schema_hash(coverage_model(2)) != schema_hash(DefectJudgement)


async def test_the_engine_keys_each_call_by_what_it_sent(tmp_path) -> None:
    """The key in the provenance is ``judge_call_key`` of exactly what each call sent."""
    fake = answers()
    result = await grader(fake, cache=JudgeCache(tmp_path / "c")).grade(request())
    sent = {call.response_model.__name__: call for call in fake.calls if call.response_model}
    model_of = {"coverage": "CoverageJudgement", "defects": "DefectJudgement"}
    library = load_library()
    assert [record.task for record in result.provenance.calls] == ["coverage", "defects"]
    for record in result.provenance.calls:
        call = sent[model_of[record.task]]
        rubric = library.for_task(CFG.rubric, record.task)
        assert record.cache_key == judge_call_key(
            output_fields=CFG.output_fields(),
            messages=call.messages,
            rubric={"id": rubric.id, "version": rubric.version, "hash": rubric.hash},
            response_schema=schema_hash(call.response_model),
        )


# -- hits and misses -----------------------------------------------------------------------------


def test_hits_misses_and_writes_are_counted_and_persist(tmp_path) -> None:
    cache = JudgeCache(tmp_path / "c")
    assert cache.enabled and cache.get("k") is None
    cache.set("k", {"value": [1, "二"]})
    assert cache.get("k") == {"value": [1, "二"]}
    assert cache.stats.as_dict() == {"hits": 1, "misses": 1, "writes": 1}
    cache.close()
    again = JudgeCache(tmp_path / "c")  # a later run on the same folder
    assert again.get("k") == {"value": [1, "二"]} and len(again) == 1


async def test_cache_hit_on_rerun_and_key_sensitivity(tmp_path):
    cache = JudgeCache(tmp_path / "c")
    fake = FakeProvider(handler=by_task([covering(1, n=2)] * 10, [defects()] * 10))
    g = grader(fake, cache=cache)
    await g.grade(request())
    assert len(fake.calls) == 2
    # Same item again: both calls served from the cache.
    again = await g.grade(request())
    assert len(fake.calls) == 2
    assert all(c.cached for c in again.provenance.calls)
    # Timeout, retries and concurrency do not change the output: still hits.
    cfg = CFG.model_copy(update={"timeout": 5, "retries": 1, "concurrency": 3})
    await g.grade(request(), config=cfg)
    assert len(fake.calls) == 2
    # Model, temperature, rubric text and response change it: misses.
    for changed in (
        CFG.model_copy(update={"model": "fake/other"}),
        CFG.model_copy(update={"temperature": 0.2}),
    ):
        await g.grade(request(), config=changed)
    assert len(fake.calls) == 6
    await g.grade(request(response="Something else entirely."))
    assert len(fake.calls) == 8


async def test_unscored_outputs_are_not_cached(tmp_path):
    cache = JudgeCache(tmp_path / "c")
    bad = {"points": []}
    fake = FakeProvider(handler=by_task([bad] * 3 + [covering(1, n=2)], [defects()] * 2))
    g = grader(fake, cache=cache)
    first = await g.grade(request())
    assert first.coverage.status == "unscored"
    second = await g.grade(request())
    assert second.coverage.status == "scored"


async def test_metric_values_are_cached_too(tmp_path) -> None:
    cfg = JudgeConfig(model="fake/judge", metrics=("rouge_l",))
    g = grader(FakeProvider(outputs=[]), cfg, cache=JudgeCache(tmp_path / "c"))
    first = await g.grade(request())
    assert g.stats.metric_cache_hits == 0
    second = await g.grade(request())
    assert g.stats.metric_cache_hits == 1 and second.rouge_l == first.rouge_l


async def test_caching_off_in_the_config_neither_reads_nor_writes(tmp_path) -> None:
    cache = JudgeCache(tmp_path / "c")
    fake = answers()
    g = grader(fake, CFG.model_copy(update={"cache": False}), cache=cache)
    await g.grade(request())
    await g.grade(request())
    assert len(fake.calls) == 4 and len(cache) == 0


# -- entries that do not read back, and a failing cache --------------------------------------------


async def test_an_entry_that_is_not_json_is_a_miss(tmp_path) -> None:
    folder = tmp_path / "c"
    fake = answers()
    first = await grader(fake, cache=JudgeCache(folder)).grade(request())
    raw = diskcache.Cache(str(folder))
    for record in first.provenance.calls:
        raw.set(record.cache_key, "{not json")  # a damaged or foreign entry
    raw.close()
    again = await grader(fake, cache=JudgeCache(folder)).grade(request())
    assert again.status == "scored" and len(fake.calls) == 4  # both asked again
    assert not any(c.cached for c in again.provenance.calls)


class Broken:
    """A diskcache stand-in whose every call fails as a damaged database would."""

    def get(self, key: str) -> Any:
        raise OSError("disk I/O error")

    def set(self, key: str, value: Any, **kw: Any) -> None:
        raise OSError("disk I/O error")

    def close(self) -> None:
        raise OSError("disk I/O error")


async def test_a_failing_cache_is_disposable(tmp_path) -> None:
    cache = JudgeCache(tmp_path / "c")
    cache._cache = Broken()  # every read and write fails from now on
    fake = answers()
    g = grader(fake, cache=cache)
    first = await g.grade(request())
    second = await g.grade(request())
    assert first.status == second.status == "scored"
    assert len(fake.calls) == 4  # nothing was served from the cache
    assert cache.degraded and cache.errors >= 8  # two reads and two writes per item
    cache.close()  # counted, never raised


def test_a_disabled_cache_holds_nothing() -> None:
    cache = JudgeCache(None)
    cache.set("k", 1)
    assert not cache.enabled and cache.get("k") is None
    assert len(cache) == 0 and cache.volume() == 0 and not cache.writable()
    assert cache.stats.as_dict() == {"hits": 0, "misses": 0, "writes": 0}


def test_writes_past_the_size_limit_are_evicted_every_thousand_writes(tmp_path) -> None:
    # diskcache's own check on every write is off (a quarter of a write's CPU): `set` culls.
    from judge import cache as cache_module

    cache = JudgeCache(tmp_path, size_limit=200_000)
    blob = {"value": "x" * 2_000}
    for i in range(cache_module._CULL_EVERY):
        cache.set(f"k{i}", blob)
    # Just culled: back under the limit, the newest entries kept.
    assert cache.volume() <= 200_000 + 100_000  # diskcache's volume counts the database pages
    assert cache.get(f"k{cache_module._CULL_EVERY - 1}") == blob
    assert cache.get("k0") is None
    cache.close()


async def test_a_huge_reply_is_cached_cut_to_its_first_16_kb(tmp_path) -> None:
    # A 5 MB reply that validates (its answer padded with whitespace) was cached whole.
    pad = " " * 5_000_000
    fake = FakeProvider(handler=by_task(
        [json.dumps(covering(1, n=2)) + pad], [json.dumps(defects()) + pad]))
    cache = JudgeCache(tmp_path / "c")
    result = await grader(fake, cache=cache).grade(request())
    assert result.coverage is not None and result.coverage.covered == 1
    for record in result.provenance.calls:
        entry = cache.get(record.cache_key)
        assert entry is not None and len(entry["raw"]) < MAX_STORED_RAW + 100
        assert entry["raw"].endswith("more characters not kept]")
    silent = FakeProvider(handler=by_task([], []))  # any call would fail: served from the cache
    again = await grader(silent, cache=cache).grade(request())
    assert again.coverage is not None and again.coverage.covered == 1 and silent.calls == []


async def test_identical_calls_under_way_are_sent_once(tmp_path) -> None:
    """Single flight: the same call made five times at once costs one request, not five.

    Before, each of the concurrent copies missed the cache (the first answer was not there yet)
    and sent its own request; a calibration set with five candidates per question paid each
    question's extraction up to five times.
    """
    import asyncio

    fake = FakeProvider(
        handler=by_task([covering(1, n=2)] * 10, [defects()] * 10), latency=0.05
    )
    g = grader(fake, cache=JudgeCache(tmp_path / "c"))
    results = await asyncio.gather(*(g.grade(request()) for _ in range(5)))
    assert all(r.status == "scored" for r in results)
    assert len(fake.calls) == 2  # one coverage call and one defects call
    sent = [r for r in results if not any(c.cached for c in r.provenance.calls)]
    assert len(sent) == 1  # the other four were answered from the cache


async def test_a_failed_call_under_way_leaves_its_copies_to_ask_themselves(tmp_path) -> None:
    import asyncio

    bad = {"points": []}
    fake = FakeProvider(
        handler=by_task([bad] * 3 + [covering(1, n=2)] * 10, [defects()] * 10), latency=0.05
    )
    g = grader(fake, cache=JudgeCache(tmp_path / "c"))
    results = await asyncio.gather(*(g.grade(request()) for _ in range(2)))
    # The first copy's coverage failed (3 invalid answers); the second asked again and scored.
    assert sorted(r.status for r in results) == ["scored", "unscored"]
