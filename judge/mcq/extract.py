r"""Read the chosen option(s) from a model's free-text answer to a multiple-choice question.

Pure functions, no I/O. The rules run in tiers and the first tier that finds anything decides:

1. **strict**: ``[[X]]``, the format ToMBench and CogToM ask for. The text is NFKC-normalised first,
   so the full-width ``［［Ａ］］`` is the same string. ``[[b]]`` with labels A-D, or ``[[2]]`` read
   as the second option, is still this tier but is flagged ``lenient``.
2. **marked** (lenient): a label after an answer marker: "Answer: B", "The answer is (B)",
   "I choose B", "答案：B", "答案是B", "我选B", ``\\boxed{B}``.
3. **form** (lenient): a response that starts with a label ("B.", "(B)", "B) ..."), is only a label
   or a label list ("A, C, F"), a bracketed label anywhere ("(b)"), or "option B" / "选项B".
4. **yes/no** (lenient): two-option items whose options are yes/no, true/false, 是/否, 对/错.
5. **fuzzy** (option text): a response that *is* one option's text (compared after normalising
   case, width, whitespace, curly quotes and trailing punctuation; spaces next to Chinese
   characters are dropped) is that option; a single-select response that *contains* exactly one
   option's full text verbatim (not negated, not only as part of a longer option's text) picks
   it, and one that puts "or"/"或"/"还是" next to an option's text is hedged, so unparseable.
   Only then rapidfuzz: the text of exactly one option found in the response (score at or above
   the threshold and clearly ahead of the runner-up). Verbatim text goes first because ToM
   options often differ in one word ("looks in the basket" / "looks in the box"), where a
   fragment of the wrong option still scores within the margin.

Within a tier, a label after a *final-answer* marker ("Final answer: B", "最终答案") wins over the
tier's other mentions, because the model itself said which one is final. Otherwise several
different labels, a label that is not an option ("[[E]]" with four options), or a hedge ("A or B")
make the answer ``unparseable``: its own outcome, never a guess, and the next tier is not tried.

Decided for the hostile case "I think A... actually B": **unparseable**. Neither letter is in a
form the rules accept ("I think" is no answer marker, and bare capitals in running text are not
read), and a later revision ("actually", "wait", "其实", "改为") naming a different label vetoes an
earlier accepted reading, so "Answer: A... actually B" is unparseable too. A strict ``[[B]]`` after
thinking aloud is accepted (ToMBench's chain-of-thought prompt asks for exactly that), unless a
revision after it names another label. Negated mentions ("not A", "不是A", "不选A") are dropped.

Letters that are also English words ("a", "A", "I") are read unbracketed only when punctuation or a
connective ("because", "is", ...) follows, so "The answer is a bit unclear" reads nothing; one
that starts the response and is not among the labels ("I would say ..." with options A-D) is the
word, not a bad label.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from rapidfuzz import fuzz

from bonusjudge_client.wire.mcq import ExtractionMethod
from bonusjudge_client.wire.mcq_defaults import DEFAULT_FUZZY_MARGIN, DEFAULT_FUZZY_THRESHOLD
from core.text import is_cjk, normalize

__all__ = [
    "DEFAULT_FUZZY_MARGIN",
    "DEFAULT_FUZZY_THRESHOLD",
    "Extraction",
    "extract_answer",
]

@dataclass(frozen=True)
class Extraction:
    """What was read from one response.

    Attributes:
        labels: The label(s) named, as displayed to the model, in label order; empty when
            unparseable.
        method: How they were read.
        detail: Why the answer is unparseable, or which form a non-strict reading came from.
    """

    labels: tuple[str, ...]
    method: ExtractionMethod
    detail: str | None = None

    @property
    def parsed(self) -> bool:
        """Whether a reading was made (``method`` is not ``unparseable``)."""
        return self.method != "unparseable"


Tier = Literal["strict", "marked", "form"]

# Emphasis marks are stripped so "**B**" and "`[[B]]`" read like their plain forms.
_MARKDOWN = str.maketrans("", "", "*`")
# Lenticular and tortoise-shell brackets are what Chinese answers use instead of [ ]; NFKC leaves
# them alone, so they are mapped by hand (one character each, positions unchanged).
_CJK_BRACKETS = str.maketrans("【】〖〗〔〕", "[][][]")

_TOKEN = r"[A-Za-z]|\d{1,2}"
_TOKEN_AT = re.compile(
    rf"\s*(?P<open>[(\[{{]\s*)?(?<![A-Za-z0-9])(?P<tok>{_TOKEN})(?![A-Za-z0-9'])"
    r"(?P<close>\s*[)\]}])?"
)
_SEP_AT = re.compile(
    r"\s*(?P<sep>,|、|/|;|&|\band\b|\bor\b|以及|和|与|及|或者|或|还是)\s*", re.IGNORECASE
)
_DISJUNCTIVE = {"or", "或者", "或", "还是"}

_STRICT = re.compile(r"\[\[\s*([^\[\]\n]{1,60}?)\s*\]\]")
_MARKER = re.compile(
    r"(?:"
    r"\b(?:(?P<final>final)\s+)?(?:correct\s+)?answers?"
    r"(?:\s+(?:is|would\s+be|should\s+be|will\s+be|must\s+be))?"
    r"|\bI(?:'d|\s+would|\s+will|\s+shall)?\s+(?:choose|pick|select|go\s+with)"
    r"|\bmy\s+(?:(?P<final2>final)\s+)?(?:answer|choice|pick|selection)(?:\s+is)?"
    r"|\bcorrect\s+(?:option|choice)(?:\s+is)?"
    r"|(?P<final_zh>最终|最后)?(?:正确)?答案(?:应该|应当|应|就)?(?:是|为)?"
    r"|我?(?:选择|选)了?"
    r"|\\boxed"
    r")"
    r"\s*(?:[:=\-—]|is\b)?\s*(?:(?:option|choice|letter|选项)\s*)?",
    re.IGNORECASE,
)
_FINAL_BEFORE = re.compile(
    r"(?:final\s+answer|my\s+final|最终答案|最终选择|最后答案)[^\n]{0,20}$", re.IGNORECASE
)
_OPTION_MENTION = re.compile(r"(?:\b(?:options?|choices?)\s+|选项\s*)", re.IGNORECASE)
_LEADING = re.compile(r"\s*(?:(?:option|choice|选项)\s*)?", re.IGNORECASE)
_STANDALONE = re.compile(rf"(?<![A-Za-z0-9])({_TOKEN})(?![A-Za-z0-9'])")
_BRACKETED = re.compile(rf"(?<![A-Za-z0-9\\])[(\[{{]\s*(?:{_TOKEN})\s*[)\]}}]")
_NEGATION_BEFORE = re.compile(
    r"(?:\bnot|n't|\bnever|\bexcept|\brather\s+than|\binstead\s+of|不是|不选|不应该?是|并非|而非|"
    r"排除|除了)\s*(?:the\s+)?(?:(?:option|choice|answer)\s*|选项\s*)?[(\[{]?\s*$",
    re.IGNORECASE,
)
_REVISION = re.compile(
    r"\b(?:actually|wait|on\s+second\s+thought|correction|rather|instead)\b|其实|不对|更正|改为|改选",
    re.IGNORECASE,
)
_CONNECTIVES = frozenset(
    {
        "because",
        "since",
        "as",
        "is",
        "was",
        "seems",
        "would",
        "should",
        "fits",
        "best",
        "matches",
        "and",
        "but",
        "so",
    }
)
# Letters that double as English words; read unbracketed only when no ordinary word follows.
_AMBIGUOUS = frozenset({"a", "A", "I", "i"})

# Option-text comparison: curly quotes as straight ones, and what may end (or open) a sentence
# without changing which option it repeats.
_QUOTES = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"'})
_TRAILING = " \t\n.。!?;,:、…\"'「」『』"
_LEADING_QUOTES = " \t\n\"'「『"
_HEDGE_AFTER = re.compile(r"[\s,、]*(?:\bor\b|或者|或|还是)", re.IGNORECASE)
_HEDGE_BEFORE = re.compile(r"(?:\bor|\beither|或者|或|还是)[\s,、]*$", re.IGNORECASE)

# Option texts that make a yes/no item, and the words that answer one. "Correct"/"right" are
# option words only: as the first word of an answer they usually start "Correct answer is ...".
_YES_OPTIONS = frozenset({"yes", "true", "correct", "right"})
_NO_OPTIONS = frozenset({"no", "false", "incorrect", "wrong"})
_YES_EN = frozenset({"yes", "true"})
_NO_EN = frozenset({"no", "false"})
# Longest first, negatives before positives: "不是" starts with "不", "不正确" contains "正确".
_IDEOGRAPH = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff]")
_NO_ZH = ("不正确", "不是", "不对", "错误", "否", "错")
_YES_ZH = ("是的", "正确", "是", "对")


@dataclass(frozen=True)
class _Token:
    text: str
    start: int
    end: int
    bracketed: bool


@dataclass(frozen=True)
class _Scan:
    tokens: tuple[_Token, ...]
    end: int
    disjunctive: bool


@dataclass(frozen=True)
class _Candidate:
    label: str | None  # None: the token names no option (out of range)
    raw: str
    exact: bool  # label written exactly as displayed (strict needs this)
    final: bool
    start: int
    form: str
    snippet: str
    disjunctive: bool = False
    note: str | None = None


def _candidate(
    token: _Token,
    scan: _Scan,
    resolved: tuple[str | None, bool, str | None],
    *,
    final: bool,
    start: int,
    form: str,
    snippet: str,
) -> _Candidate:
    """The candidate that `token` of `scan` names, `resolved` as (label, exact, note)."""
    label, exact, note = resolved
    return _Candidate(
        label=label,
        raw=token.text,
        exact=exact,
        final=final,
        start=start,
        form=form,
        snippet=snippet,
        disjunctive=scan.disjunctive,
        note=note,
    )


class _LabelSet:
    """Resolves a written token (letter or number) to one of the displayed labels."""

    def __init__(self, labels: Sequence[str]) -> None:
        self.labels = list(labels)
        self.digits = self.labels[0].isdigit()
        self.by_fold = {label.casefold(): label for label in self.labels}

    def describe(self) -> str:
        return ", ".join(self.labels)

    def resolve(self, token: str) -> tuple[str | None, bool, str | None] | None:
        """Return (label or None if out of range, exact, note); None if the token is foreign.

        A letter in a numbered item is foreign (ignored outside the strict tier), as is a
        "number" with a leading zero.
        """
        if token.isdigit():
            if self.digits:
                return (token if token in self.labels else None), True, None
            position = int(token)
            if 1 <= position <= len(self.labels):
                label = self.labels[position - 1]
                return label, False, f"number {token} read as option {label}"
            return None, False, None
        if self.digits:
            return None
        if token in self.labels:
            return token, True, None
        return self.by_fold.get(token.casefold()), False, None


def _followed_by_word(text: str, end: int) -> bool:
    """Whether an ordinary English word (not a connective) follows position ``end``."""
    match = re.match(r"[ \t]+([A-Za-z][A-Za-z']*)", text[end:])
    return bool(match) and match.group(1).lower() not in _CONNECTIVES  # type: ignore[union-attr]


def _scan_list(text: str, pos: int) -> _Scan | None:
    """Read a label or a list of labels ("A", "(B)", "A, C and F", "A or B") at ``pos``."""
    match = _TOKEN_AT.match(text, pos)
    if match is None:
        return None
    tokens = [_token_from(match)]
    end = match.end()
    disjunctive = False
    while True:
        sep = _SEP_AT.match(text, end)
        if sep is None:
            break
        nxt = _TOKEN_AT.match(text, sep.end())
        if nxt is None:
            break
        token = _token_from(nxt)
        # "A and I think..." : the pronoun ends the list rather than joining it.
        if not token.bracketed and token.text in _AMBIGUOUS and _followed_by_word(text, nxt.end()):
            break
        tokens.append(token)
        disjunctive = disjunctive or sep.group("sep").lower() in _DISJUNCTIVE
        end = nxt.end()
    return _Scan(tuple(tokens), end, disjunctive)


def _token_from(match: re.Match[str]) -> _Token:
    # "(B", "B)" and "(B)" all mark a label; only the bare letter needs its context checked.
    bracketed = bool(match.group("open")) or bool(match.group("close"))
    return _Token(match.group("tok"), match.start("tok"), match.end(), bracketed)


def _negated(text: str, start: int) -> bool:
    return bool(_NEGATION_BEFORE.search(text[max(0, start - 24) : start]))


def _is_final(text: str, start: int) -> bool:
    return bool(_FINAL_BEFORE.search(text[max(0, start - 40) : start]))


def _snippet(text: str, start: int, end: int) -> str:
    return " ".join(text[start:end].split())[:60]


class _Reader:
    """Collects candidates tier by tier for one response."""

    def __init__(self, response: str, labels: Sequence[str]) -> None:
        base = unicodedata.normalize("NFKC", response).translate(_MARKDOWN)
        self.base = base
        self.loose = base.translate(_CJK_BRACKETS)
        self.labels = _LabelSet(labels)

    def _accept(self, text: str, token: _Token, exact: bool) -> bool:
        """Context check for a token outside ``[[ ]]`` (see the module docstring)."""
        if token.bracketed:
            return True
        if not _followed_by_word(text, token.end):
            return True
        return exact and token.text not in _AMBIGUOUS and not token.text.isdigit()

    def _from_scan(
        self, text: str, scan: _Scan, *, form: str, final: bool, context_start: int
    ) -> list[_Candidate]:
        out: list[_Candidate] = []
        for index, token in enumerate(scan.tokens):
            resolved = self.labels.resolve(token.text)
            if resolved is None:
                continue
            label, exact, _ = resolved
            if (
                label is None
                and form == "leading-label"
                and not token.bracketed
                and token.text in _AMBIGUOUS
            ):
                # "I would say ..." with options A-D starts with the pronoun, not a bad label
                # ("Answer: I" after a marker is still read as one).
                continue
            is_last = index == len(scan.tokens) - 1
            if is_last and not self._accept(text, token, exact and label is not None):
                # An unreadable tail ("Answer: B and I think...") drops only that token.
                continue
            if _negated(text, token.start):
                continue
            out.append(
                _candidate(
                    token,
                    scan,
                    resolved,
                    final=final,
                    start=token.start,
                    form=form,
                    snippet=_snippet(text, context_start, scan.end + 1),
                )
            )
        return out

    def strict(self) -> list[_Candidate]:
        out: list[_Candidate] = []
        for match in _STRICT.finditer(self.base):
            inner = match.group(1)
            scan = _scan_list(inner, 0)
            if scan is None:
                continue
            rest = inner[scan.end :].strip()
            # "[[B. The basket]]" names B; "[[Answer Index]]" (an echoed template) names nothing.
            if rest and not re.match(r"^[.:)\-—,]", rest):
                continue
            if _negated(self.base, match.start()):
                continue
            final = _is_final(self.base, match.start())
            for token in scan.tokens:
                resolved = self.labels.resolve(token.text)
                out.append(
                    _candidate(
                        token,
                        scan,
                        resolved if resolved is not None else (None, False, None),
                        final=final,
                        start=match.start(),
                        form="strict",
                        snippet=_snippet(self.base, match.start(), match.end()),
                    )
                )
        return out

    def marked(self) -> list[_Candidate]:
        out: list[_Candidate] = []
        text = self.loose
        for match in _MARKER.finditer(text):
            scan = _scan_list(text, match.end())
            if scan is None:
                continue
            if _negated(text, match.start()):
                continue
            final = bool(match.group("final") or match.group("final2") or match.group("final_zh"))
            final = final or _is_final(text, match.start())
            out.extend(
                self._from_scan(
                    text, scan, form="answer-marker", final=final, context_start=match.start()
                )
            )
        return out

    def form(self) -> list[_Candidate]:
        out: list[_Candidate] = []
        text = self.loose
        lead = _LEADING.match(text)
        start = lead.end() if lead else 0
        scan = _scan_list(text, start)
        if scan is not None:
            out.extend(
                self._from_scan(text, scan, form="leading-label", final=False, context_start=0)
            )
        seen = {c.start for c in out}

        def take(scan: _Scan, form: str, at: int) -> None:
            # A label already read in an earlier form is not read again in a later one.
            found = self._from_scan(
                text, scan, form=form, final=_is_final(text, at), context_start=at
            )
            out.extend(found)
            seen.update(c.start for c in found)

        for match in _BRACKETED.finditer(text):
            scan = _scan_list(text, match.start())
            if scan is not None and scan.tokens[0].start not in seen:
                take(_Scan(scan.tokens[:1], scan.tokens[0].end, False), "bracketed", match.start())
        for match in _OPTION_MENTION.finditer(text):
            scan = _scan_list(text, match.end())
            if scan is None or scan.tokens[0].start in seen or _negated(text, match.start()):
                continue
            take(scan, "option-mention", match.start())
        return out

    def bare_mentions(self) -> list[str]:
        """Labels written as standalone tokens exactly as displayed (for the unparseable reason)."""
        found = {
            match.group(1)
            for match in _STANDALONE.finditer(self.loose)
            if match.group(1) in self.labels.labels
        }
        return [label for label in self.labels.labels if label in found]

    def revisions(self) -> list[tuple[int, str, str]]:
        """(position, marker, label) for each revision marker followed soon by a label."""
        out: list[tuple[int, str, str]] = []
        text = self.loose
        for match in _REVISION.finditer(text):
            window_end = match.end() + 40
            for token in _STANDALONE.finditer(text, match.end()):
                if token.start() >= window_end:
                    break
                raw = token.group(1)
                if raw.isdigit() != self.labels.digits or raw not in self.labels.labels:
                    continue
                bracketed = token.start() > 0 and text[token.start() - 1] in "([{"
                if raw in _AMBIGUOUS and not bracketed and re.match(r"\s*\w", text[token.end() :]):
                    continue
                out.append((match.start(), match.group(0), raw))
                break
        return out


def _unparseable(detail: str) -> Extraction:
    return Extraction((), "unparseable", detail)


def _decide(
    candidates: list[_Candidate], tier: Tier, labels: _LabelSet, *, multi_select: bool
) -> tuple[Extraction, int] | None:
    """Turn one tier's candidates into a reading; None when the tier found nothing."""
    if not candidates:
        return None
    finals = [c for c in candidates if c.final]
    pool = finals or candidates
    position = max(c.start for c in pool)
    for cand in pool:
        if cand.label is None:
            return _unparseable(
                f"{cand.raw!r} is not an option (labels {labels.describe()}): {cand.snippet!r}"
            ), position
    chosen = [label for label in labels.labels if any(c.label == label for c in pool)]
    if any(c.disjunctive for c in pool):
        return _unparseable(f"hedged between {', '.join(chosen)}: {pool[0].snippet!r}"), position
    if not multi_select and len(chosen) > 1:
        shown = "; ".join(dict.fromkeys(c.snippet for c in pool))
        return _unparseable(f"several options named ({', '.join(chosen)}): {shown!r}"), position
    if tier == "strict" and all(c.exact for c in pool):
        return Extraction(tuple(chosen), "strict"), position
    notes = [c.note for c in pool if c.note]
    forms = ", ".join(dict.fromkeys(c.form for c in pool))
    detail = f"{forms}: {pool[-1].snippet!r}"
    if tier == "strict":
        detail = "strict brackets, label not written as displayed: " + repr(pool[-1].snippet)
    if notes:
        detail += "; " + "; ".join(dict.fromkeys(notes))
    return Extraction(tuple(chosen), "lenient", detail), position


