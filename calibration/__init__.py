"""Calibration of the judge against human ratings: sets, agreement statistics, mappings, reports.

``sets`` loads human-rated sets (calibration JSONL or CharToM items with a human score) and
knows the shared sets; ``agreement`` computes statistics on judge and human scores joined by item
id; ``mapping`` fits a monotone judge-to-human mapping tied to one judge configuration;
``report`` writes the JSON/Markdown/PNG report. The names below are the public API.

scikit-learn, ``scipy.stats`` and matplotlib (about 3 s of CPU to import together) are imported
where they are first used, not at the top of the modules: loading a set or a mapping (the
service's calibration routes, a test session collecting) does not pay for them.
"""

from calibration.agreement import (
    AlphaResult,
    BinaryAgreement,
    Estimate,
    Joined,
    JoinError,
    KeyPointAgreement,
    LeftOut,
    MetricAgreement,
    PairAgreement,
    ThresholdCV,
    binary_agreement,
    bootstrap_ci,
    breakdown,
    correlation,
    cv_threshold,
    inter_annotator_agreement,
    join_scores,
    judge_vs_judge,
    keypoint_agreement,
    krippendorff_alpha,
    metric_agreement,
    test_retest,
)
from calibration.mapping import (
    CalibratedMapping,
    MappingConfigMismatch,
    cross_validate_mapping,
    fit_mapping,
    load_mapping,
)
from calibration.report import (
    CalibrationReport,
    ReportFiles,
    build_report,
    generate_report,
    render_markdown,
    write_report,
)
from calibration.sets import (
    CALIBRATION_DIR_ENV,
    SHARED_SETS,
    CalibrationItem,
    LoadedSet,
    Scale,
    find_calibration_dir,
    load_example_set,
    load_set,
    load_shared_set,
    parse_scale,
)

__all__ = [
    "CALIBRATION_DIR_ENV",
    "SHARED_SETS",
    "AlphaResult",
    "BinaryAgreement",
    "CalibratedMapping",
    "CalibrationItem",
    "CalibrationReport",
    "Estimate",
    "JoinError",
    "Joined",
    "KeyPointAgreement",
    "LeftOut",
    "LoadedSet",
    "MappingConfigMismatch",
    "MetricAgreement",
    "PairAgreement",
    "ReportFiles",
    "Scale",
    "ThresholdCV",
    "binary_agreement",
    "bootstrap_ci",
    "breakdown",
    "build_report",
    "correlation",
    "cross_validate_mapping",
    "cv_threshold",
    "find_calibration_dir",
    "fit_mapping",
    "generate_report",
    "inter_annotator_agreement",
    "join_scores",
    "judge_vs_judge",
    "keypoint_agreement",
    "krippendorff_alpha",
    "load_example_set",
    "load_mapping",
    "load_set",
    "load_shared_set",
    "metric_agreement",
    "parse_scale",
    "render_markdown",
    "test_retest",
    "write_report",
]
