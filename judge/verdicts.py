"""What the judge answers: structured response models, and the faithful-mode text parsers.

The judge picks labels; code turns them into scores (style.md practice 3). Point numbers are typed
``Literal[1..n]`` so a provider's constrained decoding (and the JSON schema a small local model
sees) cannot even express an out-of-range index; validators reject duplicates and missing points
so instructor re-asks, and what still fails becomes *unscored*, never coverage.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model, model_validator

from core.errors import JudgeOutputError

MAX_DEFECTS = 10
MAX_EXTRACTED_POINTS = 8


class PointJudgementBase(BaseModel):
    """Verdict on one bonus point (the index type is narrowed per item to ``Literal[1..n]``)."""

    model_config = ConfigDict(extra="ignore")

    index: int = Field(description="The bonus point's number.")
    evidence: str = Field(
        default="",
        max_length=600,
        description="The words of the response that cover the point; empty if none.",
    )
    rationale: str = Field(default="", max_length=600, description="One-sentence reason.")
    covered: bool = Field(description="Whether the response covers this bonus point.")


class CoverageJudgementBase(BaseModel):
    """The judge's per-point verdicts (one per point, each index exactly once)."""

    model_config = ConfigDict(extra="ignore")

    points: list[Any]

    @model_validator(mode="after")
    def _each_point_once(self) -> CoverageJudgementBase:
        indices = [p.index for p in self.points]
        expected = type(self).n_points()
        if len(set(indices)) != len(indices):
            dupes = sorted({i for i in indices if indices.count(i) > 1})
            raise ValueError(f"each point number must appear once; repeated: {dupes}")
        missing = sorted(set(range(1, expected + 1)) - set(indices))
        if missing:
            raise ValueError(f"a verdict is missing for point(s) {missing}")
        return self

    @classmethod
    def n_points(cls) -> int:
        """How many points this model was built for."""
        return int(getattr(cls, "_n_points", 0))


@lru_cache(maxsize=64)
def coverage_model(n_points: int) -> type[CoverageJudgementBase]:
    """The coverage response model for an item with ``n_points`` bonus points.

    Indices are ``Literal[1..n]`` and the list holds exactly ``n`` verdicts, so the JSON schema
    itself rules out out-of-range and missing points.
    """
    if not 1 <= n_points <= 64:
        raise ValueError("n_points must be in 1..64")
    index_type = Literal[tuple(range(1, n_points + 1))]  # type: ignore[valid-type]
    point = create_model(
        "PointJudgement",
        __base__=PointJudgementBase,
        index=(index_type, Field(description=f"The bonus point's number, 1 to {n_points}.")),  # type: ignore[arg-type]
    )
    model = create_model(
        "CoverageJudgement",
        __base__=CoverageJudgementBase,
        points=(
            list[point],
            Field(
                min_length=n_points,
                max_length=n_points,
                description=f"Exactly {n_points} verdicts, one for each bonus point 1..{n_points}.",
            ),
        ),
    )
    model._n_points = n_points  # type: ignore[attr-defined]
    model.__doc__ = CoverageJudgementBase.__doc__
    return model


class DefectItem(BaseModel):
    """One defect the judge found."""

    model_config = ConfigDict(extra="ignore")

    description: str = Field(min_length=1, max_length=800, description="What is wrong.")
    kind: Literal["factual", "logical"] = Field(description="factual or logical error.")
    evidence: str = Field(default="", max_length=600, description="The offending words.")


class DefectJudgement(BaseModel):
    """The defects found in the response; an empty list means none."""

    model_config = ConfigDict(extra="ignore")

    defects: list[DefectItem] = Field(
        max_length=MAX_DEFECTS, description="Every factual or logical error; empty if none."
    )


class BonusPointsExtraction(BaseModel):
    """Bonus points split from a reference answer."""

    model_config = ConfigDict(extra="ignore")

    points: list[str] = Field(
        min_length=1,
        max_length=MAX_EXTRACTED_POINTS,
        description="The bonus points, each a short self-contained sentence.",
    )

    @model_validator(mode="after")
    def _clean(self) -> BonusPointsExtraction:
        cleaned = [p.strip() for p in self.points]
        if any(not p for p in cleaned):
            raise ValueError("bonus points must not be empty")
        if len({p.casefold() for p in cleaned}) != len(cleaned):
            raise ValueError("bonus points must differ from each other")
        self.points = cleaned
        return self


