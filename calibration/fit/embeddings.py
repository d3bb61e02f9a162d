"""The fit's embedding cache: sentence vectors of the calibration texts, kept between refits.

Encoding the shared sets takes minutes (41,000 texts: about 4 with the MiniLM encoder, 12 with
the multilingual one on 2 cores), so ``python -m calibration.fit.matcher`` keeps every vector in
``<cache dir>/embeddings-<encoder>.npz``, keyed by a digest of the text, and encodes only what
is new. The cache lives outside the project (``--cache-dir``) and is saved after every chunk, so
an interrupted fit resumes where it stopped.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

__all__ = ["Embed", "digest", "embed_cached"]

Embed = Callable[[list[str]], npt.NDArray[np.float32]]
"""Texts to L2-normalised rows (an encoder's ``embed``)."""


def digest(*parts: str) -> str:
    """Stable hex key of some strings."""
    h = hashlib.sha1()
    for part in parts:
        h.update(part.encode("utf-8"))
        h.update(b"\x00")
    return h.hexdigest()


def embed_cached(
    texts: Sequence[str],
    cache_dir: Path | None,
    encoder_name: str,
    embed: Callable[[], Embed],
    log: Callable[[str], None],
) -> dict[str, npt.NDArray[np.float32]]:
    """Embed texts with an encoder, reusing vectors cached by an earlier run.

    Args:
        texts: Distinct texts.
        cache_dir: Cache folder, or None for no cache.
        encoder_name: Encoder name (names the cache file).
        embed: Returns the encoder's embedding function; called only when a text is missing
            (a warm refit loads no encoder).
        log: Progress printer.

    Returns:
        Text to L2-normalised vector.
    """
    vectors: dict[str, npt.NDArray[np.float32]] = {}
    cache_file = cache_dir / f"embeddings-{encoder_name}.npz" if cache_dir else None
    if cache_file is not None and cache_file.is_file():
        with np.load(cache_file) as data:
            stored = dict(zip(data["keys"].tolist(), data["vectors"], strict=True))
        for text in texts:
            vec = stored.get(digest(text))
            if vec is not None:
                vectors[text] = vec
    else:
        stored = {}
    missing = [t for t in texts if t not in vectors]
    log(f"embeddings ({encoder_name}): {len(vectors)} cached, {len(missing)} to encode")
    if missing:
        encode = embed()
        start = time.perf_counter()
        chunk = 1024
        for offset in range(0, len(missing), chunk):
            part = missing[offset : offset + chunk]
            matrix = encode(part)
            for text, vec in zip(part, matrix, strict=True):
                vectors[text] = vec
                stored[digest(text)] = vec
            done = offset + len(part)
            rate = done / (time.perf_counter() - start)
            log(f"  encoded {done}/{len(missing)} ({rate:.0f} texts/s)")
            if cache_file is not None:
                # Saved after every chunk, so an interrupted fit resumes where it stopped.
                _save_vectors(cache_file, stored)
    return vectors


def _save_vectors(cache_file: Path, stored: dict[str, npt.NDArray[np.float32]]) -> None:
    """Write the embedding cache atomically (a temporary file, then a rename)."""
    cache_file.parent.mkdir(parents=True, exist_ok=True)
    partial = cache_file.with_suffix(".partial.npz")
    keys = np.array(list(stored), dtype=str)
    np.savez(partial, keys=keys, vectors=np.stack(list(stored.values())))
    partial.replace(cache_file)
