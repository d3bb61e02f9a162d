"""Loading what a judge configuration needs, ahead of grading or on its first cache miss.

Above both the metrics (:mod:`judge.metrics`) and the embedded matcher (:mod:`judge.matcher`),
so neither reaches up into the other: this module decides, from a configuration, which encoder,
which ROUGE tokenisers and whether the matcher must be loaded, and loads them once per process,
one thread at a time.
"""

from __future__ import annotations

from judge.config import JudgeConfig
from judge.metrics.encoders import get_encoder, import_serialized, resolve_encoder
from judge.metrics.rouge import warm_rouge

__all__ = ["check_loadable", "needs_encoder", "warm_up"]


def needs_encoder(config: JudgeConfig) -> bool:
    """Whether grading with ``config`` uses a text encoder (BERTScore, or the embedded matcher).

    Args:
        config: The judge configuration.

    Returns:
        True when its metrics include BERTScore, or coverage judged by the embedded matcher.
    """
    return "bertscore" in config.metrics or config.uses_matcher


def check_loadable(config: JudgeConfig) -> None:
    """Raise now what :func:`warm_up` would raise for ``config``, without loading a model.

    Resolves the BERTScore encoder and, for coverage by the embedded matcher, validates the
    matcher's parameter file and resolves its encoder: milliseconds, where loading takes
    seconds. A run answered from the cache then loads nothing, and a missing encoder still
    stops it before the first item.

    Raises:
        EncoderUnavailableError: (a ``ConfigError``) an encoder is not available offline.
        ConfigError: the matcher's parameter file is missing or corrupt.
    """
    if "bertscore" in config.metrics:
        resolve_encoder(config.encoder, layer=config.encoder_layer)
    if config.uses_matcher:
        import_serialized("judge.matcher")
        from judge.matcher import load_params

        resolve_encoder(load_params().encoder)


def warm_up(config: JudgeConfig) -> None:
    """Load everything grading with ``config`` uses, once per process, one thread at a time.

    The one warm-up path: ``Grader.prepare`` runs it in a worker thread before grading, and the
    service runs it in its start-up thread for ``/readyz``. What it loads is cached per process,
    so later calls return at once, and concurrent calls wait for each other rather than import
    the same libraries twice at once. It loads exactly what the metrics need: rouge-score for
    ``rouge_l``; the BERTScore encoder for ``bertscore`` (and bert_score when that encoder runs
    on transformers; the packaged one does not); the embedded matcher
    (parameters and its encoder) for ``coverage`` when the judge is the embedded matcher or the
    cascade.

    Args:
        config: The judge configuration (metrics, judge model, encoder, layer, segmenter).

    Raises:
        EncoderUnavailableError: (a ``ConfigError``) an encoder cannot be loaded offline.
        ConfigError: the matcher's parameter file is missing or corrupt.
        ImportError: a metric's library is not installed.
    """
    wanted = set(config.metrics)
    if "rouge_l" in wanted:
        warm_rouge(config.rouge_segmenter)
    if "bertscore" in wanted:
        get_encoder(config.encoder, layer=config.encoder_layer).load(bertscore=True)
    if config.uses_matcher:
        # Imported under the load lock, loaded outside it: the matcher takes its own lock and
        # get_encoder's before that one (the load lock stays innermost).
        import_serialized("judge.matcher")
        from judge.matcher import get_matcher

        get_matcher().load()
