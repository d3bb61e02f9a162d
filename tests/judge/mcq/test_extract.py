"""Table-driven tests of answer extraction: English, Chinese, hostile strings, multi-select."""

from __future__ import annotations

import pytest

from judge.mcq.extract import extract_answer

ABCD = ["A", "B", "C", "D"]
SALLY = [
    "Sally looks in the basket",
    "Sally looks in the box",
    "Anne takes the ball",
    "Nobody knows where the ball is",
]
LABELS_9 = list("ABCDEFGHI")
INTENTS = [
    "Build rapport",
    "Show empathy",
    "Promote coordination",
    "Undermine the other's needs",
    "Discover preferences",
    "Describe self needs",
    "Call out fairness",
    "No intention",
    "Other intention",
]

# (response, expected labels, expected method)
SINGLE_CASES: list[tuple[str, tuple[str, ...], str]] = [
    # strict
    ("[[B]]", ("B",), "strict"),
    ("[[ C ]]", ("C",), "strict"),
    ("The answer is [[B]].", ("B",), "strict"),
    ("Let me think. Sally was away, so she does not know. [[A]]", ("A",), "strict"),
    ("`[[D]]`", ("D",), "strict"),
    ("[[Answer Index]] [[C]]", ("C",), "strict"),  # echoed template is ignored
    ("[[B. Sally looks in the box]]", ("B",), "strict"),
    ("[[A]] is tempting, but my final answer: [[B]]", ("B",), "strict"),
    # strict brackets, label not as displayed -> lenient
    ("[[b]]", ("B",), "lenient"),
    ("[[2]]", ("B",), "lenient"),
    # answer markers
    ("Answer: B", ("B",), "lenient"),
    ("answer: b.", ("B",), "lenient"),
    ("The answer is (C).", ("C",), "lenient"),
    ("I think the answer is B because Sally was out.", ("B",), "lenient"),
    ("The answer is A because she did not see it.", ("A",), "lenient"),
    ("The correct answer is: C) Anne takes the ball", ("C",), "lenient"),
    ("Option A is wrong. Option B is right. Answer: B", ("B",), "lenient"),
    ("Both A and B are plausible, but I'd go with B", ("B",), "lenient"),
    ("I choose option D", ("D",), "lenient"),
    ("\\boxed{C}", ("C",), "lenient"),
    ("The answer is B, not A.", ("B",), "lenient"),
    ("Analysis:\nA. wrong\nB. wrong\nTherefore, the answer is C.", ("C",), "lenient"),
    # leading label / bracketed / option mention
    ("B", ("B",), "lenient"),
    ("b", ("B",), "lenient"),
    ("B. Sally looks in the box", ("B",), "lenient"),
    ("(D)", ("D",), "lenient"),
    ("**C**", ("C",), "lenient"),
    ("Option C.", ("C",), "lenient"),
    ("2", ("B",), "lenient"),  # digit read as position
    ("(3)", ("C",), "lenient"),
    ("Answer: B. Sally looks in the basket", ("B",), "lenient"),  # a label beats quoted text
    # fuzzy on the option text
    ("Sally looks in the box.", ("B",), "fuzzy"),
    ("Anne takes the ball", ("C",), "fuzzy"),
]

HOSTILE_CASES: list[tuple[str, str]] = [
    # (response, a fragment the reason must contain)
    ("A or B", "hedged"),
    ("Answer: A or B", "hedged"),
    ("not A", "bare mentions of A"),
    ("It could be B or C.", "bare mentions of B, C"),
    ("[[E]]", "'E' is not an option"),
    ("Answer: E.", "'E' is not an option"),
    ("I think A... actually B", "revises itself"),
    ("Answer: A... actually B", "answer revised"),
    ("[[A]]. Wait, actually it is B.", "answer revised"),
    ("[[A]] [[B]]", "several options"),
    ("(A) seems right, but (C) also fits", "several options"),
    ("The answer is a bit unclear", "no option"),
    ("I don't know.", "no option"),
    ("Neither A nor B", "bare mentions of A, B"),
    ("", "empty response"),
    ("   ", "empty response"),
]

