"""Reference-based metrics: ROUGE-L, BERTScore, and the shared offline text encoder.

Importing this package is cheap (no torch, transformers or bert_score): they load on first use,
because the CLI and the HTTP service import it at start-up. First imports and weight loads are
serialized process-wide; :func:`warm_up` loads what a judge configuration needs ahead of grading.
"""

from judge.metrics.bertscore import BertScore, BertScorer, bertscore
from judge.metrics.encoders import (
    DEFAULT_ENCODER,
    Encoder,
    EncoderSpec,
    EncoderUnavailableError,
    MetricInputError,
    get_encoder,
    import_encoder_libraries,
    resolve_encoder,
    supports_language,
)
from judge.metrics.rouge import RougeScore, rouge_l, tokenize

__all__ = [
    "DEFAULT_ENCODER",
    "BertScore",
    "BertScorer",
    "Encoder",
    "EncoderSpec",
    "EncoderUnavailableError",
    "MetricInputError",
    "RougeScore",
    "bertscore",
    "get_encoder",
    "import_encoder_libraries",
    "resolve_encoder",
    "rouge_l",
    "supports_language",
    "tokenize",
]
