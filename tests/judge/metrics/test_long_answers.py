"""Long, multi-reference answers: BERTScore, ROUGE-L and the matcher give the values they gave
before the long-answer work (token-budget batches, chunked embeddings, the long-point fast path,
rapidfuzz's LCS), whatever the batching.

The items are generated here, deterministically (about 300-word responses, one of 650 words past
BERTScore's 512-token window, three or four ~300-word references each), and the expected values
were computed with the code before that change and pinned: BERTScore within 1e-6 (batches of
other shapes move float32 sums in the last bits), ROUGE-L and the matcher's verdicts, evidence
and rationales exactly, its probabilities within 1e-6. The matcher's values are pinned again
when its fitted parameters change (last: matcher-v4, whose refit moved one short point's
probability from 0.638 to 0.622 and the long points' by less than 1e-6).
"""

from __future__ import annotations

import hashlib
import importlib
import itertools
import json
import random

import pytest

import judge.matcher as matcher_module
import judge.matcher.features as matcher_features
from judge.matcher import MatchInput, get_matcher, point_features, texts_to_embed
from judge.metrics import bertscore, rouge_l
from judge.metrics.bertscore import BertScorer

# The package exports the function `bertscore` under the module's name.
bertscore_module = importlib.import_module("judge.metrics.bertscore")

_VOCABULARY = """
patient doctor treatment disease symptom blood heart kidney liver lung brain pain fever infection
virus bacteria vaccine dose tablet injection surgery therapy recovery risk factor family history
genetic mutation syndrome condition chronic acute severe mild early late stage diagnosis test scan
result level pressure sugar weight diet exercise sleep stress smoking alcohol child adult woman man
village river mountain forest ship captain soldier king queen letter secret journey storm harbor
city market school teacher student book story plan war peace council leader promise betrayal friend
brother sister mother father wife husband daughter son money gold debt trade farm winter summer
night morning year month week day hour decide discover explain reveal escape return protect attack
believe remember forget hide find lose win build break carry follow warn trust doubt fear hope
"""
_FUNCTION = (
    "the a of to and in that for on with as by at from into after before was is his her their"
)
_NAMES = "Aldan Briggs Corva Delmar Elkins Farrow Gideon Halvey Isko Jarrow"
QUESTION = "What happens in the story, and why?"


def _sentence(rng: random.Random, names: list[str]) -> str:
    vocabulary, function = _VOCABULARY.split(), _FUNCTION.split()
    words = []
    for position in range(rng.randint(10, 22)):
        roll = rng.random()
        if roll < 0.3:
            words.append(rng.choice(function))
        elif roll < 0.37:
            words.append(rng.choice(names))
        elif roll < 0.40 and position:
            words.append(str(rng.randint(2, 1990)))
        else:
            words.append(rng.choice(vocabulary))
    return words[0].capitalize() + " " + " ".join(words[1:]) + "."


def _text(rng: random.Random, facts: list[str], share: float, words: int, names: list[str]) -> str:
    out: list[str] = []
    count = 0
    while count < words:
        sentence = rng.choice(facts) if rng.random() < share else _sentence(rng, names)
        out.append(sentence)
        count += len(sentence.split())
    return " ".join(out)


def long_items(seed: int = 5) -> list[tuple[str, list[str]]]:
    """Three (response, references) items: 300, 300 and 650 words; 4, 3 and 3 references."""
    rng = random.Random(seed)
    items = []
    for words, count in ((300, 4), (300, 3), (650, 3)):
        names = rng.sample(_NAMES.split(), 3)
        facts = [_sentence(rng, names) for _ in range(30)]
        references = [_text(rng, facts, 0.8, 300, names) for _ in range(count)]
        items.append((_text(rng, facts, 0.5, words, names), references))
    return items


ITEMS = long_items()
RESPONSES = [response for response, references in ITEMS for _ in references]
REFERENCES = [reference for _, references in ITEMS for reference in references]


def _match_inputs() -> list[MatchInput]:
    """Each reference as the one long point, then the first reference's first sentence."""
    inputs = []
    for response, references in ITEMS:
        for reference in references:
            inputs.append(MatchInput(QUESTION, references[0], [reference], response, "en"))
        short = references[0].split(".")[0] + "."
        inputs.append(MatchInput(QUESTION, references[0], [short], response, "en"))
    return inputs


