"""The rubric library the service grades with, as the rubric routes show it."""

from __future__ import annotations

from api.errors import NotFound
from bonusjudge_client.wire.schemas import RubricDetail, RubricList, RubricPromptText, RubricSummary
from core.errors import RubricNotFound
from rubrics import RubricLibrary


def list_rubrics(library: RubricLibrary) -> RubricList:
    """Every rubric (id, version, hash, family, task, languages) and the selectable families."""
    rubrics = [RubricSummary.model_validate(rubric.summary()) for rubric in library]
    return RubricList(rubrics=rubrics, families=library.families)


def rubric_detail(library: RubricLibrary, rubric_id: str) -> RubricDetail:
    """A rubric's summary and its prompt templates per language.

    Raises:
        NotFound: no rubric with that id.
    """
    try:
        rubric = library.get(rubric_id)
    except RubricNotFound as exc:
        # Here the rubric is the resource itself, so a miss is a 404 rather than bad input.
        raise NotFound(str(exc)) from exc
    return RubricDetail(
        **rubric.summary(),
        source=rubric.source,
        fallback_language=rubric.fallback_language,
        prompts={
            lang: RubricPromptText(system=p.system, user=p.user)
            for lang, p in rubric.prompts.items()
        },
    )