ZH_CASES: list[tuple[str, tuple[str, ...], str]] = [
    ("［［Ａ］］", ("A",), "strict"),
    ("最终答案：［［Ｃ］］", ("C",), "strict"),
    ("答案：B", ("B",), "lenient"),
    ("答案是C，因为莎莉不在场。", ("C",), "lenient"),
    ("正确答案为（D）", ("D",), "lenient"),
    ("我选B。", ("B",), "lenient"),
    ("选项A：莎莉会去篮子里找", ("A",), "lenient"),
    ("【B】", ("B",), "lenient"),
    ("【【B】】", ("B",), "lenient"),  # not NFKC-equal to [[B]]: lenient, not strict
    ("Ｂ", ("B",), "lenient"),
]

ZH_CHOICES = ["莎莉会去篮子里找", "莎莉会去盒子里找", "安妮拿走了球", "没人知道"]

ZH_HOSTILE: list[tuple[str, str]] = [
    ("可能是A或B", "bare mentions of A, B"),
    ("答案不是A，是C", "bare mentions of A, C"),
    ("不选A", "bare mentions of A"),
    ("我觉得是A，其实B更合理。", "revises itself"),
    ("［［Ｅ］］", "'E' is not an option"),
    ("这个问题无法确定。", "no option"),
]


@pytest.mark.parametrize(("response", "labels", "method"), SINGLE_CASES)
def test_single_select_english(response: str, labels: tuple[str, ...], method: str) -> None:
    got = extract_answer(response, ABCD, SALLY)
    assert (got.labels, got.method) == (labels, method), got.detail
    if method == "strict":
        assert got.detail is None
    else:
        assert got.detail  # every non-strict reading says where it came from


@pytest.mark.parametrize(("response", "reason"), HOSTILE_CASES)
def test_hostile_strings_are_unparseable(response: str, reason: str) -> None:
    got = extract_answer(response, ABCD, SALLY)
    assert got.method == "unparseable"
    assert got.labels == ()
    assert not got.parsed
    assert got.detail is not None and reason in got.detail


@pytest.mark.parametrize(("response", "labels", "method"), ZH_CASES)
def test_single_select_chinese(response: str, labels: tuple[str, ...], method: str) -> None:
    got = extract_answer(response, ABCD, ZH_CHOICES)
    assert (got.labels, got.method) == (labels, method), got.detail


@pytest.mark.parametrize(("response", "reason"), ZH_HOSTILE)
def test_chinese_hostile_strings_are_unparseable(response: str, reason: str) -> None:
    got = extract_answer(response, ABCD, ZH_CHOICES)
    assert got.method == "unparseable"
    assert got.detail is not None and reason in got.detail


def test_chinese_fuzzy_option_text() -> None:
    got = extract_answer("安妮拿走了球", ABCD, ZH_CHOICES)
    assert (got.labels, got.method) == (("C",), "fuzzy")


@pytest.mark.parametrize(
    ("response", "labels", "method"),
    [
        ("[[A, C, F]]", ("A", "C", "F"), "strict"),
        ("[[F]] [[A]]", ("A", "F"), "strict"),
        ("Answer: B, D", ("B", "D"), "lenient"),
        ("A, C and F", ("A", "C", "F"), "lenient"),
        ("答案：A、E", ("A", "E"), "lenient"),
        ("I choose A and I think that is all", ("A",), "lenient"),  # "I" ends the list
        ("I", ("I",), "lenient"),
        ("Build rapport and show empathy.", ("A", "B"), "fuzzy"),
        ("Describe self needs.", ("F",), "fuzzy"),  # exactly one option's text
    ],
)
def test_multi_select_parses_to_a_set(response: str, labels: tuple[str, ...], method: str) -> None:
    got = extract_answer(response, LABELS_9, INTENTS, multi_select=True)
    assert (got.labels, got.method) == (labels, method), got.detail