BERTSCORE_BEFORE: list[tuple[float, float, float]] = [
    (0.782074749, 0.802609921, 0.792209268),
    (0.782373965, 0.788330853, 0.785341144),
    (0.79400295, 0.79575783, 0.794879436),
    (0.769908845, 0.779461086, 0.774655521),
    (0.787269354, 0.805948555, 0.796499491),
    (0.811748207, 0.820645034, 0.816172361),
    (0.798220277, 0.790679872, 0.794432223),
    (0.779484987, 0.829733491, 0.803824723),
    (0.759759128, 0.785897911, 0.772607505),
    (0.759344339, 0.793020844, 0.775817335),
]

ROUGE_L_BEFORE: list[tuple[float, float, float]] = [
    (0.28289473684210525, 0.2847682119205298, 0.2838283828382839),
    (0.21710526315789475, 0.21926910299003322, 0.21818181818181817),
    (0.23026315789473684, 0.22950819672131148, 0.22988505747126434),
    (0.23026315789473684, 0.22364217252396165, 0.22690437601296595),
    (0.25249169435215946, 0.24516129032258063, 0.24877250409165302),
    (0.26578073089701, 0.264026402640264, 0.2649006622516556),
    (0.23588039867109634, 0.23127035830618892, 0.23355263157894735),
    (0.1580547112462006, 0.33876221498371334, 0.2155440414507772),
    (0.16869300911854104, 0.36156351791530944, 0.23005181347150258),
    (0.13829787234042554, 0.29545454545454547, 0.18840579710144928),
]

MATCHER_BEFORE: list[tuple[float, bool, str, str]] = [
    (
        0.5508566384067798,
        True,
        (
            "Before therapy before man diagnosis believe soldier risk tablet student scan Elkins "
            "as daughter hide Elkins Farrow virus teacher Elkins doubt fear."
        ),
        (
            "embedded-matcher: p=0.55, long point judged on whole-response similarity "
            "(whole-response similarity 0.72, content-word recall 0.72, 67% of its numbers "
            "missing)"
        ),
    ),
    (
        0.6278478354960471,
        True,
        (
            "Wife tablet after after for trust 125 from infection stress before sleep therapy "
            "genetic in woman return carry."
        ),
        (
            "embedded-matcher: p=0.63, long point judged on whole-response similarity "
            "(whole-response similarity 0.78, content-word recall 0.70, 75% of its numbers "
            "missing)"
        ),
    ),
    (
        0.6477126319385441,
        True,
        (
            "Before therapy before man diagnosis believe soldier risk tablet student scan Elkins "
            "as daughter hide Elkins Farrow virus teacher Elkins doubt fear."
        ),
        (
            "embedded-matcher: p=0.65, long point judged on whole-response similarity "
            "(whole-response similarity 0.80, content-word recall 0.73, 67% of its numbers "
            "missing)"
        ),
    ),
    (
        0.5899746117666792,
        True,
        (
            "Wife tablet after after for trust 125 from infection stress before sleep therapy "
            "genetic in woman return carry."
        ),
        (
            "embedded-matcher: p=0.59, long point judged on whole-response similarity "
            "(whole-response similarity 0.75, content-word recall 0.70, 33% of its numbers "
            "missing)"
        ),
    ),
    (
        0.05,
        False,
        "Promise husband Farrow is and smoking the recovery that 1326.",
        (
            "embedded-matcher: p=0.05 (max sentence similarity 0.39, content-word recall 0.80, "
            "its number(s) 1254 replaced by others in the response)"
        ),
    ),
    (
        0.5998612388119087,
        True,
        (
            "Her patient king tablet late woman mild explain from hide into mother on with factor "
            "was book Isko was lose."
        ),
        (
            "embedded-matcher: p=0.60, long point judged on whole-response similarity "
            "(whole-response similarity 0.76, content-word recall 0.76, 50% of its numbers "
            "missing)"
        ),
    ),
    (
        0.6447996087311291,
        True,
        (
            "Win syndrome stress Jarrow a 646 wife as with pressure a betrayal her story and "
            "doubt level night harbor heart stress."
        ),
        (
            "embedded-matcher: p=0.64, long point judged on whole-response similarity "
            "(whole-response similarity 0.79, content-word recall 0.79, 71% of its numbers "
            "missing)"
        ),
    ),
    (
        0.6445643538467373,
        True,
        (
            "Letter on early his Jarrow hour dose result mother husband of her kidney dose win "
            "council trust brother level debt husband infection."
        ),
        (
            "embedded-matcher: p=0.64, long point judged on whole-response similarity "
            "(whole-response similarity 0.79, content-word recall 0.75, 86% of its numbers "
            "missing)"
        ),
    ),
    (
        0.6216963929112916,
        True,
        (
            "To 60 condition school Isko child at daughter syndrome brother before Elkins to as "
            "forest."
        ),
        "embedded-matcher: p=0.62 (max sentence similarity 0.50, content-word recall 0.73)",
    ),
    (
        0.6369681855490272,
        True,
        (
            "Family peace smoking before harbor plan from acute explain storm kidney that father "
            "trust is forget leader day brain after brother before."
        ),
        (
            "embedded-matcher: p=0.64, long point judged on whole-response similarity "
            "(whole-response similarity 0.79, content-word recall 0.89, 50% of its numbers "
            "missing)"
        ),
    ),
    (
        0.5685135328975517,
        True,
        (
            "Sugar peace attack trade student reveal tablet patient of week mother his by before "
            "mutation disease after follow on into month on."
        ),
        (
            "embedded-matcher: p=0.57, long point judged on whole-response similarity "
            "(whole-response similarity 0.73, content-word recall 0.91, 56% of its numbers "
            "missing)"
        ),
    ),
    (
        0.6145330685770101,
        True,
        (
            "Family peace smoking before harbor plan from acute explain storm kidney that father "
            "trust is forget leader day brain after brother before."
        ),
        (
            "embedded-matcher: p=0.61, long point judged on whole-response similarity "
            "(whole-response similarity 0.77, content-word recall 0.92, 33% of its numbers "
            "missing)"
        ),
    ),
    (
        0.9867846418961078,
        True,
        "Heart at adult Isko their mutation genetic follow that diagnosis the from.",
        "embedded-matcher: p=0.99 (max sentence similarity 1.00, content-word recall 1.00)",
    ),
]


