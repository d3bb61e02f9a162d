"""The rubric library the service grades with."""

from __future__ import annotations

from fastapi import APIRouter, Depends

from api.deps import GraderDep, require_owner
from api.errors import ERROR_RESPONSES, NotFound
from api.schemas import RubricDetail, RubricList, RubricPromptText, RubricSummary
from core.errors import RubricNotFound

router = APIRouter(
    prefix="/v1/rubrics", tags=["rubrics"], dependencies=[Depends(require_owner)],
    responses=ERROR_RESPONSES,
)


@router.get("", summary="List rubrics")
async def list_rubrics(grader: GraderDep) -> RubricList:
    """Every rubric (id, version, hash, family, task, languages) and the selectable families."""
    library = grader.library
    rubrics = [RubricSummary.model_validate(rubric.summary()) for rubric in library]
    return RubricList(rubrics=rubrics, families=library.families)


@router.get("/{rubric_id}", summary="One rubric with its prompts")
async def get_rubric(rubric_id: str, grader: GraderDep) -> RubricDetail:
    """A rubric's summary and its prompt templates per language."""
    try:
        rubric = grader.library.get(rubric_id)
    except RubricNotFound as exc:
        # Here the rubric is the resource itself, so a miss is a 404 rather than bad input.
        raise NotFound(str(exc)) from exc
    return RubricDetail(
        **rubric.summary(),  # type: ignore[arg-type]
        source=rubric.source,
        fallback_language=rubric.fallback_language,
        prompts={
            lang: RubricPromptText(system=p.system, user=p.user)
            for lang, p in rubric.prompts.items()
        },
    )