@pytest.mark.parametrize("response", ["A or C", "[[A, J]]", "no idea"])
def test_multi_select_unparseable(response: str) -> None:
    assert extract_answer(response, LABELS_9, INTENTS, multi_select=True).method == "unparseable"


def test_several_letters_in_single_select_list_are_unparseable() -> None:
    got = extract_answer("[[A, C]]", ABCD, SALLY)
    assert got.method == "unparseable" and "several options" in (got.detail or "")


@pytest.mark.parametrize(
    ("response", "expected"),
    [("[[2]]", ("2",)), ("(3)", ("3",)), ("Answer: 4", ("4",)), ("答案：1", ("1",))],
)
def test_numbered_labels(response: str, expected: tuple[str, ...]) -> None:
    assert extract_answer(response, ["1", "2", "3", "4"], SALLY).labels == expected


def test_numbered_labels_reject_letters_and_out_of_range() -> None:
    labels = ["1", "2", "3", "4"]
    assert extract_answer("[[B]]", labels, SALLY).method == "unparseable"
    assert extract_answer("[[5]]", labels, SALLY).method == "unparseable"
    # A bare letter in a numbered item is no label at all (here: "I" the pronoun).
    assert extract_answer("I pick 3", labels, SALLY).labels == ("3",)


def test_lower_case_labels_up_to_sixteen_options() -> None:
    labels = list("abcdefghijklmnop")
    choices = [f"option text {i}" for i in range(16)]
    assert extract_answer("(p)", labels, choices).labels == ("p",)
    assert extract_answer("Answer: K", labels, choices).labels == ("k",)
    assert extract_answer("answer: a) option text 0", labels, choices).labels == ("a",)
    assert extract_answer("(q)", labels, choices).method == "unparseable"
    assert extract_answer("The answer is a bit odd", labels, choices).method == "unparseable"


@pytest.mark.parametrize(
    ("response", "choices", "expected"),
    [
        ("Yes, she does.", ["Yes", "No"], ("A",)),
        ("No.", ["Yes", "No"], ("B",)),
        ("False", ["True", "False"], ("B",)),
        ("是的，他说了不该说的话。", ["是", "否"], ("A",)),
        ("不是。", ["是", "否"], ("B",)),
        ("否", ["是", "否"], ("B",)),
        ("Answer: no", ["No", "Yes"], ("A",)),
    ],
)
def test_yes_no_items(response: str, choices: list[str], expected: tuple[str, ...]) -> None:
    got = extract_answer(response, ["A", "B"], choices)
    assert (got.labels, got.method) == (expected, "lenient"), got.detail


@pytest.mark.parametrize("response", ["对于这个问题，很难说。", "Yes. Answer: no"])
def test_yes_no_not_read_from_ordinary_words_or_both(response: str) -> None:
    assert extract_answer(response, ["A", "B"], ["是", "否"]).method == "unparseable"
    assert extract_answer(response, ["A", "B"], ["Yes", "No"]).method == "unparseable"


def test_fuzzy_threshold_above_100_disables_fuzzy() -> None:
    assert extract_answer("Anne takes the ball", ABCD, SALLY, fuzzy_threshold=101).method == (
        "unparseable"
    )
    # Verbatim option text is part of the fuzzy tier, so it is switched off too.
    got = extract_answer("I think Anne takes the ball.", ABCD, SALLY, fuzzy_threshold=101)
    assert got.method == "unparseable"


def test_bad_arguments_raise() -> None:
    with pytest.raises(ValueError, match="differ in length"):
        extract_answer("A", ABCD, SALLY[:2])
    with pytest.raises(ValueError, match="empty"):
        extract_answer("A", [], [])


