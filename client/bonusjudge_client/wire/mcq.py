"""Typed models of the multiple-choice scorer: item in, result per item out, summary over a run.

They double as the wire schemas of ``POST /v1/mcq``, so every field carries a description.

Frames of reference matter here. An item's ``choices``, ``labels`` and ``answer`` are always in the
*canonical* order (the order of the benchmark's data). When the options were shown permuted
(position-bias control), ``permutation.order`` says which canonical option stood at each displayed
position; the model's ``response`` names *displayed* labels, and the scorer maps them back.
"""

from __future__ import annotations

import re
import string
import unicodedata
from typing import Literal, Protocol, runtime_checkable

from pydantic import (
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from bonusjudge_client.wire.base import StrictWireModel, WireModel
from bonusjudge_client.wire.vocab import ItemId

ExtractionMethod = Literal["strict", "lenient", "fuzzy", "llm", "unparseable"]
"""How the chosen option(s) were read from the response.

``strict``: the requested ``[[X]]`` format (NFKC-normalised, so ``［［Ａ］］`` counts).
``lenient``: an option label in another common form ("(B)", "Answer: B", "答案：B", a digit,
a yes/no word).
``fuzzy``: the text of one option: the whole response (normalised), quoted verbatim, or matched
with rapidfuzz. ``llm``: an LLM extractor read it after the rules failed. ``unparseable``: no
single reading; its own outcome, never a guess.
"""

Outcome = Literal["correct", "wrong", "unparseable"]
"""Per-item outcome. ``unparseable`` is kept apart from ``wrong`` in every count."""

Aggregate = Literal["mean", "majority"]
"""How runs of one question over permuted options combine.

``mean``: the question's score is its mean accuracy over the runs (CogToM: 4 rotations + 1 shuffle).
``majority``: the most frequent parsed answer counts (ToMBench: 5 shuffles); a tie is not correct.
"""

PermutationKind = Literal["identity", "rotation", "shuffle"]
"""How a displayed option order was made."""

MAX_OPTIONS = 26
"""Most options an item may have (ToMValley uses up to 16, a-p)."""

_LETTER_LABEL = re.compile(r"^[A-Za-z]$")
_DIGIT_LABEL = re.compile(r"^[1-9][0-9]?$")


def default_labels(count: int, *, style: Literal["upper", "lower", "digit"] = "upper") -> list[str]:
    """Labels shown for ``count`` options: ``A, B, C...``, ``a, b, c...`` or ``1, 2, 3...``.

    Args:
        count: Number of options (1 to 26).
        style: ``upper`` (ToMBench, CogToM), ``lower`` (ToMValley) or ``digit`` (CharToM's
            "(1)-(4)").

    Raises:
        ValueError: If ``count`` is out of range.
    """
    if not 1 <= count <= MAX_OPTIONS:
        raise ValueError(f"count must be between 1 and {MAX_OPTIONS}, got {count}")
    if style == "digit":
        return [str(i) for i in range(1, count + 1)]
    letters = string.ascii_uppercase if style == "upper" else string.ascii_lowercase
    return list(letters[:count])


def _clean_label(value: str) -> str:
    """NFKC-normalise and strip a label, so "Ａ " and "A" are the same label."""
    return unicodedata.normalize("NFKC", value).strip()


class PermutationInfo(StrictWireModel):
    """How the options of one run were displayed, relative to the canonical order."""

    run: int = Field(
        ge=0,
        description="Index of this presentation among the runs of the same question (0-based); "
        "runs with the same id and language are aggregated together.",
    )
    kind: PermutationKind = Field(
        default="shuffle",
        description="How the order was made: identity, cyclic rotation, or seeded shuffle.",
    )
    order: list[int] = Field(
        description="order[i] is the canonical index (0-based) of the option shown at displayed "
        "position i, under displayed label labels[i]. Must be a permutation of 0..n-1.",
    )
    seed: int | None = Field(
        default=None,
        description="Seed of the shuffle that produced this order (none for rotations), so the "
        "presentation can be rebuilt.",
    )

    @field_validator("order")
    @classmethod
    def _order_is_permutation(cls, order: list[int]) -> list[int]:
        if sorted(order) != list(range(len(order))):
            raise ValueError(f"order must be a permutation of 0..{len(order) - 1}, got {order}")
        return order


class McqItem(WireModel):
    """One multiple-choice question with the model's raw answer, ready to score."""

    model_config = ConfigDict(extra="ignore", frozen=True, coerce_numbers_to_str=True)

    id: ItemId = Field(
        min_length=1,
        description="Question id. Parallel items in several languages share an id (XToM); runs "
        "of one question over permuted options share id and language.",
    )
    choices: list[str] = Field(
        min_length=2,
        max_length=MAX_OPTIONS,
        description="Option texts in canonical order (2 to 26).",
    )
    labels: list[str] | None = Field(
        default=None,
        description="Labels of the options in canonical order, one letter each (all upper or all "
        "lower case) or numbers 1-99; default A, B, C... The same labels are shown at the "
        "displayed positions when the options are permuted.",
    )
    answer: str | list[str] = Field(
        description="The correct label, or a list of labels for a multi-select question (XToM "
        "intentions). Matched to labels ignoring case.",
    )
    response: str = Field(
        default="",
        description="The model's raw answer text (null is read as empty, which is unparseable).",
    )
    multi_select: bool | None = Field(
        default=None,
        description="Whether several options may be chosen; default: true exactly when answer is "
        "a list.",
    )
    task: str | None = Field(default=None, description="Task name, for breakdowns (ToMBench).")
    ability: str | None = Field(
        default=None, description="Ability or sub-capability, for breakdowns (ToMBench, CogToM)."
    )
    tom_dimension: str | None = Field(
        default=None,
        description="Theory-of-mind dimension (belief, intention, emotion, desire, ...); "
        "abilities are macro-averaged within it.",
    )
    language: str | None = Field(
        default=None, description="Language code (en, zh, ...), for breakdowns and XToM."
    )
    story_id: ItemId | None = Field(
        default=None,
        description="Story or scene the question belongs to; a story is coherently right only "
        "when all of its questions are right (ToMBench).",
    )
    slot_group: str | None = Field(
        default=None,
        description="Composite question this item is one slot of (XToM belief/desire: three "
        "high/medium/low slots); the group counts as an exact match only if every slot is right.",
    )
    tags: dict[str, str] = Field(
        default_factory=dict,
        description="Extra grouping fields (e.g. ToMValley question_type); each key gets its own "
        "breakdown.",
    )
    permutation: PermutationInfo | None = Field(
        default=None,
        description="Present when the options were shown permuted; the response then names "
        "displayed labels.",
    )

    @field_validator("id")
    @classmethod
    def _strip_id(cls, value: str) -> str:
        value = value.strip()
        if not value:
            raise ValueError("id must not be blank")
        return value

    @field_validator("response", mode="before")
    @classmethod
    def _none_response(cls, value: object) -> object:
        # Harnesses write null when generation failed; that is an unparseable answer, not bad input.
        return "" if value is None else value

    @field_validator("choices")
    @classmethod
    def _choices_not_blank(cls, choices: list[str]) -> list[str]:
        for index, text in enumerate(choices):
            if not text.strip():
                raise ValueError(f"choice {index} is blank")
        return choices

    @field_validator("labels")
    @classmethod
    def _labels_well_formed(
        cls, labels: list[str] | None, info: ValidationInfo
    ) -> list[str] | None:
        if labels is None:
            return None
        choices = info.data.get("choices")
        if choices is not None and len(labels) != len(choices):
            raise ValueError(f"{len(labels)} labels given for {len(choices)} choices")
        cleaned = [_clean_label(label) for label in labels]
        for label in cleaned:
            if not (_LETTER_LABEL.match(label) or _DIGIT_LABEL.match(label)):
                raise ValueError(f"label {label!r} must be one letter or a number 1-99")
        kinds = {"digit" if label.isdigit() else label.isupper() for label in cleaned}
        if len(kinds) > 1:
            raise ValueError(
                "labels must be all upper-case letters, all lower-case, or all numbers"
            )
        if len({label.casefold() for label in cleaned}) != len(cleaned):
            raise ValueError(f"labels must be distinct, got {cleaned}")
        return cleaned

    # The cross-field checks are field validators reading earlier fields (``info.data``), so each
    # error is located at the field at fault (``answer``, ``labels``) in the HTTP API's 422 too.
    # A field that failed its own validation is missing from ``info.data``; its checks are skipped.

    @field_validator("answer")
    @classmethod
    def _answer_among_labels(cls, answer: str | list[str], info: ValidationInfo) -> str | list[str]:
        choices = info.data.get("choices")
        if choices is None or "labels" not in info.data:
            return answer
        labels = info.data["labels"] or default_labels(len(choices))
        if len(labels) != len(choices):
            return answer  # reported on labels
        by_fold = {label.casefold(): label for label in labels}
        raw = [answer] if isinstance(answer, str) else list(answer)
        if not raw:
            raise ValueError("the list of correct labels is empty")
        resolved: list[str] = []
        for value in raw:
            label = by_fold.get(_clean_label(value).casefold())
            if label is None:
                raise ValueError(f"label {value!r} is not among the labels {', '.join(labels)}")
            if label in resolved:
                raise ValueError(f"label {label!r} is listed twice")
            resolved.append(label)
        # Stored in the labels' own spelling, so results compare by plain equality.
        return resolved if isinstance(answer, list) else resolved[0]

    @field_validator("permutation")
    @classmethod
    def _permutation_fits(
        cls, permutation: PermutationInfo | None, info: ValidationInfo
    ) -> PermutationInfo | None:
        choices = info.data.get("choices")
        if (
            permutation is not None
            and choices is not None
            and len(permutation.order) != len(choices)
        ):
            raise ValueError(
                f"order has {len(permutation.order)} positions for {len(choices)} choices"
            )
        return permutation

    @model_validator(mode="after")
    def _multi_select_fits(self) -> McqItem:
        if self.multi_select is False and isinstance(self.answer, list) and len(self.answer) > 1:
            raise ValueError("multi_select is false but answer lists several labels")
        return self

    @property
    def display_labels(self) -> list[str]:
        """The labels in use: ``labels`` if given, else ``A, B, C...``."""
        return list(self.labels) if self.labels is not None else default_labels(len(self.choices))

    @property
    def is_multi_select(self) -> bool:
        """Whether several options may be chosen (explicit flag, else: answer is a list)."""
        if self.multi_select is not None:
            return self.multi_select
        return isinstance(self.answer, list)

    @property
    def answer_labels(self) -> tuple[str, ...]:
        """The correct canonical labels, in label order."""
        raw = [self.answer] if isinstance(self.answer, str) else self.answer
        labels = self.display_labels
        return tuple(sorted(raw, key=labels.index))

    @property
    def order(self) -> list[int]:
        """Canonical index shown at each displayed position (identity when not permuted)."""
        if self.permutation is None:
            return list(range(len(self.choices)))
        return list(self.permutation.order)

    @property
    def displayed_choices(self) -> list[str]:
        """Option texts in the order the model saw them."""
        return [self.choices[index] for index in self.order]


class McqResult(StrictWireModel):
    """The scored outcome of one item (one line of the output file)."""

    id: str = Field(description="Question id, copied from the item.")
    language: str | None = Field(default=None, description="Language, copied from the item.")
    task: str | None = Field(default=None, description="Task, copied from the item.")
    ability: str | None = Field(default=None, description="Ability, copied from the item.")
    tom_dimension: str | None = Field(
        default=None, description="ToM dimension, copied from the item."
    )
    story_id: str | None = Field(default=None, description="Story id, copied from the item.")
    slot_group: str | None = Field(default=None, description="Slot group, copied from the item.")
    tags: dict[str, str] = Field(
        default_factory=dict, description="Extra grouping fields, copied from the item."
    )
    permutation: PermutationInfo | None = Field(
        default=None, description="The presentation this run used, copied from the item."
    )
    multi_select: bool = Field(description="Whether several options could be chosen.")
    answer: list[str] = Field(description="Correct canonical label(s), in label order.")
    extracted: list[str] = Field(
        description="Label(s) read from the response as the model named them (displayed "
        "labels); empty when unparseable.",
    )
    chosen: list[str] = Field(
        description="The extracted label(s) mapped back to canonical labels; empty when "
        "unparseable.",
    )
    method: ExtractionMethod = Field(description="How the answer was extracted.")
    detail: str | None = Field(
        default=None,
        description="Why the answer is unparseable, or how a non-strict reading was made.",
    )
    outcome: Outcome = Field(description="correct, wrong, or unparseable (its own outcome).")
    correct: bool | None = Field(
        description="True if the chosen set equals the answer set; null when unparseable."
    )
    f1: float | None = Field(
        default=None,
        description="Multi-select only: F1 of the chosen set against the answer set (null when "
        "unparseable or single-select).",
    )


class SkippedLine(StrictWireModel):
    """A summary entry: an input line that could not be read as an item and was skipped.

    The readers report a bad line as a ``core.jsonl.BadLine``; this is its shape in the
    summary's ``bad_lines`` (``line`` and ``error``), built by ``judge.mcq.runner``.
    """

    line: int = Field(ge=1, description="1-based line number in the input file.")
    error: str = Field(description="What was wrong, naming the field.")


class SlotMetrics(StrictWireModel):
    """Exact match over the slots of composite questions (XToM belief/desire)."""

    groups: int = Field(description="Composite questions (slot_group x language).")
    exact: int = Field(description="Composite questions whose slots are all right.")
    exact_match: float = Field(description="exact / groups.")


class MultiSelectMetrics(StrictWireModel):
    """Multi-label scores over multi-select result lines (XToM intentions)."""

    items: int = Field(description="Multi-select result lines (unparseable ones count as empty).")
    unparseable: int = Field(description="Of those, unparseable (scored as choosing nothing).")
    micro_f1: float = Field(description="F1 over all (item, label) decisions pooled.")
    macro_f1: float = Field(
        description="Mean of per-label F1 over the labels that occur in an answer or a choice."
    )
    exact_set: float = Field(description="Share of lines whose chosen set equals the answer set.")


class CoherentMetrics(StrictWireModel):
    """Story-level accuracy: a story counts only if all of its questions are right (ToMBench)."""

    stories: int = Field(description="Stories (story_id x language).")
    coherent: int = Field(description="Stories whose questions are all right.")
    accuracy: float = Field(description="coherent / stories.")


class PermutationMetrics(StrictWireModel):
    """Bookkeeping of permuted runs (position-bias control)."""

    aggregate: Aggregate = Field(description="How runs were combined into a question score.")
    questions: int = Field(description="Questions with at least one permuted run.")
    min_runs: int = Field(description="Fewest runs of any such question.")
    max_runs: int = Field(description="Most runs of any such question.")
    consistency_questions: int = Field(description="Questions with two or more runs.")
    position_consistency: float | None = Field(
        description="Share of questions with 2+ runs answered the same canonical option(s) in "
        "every run, no run unparseable; null when none has 2+ runs.",
    )
    ties: int = Field(
        description="Majority mode: questions whose top answers tied (scored not correct)."
    )
    no_votes: int = Field(description="Majority mode: questions where every run was unparseable.")


class McqMetrics(StrictWireModel):
    """Scores over a set of results: the whole run, or one group of a breakdown."""

    items: int = Field(description="Result lines (one per run of a question).")
    questions: int = Field(
        description="Distinct questions (id x language); runs over permutations are one question."
    )
    correct: float = Field(
        description="Sum of question scores (fractional under mean aggregation)."
    )
    accuracy: float | None = Field(
        description="correct / questions: unparseable answers count as not correct (and are "
        "counted separately in unparseable). Null when there are no questions."
    )
    accuracy_parsed: float | None = Field(
        description="Share of parsed result lines that are correct (unparseable lines left out, "
        "before permutation aggregation). Null when nothing parsed."
    )
    unparseable: int = Field(description="Result lines whose answer could not be extracted.")
    unparseable_rate: float | None = Field(description="unparseable / items.")
    methods: dict[str, int] = Field(
        description="Result lines per extraction method (strict, lenient, fuzzy, llm, unparseable)."
    )
    exact_match: SlotMetrics | None = Field(
        default=None, description="Slot exact match, when items have slot_group."
    )
    multi_select: MultiSelectMetrics | None = Field(
        default=None, description="Multi-label F1, when there are multi-select items."
    )
    coherent: CoherentMetrics | None = Field(
        default=None, description="Story-level accuracy, when items have story_id."
    )
    permutation: PermutationMetrics | None = Field(
        default=None, description="Permutation bookkeeping, when items have permutation."
    )


class CrossLingualMetrics(StrictWireModel):
    """Consistency of parallel items across languages (XToM): same id, several languages."""

    languages: list[str] = Field(description="Languages seen among parallel items.")
    instances: int = Field(description="Ids present in two or more languages.")
    consistently_right: int = Field(description="Instances right in every language.")
    consistently_wrong: int = Field(
        description="Instances not right in any language (unparseable counts as not right)."
    )
    inconsistent: int = Field(description="Instances right in some languages only.")
    consistently_right_rate: float = Field(description="consistently_right / instances.")
    consistently_wrong_rate: float = Field(description="consistently_wrong / instances.")
    inconsistent_rate: float = Field(description="inconsistent / instances.")


class McqSummary(McqMetrics):
    """Everything about one scored run: overall metrics, breakdowns, and what was skipped."""

    fuzzy_threshold: float = Field(description="rapidfuzz score (0-100) a fuzzy match needed.")
    llm_extractor: bool = Field(description="Whether an LLM extractor was given the leftovers.")
    llm_failures: int = Field(
        default=0, description="LLM extractor calls that raised (items stay unparseable)."
    )
    breakdowns: dict[str, dict[str, McqMetrics]] = Field(
        description="Metrics per group, keyed by grouping field (task, ability, tom_dimension, "
        "language, tags.<key>), then by group value.",
    )
    macro: dict[str, float] = Field(
        description="Per grouping field: unweighted mean of the groups' accuracies (ToMBench's "
        "task view is macro['task']); lines without a value are left out and counted in "
        "ungrouped.",
    )
    ungrouped: dict[str, int] = Field(
        default_factory=dict,
        description="Per grouping field in macro: result lines with no value for it (the "
        "'(none)' group), which the macro average leaves out.",
    )
    dimension_over_abilities: dict[str, float] = Field(
        default_factory=dict,
        description="Per tom_dimension: unweighted mean accuracy of its abilities (ToMBench's "
        "ability view).",
    )
    ability_view: float | None = Field(
        default=None,
        description="Unweighted mean of dimension_over_abilities over dimensions.",
    )
    cross_lingual: CrossLingualMetrics | None = Field(
        default=None, description="Cross-lingual consistency, when ids repeat across languages."
    )
    bad_lines: list[SkippedLine] = Field(
        default_factory=list,
        description="Input lines skipped as invalid, with line numbers (a service job's: the "
        "first 1,000; its status's `invalid` counts them all).",
    )


@runtime_checkable
class LlmExtractor(Protocol):
    """Reads the chosen option(s) from a response the rules could not parse.

    The runner calls it only for rule-unparseable answers and records its readings as ``llm``.
    """

    async def extract(self, item: McqItem, response: str) -> set[str] | None:
        """Return the displayed label(s) the response chose, or ``None`` if it chose none.

        Args:
            item: The item, whose ``display_labels`` and ``displayed_choices`` are what the model
                saw.
            response: The model's raw answer.
        """
        ...
