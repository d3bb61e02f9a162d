"""The eight shared human-rated sets load cleanly (skipped where /work/shared is absent)."""

from pathlib import Path
from typing import Any

import pytest

import calibration.sets.registry
from calibration.sets import (
    SHARED_SETS,
    LoadedSet,
    find_calibration_dir,
    load_set,
    load_shared_set,
)

SHARED = find_calibration_dir()
CHARTOM_LIKE = (SHARED.parent / "bench" / "chartom_like_1035.jsonl") if SHARED else None


@pytest.mark.skipif(SHARED is None, reason="shared calibration folder absent")
@pytest.mark.parametrize("name", sorted(SHARED_SETS))
def test_shared_set_loads_without_problems(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    entry = SHARED_SETS[name]
    assert SHARED is not None
    if not (SHARED / entry.path).is_file():
        pytest.skip(f"{entry.path} absent")
    loaded = load_shared_set(name, directory=SHARED)
    assert [str(p) for p in loaded.problems] == []
    assert loaded.items
    assert loaded.scale is not None and loaded.scale.kind == entry.kind
    assert all(0.0 <= item.human_norm <= 1.0 for item in loaded.items)
    # By its path, the same file is read under the registry name. Asked of the loader rather
    # than read a second time: the file was just read, and evouna_tq alone is 10,000 lines.
    asked: list[tuple[Path, dict[str, Any]]] = []

    def load_set_spy(path: Path, **options: Any) -> LoadedSet:
        asked.append((path, options))
        return loaded

    monkeypatch.setattr(calibration.sets.registry, "load_set", load_set_spy)
    assert load_shared_set(entry.path.removesuffix(".jsonl"), directory=SHARED) is loaded
    ((path, options),) = asked
    assert path == loaded.path and options["name"] == loaded.name == name


@pytest.mark.skipif(
    CHARTOM_LIKE is None or not CHARTOM_LIKE.is_file(), reason="shared bench file absent"
)
def test_chartom_like_bench_file() -> None:
    # No score_scale in this file; its NarrativeQA half is rated 0.2-1.0 (fits the 0-1 default)
    # and its MS MARCO half 1-5, so those lines are refused with a reason, not misread.
    assert CHARTOM_LIKE is not None
    loaded = load_set(CHARTOM_LIKE)
    assert loaded.items and all(item.format == "chartom" for item in loaded.items)
    assert all(item.dimension for item in loaded.items)
    assert all(item.bonus_points for item in loaded.items)
    assert all("no score_scale" in p.message for p in loaded.problems)
    assert len(loaded.items) + len(loaded.problems) == 1035