def _polarity_of_choice(text: str) -> bool | None:
    word = re.sub(r"[\W_]+", "", normalize(text))
    if word in _YES_OPTIONS or word in _YES_ZH:
        return True
    if word in _NO_OPTIONS or word in _NO_ZH:
        return False
    return None


def _polarity_at(text: str, pos: int) -> bool | None:
    rest = text[pos:].lstrip(" \t\n:：\"'“”「」([")
    match = re.match(r"([A-Za-z]+)\b", rest)
    if match:
        word = match.group(1).lower()
        if word in _YES_EN:
            return True
        if word in _NO_EN:
            return False
        return None
    for phrases, value in ((_NO_ZH, False), (_YES_ZH, True)):
        for phrase in phrases:
            # "对于..." ("regarding") is no yes: the word must end before the next ideograph.
            if rest.startswith(phrase) and not _IDEOGRAPH.match(rest, len(phrase)):
                return value
    return None


def _yes_no(text: str, labels: Sequence[str], choices: Sequence[str]) -> Extraction | None:
    """Two-option yes/no items: read a leading or marked yes/no word."""
    if len(choices) != 2:
        return None
    polarities = [_polarity_of_choice(choice) for choice in choices]
    if None in polarities or polarities[0] == polarities[1]:
        return None
    found: set[bool] = set()
    for pos in [0, *(m.end() for m in _MARKER.finditer(text))]:
        value = _polarity_at(text, pos)
        if value is not None:
            found.add(value)
    if not found:
        return None
    if len(found) > 1:
        return _unparseable("answers both yes and no")
    label = labels[polarities.index(found.pop())]
    return Extraction((label,), "lenient", "yes/no word read as option " + label)


