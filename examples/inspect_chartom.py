# mypy: disable-error-code="untyped-decorator"
# inspect_ai is a harness's library, not in the project's environment, where its decorators
# read as untyped; against the installed inspect_ai (.harness/inspect) this is strict-clean.
r"""Grade a file of existing answers with inspect_ai and bonusjudge, and report BPC.

The data is CharToM-QA JSONL with each line's answer in ``response`` (the input of
``bonusjudge grade``; see docs/grading.md). The solver does not ask the model: it answers each
sample with its line's ``response``, so ``mockllm/model`` stands in for the model under test and
the scorer grades the answers already written::

    bonusjudge serve --port 8000 &
    inspect eval examples/inspect_chartom.py --model mockllm/model \
        -T data=$PWD/judge/data/examples_chartom.jsonl -T url=http://127.0.0.1:8000

To grade a model instead, drop the solver argument (inspect's ``generate()`` runs) and name the
model with ``--model``. Copy this file; it needs ``inspect-ai`` and ``bonusjudge-client``.
"""

from __future__ import annotations

from typing import Any

from inspect_ai import Task, task
from inspect_ai.dataset import Sample, json_dataset
from inspect_ai.model import ChatMessageAssistant, ModelOutput
from inspect_ai.solver import Generate, Solver, TaskState, solver

from bonusjudge_client.inspect_ai import bonusjudge_scorer


def chartom_sample(line: dict[str, Any]) -> Sample:
    """One CharToM-QA line as a sample: the question in, the reference as target, the rest kept."""
    return Sample(
        input=line["question"],
        target=line["answer"],
        id=line.get("id"),
        metadata=line,  # bonus points, dimension, plot windows, and the answer to grade
    )


@solver
def answer_from_data() -> Solver:
    """Answer each sample with the ``response`` its line holds (no model call)."""

    async def solve(state: TaskState, generate: Generate) -> TaskState:
        answer = state.metadata.get("response") or ""
        state.output = ModelOutput.from_content(model=str(state.model), content=answer)
        state.messages.append(ChatMessageAssistant(content=answer))
        return state

    return solve


@task
def inspect_chartom(data: str, url: str | None = None, context_window: int | None = None) -> Task:
    """CharToM-QA answers graded by bonusjudge: coverage per sample, BPC and penalty rate.

    Args:
        data: CharToM-QA JSONL, one answer per line in ``response``.
        url: The bonusjudge service (default ``BONUSJUDGE_URL``, else http://127.0.0.1:8000).
        context_window: The plot window (0, 1000, 2000) the defect judge reads; default the
            largest in each line.
    """
    return Task(
        dataset=json_dataset(data, chartom_sample),
        solver=answer_from_data(),
        scorer=bonusjudge_scorer(url=url, context_window=context_window),
    )