# Options that differ in a single word: a fragment of the wrong one scores within the rapidfuzz
# margin, so repeating or quoting one option's full text must decide before rapidfuzz does.
PARTY = ["He wants to leave the party", "He wants to stay at the party"]
SAD = ["He is sad because he lost", "He is sad because he won"]
ZH_KEY = ["小明认为钥匙在抽屉里", "小明知道钥匙在抽屉里"]
NESTED = ["Tom", "Tom and Mary", "Mary"]

# (response, options, expected labels, detail fragment)
VERBATIM_CASES: list[tuple[str, list[str], tuple[str, ...], str]] = [
    # the whole response is one option's text (case, spacing, quotes, trailing punctuation)
    ("He wants to stay at the party.", PARTY, ("B",), "exactly"),
    ("he wants to LEAVE the party!", PARTY, ("A",), "exactly"),
    ("Sally looks in the basket", SALLY, ("A",), "exactly"),
    ("Sally looks in the basket.", SALLY, ("A",), "exactly"),
    ("  sally   looks in the BASKET!! ", SALLY, ("A",), "exactly"),
    ("**Sally looks in the basket**", SALLY, ("A",), "exactly"),
    ("\u201cSally looks in the basket.\u201d", SALLY, ("A",), "exactly"),
    ("He is sad because he lost.", SAD, ("A",), "exactly"),
    ("He is sad because he won", SAD, ("B",), "exactly"),
    ("Tom", NESTED, ("A",), "exactly"),
    # Chinese: full-width punctuation, and spaces between characters do not count
    ("小明认为钥匙在抽屉里。", ZH_KEY, ("A",), "exactly"),
    ("小明 知道 钥匙 在 抽屉 里", ZH_KEY, ("B",), "exactly"),
    ("小明知道钥匙在抽屉里！", ZH_KEY, ("B",), "exactly"),
    # one option's full text inside a longer answer
    ("Sally looks in the basket, not the box", SALLY, ("A",), "verbatim"),
    ("She thinks Sally looks in the basket, since she left it there.", SALLY, ("A",), "verbatim"),
    ("I guess he is sad because he lost, after all.", SAD, ("A",), "verbatim"),
    ("I would say Sally looks in the basket.", SALLY, ("A",), "verbatim"),
    ("Tom and Mary went home.", NESTED, ("B",), "verbatim"),  # "Tom" only inside the longer one
    ("我觉得小明知道钥匙在抽屉里，因为他看见了。", ZH_KEY, ("B",), "verbatim"),
]

# (response, options, fragment of the unparseable reason)
VERBATIM_UNPARSEABLE: list[tuple[str, list[str], str]] = [
    ("He wants to stay at the party or leave the party", PARTY, "hedged"),
    ("Either he wants to leave the party or he wants to stay at the party", PARTY, "hedged"),
    ("小明认为钥匙在抽屉里还是小明知道钥匙在抽屉里", ZH_KEY, "hedged"),
    ("Not he wants to leave the party", PARTY, "no option"),  # negated, nothing else
    ("不是小明知道钥匙在抽屉里", ZH_KEY, "no option"),
]


@pytest.mark.parametrize(("response", "choices", "labels", "detail"), VERBATIM_CASES)
def test_verbatim_option_text_wins_over_near_miss_options(
    response: str, choices: list[str], labels: tuple[str, ...], detail: str
) -> None:
    got = extract_answer(response, ABCD[: len(choices)], choices)
    assert (got.labels, got.method) == (labels, "fuzzy"), got.detail
    assert detail in (got.detail or "")


@pytest.mark.parametrize(("response", "choices", "reason"), VERBATIM_UNPARSEABLE)
def test_verbatim_option_text_negated_or_hedged_is_not_read(
    response: str, choices: list[str], reason: str
) -> None:
    got = extract_answer(response, ABCD[: len(choices)], choices)
    assert got.method == "unparseable", got
    assert reason in (got.detail or "")