def _canon_text(text: str) -> str:
    """Option text for verbatim comparison: width, case, quotes, whitespace, edge punctuation.

    Whitespace next to a CJK character is dropped rather than collapsed, since Chinese does not
    separate words ("小明 知道" is "小明知道") and tokenised output often inserts spaces.
    """
    folded = normalize(text).translate(_MARKDOWN).translate(_QUOTES)

    def space(match: re.Match[str]) -> str:
        before = folded[match.start() - 1] if match.start() > 0 else ""
        after = folded[match.end()] if match.end() < len(folded) else ""
        return "" if (before and is_cjk(before)) or (after and is_cjk(after)) else " "

    return re.sub(r"\s+", space, folded).rstrip(_TRAILING).lstrip(_LEADING_QUOTES)


def _word_edge(text: str, index: int) -> bool:
    """Whether ``index`` is no position inside a Latin word or number (CJK has no word edges)."""
    if index <= 0 or index >= len(text):
        return True
    left, right = text[index - 1], text[index]
    return not (left.isalnum() and right.isalnum() and not is_cjk(left) and not is_cjk(right))


def _verbatim_spans(response: str, option: str) -> list[tuple[int, int]]:
    """Where ``option`` occurs in ``response`` as whole words (both canonical)."""
    spans: list[tuple[int, int]] = []
    start = response.find(option)
    while start >= 0:
        end = start + len(option)
        if _word_edge(response, start) and _word_edge(response, end):
            spans.append((start, end))
        start = response.find(option, start + 1)
    return spans


