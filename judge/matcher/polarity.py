"""Polarity evidence for the embedded matcher: negations and antonyms that flip a point.

A sentence encoder places "Dantès wants to forgive those who betrayed him" next to "Dantès wants
revenge on those who betrayed him" (cosine 0.90 with the packaged MiniLM encoder, far above a
true paraphrase such as "he is determined to make the men who betrayed him pay", 0.57): the
words are shared and the one that matters is a small part of the vector. So the matcher looks
for two cues of opposite meaning between a point and the response clause that matches it best:

* a negation present in one and not in the other (English: not, n't, no, never, ...; Chinese:
  不, 没, 没有, 未, 别, 无, 非, ... outside words where they do not negate, such as 非常 "very",
  未来 "future", 别人 "others");
* a word of the point whose antonym stands in the clause while the word itself does not
  (forgive / revenge, proud / ashamed, 原谅 / 复仇, 骄傲 / 羞愧), from a small embedded lexicon of
  pairs and of opposite emotion poles, and, for English, WordNet's antonyms of common words
  (:mod:`judge.matcher.lexicon`; no download at run time).

Both together cancel when the negation falls on the pair's word ("does not trust" against
"distrusts" is no flip), not when it falls on another ("suspects he killed" against "trusts he
did not kill"). A negation only the point has counts when the clause states the negated word
plainly ("has no remorse" against "regrets", 毫无悔意 against 非常后悔). The result is a
feature of the point (:func:`polarity_flip`); it is lexical, so it misses opposites worded
otherwise ("gave up on killing the whale") and can fire on a paraphrase that says the same
thing through a negation ("never stops loving him" for "still loves him"): the matcher is weak
where meaning turns on negation, and its rationale names the cue it saw.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

import numpy as np

from core.text import count_words, normalize
from judge.matcher.lexicon import base_forms, opposed
from judge.matcher.text import (
    fuzzy_recall,
    is_content,
    split_clauses,
    split_sentences,
    word_tokens,
)

__all__ = [
    "POLARITY_MAX_WORDS",
    "PolarityCue",
    "negated_words",
    "negation_count",
    "polarity_flip",
    "response_polarity",
]

# English negation cues, as whole words (after case folding; "n't" is matched separately).
_EN_NEGATIONS = frozenset(
    [
        "not",
        "no",
        "never",
        "nor",
        "neither",
        "none",
        "nobody",
        "nothing",
        "nowhere",
        "cannot",
        "without",
        "hardly",
        "barely",
        "scarcely",
    ]
)
# Phrases with a cue word that do not negate the statement: removed before counting.
_EN_NOT_NEGATING = re.compile(
    r"\b(?:not only|not just|not merely|no doubt|no matter|nothing but|never mind|"
    r"no sooner|can(?:no|')t help|couldn't help|not least|"
    # Negated idioms that mean one thing: "cannot stand him" is "dislikes him".
    r"(?:can(?:no|')t|could(?:n't| not)|not) (?:stand|bear|wait))\b"
)
_NOT_A_CUE = re.compile(
    r"\bno\.\s*\d|^\s*(?:yes|no)\b(?:\s*[,.!;:]+|\s+(?=(?:he|she|it|they|i|we|you|there|"
    r"the|this|that|his|her|its|their)\b))"
)
# Tokenised text writes "doesn 't", "can 't" and "does n't".
_SPACED_NT = re.compile(r"\s?n\s+'\s?t\b|n'\s+t\b|(?<=\w)\s+n't\b")
# Verbs that negate the clause they govern: "refuses to sacrifice himself", "failed to warn
# her". ("Gives up" is left out: "gives up his life for her" is the sacrifice, not its negation.)
_EN_NEGATING_VERBS = re.compile(
    r"\b(?:refus(?:e|es|ed|ing)|fail(?:s|ed|ing)?|declin(?:e|es|ed|ing)) to\b"
)
_EN_NT = re.compile(
    r"\b\w+n't\b|\b(?:can|won|don|doesn|didn|isn|aren|wasn|weren|hasn|haven|"
    r"hadn|wouldn|shouldn|couldn|mustn|needn|ain)t\b"
)
# Chinese negation characters and words; matched after removing the words that contain one of
# them without negating (非常 "very", 未来 "future", 别人 "others", 不过 "but", ...).
_ZH_NEGATIONS = ("没有", "没", "不", "未", "别", "无", "非", "莫", "勿", "毫无", "并非")
_ZH_NOT_NEGATING = (
    "非常", "并非", "未来", "未必", "别人", "别的", "特别", "分别", "区别", "告别", "离别", "个别",
    "级别", "类别", "性别", "差别", "识别", "辨别", "鉴别", "不过", "不仅", "不但", "不管", "不论",
    "无论", "不断", "不久", "不少", "差不多", "了不起", "对不起", "不得不", "不禁", "不由得",
    "不一定",
    "不然", "要不", "不免", "无比", "无数", "无限", "莫名", "莫非", "是非", "除非", "非得",
    "无非", "不停", "不住", "忍不住", "不知不觉", "不约而同", "毫不犹豫", "看不起", "瞧不起",
    "恨不得", "不得了", "无聊", "无辜", "无奈", "淹没", "没收",
)  # fmt: skip
# 并非 is a negation (counted once as 非 would be), 毫无 likewise through 无: they stay cues.
_ZH_KEEP = frozenset({"并非"})

# Antonym pairs: two sides whose words oppose each other (the words of a side need not be
# synonyms: "leave" and "return" both oppose "stay"). English words match whole words; a word
# ending in "*" is a stem and matches any word it starts ("forgiv*" finds forgive, forgiving,
# forgiveness); phrases match as phrases. Chinese words match as substrings. Words that carry a
# negation themselves (不信, 不满, 无悔) are left out: the negation cue already counts them, and
# counting both would cancel the flip.
_EN_PAIRS: tuple[tuple[str, str], ...] = (
    ("forgiv* forgave pardon*", "reveng* aveng* vengeance retaliat* punish*"),
    ("love loved loves loving adore*", "hate hated hates hating hatred loath* detest*"),
    ("likes liked fond", "dislike dislikes disliked"),
    ("admir* respect respects respected esteem*", "despis* scorn* contempt* disrespect* disdain*"),
    ("trust trusts trusted trusting", "distrust* mistrust* suspect suspects suspected suspicio*"),
    (
        "accept* agree agrees agreed consent*",
        "refus* reject* declin* turn down turns down turned down",
    ),
    (
        "stay stays stayed remain remains remained",
        "leave leaves left flee flees fled depart* abandon* return* go back goes back went back",
    ),
    ("proud pride", "asham* shame shamed humiliat* embarrass* humble"),
    ("arrogant* haughty conceited", "humble modest*"),
    ("generous generosity", "stingy miserly greed*"),
    ("brave* courag* bold", "coward* timid"),
    ("honest honesty truthful sincer*", "dishonest* lie lies lied lying liar deceit*"),
    ("innocent innocence", "guilty guilt"),
    ("alive survive survived survives", "dead died dies killed murdered"),
    (
        "happy happiness glad joy joyful cheerful delighted pleased",
        "unhappy sad sadness miserable heartbroken devastated depressed grief grieving "
        "horrified terrified disgusted",
    ),
    ("admirable respectable", "ridiculous absurd contemptible"),
    ("calm* relaxed serene", "anxious anxiety nervous agitated furious angry anger"),
    ("grateful gratitude thankful", "ungrateful resent* bitter*"),
    ("hope hopes hoped hopeful", "despair* hopeless*"),
    ("relieved relief", "worried worry worries distressed"),
    ("win wins won victory victorious triumph*", "lose loses lost defeat*"),
    ("succeed* success*", "fail failed fails failure"),
    ("remember* recall*", "forget forgets forgot forgotten"),
    ("believe believes believed", "doubt* disbeliev*"),
    ("kindness gentle", "cruel cruelty harsh*"),
    ("obey* submit* compl*", "disobey* defy defies defied rebel*"),
    ("praise praised praises", "criticiz* criticis* blame blamed blames scold*"),
    ("help helps helped protect*", "harm harms harmed hurt hurts betray*"),
    ("reveal* confess* admit*", "conceal* hide hides hid hidden deny denies denied"),
    ("friend friends ally allies", "enemy enemies foe foes"),
    ("rich wealthy", "poor poverty"),
    ("strong strength", "weak weakness"),
    ("true", "false"),
    ("wise clever", "foolish stupid"),
    ("same", "different"),
    ("approv*", "disapprov*"),
    ("marr* wed wedding", "divorc*"),
    ("confident confidence", "insecur*"),
)  # fmt: skip
_ZH_PAIRS: tuple[tuple[str, str], ...] = (
    ("原谅 宽恕 饶恕", "复仇 报复 报仇 惩罚"),
    ("爱 喜欢 喜爱 热爱", "恨 讨厌 厌恶 憎恨 痛恨"),
    ("尊重 敬重 钦佩 敬佩 尊敬", "歧视 轻视 鄙视 看不起 瞧不起 蔑视"),
    ("相信 信任 信赖", "怀疑 猜疑"),
    ("接受 答应 同意 顺从 服从", "拒绝 反对 反抗 违抗"),
    ("留下 留在 待在", "离开 逃离 逃走 出走 回到 回去"),
    ("骄傲 自豪 得意", "羞愧 羞辱 丢脸 惭愧 耻辱 难堪"),
    ("傲慢 自大 狂妄", "谦虚 谦逊"),
    ("慷慨 大方", "吝啬 小气"),
    ("勇敢", "胆小 懦弱"),
    ("诚实", "撒谎 说谎 欺骗"),
    ("高兴 开心 快乐 愉快 喜悦 痛快", "难过 伤心 悲伤 痛苦 悲痛 委屈"),
    ("平静 冷静 镇定", "愤怒 生气 恼怒"),
    ("感激 感谢 感恩", "怨恨 埋怨 抱怨"),
    ("希望 盼望", "绝望"),
    ("放心 安心", "担心 焦虑 忧虑"),
    ("胜利 赢 成功", "失败 输"),
    ("记得 记住", "忘记 忘了"),
    ("关心 关怀 照顾 体贴", "冷落 冷漠 漠视 忽视"),
    ("帮助 保护", "伤害 陷害 背叛"),
    ("承认 坦白", "否认 隐瞒 辩解"),
    ("善良", "恶毒 邪恶 狠毒"),
    ("聪明 明智", "愚蠢 糊涂"),
    ("富有 富裕", "贫穷 穷困"),
    ("坚持 继续", "放弃 散伙"),
    ("得到 获得", "失去"),
    ("严明 严格", "放松 松懈"),
    ("后悔 悔恨 内疚 愧疚", "心安理得"),
)  # fmt: skip


@dataclass(frozen=True)
class PolarityCue:
    """Why a point and a response clause were found to say opposite things.

    Attributes:
        flipped: Whether the clause says the opposite of the point by these cues (a negation
            on one side only, or an antonym, but not both on the same word).
        negation: Where a negation stands on one side only (``"point"`` or ``"response"``), or
            None when both sides agree.
        antonym: ``"point word / response word"`` of an antonym pair found, or None.
        restated: For a negation the point alone has, whether the clause states the negated
            word plainly ("has no remorse" against "regrets it"): then the clause asserts what
            the point denies.
    """

    flipped: bool
    negation: Literal["point", "response"] | None
    antonym: str | None
    restated: bool = False

    @property
    def contradicts(self) -> bool:
        """Whether the matcher acts on the cue.

        It acts on an antonym, a negation the response adds, or a negation the point alone
        has on a word the response states.

        A negation only the point has is otherwise too often a paraphrase in the shared
        human-rated sets (the response says it in another clause, or in other words: "should
        not be increased" against "do not take a double dose"): acting on it would cost as
        many answers people judged covered as it would catch (75 against 66 rows). With the
        negated word restated it was on 10 rows, 5 judged not covered ("do not heal" against
        "often heal"), where the sets judge a third of the answers not covered; a net zero on
        those sets, kept because it is the CharToM opposite "has no remorse" / "regrets". An
        added negation or an antonym was on 168 rows judged not covered against 115 covered.
        """
        return self.flipped and (self.negation != "point" or self.restated)

    def describe(self) -> str:
        """One phrase naming the cue(s), for the matcher's rationale."""
        parts = []
        if self.negation is not None:
            restated = ", its word stated in the response" if self.restated else ""
            parts.append(f"negation in the {self.negation} only{restated}")
        if self.antonym is not None:
            parts.append(f"antonym {self.antonym}")
        return "; ".join(parts)


def _is_cjk_text(text: str) -> bool:
    """Whether the text holds CJK ideographs (then Chinese cues and substrings are used)."""
    return re.search(r"[\u3400-\u9fff]", text) is not None


# One pattern for every English cue, so that each is found once and where it stands: "n't"
# forms, the negating verbs, then the negation words (no word matches two alternatives).
_EN_CUE = re.compile(
    rf"{_EN_NT.pattern}|{_EN_NEGATING_VERBS.pattern}|\b(?:{'|'.join(sorted(_EN_NEGATIONS))})\b"
)
# Longest cue first, so that 没有 is one cue and not 没 and again 有.
_ZH_CUE = re.compile("|".join(sorted(_ZH_NEGATIONS, key=len, reverse=True)))
# Characters skipped after a Chinese cue to reach the word it negates: the copula, modals and
# aspect words (不是凶手, 没有再见, 不敢说).
_ZH_BEFORE_WORD = frozenset("是会能要想敢再太很愿肯得了曾被把对在过都也还就去来")
_ZH_SPAN = re.compile(r"[\u3400-\u9fff]+")


def _prepared(text: str) -> str:
    """The text as the cues are read: case folded, "n't" rejoined, non-negating uses removed."""
    lowered = normalize(text).replace("\u2019", "'")
    # "No. 1" is a number; a leading "yes"/"no" answers the question rather than negating the
    # clause ("no, he is the only one in the video" states that he is the only one).
    lowered = _NOT_A_CUE.sub(" ", lowered)
    # Tokenised text splits contractions (see _SPACED_NT): join them back.
    return _SPACED_NT.sub("n't", lowered)


def negated_words(text: str) -> list[str]:
    """What each negation cue of a text negates: one entry per cue, in order.

    English: the first content word within three words after the cue ("is not afraid of" ->
    "afraid", "refuses to marry" -> "marry"), or ``""`` when there is none. Chinese: the two
    characters after the cue, past the copula, modals and aspect words (毫无悔意 -> 悔意,
    不是凶手 -> 凶手). Phrases with a cue word that do not negate (not only, 非常, 别人) are not
    cues.

    Args:
        text: Any text.

    Returns:
        The negated words; the list's length is the number of cues.
    """
    lowered = _prepared(text)
    found: list[str] = []
    if _is_cjk_text(lowered):
        rest = lowered
        for word in _ZH_NOT_NEGATING:
            if word not in _ZH_KEEP:
                rest = rest.replace(word, " ")
        for match in _ZH_CUE.finditer(rest):
            after = _ZH_SPAN.match(rest, match.end())
            span = after.group() if after else ""
            found.append(span.lstrip("".join(_ZH_BEFORE_WORD))[:2])
    rest = _EN_NOT_NEGATING.sub(" ", lowered)
    for match in _EN_CUE.finditer(rest):
        following = re.findall(r"[a-z]+", rest[match.end() :])[:3]
        found.append(next((w for w in following if is_content(w) and w not in _EN_NEGATIONS), ""))
    return found


def negation_count(text: str) -> int:
    """Count the negation cues of a text (English words and "n't"; Chinese characters/words).

    Args:
        text: Any text.

    Returns:
        The number of cues found (phrases such as "not only", 非常 and 别人 excluded).
    """
    return len(negated_words(text))


@lru_cache(maxsize=1)
def _lexicon() -> tuple[
    tuple[tuple[tuple[str, ...], tuple[str, ...]], ...],
    tuple[tuple[tuple[str, ...], tuple[str, ...]], ...],
]:
    """The antonym pairs as word tuples: (English pairs, Chinese pairs)."""
    english = tuple((tuple(a.split()), tuple(b.split())) for a, b in _EN_PAIRS)
    chinese = tuple((tuple(a.split()), tuple(b.split())) for a, b in _ZH_PAIRS)
    return english, chinese


def _en_words(text: str) -> list[str]:
    return re.findall(r"[a-z]+", normalize(text).replace("\u2019", "'"))


def _en_find(words: Iterable[str], text_words: list[str], joined: str) -> str | None:
    """The first word of ``text_words`` (or phrase of ``joined``) that one of ``words`` names."""
    for word in words:
        if " " in word:
            if f" {word} " in joined:
                return word
        elif word.endswith("*"):
            stem = word[:-1]
            found = next((t for t in text_words if t.startswith(stem)), None)
            if found is not None:
                return found
        elif word in text_words:
            return word
    return None


def _antonym(point: str, clause: str) -> tuple[str, str] | None:
    """``(a, b)`` when the point has a word ``a``, the clause its antonym ``b`` and not ``a``."""
    english, chinese = _lexicon()
    if _is_cjk_text(point) or _is_cjk_text(clause):
        for left, right in chinese:
            for a_side, b_side in ((left, right), (right, left)):
                a = next((w for w in a_side if w in point), None)
                if a is None or any(w in clause for w in a_side):
                    continue
                b = next((w for w in b_side if w in clause and w not in point), None)
                if b is not None:
                    return a, b
        return None
    point_words, clause_words = _en_words(point), _en_words(clause)
    point_joined, clause_joined = f" {' '.join(point_words)} ", f" {' '.join(clause_words)} "
    for left, right in english:
        for a_side, b_side in ((left, right), (right, left)):
            a = _en_find(a_side, point_words, point_joined)
            if a is None or _en_find(a_side, clause_words, clause_joined) is not None:
                continue
            b = _en_find(b_side, clause_words, clause_joined)
            if b is not None and _en_find(b_side, point_words, point_joined) is None:
                return a, b
    return _wordnet_antonym(point_words, clause_words)


# Words WordNet lists with antonyms for a sense other than the one they mostly carry in a
# sentence: "like" the preposition (dislike / like), "left" the past of leave (right / left),
# "still" and "even" the adverbs, "well" the discourse word, "back" the direction.
_NOT_WORDNET_ANTONYMS = frozenset({"like", "well", "right", "left", "still", "even", "back"})


def _wordnet_antonym(point_words: list[str], clause_words: list[str]) -> tuple[str, str] | None:
    """``(a, b)``: a point word whose WordNet antonym stands in the clause, neither on both sides.

    Base forms count (:func:`judge.matcher.lexicon.base_forms`): "refuses" in the point and
    "accepted" in the clause are a pair, and a word present on both sides is no flip.
    """
    point_bases = {b for w in point_words for b in (*base_forms(w), w)}
    clause_bases = {b for w in clause_words for b in (*base_forms(w), w)}
    point_content = [
        w for w in dict.fromkeys(point_words) if is_content(w) and w not in _NOT_WORDNET_ANTONYMS
    ]
    clause_content = [
        w for w in dict.fromkeys(clause_words) if is_content(w) and w not in _NOT_WORDNET_ANTONYMS
    ]
    for a in point_content:
        if clause_bases.intersection((*base_forms(a), a)):
            continue
        for b in clause_content:
            if point_bases.intersection((*base_forms(b), b)):
                continue
            if opposed(a, b):
                return a, b
    return None


# Light suffixes two Chinese words may share without sharing a meaning (意 of 悔意 and 同意,
# 心 of 伤心 and 小心); function characters are not content (:func:`is_content`) either.
_ZH_LIGHT = frozenset("意心性感度得到有会能要想人子地过去来上下")


def _same_word(a: str, b: str) -> bool:
    """Whether two words are one word: equal, a common base form, or the same 5-letter stem.

    Chinese: a character they share other than function characters and light suffixes (悔意
    and 后悔 share 悔).
    """
    if not a or not b:
        return False
    if _is_cjk_text(a) or _is_cjk_text(b):
        return any(ch in b for ch in a if is_content(ch) and ch not in _ZH_LIGHT)
    if {a, *base_forms(a)} & {b, *base_forms(b)}:
        return True
    return len(a) >= 5 and len(b) >= 5 and a[:5] == b[:5]


def _words_of(text: str) -> list[str]:
    """The words of a text as :func:`_same_word` compares them (Chinese: the text itself)."""
    return [text] if _is_cjk_text(text) else _en_words(text)


def polarity_flip(point: str, clause: str) -> PolarityCue:
    """Whether ``clause`` says the opposite of ``point``, by negation and antonym cues.

    The negation cue is a negation on one side only (any number of cues counts as one);
    the antonym cue a word of the point whose antonym, and not the word, is in the clause. One
    of the two flips the meaning. Both together cancel when the negation falls on the antonym
    ("does not trust" vs "distrusts"); when it falls on another word they are two statements,
    and the negation stands ("suspects he killed" vs "believes he did not kill": 怀疑 and 相信
    are a pair, but the negation is on the killing). A negation the point alone has is marked
    ``restated`` when the clause states its word plainly ("no remorse" vs "regrets", 毫无悔意 vs
    非常后悔).

    Args:
        point: The bonus point.
        clause: The response clause that matches the point best.

    Returns:
        The cue, with ``flipped`` and what was seen.
    """
    # Presence, not parity: "no, there is no one else" negates once, however many cues it has.
    point_negated, clause_negated = negated_words(point), negated_words(clause)
    negation: Literal["point", "response"] | None = None
    if bool(point_negated) != bool(clause_negated):
        negation = "point" if point_negated else "response"
    pair = _antonym(point, clause)
    antonym = f"{pair[0]} / {pair[1]}" if pair else None
    if negation is None or pair is None:
        flipped = (negation is None) != (pair is None)
    else:
        negated = point_negated if negation == "point" else clause_negated
        on_pair = pair[0] if negation == "point" else pair[1]
        # An unknown negated word (a cue at the end) keeps the old rule: the two cancel.
        flipped = all(word for word in negated) and not any(
            _same_word(word, on_pair) for word in negated
        )
    restated = (
        flipped
        and negation == "point"
        and pair is None
        and any(_same_word(w, c) for w in point_negated for c in _words_of(clause) if w)
    )
    return PolarityCue(flipped, negation, antonym, restated)


POLARITY_MAX_WORDS = 25
"""Points of 3 to this many words, in one sentence, are checked for polarity (one statement)."""

_POLARITY_MARGIN = 0.1
"""Clauses within this much content-word recall of the best are read for polarity cues."""


def response_polarity(point: str, sentences: Sequence[str]) -> PolarityCue | None:
    """The polarity cue between a point and the response clauses that state it, or None.

    Only a point of one sentence of 3 to :data:`POLARITY_MAX_WORDS` words is checked: a point
    of one or two words is a name or a value ("Richard Noble", "1865"), with no statement to
    negate, and a "not" near it is about something else ("in 1983, not 1990"). The clauses
    holding most of the point's content words (within :data:`_POLARITY_MARGIN` of the best, at
    most three) are all read, and the point counts as flipped only when every one of them flips
    it: the best clause is often a neighbour of the one that states the point, and a flip read
    there would be a false alarm. Lexical only (no encoder text is added): the clause choice
    and the cues are the same for English and Chinese.

    Args:
        point: The bonus point.
        sentences: The response's sentences (:func:`split_sentences`).

    Returns:
        The cue (``flipped`` False when the near-best clauses disagree), or None when the point
        is not checked or the response is empty.
    """
    one_sentence = len(split_sentences(point) or [point]) == 1
    if not one_sentence or not 3 <= count_words(point) <= POLARITY_MAX_WORDS:
        return None
    clauses = [clause for sentence in sentences for clause in split_clauses(sentence)]
    if not clauses:
        return None
    point_tokens = word_tokens(point)
    content = [t for t in point_tokens if is_content(t)] or point_tokens
    recalls = np.array([fuzzy_recall(content, word_tokens(c)) for c in clauses])
    order = np.argsort(-recalls, kind="stable")
    near = [int(i) for i in order[:3] if recalls[i] >= recalls[order[0]] - _POLARITY_MARGIN]
    cues = [polarity_flip(point, clauses[i]) for i in near]
    if all(cue.flipped for cue in cues):
        return cues[0]
    return PolarityCue(False, None, None)
