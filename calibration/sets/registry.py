"""Where the calibration sets live: the shared folder, its registry, the packaged examples."""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from calibration.sets.loading import LoadedSet, load_set
from core.errors import InputError
from judge.config import load_settings
from judge.mapping import ScaleKind

CALIBRATION_DIR_ENV = "BONUSJUDGE_CALIBRATION_DIR"
"""Environment variable naming the folder that holds the shared calibration sets."""

# --- where the shared sets live ----------------------------------------------------------------

_REPO_ROOT = Path(__file__).resolve().parents[2]  # calibration/sets/registry.py


def _candidate_dirs() -> list[Path]:
    relative = Path("..") / "shared" / "calibration"
    return [Path.cwd() / relative, _REPO_ROOT / relative]


def find_calibration_dir(directory: str | Path | None = None) -> Path | None:
    """Locate the folder of shared calibration sets, or ``None`` when it is absent.

    Order: ``directory`` if given, else ``$BONUSJUDGE_CALIBRATION_DIR`` if set (either must exist:
    an explicit choice never falls through to a default), else ``../shared/calibration``
    relative to the current directory, then relative to the repository root.

    Args:
        directory: An explicit folder.

    Returns:
        The resolved folder, or ``None`` when no default folder exists.

    Raises:
        InputError: When an explicitly given folder (argument or env var) does not exist.
    """
    # $BONUSJUDGE_CALIBRATION_DIR is read where every setting is, by Settings (a settings
    # file's calibration_dir counts too).
    explicit = directory if directory is not None else load_settings().calibration_dir
    if explicit is not None:
        path = Path(explicit).expanduser()
        if not path.is_dir():
            origin = "directory" if directory is not None else CALIBRATION_DIR_ENV
            raise InputError(
                f"calibration folder {path} (from {origin}) does not exist", field=origin
            )
        return path.resolve()
    for candidate in _candidate_dirs():
        if candidate.is_dir():
            return candidate.resolve()
    return None


def resolve_calibration_dir(directory: str | Path | None = None) -> Path:
    """Like :func:`find_calibration_dir`, but raise when no folder is found.

    Raises:
        InputError: When no calibration folder can be found.
    """
    found = find_calibration_dir(directory)
    if found is None:
        tried = ", ".join(str(p) for p in _candidate_dirs())
        raise InputError(
            f"no calibration folder found: set {CALIBRATION_DIR_ENV} or pass a path "
            f"(tried {tried})",
            field=CALIBRATION_DIR_ENV,
        )
    return found


@dataclass(frozen=True)
class SharedSet:
    """A registry entry for one of the shared human-rated sets.

    Attributes:
        name: Registry name.
        path: Path relative to the calibration folder.
        kind: The scale kind its ``score_scale`` parses to.
        description: What the set is.
    """

    name: str
    path: str
    kind: ScaleKind
    description: str


SHARED_SETS: dict[str, SharedSet] = {
    s.name: s
    for s in (
        SharedSet(
            "kpqa_nrqa_mhpgm", "kpqa/nrqa_mhpgm.jsonl", "range", "NarrativeQA answers, 0.2-1.0"
        ),
        SharedSet("kpqa_marco_all", "kpqa/marco_all.jsonl", "range", "MS MARCO, 1-5 mean"),
        SharedSet("kpqa_avsd_all", "kpqa/avsd_all.jsonl", "range", "AVSD, 1-5 mean"),
        SharedSet(
            "kpqa_marcomulti_unilm",
            "kpqa/marcomulti_unilm.jsonl",
            "range",
            "MS MARCO multi-span (UniLM), 1-5 mean",
        ),
        SharedSet("evouna_tq", "evouna/tq.jsonl", "binary", "EVOUNA TriviaQA, 0/1 correct"),
        SharedSet(
            "kqa_nli_keypoints",
            "kqa/kqa_nli_keypoints.jsonl",
            "keypoint",
            "K-QA gold statements: 1 covered, 0 not, -1 contradicted",
        ),
        SharedSet(
            "kqa_answer_level",
            "kqa/kqa_answer_level.jsonl",
            "range",
            "K-QA answers: share of must-have statements covered, 0-1",
        ),
        SharedSet(
            "liveqa_med",
            "liveqa_med/medquad_judged_answers.jsonl",
            "range",
            "LiveQA-Med 2017 judged answers, 1-4",
        ),
    )
}
"""The eight shared sets by name (paths relative to the calibration folder)."""


def load_shared_set(
    name: str, *, directory: str | Path | None = None, strict: bool = False
) -> LoadedSet:
    """Load one of the :data:`SHARED_SETS` by name.

    Args:
        name: Registry name, or the file's path relative to the folder (``kpqa/nrqa_mhpgm``).
        directory: The calibration folder (default: see :func:`find_calibration_dir`).
        strict: Raise on the first bad line.

    Raises:
        InputError: Unknown name, missing folder or file, or (``strict``) a bad line.
    """
    entry = SHARED_SETS.get(name)
    if entry is None:
        # Also accept the file's relative path, with or without ".jsonl" ("kpqa/nrqa_mhpgm").
        wanted = name.removesuffix(".jsonl")
        entry = next(
            (e for e in SHARED_SETS.values() if e.path.removesuffix(".jsonl") == wanted), None
        )
    if entry is None:
        known = ", ".join(sorted(SHARED_SETS))
        raise InputError(f"unknown calibration set {name!r}; known: {known}", field="name")
    base = resolve_calibration_dir(directory)
    return load_set(base / entry.path, name=entry.name, strict=strict)


EXAMPLE_SETS: dict[str, str] = {
    "example": "example.jsonl",
    "example_binary": "example_binary.jsonl",
    "example_keypoints": "example_keypoints.jsonl",
}
"""Small packaged sets of our own making (graded 0-1, binary, K-QA key points) for tests/demos."""


def example_set_path(name: str = "example") -> Path:
    """Path of a packaged example set.

    Raises:
        InputError: When ``name`` is not one of :data:`EXAMPLE_SETS`.
    """
    if name not in EXAMPLE_SETS:
        raise InputError(
            f"unknown example set {name!r}; known: {', '.join(sorted(EXAMPLE_SETS))}", field="name"
        )
    return Path(str(resources.files("calibration") / "data" / EXAMPLE_SETS[name]))


def load_example_set(name: str = "example") -> LoadedSet:
    """Load a packaged example set (strictly: they must always load cleanly)."""
    return load_set(example_set_path(name), name=name, strict=True)
