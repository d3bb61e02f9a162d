"""The cascade band's fit (issue 32.4) and its section of the matcher's parameter file."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from calibration.fit.cascade import KindRows, fit_band, out_of_fold, set_table
from core.errors import ConfigError
from judge.matcher import PARAMS_PATH, CascadeBand, load_params


def rows(n: int = 600, seed: int = 3) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """People agree with the matcher below 0.2 and above 0.8, and half the time between."""
    rng = np.random.default_rng(seed)
    p = rng.uniform(0, 1, n)
    positive = np.where(p < 0.2, False, np.where(p > 0.8, True, rng.uniform(0, 1, n) < 0.5))
    return p, positive, np.ones(n)


def agreement(p: np.ndarray, positive: np.ndarray, band: tuple[float, float], t: float) -> float:
    sure = (p < band[0]) | (p > band[1])
    return float(((p >= t) == positive)[sure].mean())


def test_the_band_keeps_the_sure_verdicts_at_the_target_and_no_more_unsure_than_needed() -> None:
    p, positive, w = rows()
    low, high = fit_band(p, positive, w, 0.5, 0.95)
    assert 0.0 <= low <= 0.5 <= high <= 1.0
    assert agreement(p, positive, (low, high), 0.5) >= 0.95
    # The perfectly agreeing zones are sure (the edges at most a grid step inside them) and
    # little of the mixed middle is.
    assert 0.18 <= low <= 0.3 and 0.7 <= high <= 0.82
    stricter = fit_band(p, positive, w, 0.5, 0.99)
    assert stricter[0] <= low and stricter[1] >= high


def test_weights_make_a_set_count_as_its_weight_not_its_rows() -> None:
    # A large set the matcher gets right everywhere, a small one mixed in the middle.
    easy = np.linspace(0, 1, 4000)
    hard, hard_positive, _ = rows(200)
    p = np.concatenate([easy, hard])
    positive = np.concatenate([easy >= 0.5, hard_positive])
    by_rows = fit_band(p, positive, np.ones(len(p)), 0.5, 0.95)
    by_sets = fit_band(p, positive, np.concatenate([np.full(4000, 1 / 4000),
                                                    np.full(200, 1 / 200)]), 0.5, 0.95)
    # Counted by rows, the easy set buys a sure zone the small set pays for.
    assert by_sets[1] - by_sets[0] > by_rows[1] - by_rows[0] + 0.2
    assert agreement(hard, hard_positive, by_sets, 0.5) > (
        agreement(hard, hard_positive, by_rows, 0.5) + 0.05
    )


def test_an_unreachable_target_makes_nothing_sure() -> None:
    p = np.linspace(0, 1, 200)
    positive = np.arange(200) % 2 == 0  # people at random
    assert fit_band(p, positive, np.ones(200), 0.5, 0.95) == (0.0, 1.0)
    assert not CascadeBand(0.0, 1.0).sure(0.0) and not CascadeBand(0.0, 1.0).sure(1.0)


def test_the_reported_figures_use_bands_chosen_without_the_rows_fold() -> None:
    p, positive, w = rows()
    n = len(p)
    data = KindRows(
        kind="full", threshold=0.5, sets=np.array(["a"] * (n // 2) + ["b"] * (n - n // 2)),
        items=np.array([str(i // 2) for i in range(n)]), probability=p, positive=positive,
        weight=w, fold=np.arange(n) % 5, train=np.ones(n, dtype=bool),
    )  # fmt: skip
    sure = out_of_fold(data, 0.95)
    table = set_table(data, sure)
    assert [row["set"] for row in table] == ["a", "b"]
    for row in table:
        assert 0.0 < row["routed"] < 1.0 and row["sure_agreement"] >= 0.9
        # Two rows per answer: an answer goes to the LLM when either row is unsure.
        assert row["answers"] == row["points"] // 2 and row["answers_routed"] >= row["routed"]


def test_the_shipped_bands_load_around_each_threshold() -> None:
    params = load_params()
    assert params.cascade is not None
    bands = params.cascade.at(0.95)
    for kind, band in bands.items():
        assert band.low <= params.model(kind).threshold <= band.high
    with pytest.raises(ConfigError, match=r"no cascade band is fitted for agreement 0\.8"):
        params.cascade.at(0.8)


def test_a_band_across_the_threshold_is_refused(tmp_path: Path) -> None:
    data = json.loads(PARAMS_PATH.read_text(encoding="utf-8"))
    threshold = data["full"]["threshold"]
    data["cascade"]["bands"]["0.95"]["full"] = [threshold + 0.01, 0.9]
    path = tmp_path / "params.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(ConfigError, match=r"cascade.bands.0.95.full must be \[low, high\]"):
        load_params(path)
    del data["cascade"]
    path.write_text(json.dumps(data), encoding="utf-8")
    assert load_params(path).cascade is None