# ---------------------------------------------------------------------------------------------
# Faithful mode: the paper's plain-text formats. The public scorer's parser turned an unparseable
# reply into the string "Null" and counted len(set("Null")) == 3 covered points, and treated any
# defect text containing "None" as no defect (protocol.md section 4). These parsers accept only
# the published formats and raise JudgeOutputError for everything else.
# ---------------------------------------------------------------------------------------------

_COVERAGE_RE = re.compile(
    r"\[\s*included\s+bonus\s+points?\s*\]\s*[:：]\s*(?P<body>[^\n\r]*)", re.IGNORECASE
)
_DEFECT_RE = re.compile(r"\[\s*defects?\s*\]\s*[:：]\s*(?P<body>.*)", re.IGNORECASE | re.DOTALL)
_NONE_RE = re.compile(r"^\s*(none|null|nil|无|没有)\s*[.。!！]?\s*$", re.IGNORECASE)
_NONE_VERDICT_RE = re.compile(
    r"^(none|null|无缺陷|没有缺陷|无|没有)\s*(?:[.。!！]|$)", re.IGNORECASE | re.MULTILINE
)
# Possessive quantifiers (Python 3.11+): with plain ``(\d+)*`` a run of digits could be split into
# numbers in exponentially many ways, and a reply like "[Included Bonus Points]: 111...1x" took
# seconds per extra digit to reject (ReDoS, blocking the event loop). Same language, linear time.
_INDEX_LIST_RE = re.compile(
    r"^\s*+\(?\d++\)?(?:\s*+[,，、;；]?\s*+(?:and\s++)?\(?\d++\)?)*+\s*+[.。]?\s*+$"
)


def parse_paper_coverage(text: str, n_points: int) -> list[int]:
    """Parse ``[Included Bonus Points]: 1,2`` (or ``None``) into sorted unique point numbers.

    The last marker in the reply wins (a judge that reasons first often restates a draft).

    Raises:
        JudgeOutputError: no marker, a body that is neither ``None`` nor a list of numbers, or a
            number outside ``1..n_points`` (reason ``parse_failure``).
    """
    matches = list(_COVERAGE_RE.finditer(text or ""))
    if not matches:
        raise JudgeOutputError("no '[Included Bonus Points]:' line in the judge's reply", raw=text)
    body = matches[-1].group("body").strip()
    if _NONE_RE.match(body):
        return []
    if not _INDEX_LIST_RE.match(body):
        raise JudgeOutputError(
            f"'[Included Bonus Points]:' is followed by {body[:80]!r}, not point numbers",
            raw=text,
        )
    numbers = [int(n) for n in re.findall(r"\d+", body)]
    bad = sorted({n for n in numbers if not 1 <= n <= n_points})
    if bad:
        raise JudgeOutputError(f"point number(s) {bad} out of range 1..{n_points}", raw=text)
    return sorted(set(numbers))


def parse_paper_defects(text: str) -> list[str]:
    """Parse ``[Defect]: None`` (no defect) or ``[Defect]: <text>`` (one defect).

    Only a body that is exactly ``None`` (case and a final full stop aside) means no defect: a
    description that merely contains "None" ("None of the plot supports ...") is a defect.

    Raises:
        JudgeOutputError: no ``[Defect]:`` marker, or an empty body.
    """
    matches = list(_DEFECT_RE.finditer(text or ""))
    if not matches:
        raise JudgeOutputError("no '[Defect]:' line in the judge's reply", raw=text)
    body = matches[-1].group("body").strip()
    if not body:
        raise JudgeOutputError("'[Defect]:' is followed by nothing", raw=text)
    # "None." may be followed by an explanation on the same or next lines; "None of ..." may not.
    if _NONE_VERDICT_RE.match(body):
        return []
    return [body]
