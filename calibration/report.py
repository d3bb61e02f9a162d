"""The calibration report: every agreement figure for one set, as JSON, Markdown and plots.

Input is a calibration set, the judge configurations (name -> settings, with hash), and per
metric the judge's score for each item (``None`` when unscored, with a reason), optionally
per-point verdicts and defect flags for K-QA key-point sets, and a second run per metric for
test-retest. :func:`build_report` computes everything (deterministic given ``seed``);
:func:`write_report` writes ``report.json``, ``report.md`` (the CharToM-QA paper's Table 7
layout: metrics side by side as columns, a "Human correlation" row), PNG plots drawn with
matplotlib's Agg backend, and one calibrated-mapping JSON file per metric.
"""

from __future__ import annotations

import hashlib
import json
import re
import textwrap
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from calibration.agreement import (
    JoinError,
    MetricAgreement,
    Objective,
    breakdown,
    inter_annotator_agreement,
    judge_vs_judge,
    metric_agreement,
    test_retest,
    to_jsonable,
)
from calibration.mapping import (
    CalibratedMapping,
    MappingCV,
    fit_mapping_with_cv,
    reliability_bins,
)
from calibration.sets import ANNOTATOR_META_KEYS, CalibrationItem, LoadedSet
from core import markdown
from core.errors import ConfigError, InputError

if TYPE_CHECKING:  # matplotlib loads when a figure is drawn: see calibration/__init__
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
    from matplotlib.transforms import BboxBase

__all__ = [
    "DEFAULT_GROUP_FIELDS",
    "REPORT_FORMAT_VERSION",
    "CalibrationReport",
    "ReportFiles",
    "build_report",
    "config_hash",
    "generate_report",
    "render_markdown",
    "write_report",
]

REPORT_FORMAT_VERSION = 1
"""Version of ``report.json``'s layout."""

DEFAULT_GROUP_FIELDS: tuple[str, ...] = ("source", "dimension", "system", "key_point_category")
"""Fields broken down by default, when the items have at least two values for them."""

# Keys whose values never belong in a report, whatever a caller's config dict holds.
_SECRET_KEY = re.compile(r"(api_?key|secret|password|(?<!max_)tokens?$|^token)", re.I)
# Up to this many distinct values, an axis is treated as discrete and jittered in scatter plots.
_JITTER_LEVELS = 12


def _redact(config: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in config.items():
        if _SECRET_KEY.search(str(key)):
            out[str(key)] = None if value is None else "***"
        elif isinstance(value, Mapping):
            out[str(key)] = _redact(value)
        else:
            out[str(key)] = value
    return out


def _configuration_cell(entry: Mapping[str, Any]) -> str:
    """The report table's configuration cell: name, judge version when there is one, hash."""
    if not entry["config"]:
        return "—"
    version = entry.get("judge_version")
    return f"{entry['config']}{f' {version}' if version else ''} (`{entry['config_hash']}`)"


def config_hash(config: Mapping[str, Any]) -> str:
    """The hash of a judge configuration.

    Uses the dict's own ``config_hash`` when it has one (as ``JudgeConfig.config_hash()``
    produces), else the first 16 hex digits of SHA-256 over its canonical JSON, secrets
    excluded.

    Raises:
        ConfigError: When the config cannot be serialised to JSON.
    """
    own = config.get("config_hash")
    if isinstance(own, str) and own:
        return own
    try:
        blob = json.dumps(_redact(config), sort_keys=True, ensure_ascii=False, default=str)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"judge configuration is not JSON-serialisable: {exc}") from exc
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


@dataclass
class CalibrationReport:
    """A computed report: the JSON data, the fitted mappings, and what the plots need.

    Attributes:
        data: Everything ``report.json`` holds.
        mappings: Calibrated mapping per metric (metrics linked to a configuration only).
        points: Per metric, the joined (ids, judge scores, raw human scores) for scatter plots.
        cv: Per metric, the mapping's cross-validated predictions for reliability diagrams.
    """

    data: dict[str, Any]
    mappings: dict[str, CalibratedMapping] = field(default_factory=dict)
    points: dict[str, tuple[list[str], list[float], list[float]]] = field(default_factory=dict)
    cv: dict[str, MappingCV] = field(default_factory=dict)


@dataclass(frozen=True)
class ReportFiles:
    """Files written by :func:`write_report`.

    Attributes:
        json: ``report.json``.
        markdown: ``report.md``.
        plots: PNG files.
        mappings: Calibrated-mapping JSON files.
    """

    json: Path
    markdown: Path
    plots: tuple[Path, ...]
    mappings: tuple[Path, ...]