def _hedged(text: str, start: int, end: int) -> bool:
    return bool(_HEDGE_BEFORE.search(text[:start]) or _HEDGE_AFTER.match(text, end))


def _option_text(
    text: str, labels: Sequence[str], choices: Sequence[str], *, multi_select: bool
) -> Extraction | None:
    """The option whose full text the response is, or (single-select) quotes verbatim.

    Returns None when this settles nothing (rapidfuzz decides next), and an unparseable
    extraction when an option's text is hedged with "or".
    """
    response = _canon_text(text)
    options = [_canon_text(choice) for choice in choices]
    if not response:
        return None
    exact = [label for label, option in zip(labels, options, strict=True) if option == response]
    if len(exact) == 1:
        return Extraction((exact[0],), "fuzzy", "option text repeated exactly")
    if exact or multi_select:
        # Two options with one text, or several options allowed: the rapidfuzz rules decide.
        return None
    found: dict[str, list[tuple[int, int]]] = {}
    for label, option in zip(labels, options, strict=True):
        # Short options ("Tom") must match as a whole, as in the rapidfuzz rules below.
        if len(option) >= 4:
            found[label] = _verbatim_spans(response, option)
    spans = [(start, end, label) for label, where in found.items() for start, end in where]
    standing: set[str] = set()
    hedged: set[str] = set()
    for start, end, label in spans:
        # "Tom and Mary" also contains the option "Tom"; only the longer text is the mention.
        inside_longer = any(
            other != label and o_start <= start and end <= o_end and o_end - o_start > end - start
            for o_start, o_end, other in spans
        )
        if inside_longer or _negated(response, start):
            continue
        (hedged if _hedged(response, start, end) else standing).add(label)
    if hedged:
        # As with "A or B": a hedge is its own outcome, and rapidfuzz would only pick a side.
        named = ", ".join(label for label in labels if label in hedged | standing)
        return _unparseable(f"hedged: 'or' next to the text of option {named}")
    if len(standing) != 1:
        return None
    label = standing.pop()
    return Extraction((label,), "fuzzy", "option text quoted verbatim")


