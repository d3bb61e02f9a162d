"""The rubric library the service grades with."""

from __future__ import annotations

from api.deps import GraderDep, require_owner
from api.errors import error_responses
from api.routes.common import guarded_router
from api.services import rubrics
from bonusjudge_client.wire.schemas import RubricDetail, RubricList

router = guarded_router("/v1/rubrics", "rubrics", require_owner)


@router.get("", operation_id="listRubrics", summary="List rubrics")
async def list_rubrics(grader: GraderDep) -> RubricList:
    """Every rubric (id, version, hash, family, task, languages) and the selectable families."""
    return rubrics.list_rubrics(grader.library)


@router.get(
    "/{rubric_id}", operation_id="getRubric", summary="One rubric with its prompts",
    responses=error_responses(404),
)
async def get_rubric(rubric_id: str, grader: GraderDep) -> RubricDetail:
    """A rubric's summary and its prompt templates per language."""
    return rubrics.rubric_detail(grader.library, rubric_id)