def _auto_groups(items: Sequence[CalibrationItem], fields: Sequence[str] | None) -> list[str]:
    chosen = DEFAULT_GROUP_FIELDS if fields is None else tuple(fields)
    out = []
    for name in chosen:
        values = {item.group(name) for item in items} - {None}
        # An explicitly requested field is kept even with one value; defaults need two.
        if len(values) >= 2 or (fields is not None and values):
            out.append(name)
    return out


def _metric_config(
    metric: str, configs: Mapping[str, Any], metric_configs: Mapping[str, str] | None
) -> str | None:
    if metric_configs is not None and metric in metric_configs:
        name = metric_configs[metric]
        if name not in configs:
            raise ConfigError(
                f"metric {metric!r} is linked to unknown configuration {name!r}",
                field=f"metric_configs.{metric}",
            )
        return name
    if metric in configs:
        return metric
    if len(configs) == 1:
        return next(iter(configs))
    return None


def _agreement_json(result: MetricAgreement) -> dict[str, Any]:
    data: dict[str, Any] = to_jsonable(result, drop=lambda name: name in ("left_out", "folds"))
    if result.binary is not None:
        # Keep per-fold thresholds (they show the threshold moves between folds), not indices.
        data["binary"]["cv"]["folds"] = [
            {"fold": f.fold, "threshold": f.threshold, "n_test": len(f.test_indices),
             "accuracy": f.accuracy}
            for f in result.binary.cv.folds
        ]  # fmt: skip
    return data


def _system_means(
    items: Sequence[CalibrationItem],
    scores: Mapping[str, Mapping[str, float | None]],
) -> dict[str, dict[str, float | int | None]]:
    """Mean normalised human score and mean judge score per metric, per system and overall."""
    groups: dict[str, list[CalibrationItem]] = {}
    for item in items:
        if item.system is not None:
            groups.setdefault(item.system, []).append(item)
    rows: dict[str, list[CalibrationItem]] = {k: groups[k] for k in sorted(groups)}
    rows["All"] = list(items)
    out: dict[str, dict[str, float | int | None]] = {}
    for name, members in rows.items():
        row: dict[str, float | int | None] = {
            "n": len(members),
            "human": float(np.mean([m.human_norm for m in members])),
        }
        for metric, per_item in scores.items():
            values = [per_item.get(m.id) for m in members]
            known = [float(v) for v in values if v is not None and np.isfinite(v)]
            row[metric] = float(np.mean(known)) if known else None
        out[name] = row
    return out


@dataclass(frozen=True)
class _Run:
    """What every metric of one report is measured against, and with which options."""

    items: Sequence[CalibrationItem]
    set_name: str
    set_hash: str
    configs: Mapping[str, Mapping[str, Any]]
    config_info: dict[str, dict[str, Any]]
    metric_configs: Mapping[str, str] | None
    fields: list[str]
    seed: int
    n_resamples: int
    n_folds: int
    group_by_question: bool
    objective: Objective

    @property
    def common(self) -> dict[str, Any]:
        """The bootstrap options shared by every figure with an interval."""
        return {"n_resamples": self.n_resamples, "seed": self.seed}


def build_report(
    dataset: LoadedSet | Sequence[CalibrationItem],
    *,
    configs: Mapping[str, Mapping[str, Any]],
    scores: Mapping[str, Mapping[str, float | None]],
    unscored: Mapping[str, Mapping[str, str]] | None = None,
    point_verdicts: Mapping[str, Mapping[str, bool | None]] | None = None,
    defects: Mapping[str, Mapping[str, bool | None]] | None = None,
    metric_configs: Mapping[str, str] | None = None,
    retest: Mapping[str, Mapping[str, float | None]] | None = None,
    set_name: str | None = None,
    set_hash: str | None = None,
    group_fields: Sequence[str] | None = None,
    seed: int = 0,
    n_resamples: int = 1000,
    n_folds: int = 5,
    group_by_question: bool = True,
    objective: Objective = "accuracy",
) -> CalibrationReport:
    """Compute every figure of the calibration report.

    Args:
        dataset: The loaded set, or its items (then ``set_name`` and ``set_hash`` are required).
        configs: Judge configurations by name (a ``config_hash`` key is used when present).
        scores: Per metric, the judge's score per item id (``None`` = unscored).
        unscored: Per metric, why each unscored item is unscored.
        point_verdicts: Per metric, per-point "covered" verdicts (K-QA key-point sets).
        defects: Per metric, whether the judge found a defect in each item's answer.
        metric_configs: Which configuration each metric belongs to (default: the config of
            the same name, or the only config).
        retest: Per metric, a second run of the same configuration (test-retest).
        set_name: The set's name (default: the loaded set's).
        set_hash: The set file's SHA-256 (default: the loaded set's).
        group_fields: Fields to break down by (default: :data:`DEFAULT_GROUP_FIELDS` that have
            two or more values).
        seed: Seed of every bootstrap and fold split: same seed, same report.
        n_resamples: Bootstrap resamples per interval.
        n_folds: Cross-validation folds (thresholds and mappings).
        group_by_question: Keep each question's candidates within one fold.
        objective: What the cross-validated threshold maximises.

    Returns:
        The report data, fitted mappings, and plot inputs.

    Raises:
        InputError: Missing set name/hash, no metrics, or scores that cannot be joined (the
            message names the metric).
        ConfigError: A metric linked to an unknown configuration.
    """
    items, name, digest, n_problems = _read_set(dataset, set_name, set_hash)
    if not scores:
        raise InputError("no metric scores given", field="scores")
    run = _Run(
        items=items, set_name=name, set_hash=digest, configs=configs,
        config_info=_config_info(configs), metric_configs=metric_configs,
        fields=_auto_groups(items, group_fields), seed=seed, n_resamples=n_resamples,
        n_folds=n_folds, group_by_question=group_by_question, objective=objective,
    )  # fmt: skip
    report = CalibrationReport(data={})
    reasons = unscored or {}
    metrics_json: dict[str, Any] = {}
    for metric, per_item in scores.items():
        metrics_json[metric] = _metric_entry(
            report, run, metric, per_item, reasons.get(metric),
            (point_verdicts or {}).get(metric), (defects or {}).get(metric),
        )  # fmt: skip
    pairs = _judge_pairs(run, scores, reasons)
    retest_json = _retests(run, scores, retest or {})
    report.data = _report_data(run, n_problems, scores, metrics_json, pairs, retest_json)
    return report