def _fuzzy(
    text: str,
    labels: Sequence[str],
    choices: Sequence[str],
    *,
    multi_select: bool,
    threshold: float,
    margin: float,
) -> Extraction | None:
    """Find the option whose text the response contains (or is)."""
    response = " ".join(normalize(text).split()).strip(" .。!！")
    if not response:
        return None
    scored: list[tuple[float, str]] = []
    for label, choice in zip(labels, choices, strict=True):
        option = " ".join(normalize(choice).split()).strip(" .。!！")
        if not option:
            continue
        if len(option) >= 4 and len(option) <= len(response):
            # Look for the option inside a longer answer; a negation just before it voids it.
            aligned = fuzz.partial_ratio_alignment(option, response)
            score = aligned.score if aligned is not None else 0.0
            if aligned is not None and _negated(response, aligned.dest_start):
                score = 0.0
        else:
            # Short options ("Tom") or short answers must match as a whole, not as a fragment.
            score = fuzz.ratio(option, response)
        scored.append((score, label))
    hits = [(score, label) for score, label in scored if score >= threshold]
    if not hits:
        return None
    if multi_select:
        chosen = tuple(label for label in labels if any(label == hit for _, hit in hits))
        return Extraction(chosen, "fuzzy", f"option text matched (scores >= {threshold:g})")
    ranked = sorted(scored, reverse=True)
    best_score, best_label = ranked[0]
    runner_up = ranked[1][0] if len(ranked) > 1 else 0.0
    if best_score - runner_up < margin:
        close = [label for score, label in ranked if best_score - score < margin]
        return _unparseable(
            f"response matches the text of several options ({', '.join(sorted(close))})"
        )
    return Extraction(
        (best_label,),
        "fuzzy",
        f"option text matched (score {best_score:.0f}, next {runner_up:.0f})",
    )


