"""Option permutations against position bias: build presentations, map labels both ways.

A presentation is an ``order``: ``order[i]`` is the canonical index of the option shown at displayed
position ``i``, under the displayed label ``labels[i]`` (labels stay in place, texts move). CogToM
shows each question under four cyclic rotations plus one shuffle and averages accuracy; ToMBench
shows five shuffles and takes the majority answer. Shuffles are seeded per question and run, so a
harness can rebuild any presentation from the seed stored in :class:`PermutationInfo`.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence
from typing import Literal

from bonusjudge_client.wire.mcq import McqItem, PermutationInfo

__all__ = [
    "SCHEMES",
    "Scheme",
    "derive_seed",
    "expand_item",
    "plan_permutations",
    "render_options",
    "rotation",
    "seeded_shuffle",
    "to_canonical",
    "to_displayed",
]

Scheme = Literal["cogtom", "tombench", "rotations"]
"""Named presentation plans: ``cogtom`` (4 rotations + 1 shuffle), ``tombench`` (5 shuffles),
``rotations`` (every cyclic rotation once)."""

SCHEMES: dict[Scheme, tuple[int | None, int]] = {
    "cogtom": (4, 1),
    "tombench": (0, 5),
    "rotations": (None, 0),
}
"""Scheme -> (number of rotations, None meaning one per option; number of shuffles)."""


def rotation(count: int, shift: int) -> list[int]:
    """The cyclic rotation of ``count`` options by ``shift`` (shift 0 is the identity).

    Displayed position ``i`` shows canonical option ``(i + shift) % count``.
    """
    if count < 1:
        raise ValueError(f"count must be at least 1, got {count}")
    return [(i + shift) % count for i in range(count)]


def derive_seed(base_seed: int, item_id: str, run: int) -> int:
    """A per-question, per-run seed, stable across processes and Python versions.

    Hashes the parts with SHA-256 rather than using ``hash()``, which is salted per process.
    """
    digest = hashlib.sha256(f"{base_seed}\x1f{item_id}\x1f{run}".encode()).digest()
    # 48 bits: exact in JSON consumers that read numbers as doubles (JavaScript).
    return int.from_bytes(digest[:6], "big")


def seeded_shuffle(count: int, seed: int) -> list[int]:
    """A shuffled order of ``count`` options, reproducible from ``seed``."""
    if count < 1:
        raise ValueError(f"count must be at least 1, got {count}")
    order = list(range(count))
    random.Random(seed).shuffle(order)
    return order


def plan_permutations(
    count: int,
    *,
    item_id: str,
    scheme: Scheme = "cogtom",
    seed: int = 0,
    rotations: int | None = None,
    shuffles: int | None = None,
) -> list[PermutationInfo]:
    """The presentations of one question: rotations first, then seeded shuffles.

    Args:
        count: Number of options.
        item_id: The question id, mixed into each shuffle's seed so questions differ.
        scheme: A named plan from :data:`SCHEMES`; ``rotations``/``shuffles`` override its parts.
        seed: Base seed of the whole run.
        rotations: Number of cyclic rotations (shift 0, 1, ...), at most ``count``.
        shuffles: Number of seeded shuffles.

    Returns:
        One :class:`PermutationInfo` per run, with ``run`` numbered from 0.

    Raises:
        ValueError: If the counts are negative, there are more rotations than options, or the
            plan is empty.
    """
    default_rotations, default_shuffles = SCHEMES[scheme]
    n_rot = rotations if rotations is not None else default_rotations
    n_rot = count if n_rot is None else n_rot
    n_shuf = shuffles if shuffles is not None else default_shuffles
    if n_rot < 0 or n_shuf < 0:
        raise ValueError("rotations and shuffles must not be negative")
    if n_rot > count:
        raise ValueError(f"{n_rot} rotations asked for but only {count} options")
    if n_rot + n_shuf == 0:
        raise ValueError("the plan has no runs")
    plan: list[PermutationInfo] = []
    for shift in range(n_rot):
        plan.append(
            PermutationInfo(
                run=shift,
                kind="identity" if shift == 0 else "rotation",
                order=rotation(count, shift),
            )
        )
    for index in range(n_shuf):
        run = n_rot + index
        run_seed = derive_seed(seed, item_id, run)
        plan.append(
            PermutationInfo(
                run=run, kind="shuffle", order=seeded_shuffle(count, run_seed), seed=run_seed
            )
        )
    return plan


def to_canonical(displayed_label: str, labels: Sequence[str], order: Sequence[int]) -> str:
    """Map a label the model saw to the canonical label of the option behind it.

    Raises:
        ValueError: If the label is not one of ``labels``.
    """
    return labels[order[_position(displayed_label, labels)]]


def to_displayed(canonical_label: str, labels: Sequence[str], order: Sequence[int]) -> str:
    """Map a canonical label to the label its option was shown under.

    Raises:
        ValueError: If the label is not one of ``labels``.
    """
    return labels[list(order).index(_position(canonical_label, labels))]


def _position(label: str, labels: Sequence[str]) -> int:
    """Where ``label`` stands in ``labels``; a ValueError naming both when it is not there."""
    try:
        return list(labels).index(label)
    except ValueError:
        raise ValueError(f"label {label!r} is not among {list(labels)}") from None


def expand_item(
    item: McqItem,
    *,
    scheme: Scheme = "cogtom",
    seed: int = 0,
    rotations: int | None = None,
    shuffles: int | None = None,
) -> list[McqItem]:
    """Copies of ``item``, one per presentation, each carrying its ``permutation``.

    The copies keep the canonical ``choices``, ``labels`` and ``answer``; render each with
    :func:`render_options` for the prompt and put the model's answer in ``response``.

    Raises:
        ValueError: If ``item`` is already permuted, or the plan is invalid.
    """
    if item.permutation is not None:
        raise ValueError(f"item {item.id!r} already carries a permutation")
    plan = plan_permutations(
        len(item.choices),
        item_id=item.id,
        scheme=scheme,
        seed=seed,
        rotations=rotations,
        shuffles=shuffles,
    )
    return [item.model_copy(update={"permutation": info, "response": ""}) for info in plan]


def render_options(item: McqItem, *, template: str = "{label}. {text}", sep: str = "\n") -> str:
    """The option block of the prompt, in the order the model sees (``item.permutation``).

    Args:
        item: The item (permuted or not).
        template: Format of one option line, with ``{label}`` and ``{text}``; e.g. ``"({label})
            {text}"`` for CharToM.
        sep: Text between option lines.
    """
    return sep.join(
        template.format(label=label, text=text)
        for label, text in zip(item.display_labels, item.displayed_choices, strict=True)
    )