def _read_set(
    dataset: LoadedSet | Sequence[CalibrationItem], set_name: str | None, set_hash: str | None
) -> tuple[Sequence[CalibrationItem], str, str, int]:
    """The items, name, hash and count of lines not loaded of the set a report is about."""
    if isinstance(dataset, LoadedSet):
        items: Sequence[CalibrationItem] = dataset.items
        name = set_name or dataset.name
        digest = set_hash or dataset.sha256
        n_problems = len(dataset.problems)
    else:
        items = list(dataset)
        if not set_name or not set_hash:
            raise InputError("set_name and set_hash are required with plain items", field="set")
        name, digest, n_problems = set_name, set_hash, 0
    if not items:
        raise InputError(f"calibration set {name!r} has no items", field="dataset")
    return items, name, digest, n_problems


def _config_info(configs: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each judge configuration as the report shows it: hash, version, redacted settings."""
    return {
        cname: {
            "hash": config_hash(cfg),
            "judge_version": cfg.get("judge_version"),
            # Apart from the redacted config: its `tokenizer` would read as a secret there.
            "metric_settings": cfg.get("metric_settings") or {},
            "config": _redact({k: v for k, v in cfg.items() if k != "metric_settings"}),
        }
        for cname, cfg in configs.items()
    }


def _metric_entry(
    report: CalibrationReport,
    run: _Run,
    metric: str,
    per_item: Mapping[str, float | None],
    reasons: Mapping[str, str] | None,
    point_verdicts: Mapping[str, bool | None] | None,
    defects: Mapping[str, bool | None] | None,
) -> dict[str, Any]:
    """One metric's part of the report: agreement, per group, left out, mapping.

    Records the metric's scatter points (and its mapping, when one is fitted) in ``report``.
    """
    cname = _metric_config(metric, run.configs, run.metric_configs)
    # The whole set and each of its groups are measured with the same options.
    options: dict[str, Any] = {
        "metric": metric,
        "unscored_reasons": reasons,
        "point_verdicts": point_verdicts,
        "defects": defects,
        "n_folds": run.n_folds,
        "group_by_question": run.group_by_question,
        "objective": run.objective,
        **run.common,
    }
    try:
        result = metric_agreement(run.items, per_item, **options)
        groups = {
            group: {
                value: _agreement_json(stats)
                for value, stats in breakdown(run.items, per_item, group, **options).items()
            }
            for group in run.fields
        }
    except JoinError as exc:
        raise InputError(f"metric {metric!r}: {exc}", field=f"scores.{metric}") from exc
    report.points[metric] = _joined_points(run.items, per_item)
    entry: dict[str, Any] = {
        "config": cname,
        "config_hash": run.config_info[cname]["hash"] if cname else None,
        "judge_version": run.config_info[cname]["judge_version"] if cname else None,
        "agreement": _agreement_json(result),
        "by_group": groups,
        "left_out": [to_jsonable(x) for x in result.left_out],
    }
    entry["mapping"] = _fit_mapping_entry(report, run, metric, per_item, reasons, cname)
    return entry


def _joined_points(
    items: Sequence[CalibrationItem], per_item: Mapping[str, float | None]
) -> tuple[list[str], list[float], list[float]]:
    """The (ids, judge scores, raw human scores) of the items the judge scored, for a scatter."""
    by_id = {item.id: item for item in items}
    joined_ids = [i for i in by_id if (v := per_item.get(i)) is not None and np.isfinite(float(v))]
    return (
        joined_ids,
        [float(per_item[i] or 0.0) for i in joined_ids],
        [by_id[i].human_score for i in joined_ids],
    )


def _judge_pairs(
    run: _Run,
    scores: Mapping[str, Mapping[str, float | None]],
    unscored: Mapping[str, Mapping[str, str]],
) -> list[Any]:
    """Judge-vs-judge agreement for every pair of metrics, in name order."""
    pairs = []
    for left, right in combinations(sorted(scores), 2):
        pair = judge_vs_judge(
            scores[left],
            scores[right],
            names=(left, right),
            unscored_reasons=(unscored.get(left), unscored.get(right)),
            **run.common,
        )
        pairs.append(to_jsonable(pair))
    return pairs


def _retests(
    run: _Run,
    scores: Mapping[str, Mapping[str, float | None]],
    retest: Mapping[str, Mapping[str, float | None]],
) -> dict[str, Any]:
    """Test-retest agreement per metric that was run twice."""
    out = {}
    for metric, second in retest.items():
        if metric not in scores:
            raise InputError(f"retest run for unknown metric {metric!r}", field=f"retest.{metric}")
        out[metric] = to_jsonable(test_retest(scores[metric], second, name=metric, **run.common))
    return out


def _human_ceiling(items: Sequence[CalibrationItem]) -> dict[str, Any]:
    """Inter-annotator agreement, or a note saying why the set cannot give it."""
    ceiling = inter_annotator_agreement(items)
    if ceiling is not None:
        return {**to_jsonable(ceiling), "from": _annotators_from(items)}
    return {
        "alpha": None,
        "level": items[0].scale.level,
        "note": "no per-annotator scores in set (annotator_scores, or meta."
        + ", meta.".join(ANNOTATOR_META_KEYS)
        + " or meta.rater_*)",
    }


def _report_data(
    run: _Run,
    n_problems: int,
    scores: Mapping[str, Mapping[str, float | None]],
    metrics_json: dict[str, Any],
    pairs: list[Any],
    retest_json: dict[str, Any],
) -> dict[str, Any]:
    """``report.json``'s data, its sections in their order (plots are added when written)."""
    return {
        "format_version": REPORT_FORMAT_VERSION,
        "set": {
            "name": run.set_name,
            "hash": run.set_hash,
            "n_items": len(run.items),
            "n_problems": n_problems,
            "scale": run.items[0].scale.describe(),
        },
        "options": {
            "seed": run.seed,
            "n_resamples": run.n_resamples,
            "confidence": 0.95,
            "n_folds": run.n_folds,
            "group_by_question": run.group_by_question,
            "threshold_objective": run.objective,
            "group_fields": run.fields,
        },
        "configs": run.config_info,
        "metrics": metrics_json,
        "human_ceiling": _human_ceiling(run.items),
        "judge_vs_judge": pairs,
        "test_retest": retest_json,
        "table7": _system_means(run.items, scores),
        "plots": {},
    }


def _annotators_from(items: Sequence[CalibrationItem]) -> str | None:
    """Where the set's per-annotator ratings were read (``meta.rater_correctness``...)."""
    places = sorted({i.annotator_scores_from for i in items if i.annotator_scores_from})
    return ", ".join(places) or None


def _fit_mapping_entry(
    report: CalibrationReport,
    run: _Run,
    metric: str,
    per_item: Mapping[str, float | None],
    reasons: Mapping[str, str] | None,
    cname: str | None,
) -> dict[str, Any]:
    """Fit the metric's calibrated mapping (recorded in ``report``); its part of the report."""
    if cname is None:
        return {"note": "no judge configuration linked to this metric: no mapping fitted"}
    options: dict[str, Any] = {
        "unscored_reasons": reasons,
        "n_folds": run.n_folds,
        "seed": run.seed,
        "group_by_question": run.group_by_question,
    }
    info = run.config_info[cname]
    try:
        mapping, cv = fit_mapping_with_cv(
            run.items,
            per_item,
            judge_config_hash=str(info["hash"]),
            judge_version=info["judge_version"],
            # ROUGE-L and BERTScore: keyed by the metric's own settings, not by the judge.
            metric_config=info["metric_settings"].get(metric),
            set_name=run.set_name,
            set_hash=run.set_hash,
            metric=metric,
            **options,
        )
    except InputError as exc:
        return {"note": f"no mapping: {exc}"}
    report.mappings[metric] = mapping
    report.cv[metric] = cv
    data: dict[str, Any] = mapping.model_dump(mode="json")
    data["reliability"] = to_jsonable(reliability_bins(cv.predicted, cv.human))
    return data


# --- writing ------------------------------------------------------------------------------------


def _slug(name: str, taken: set[str]) -> str:
    base = re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("._") or "metric"
    slug, n = base, 2
    while slug in taken:
        slug, n = f"{base}_{n}", n + 1
    taken.add(slug)
    return slug


def _new_figure(width: float, height: float) -> Figure:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(figure)  # Agg explicitly: no GUI backend, no pyplot global state.
    return figure


_MIN_WRAP = 12
"""Fewest characters a wrapped title line keeps before its font is made smaller instead."""


def _inside(box: BboxBase, frame: BboxBase) -> bool:
    """Whether ``box`` lies within ``frame`` (to half a pixel: rounding is no overflow)."""
    return bool(
        box.x0 >= frame.x0 - 0.5 and box.x1 <= frame.x1 + 0.5
        and box.y0 >= frame.y0 - 0.5 and box.y1 <= frame.y1 + 0.5
    )


def _lay_out(figure: Figure, axes: Axes) -> None:
    """Lay out ``figure`` so that its title and axis labels lie wholly inside it.

    ``tight_layout`` makes room around the axes but never shortens a text: a title wider than
    the figure (a long metric name, as "coverage@openai/..." makes) was cut at both edges. Each
    text still outside is wrapped onto narrower lines (always from its own words, so a break
    never adds a space), then, once its lines are short, set smaller, until all fit.
    """
    texts = [text for text in (axes.title, axes.xaxis.label, axes.yaxis.label) if text.get_text()]
    words = {text: text.get_text() for text in texts}
    widths = {text: len(words[text]) for text in texts}
    for _ in range(40):
        figure.tight_layout()
        renderer = figure.canvas.get_renderer()  # type: ignore[attr-defined]
        outside = [
            text for text in texts
            if not _inside(text.get_window_extent(renderer), figure.bbox)
        ]
        if not outside:
            return
        for text in outside:
            if widths[text] > _MIN_WRAP:
                widths[text] = max(_MIN_WRAP, int(widths[text] * 0.8))
                # break_long_words (the default): coverage@openai/NAME has no space to break at.
                text.set_text(textwrap.fill(words[text], widths[text]))
            else:
                text.set_fontsize(max(5.0, float(text.get_fontsize()) - 1.0))


def _jitter(values: np.ndarray[Any, Any], rng: np.random.Generator) -> np.ndarray[Any, Any]:
    levels = np.unique(values)
    if len(levels) > _JITTER_LEVELS or len(values) == 0:
        return values
    span = float(np.ptp(values)) or 1.0
    return values + rng.uniform(-0.02 * span, 0.02 * span, size=len(values))


def _scatter_png(
    path: Path, metric: str, report: CalibrationReport, rng: np.random.Generator
) -> Figure:
    _, judge, human = report.points[metric]
    x = _jitter(np.asarray(judge, dtype=float), rng)
    y = _jitter(np.asarray(human, dtype=float), rng)
    agreement = report.data["metrics"][metric]["agreement"]
    r = agreement["pearson"]["value"]
    figure = _new_figure(5.0, 4.0)
    axes = figure.add_subplot()
    axes.scatter(x, y, s=12, alpha=0.5, edgecolors="none")
    axes.set_xlabel(f"{metric} (judge score)")
    scale = report.data["set"]["scale"]
    axes.set_ylabel(f"human score ({scale['lo']:g}-{scale['hi']:g})")
    r_text = "n/a" if r is None else f"{r:.3f}"
    axes.set_title(
        f"{metric}: Pearson r = {r_text} (n = {agreement['n']}, unscored = "
        f"{agreement['n_unscored']})",
        fontsize=9,
    )
    axes.grid(alpha=0.3)
    _lay_out(figure, axes)
    figure.savefig(path, format="png", metadata={"Software": None})
    return figure


def _reliability_png(path: Path, metric: str, report: CalibrationReport) -> Figure:
    cv = report.cv[metric]
    figure = _new_figure(4.5, 4.5)
    axes = figure.add_subplot()
    axes.plot([0, 1], [0, 1], linestyle="--", color="grey", linewidth=1, label="perfect")
    series = [("calibrated (held-out)", cv.predicted)]
    if cv.judge.min() >= 0.0 and cv.judge.max() <= 1.0:
        series.append(("raw judge score", cv.judge))
    for label, predicted in series:
        # Empty bins have no means; n > 0 guarantees both are floats.
        bins = [b for b in reliability_bins(predicted, cv.human) if b.n]
        axes.plot(
            [float(b.mean_predicted or 0.0) for b in bins],
            [float(b.mean_observed or 0.0) for b in bins],
            marker="o",
            label=label,
        )
    mapping = report.mappings[metric]
    primary = mapping.cv.primary
    axes.set_title(
        f"{metric}: CV {primary} {getattr(mapping.cv.mapped, primary):.3f} "
        f"(constant {getattr(mapping.cv.constant, primary):.3f})",
        fontsize=9,
    )
    axes.set_xlabel("predicted human score (0-1)")
    axes.set_ylabel("mean human score (0-1)")
    axes.set_xlim(0, 1)
    axes.set_ylim(0, 1)
    axes.legend(fontsize=8, loc="upper left")
    axes.grid(alpha=0.3)
    _lay_out(figure, axes)
    figure.savefig(path, format="png", metadata={"Software": None})
    return figure


def write_report(report: CalibrationReport, out_dir: str | Path) -> ReportFiles:
    """Write ``report.json``, ``report.md``, the PNG plots and the mapping files.

    Plots: one scatter per metric (judge score vs human score, jittered when an axis has few
    levels) and one reliability diagram per fitted mapping (held-out predictions).

    Args:
        report: From :func:`build_report`.
        out_dir: The report folder (created when missing).
    """
    folder = Path(out_dir)
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(report.data["options"]["seed"])
    taken: set[str] = set()
    plots: list[Path] = []
    mapping_files: list[Path] = []
    plot_index: dict[str, dict[str, str]] = {"scatter": {}, "reliability": {}}
    for metric in report.data["metrics"]:
        slug = _slug(metric, taken)
        scatter = folder / f"scatter_{slug}.png"
        _scatter_png(scatter, metric, report, rng)
        plots.append(scatter)
        plot_index["scatter"][metric] = scatter.name
        if metric in report.mappings:
            reliability = folder / f"reliability_{slug}.png"
            _reliability_png(reliability, metric, report)
            plots.append(reliability)
            plot_index["reliability"][metric] = reliability.name
            target = folder / "mappings" / f"{slug}.json"
            mapping_files.append(report.mappings[metric].save(target))
            report.data["metrics"][metric]["mapping"]["file"] = f"mappings/{target.name}"
    report.data["plots"] = plot_index
    json_path = folder / "report.json"
    json_path.write_text(
        json.dumps(report.data, indent=2, sort_keys=False, ensure_ascii=False) + "\n",
        encoding="utf-8",
    )
    md_path = folder / "report.md"
    md_path.write_text(render_markdown(report.data), encoding="utf-8")
    return ReportFiles(json_path, md_path, tuple(plots), tuple(mapping_files))


def generate_report(out_dir: str | Path, dataset: LoadedSet, **kwargs: Any) -> ReportFiles:
    """:func:`build_report` then :func:`write_report` (keyword arguments go to the former)."""
    return write_report(build_report(dataset, **kwargs), out_dir)


# --- Markdown -----------------------------------------------------------------------------------


def _get(data: Any, *path: str) -> Any:
    """``data[path[0]][path[1]]...``, or ``None`` as soon as a level is missing or null."""
    for key in path:
        if not isinstance(data, Mapping):
            return None
        data = data.get(key)
    return data


def _num(value: float | None, digits: int = 3) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def _est(estimate: Mapping[str, Any] | None) -> str:
    if not estimate or estimate.get("value") is None:
        return "—"
    text = _num(estimate["value"])
    if estimate.get("ci_low") is not None and estimate.get("ci_high") is not None:
        text += f" [{_num(estimate['ci_low'])}, {_num(estimate['ci_high'])}]"
    return text


def _percent_metrics(data: Mapping[str, Any]) -> set[str]:
    """Metrics whose means lie in 0..1 everywhere, shown as percentages like the paper."""
    out = set()
    for metric in data["metrics"]:
        values = [row.get(metric) for row in data["table7"].values()]
        if all(v is None or 0.0 <= v <= 1.0 for v in values):
            out.add(metric)
    return out


def render_markdown(data: Mapping[str, Any]) -> str:
    """Render ``report.json``'s data as Markdown (Table 7 layout: metrics as columns).

    Args:
        data: The report data (``CalibrationReport.data`` or a loaded ``report.json``).
    """
    metrics = list(data["metrics"])
    lines = [
        *_md_intro(data),
        *_md_table7(data, metrics),
        *_md_agreement(data, metrics),
        *_md_ceiling(data["human_ceiling"]),
    ]
    for group in data["options"]["group_fields"]:
        lines += _md_group(data, metrics, group)
    lines += _md_judge_vs_judge(data["judge_vs_judge"])
    lines += _md_test_retest(data["test_retest"])
    lines += _md_configurations(data["configs"])
    lines += _md_plots(data.get("plots") or {})
    return "\n".join(lines) + "\n"


def _md_intro(data: Mapping[str, Any]) -> list[str]:
    """The title, the set (name, hash, size, scale) and the options the figures used."""
    info = data["set"]
    options = data["options"]
    scale = info["scale"]
    return [
        f"# Calibration report: {info['name']}",
        "",
        f"Set `{info['name']}` (sha256 `{info['hash'][:16]}`), {info['n_items']} items"
        + (f", {info['n_problems']} lines not loaded" if info.get("n_problems") else "")
        + f"; human scale: {scale['kind']} {scale['lo']:g}-{scale['hi']:g} ({scale['text']}).",
        f"Seed {options['seed']}, {options['n_resamples']} bootstrap resamples (95% percentile "
        f"intervals), {options['n_folds']} folds"
        + (", grouped by question" if options["group_by_question"] else "")
        + ".",
    ]


def _md_table7(data: Mapping[str, Any], metrics: Sequence[str]) -> list[str]:
    """Mean scores per system, metrics as columns, and the "Human correlation" row."""
    percent = _percent_metrics(data)
    rows = []
    for system, row in data["table7"].items():
        cells = [system, str(row["n"]), _num(100 * row["human"], 1)]
        for metric in metrics:
            value = row.get(metric)
            cells.append(
                _num(None if value is None else 100 * value, 1)
                if metric in percent
                else _num(value)
            )
        rows.append(cells)
    rows.append(
        ["**Human correlation** (Pearson)", "", ""]
        + [_est(data["metrics"][m]["agreement"]["pearson"]) for m in metrics]
    )
    return [
        "",
        "## Scores and human correlation (CharToM-QA Table 7 layout)",
        "",
        *markdown.table(["System", "n", "Human", *metrics], rows),
        "",
        "Human and 0-1 metrics are shown x100 (mean per system); other metrics as raw means.",
    ]


# The binary rows (when a metric has a binary analysis) and the key-point rows (K-QA sets) of
# the agreement table: (label, key) under agreement.binary.cv and agreement.keypoints.
_BINARY_ROWS = (
    ("Accuracy @ CV threshold", "accuracy"),
    ("F1 @ CV threshold", "f1"),
    ("Cohen's kappa @ CV threshold", "kappa"),
    ("Threshold (all data, to deploy)", "threshold_all_data"),
)
_KEYPOINT_ROWS = (
    ("Key-point accuracy", "accuracy"),
    ("Key-point Cohen's kappa", "kappa"),
    ("Contradicted points judged covered", "contradicted_judged_covered"),
    ("Contradicted points -> defect rate", "contradicted_defect_rate"),
    ("Other points -> defect rate", "other_defect_rate"),
)


def _md_agreement(data: Mapping[str, Any], metrics: Sequence[str]) -> list[str]:
    """The agreement-with-humans table (one row per figure, metrics as columns), and notes."""
    entries = [data["metrics"][m] for m in metrics]
    cells: list[tuple[str, Callable[[Mapping[str, Any]], str]]] = [
        ("Configuration", _configuration_cell),
        ("n (paired)", lambda e: str(e["agreement"]["n"])),
        ("Unscored", lambda e: str(e["agreement"]["n_unscored"])),
        ("Missing", lambda e: str(e["agreement"]["n_missing"])),
        ("Pearson [95% CI]", lambda e: _est(e["agreement"]["pearson"])),
        ("Spearman [95% CI]", lambda e: _est(e["agreement"]["spearman"])),
        ("Kendall tau-b [95% CI]", lambda e: _est(e["agreement"]["kendall"])),
    ]
    if any(e["agreement"]["binary"] for e in entries):
        cells.append(("AUROC [95% CI]", lambda e: _est(_get(e, "agreement", "binary", "auroc"))))
        cells += [
            (label, _number_at("agreement", "binary", "cv", key)) for label, key in _BINARY_ROWS
        ]
    if any(e["agreement"]["keypoints"] for e in entries):
        cells += [
            (label, _number_at("agreement", "keypoints", key)) for label, key in _KEYPOINT_ROWS
        ]
    cells.append(("Calibrated mapping (CV error)", _mapping_cell))
    rows = [[label] + [cell(e) for e in entries] for label, cell in cells]
    lines = ["", "## Agreement with human ratings", "", *markdown.table(["", *metrics], rows)]
    notes = [f"- {m}: {text}" for m, e in zip(metrics, entries, strict=True) for text in _notes(e)]
    if notes:
        lines += ["", "Notes:", *notes]
    return lines


def _number_at(*path: str) -> Callable[[Mapping[str, Any]], str]:
    """A cell showing the number at ``path`` in a metric's entry ("—" when it is missing)."""
    return lambda entry: _num(_get(entry, *path))


def _mapping_cell(entry: Mapping[str, Any]) -> str:
    """The calibrated mapping's cross-validated error, against a constant (and the raw score)."""
    cv = entry["mapping"].get("cv")
    if not cv:
        return "—"
    primary = cv["primary"]
    text = f"{primary} {_num(cv['mapped'][primary])} vs constant {_num(cv['constant'][primary])}"
    if cv.get("identity"):
        text += f", raw {_num(cv['identity'][primary])}"
    return text


def _md_ceiling(ceiling: Mapping[str, Any]) -> list[str]:
    """Inter-annotator agreement: the ceiling a judge's agreement is read against."""
    return [
        "",
        "## Human ceiling (inter-annotator agreement)",
        "",
        f"Krippendorff's alpha ({ceiling['level']}): {_num(ceiling.get('alpha'))}"
        + (
            f" over {ceiling['n_items']} items, up to {ceiling['n_annotators']} annotators"
            if ceiling.get("n_items")
            else ""
        )
        + (f", ratings from {ceiling['from']}" if ceiling.get("from") else "")
        + (f" ({ceiling['note']})" if ceiling.get("note") else "")
        + ".",
    ]


def _md_group(data: Mapping[str, Any], metrics: Sequence[str], group: str) -> list[str]:
    """Pearson (and AUROC) per value of one group field, metrics as columns."""
    by_metric = [data["metrics"][m]["by_group"][group] for m in metrics]
    values = sorted({v for per_value in by_metric for v in per_value})
    rows = [[value] + [_group_cell(per_value.get(value)) for per_value in by_metric]
            for value in values]  # fmt: skip
    return [
        "",
        f"## By {group}",
        "",
        *markdown.table([group, *(f"{m}: Pearson [CI]" for m in metrics)], rows),
    ]


def _group_cell(entry: Mapping[str, Any] | None) -> str:
    """One metric's agreement on one group value ("—" when it has no items there)."""
    if entry is None:
        return "—"
    text = f"{_est(entry['pearson'])} (n={entry['n']})"
    if entry.get("binary"):
        text += f"; AUROC {_num(entry['binary']['auroc']['value'])}"
    return text


def _md_judge_vs_judge(pairs: Sequence[Mapping[str, Any]]) -> list[str]:
    """Agreement between every two metrics (nothing when there is one metric)."""
    if not pairs:
        return []
    rows = [
        [
            f"{p['a']} vs {p['b']}",
            str(p["n"]),
            _est(p["pearson"]),
            _est(p["spearman"]),
            _num(p["kappa"]),
            _num(p["exact_agreement"]),
            _num(p["mean_abs_diff"]),
        ]
        for p in pairs
    ]
    header = ["Pair", "n", "Pearson [CI]", "Spearman [CI]", "kappa", "exact", "mean abs diff"]
    return ["", "## Judge vs judge", "", *markdown.table(header, rows)]


def _md_test_retest(retest: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Agreement of each metric run twice with itself (nothing when none was)."""
    if not retest:
        return []
    rows = [
        [m, str(p["n"]), _est(p["pearson"]), _num(p["exact_agreement"]), _num(p["mean_abs_diff"])]
        for m, p in retest.items()
    ]
    header = ["Metric", "n", "Pearson [CI]", "exact agreement", "mean abs diff"]
    return ["", "## Test-retest (same configuration twice)", "", *markdown.table(header, rows)]


def _md_configurations(configs: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Each judge configuration's name, hash and (redacted) settings."""
    rows = [
        [cname, f"`{c['hash']}`", f"`{json.dumps(c['config'], sort_keys=True)}`"]
        for cname, c in configs.items()
    ]
    return ["", "## Judge configurations", "", *markdown.table(["Name", "Hash", "Settings"], rows)]


def _md_plots(plots: Mapping[str, Mapping[str, str]]) -> list[str]:
    """Links to the scatter plots, then the reliability diagrams (nothing before writing)."""
    if not (plots.get("scatter") or plots.get("reliability")):
        return []
    return [
        "",
        "## Plots",
        "",
        *(
            f"![{kind} {metric}]({file})"
            for kind in ("scatter", "reliability")
            for metric, file in plots.get(kind, {}).items()
        ),
    ]


def _notes(entry: Mapping[str, Any]) -> list[str]:
    agreement = entry["agreement"]
    out = []
    for key in ("pearson", "spearman", "kendall"):
        note = agreement[key].get("note")
        if note:
            out.append(f"{key}: {note}")
    if agreement["unscored_reasons"]:
        reasons = ", ".join(f"{r} ({n})" for r, n in agreement["unscored_reasons"].items())
        out.append(f"unscored: {reasons}")
    binary = agreement.get("binary") or {}
    for key in ("auroc", "cv"):
        note = (binary.get(key) or {}).get("note")
        if note:
            out.append(f"{key}: {note}")
    if entry["mapping"].get("note"):
        out.append(str(entry["mapping"]["note"]))
    return out