def extract_answer(
    response: str,
    labels: Sequence[str],
    choices: Sequence[str],
    *,
    multi_select: bool = False,
    fuzzy_threshold: float = DEFAULT_FUZZY_THRESHOLD,
    fuzzy_margin: float = DEFAULT_FUZZY_MARGIN,
) -> Extraction:
    """Read the option label(s) a response chose, by the tiers of the module docstring.

    Args:
        response: The model's raw answer.
        labels: The labels as displayed, one per displayed position (letters or numbers).
        choices: The option texts as displayed, aligned with ``labels`` (used by the yes/no and
            fuzzy tiers).
        multi_select: Whether several labels may be chosen; the labels found then form a set.
        fuzzy_threshold: rapidfuzz score (0-100) an option text must reach; above 100 disables
            the fuzzy tier (exact and verbatim option text included).
        fuzzy_margin: Points the best option must lead the runner-up by.

    Returns:
        The displayed label(s) and how they were read; ``unparseable`` with a reason otherwise.

    Raises:
        ValueError: If ``labels`` is empty or ``labels`` and ``choices`` differ in length.
    """
    if not labels:
        raise ValueError("labels must not be empty")
    if len(labels) != len(choices):
        raise ValueError(f"labels ({len(labels)}) and choices ({len(choices)}) differ in length")
    if not response.strip():
        return _unparseable("empty response")
    reader = _Reader(response, labels)
    revisions = reader.revisions()
    tiers: tuple[tuple[Tier, list[_Candidate]], ...] = (
        ("strict", reader.strict()),
        ("marked", reader.marked()),
        ("form", reader.form()),
    )
    for tier, candidates in tiers:
        decided = _decide(candidates, tier, reader.labels, multi_select=multi_select)
        if decided is None:
            continue
        extraction, position = decided
        if extraction.parsed:
            for where, marker, label in revisions:
                if where > position and label not in extraction.labels:
                    return _unparseable(
                        f"answer revised: read {', '.join(extraction.labels)}, then "
                        f"{marker!r} ... {label}"
                    )
        return extraction
    yes_no = _yes_no(reader.loose, labels, choices)
    if yes_no is not None:
        return yes_no
    if fuzzy_threshold <= 100:
        verbatim = _option_text(response, labels, choices, multi_select=multi_select)
        if verbatim is not None:
            return verbatim
    fuzzy = _fuzzy(
        response,
        labels,
        choices,
        multi_select=multi_select,
        threshold=fuzzy_threshold,
        margin=fuzzy_margin,
    )
    if fuzzy is not None:
        return fuzzy
    if revisions:
        return _unparseable(
            f"no answer in an accepted form; the response revises itself ({revisions[0][1]!r})"
        )
    mentions = reader.bare_mentions()
    if mentions:
        # Say what was there, so an auditor sees "It could be A or B" was not overlooked.
        return _unparseable(
            f"no answer in an accepted form; bare mentions of {', '.join(mentions)}"
        )
    return _unparseable(f"no option label ({', '.join(labels)}) or option text found")