def test_the_items_are_the_ones_the_values_were_pinned_on() -> None:
    digest = hashlib.sha256(json.dumps(ITEMS).encode()).hexdigest()[:16]
    assert digest == "d404b489de09a949"


def _assert_bertscore(scores: list, expected: list[tuple[float, float, float]]) -> None:
    assert len(scores) == len(expected)
    for score, values in zip(scores, expected, strict=True):
        assert score.reason is None
        assert (score.precision, score.recall, score.f1) == pytest.approx(values, abs=1e-6)


def test_bertscore_of_long_multi_reference_items_is_unchanged() -> None:
    _assert_bertscore(bertscore(RESPONSES, REFERENCES), BERTSCORE_BEFORE)


def test_bertscore_is_unchanged_whatever_the_batches_chunks_and_reuse(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Tiny budgets: every pair its own chunk, one text per forward pass, one pair per match.
    monkeypatch.setattr(bertscore_module, "HELD_TOKENS", 1)
    monkeypatch.setattr(bertscore_module, "FORWARD_TOKENS", 1)
    monkeypatch.setattr(bertscore_module, "MATCH_CELLS", 1)
    _assert_bertscore(BertScorer(batch_size=3).score(RESPONSES, REFERENCES), BERTSCORE_BEFORE)
    # One pair per call, last first: a reference scored lately comes from the recent store.
    # Each call embeds its response again (responses are never remembered): the last pair of
    # each item, so each of the three responses once (the 650-word one too), proves it for all.
    ends = itertools.accumulate(len(references) for _, references in ITEMS)
    for index in [end - 1 for end in ends][::-1]:
        [score] = bertscore([RESPONSES[index]], [REFERENCES[index]])
        _assert_bertscore([score], [BERTSCORE_BEFORE[index]])


def test_recent_references_stay_within_their_token_budget() -> None:
    scorer = BertScorer()
    scorer.score(RESPONSES, REFERENCES)
    recent = bertscore_module._recent_references(scorer.spec)
    assert 0 < recent._tokens <= bertscore_module.RECENT_REFERENCE_TOKENS
    assert REFERENCES[-1] in recent._entries  # the latest are kept, responses never
    assert not set(RESPONSES) & set(recent._entries)


def test_rouge_l_of_long_multi_reference_items_is_unchanged() -> None:
    for response, reference, values in zip(RESPONSES, REFERENCES, ROUGE_L_BEFORE, strict=True):
        score = rouge_l(response, reference)
        assert (score.precision, score.recall, score.f1) == values


def test_rouge_l_matches_rouge_score_on_long_texts() -> None:
    from rouge_score.rouge_scorer import _score_lcs

    from judge.metrics import tokenize

    for response, reference in zip(RESPONSES, REFERENCES, strict=True):
        expected = _score_lcs(tokenize(reference), tokenize(response))
        score = rouge_l(response, reference)
        assert (score.precision, score.recall, score.f1) == (
            expected.precision,
            expected.recall,
            expected.fmeasure,
        )


def _assert_matches(matches: list, expected: list[tuple[float, bool, str, str]]) -> None:
    flat = [match for per_input in matches for match in per_input]
    assert len(flat) == len(expected)
    for match, (probability, covered, evidence, rationale) in zip(flat, expected, strict=True):
        assert match.probability == pytest.approx(probability, abs=1e-6)
        assert (match.covered, match.evidence, match.rationale) == (covered, evidence, rationale)


@pytest.fixture(scope="module")
def batch_matcher() -> matcher_module.EmbeddedMatcher:
    """A matcher of its own for the batch test, which starts it with nothing remembered."""
    return matcher_module.EmbeddedMatcher(matcher_module.load_params())


def test_matcher_on_long_multi_reference_items_is_unchanged(
    batch_matcher: matcher_module.EmbeddedMatcher,
) -> None:
    assert not batch_matcher._recent  # every vector is embedded by this batch
    _assert_matches(batch_matcher.match(_match_inputs()), MATCHER_BEFORE)


def test_matcher_is_unchanged_one_input_at_a_time_with_remembered_vectors() -> None:
    matcher = get_matcher()
    # The first and the last item (4 references, 300 words; 3 references, 650 words): in each,
    # the first input embeds the response and the later ones recall its vectors. The middle
    # item is the first one's shape again; the batch test above checks its values.
    starts = [0, *itertools.accumulate(len(references) + 1 for _, references in ITEMS)]
    kept = [*range(starts[0], starts[1]), *range(starts[2], starts[3])]
    inputs = _match_inputs()
    matches = [matcher.match([inputs[index]])[0] for index in kept]
    _assert_matches(matches, [MATCHER_BEFORE[index] for index in kept])
    assert 0 < len(matcher._recent) <= matcher_module.RECENT_TEXTS


def test_long_point_fast_path_computes_the_same_values_as_every_feature(
    batch_matcher: matcher_module.EmbeddedMatcher,
) -> None:
    matcher = get_matcher()
    # Each item's first reference as the long point and its short point: both paths, on every
    # response (the 650-word one too). The other references are long points of the same kind,
    # and their complete features (quadratic rapidfuzz ratios on 300-word texts) cost seconds.
    inputs = [
        item
        for item in _match_inputs()
        if item.points[0] == item.reference or item.points[0] not in REFERENCES
    ]
    assert len(inputs) == 2 * len(ITEMS)
    texts = list(dict.fromkeys(text for item in inputs for text in texts_to_embed(item)))
    # Both paths read the same vectors, whatever they are. The batch test's matcher remembers
    # all but the long points' sentences (3,400 of 3,800 words): those are recalled, not
    # embedded again (all are embedded here when that test has not run in this process).
    vectors = batch_matcher._recall("en", texts)
    missing = [text for text in texts if text not in vectors]
    vectors.update(zip(missing, matcher._get_encoder().embed(missing), strict=True))
    for item in inputs:
        assert set(texts_to_embed(item, complete=False)) <= set(texts_to_embed(item))
        full = point_features(item.points[0], item, vectors)
        fast = point_features(item.points[0], item, vectors, complete=False)
        assert fast.long_point == full.long_point
        assert fast.evidence == full.evidence
        assert fast.conflicting_numbers == full.conflicting_numbers
        assert fast.values == {name: full.values[name] for name in fast.values}
        model = matcher.params.select(full)
        assert set(model.features) <= set(fast.values)
        if fast.long_point:
            assert set(fast.values) == matcher_features._LONG_POINT_VALUES
