"""The progress bars of ``grade_many`` and ``wait`` (tqdm, on stderr)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from bonusjudge_client.answers import Placed
from bonusjudge_client.wire.grading import GradeResult

if TYPE_CHECKING:
    from tqdm import tqdm


def progress_bar(total: int | None, enabled: bool, desc: str) -> tqdm[Any]:
    """A bar counting items (disabled unless ``enabled``)."""
    # Imported here: a harness importing the client for a scorer never draws a bar.
    from tqdm import tqdm

    return tqdm(total=total, disable=not enabled, unit="item", desc=desc, dynamic_ncols=True)


def total_of(items: Iterable[Any]) -> int | None:
    """How many items there are, when that is known without reading them."""
    try:
        return len(items)  # type: ignore[arg-type]
    except TypeError:
        return None  # a generator: the bar counts without a total


class Tally:
    """Counts finished items on a bar, with the unscored ones in its postfix."""

    def __init__(self, bar: tqdm[Any]) -> None:
        self.bar = bar
        self.unscored = 0

    def add(self, placed: Placed) -> Placed:
        """Count one finished batch; returns it."""
        self.unscored += sum(
            1 for _, outcome in placed
            if isinstance(outcome, GradeResult) and outcome.status != "scored"
        )
        self.bar.update(len(placed))
        if self.unscored:
            self.bar.set_postfix(unscored=self.unscored, refresh=False)
        return placed
