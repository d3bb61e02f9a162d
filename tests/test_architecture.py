"""The house rules of the package layout that import-linter's contracts do not cover.

import-linter (`lint-imports`, in the test command) keeps the layers and forbidden imports. What
it does not check is a circle inside one package: two modules (or subpackages) that import each
other, lazily or for types only. grimp, which import-linter is built on, finds them.
"""

from __future__ import annotations

import grimp
import pytest

PROJECT = ("core", "rubrics", "judge", "calibration", "api", "cli", "standins")


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph(*PROJECT)


def packages(graph: grimp.ImportGraph) -> list[str]:
    modules = graph.modules
    return sorted(m for m in modules if any(x.startswith(m + ".") for x in modules))


def test_the_project_has_its_packages(graph: grimp.ImportGraph) -> None:
    found = packages(graph)
    assert {"judge", "judge.providers", "judge.matcher", "judge.metrics", "calibration.fit",
            "api.jobs", "api.services", "standins"} <= set(found)  # fmt: skip


def test_no_import_cycle_inside_any_package(graph: grimp.ImportGraph) -> None:
    cycles = {
        pkg: breakers
        for pkg in packages(graph)
        if (breakers := graph.nominate_cycle_breakers(pkg))
    }
    assert cycles == {}, f"imports to remove to break the cycles: {cycles}"
