"""Human-rated calibration sets: the line format, the scale descriptor, loaders and the registry.

A calibration set is a JSONL file with one rated answer a line. Two line formats are accepted and
mapped onto one model, :class:`CalibrationItem`:

* the calibration format of ``/work/shared/calibration/README.md``: ``id``, ``source``,
  ``question``, ``context``, ``reference``, ``references``, ``candidate``, ``human_score``,
  ``score_scale``, ``key_point``/``key_point_category`` (K-QA), ``meta``; optionally
  ``annotator_scores`` (one score per annotator) and group fields (``dimension``, ``system``,
  ``question_id``);
* CharToM-QA items with a human score: ``question``, ``answer``, ``bonus_points``, ``response``,
  ``human_score``, ``tom_dimension``, ``book_name``, ``context_0/1000/2000``.

A set may also be a CSV (or TSV) table with a header row, the form a researcher's ratings are
most often in: columns ``question``, ``reference``, ``response`` (or ``candidate``) and
``human_score`` are required; ``id`` (or ``item_id``), ``source``, ``score_scale``, ``context``,
``references`` and ``bonus_points`` (a JSON list, or texts separated by ``|``),
``annotator_scores`` (likewise), ``key_point``, ``key_point_category``, ``dimension``,
``system`` and ``question_id`` are read as in the JSONL format, and any other column is kept in
``meta``. Each row is then validated exactly as a JSONL line is.

Loading never stops at the first bad line: every line is validated on its own, a bad line is
reported as a :class:`core.jsonl.BadLine` with its 1-based number and the reason, and the rest
still load. A set has one scale (``score_scale`` parsed into a :class:`Scale`); the statistics pick
their treatment from its kind (binary, graded range, or K-QA key-point verdicts).

The package is split along those lines: :mod:`calibration.sets.items` (the line model and its
formats), :mod:`calibration.sets.tables` (CSV and TSV), :mod:`calibration.sets.loading`
(``load_set``) and :mod:`calibration.sets.registry` (the shared folder and the packaged
examples); the names below are the package's public ones.
"""

from __future__ import annotations

from calibration.sets.items import ANNOTATOR_META_KEYS, CHARTOM_DEFAULT_SCALE, CalibrationItem
from calibration.sets.loading import LoadedSet, load_set
from calibration.sets.registry import (
    CALIBRATION_DIR_ENV,
    EXAMPLE_SETS,
    SHARED_SETS,
    SharedSet,
    example_set_path,
    find_calibration_dir,
    load_example_set,
    load_shared_set,
    resolve_calibration_dir,
)
from calibration.sets.tables import CSV_REQUIRED_COLUMNS
from judge.mapping import KrippendorffLevel, Scale, ScaleKind, parse_scale

__all__ = [
    "ANNOTATOR_META_KEYS",
    "CALIBRATION_DIR_ENV",
    "CHARTOM_DEFAULT_SCALE",
    "CSV_REQUIRED_COLUMNS",
    "EXAMPLE_SETS",
    "SHARED_SETS",
    "CalibrationItem",
    "KrippendorffLevel",
    "LoadedSet",
    "Scale",
    "ScaleKind",
    "SharedSet",
    "example_set_path",
    "find_calibration_dir",
    "load_example_set",
    "load_set",
    "load_shared_set",
    "parse_scale",
    "resolve_calibration_dir",
]
