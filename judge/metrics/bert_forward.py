"""A BERT encoder in plain torch: no ``transformers`` import, the same numbers.

Importing transformers' ``BertModel`` costs about 2.4 s of a service's start-up (its
``modeling_utils`` pulls in ``torch.distributed.tensor``, flash-attention and the loss modules),
against 0.1 s for the weights themselves. An encoder only runs the forward pass, so for
BERT-architecture folders (the packaged all-MiniLM-L6-v2 is one) this module does it with torch
alone, from the folder's own files:

* ``config.json`` (the architecture), ``model.safetensors`` (read with the ``safetensors``
  package) and ``tokenizer.json`` (run by the ``tokenizers`` library, which transformers' fast
  tokenizer wraps);
* the tokenizer is configured as transformers' ``BertTokenizer`` configures it, whatever
  ``tokenizer.json`` says about normalisation: ``do_lower_case``, ``strip_accents`` and
  ``tokenize_chinese_chars`` from ``tokenizer_config.json``, the BERT pre-tokenizer, and
  ``[CLS] text [SEP]``; truncation and padding baked into ``tokenizer.json`` are ignored (the
  callers give their own limit, as they did to transformers);
* the forward pass performs transformers' operations in the same order (embedding sums, SDPA
  attention with the same boolean mask, or none when nothing is padded, ``erf`` GELU, post-layer
  norms), so hidden states agree with ``BertModel`` in eval mode to the last bit on the same
  machine, and anyway within 1e-5 (``tests/judge/metrics/test_bert_forward.py`` checks both
  the states of every layer and the token ids against transformers). Attention written as plain
  matmul + softmax (transformers' "eager" path) was up to 4e-6 off transformers' default SDPA
  on the packaged model, so SDPA it is.

:func:`unsupported_reason` says whether a folder qualifies; anything it does not recognise
(another ``model_type``, relative positions, a decoder, half-precision weights, a tokenizer other
than WordPiece...) is left to transformers by the caller, :mod:`judge.metrics.encoders`.

Nothing here imports torch, tokenizers or safetensors at module import; the caller imports them
under its load lock first (see ``encoders.import_encoder_libraries``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.errors import ConfigError

if TYPE_CHECKING:
    import torch
    from tokenizers import Tokenizer

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
TOKENIZER_FILE = "tokenizer.json"
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
SPECIAL_TOKENS_FILE = "special_tokens_map.json"

# transformers' ACT2FN entries whose torch function we call the same way: "gelu" is
# GELUActivation (torch's erf GELU), "gelu_pytorch_tanh" torch's tanh approximation. Others
# ("gelu_new" is a Python formula with different rounding) stay with transformers.
_ACTIVATIONS = ("gelu", "relu", "gelu_pytorch_tanh")

# transformers.BertTokenizer's defaults, used when tokenizer_config.json does not set them.
_DEFAULT_SPECIAL_TOKENS = {
    "cls_token": "[CLS]",
    "sep_token": "[SEP]",
    "pad_token": "[PAD]",
    "unk_token": "[UNK]",
}
_TOKENIZER_CLASSES = (None, "BertTokenizer", "BertTokenizerFast")
# transformers rebuilds the WordPiece model with these defaults (only the vocabulary and the
# unknown token come from the file), so a file with other settings is not ours to run.
_WORDPIECE_PREFIX = "##"
_WORDPIECE_MAX_CHARS = 100
# transformers writes a huge sentinel as model_max_length when a tokenizer states no limit.
_LIMIT_SENTINEL = 1_000_000


class BertFolderError(ConfigError, ValueError):
    """A BERT model folder whose files cannot be read (corrupt JSON or weights, missing tensors).

    A :class:`~core.errors.ConfigError` (field ``encoder``) and a :class:`ValueError`; the
    encoders module reports it as ``EncoderUnavailableError``.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message, field="encoder")


@dataclass(frozen=True)
class BertConfig:
    """The architecture of a BERT encoder, read from its ``config.json``.

    Attributes:
        vocab_size: Rows of the word-embedding table.
        hidden_size: Width of every hidden state.
        num_layers: Transformer layers (hidden states: embeddings + one per layer).
        num_heads: Attention heads per layer.
        intermediate_size: Width of the feed-forward layer.
        activation: Feed-forward activation, one of ``gelu``, ``relu``, ``gelu_pytorch_tanh``.
        layer_norm_eps: Epsilon of every layer norm.
        max_positions: Rows of the position-embedding table (the longest input, in tokens).
        type_vocab_size: Rows of the token-type table (row 0 is the one used).
    """

    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    intermediate_size: int
    activation: str
    layer_norm_eps: float
    max_positions: int
    type_vocab_size: int

    @property
    def head_size(self) -> int:
        """Width of one attention head."""
        return self.hidden_size // self.num_heads


def read_json_object(path: Path) -> dict[str, Any] | None:
    """A JSON object from ``path``; None when the file is absent, unreadable or not an object."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _positive_int(config: dict[str, Any], key: str) -> int | None:
    value = config.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def parse_config(config: dict[str, Any]) -> BertConfig | str:
    """Read a BERT architecture from a ``config.json`` object.

    Args:
        config: The parsed ``config.json``.

    Returns:
        The :class:`BertConfig`, or a reason string when this module cannot run the model the
        way transformers' ``BertModel`` would.
    """
    if config.get("model_type") != "bert":
        return f"model_type is {config.get('model_type')!r}, not 'bert'"
    if config.get("position_embedding_type", "absolute") != "absolute":
        return f"position_embedding_type {config.get('position_embedding_type')!r}"
    for flag in ("is_decoder", "add_cross_attention"):
        if config.get(flag):
            return f"{flag} is set"
    if config.get("chunk_size_feed_forward", 0):
        return "chunk_size_feed_forward is set"  # chunked matmuls round differently
    activation = config.get("hidden_act", "gelu")
    if activation not in _ACTIVATIONS:
        return f"hidden_act {activation!r}"
    sizes = {
        key: _positive_int(config, key)
        for key in (
            "vocab_size",
            "hidden_size",
            "num_hidden_layers",
            "num_attention_heads",
            "intermediate_size",
            "max_position_embeddings",
        )
    }
    missing = sorted(key for key, value in sizes.items() if value is None)
    if missing:
        return f"config.json lacks a positive {', '.join(missing)}"
    hidden, heads = sizes["hidden_size"] or 0, sizes["num_attention_heads"] or 0
    if hidden % heads:
        return f"hidden_size {hidden} is not a multiple of num_attention_heads {heads}"
    eps = config.get("layer_norm_eps", 1e-12)
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps > 0:
        return f"layer_norm_eps {eps!r}"
    type_vocab = config.get("type_vocab_size", 2)
    if isinstance(type_vocab, bool) or not isinstance(type_vocab, int) or type_vocab < 1:
        return f"type_vocab_size {type_vocab!r}"
    return BertConfig(
        vocab_size=sizes["vocab_size"] or 0,
        hidden_size=hidden,
        num_layers=sizes["num_hidden_layers"] or 0,
        num_heads=heads,
        intermediate_size=sizes["intermediate_size"] or 0,
        activation=activation,
        layer_norm_eps=float(eps),
        max_positions=sizes["max_position_embeddings"] or 0,
        type_vocab_size=type_vocab,
    )


def _token_text(value: Any) -> str | None:
    """A special token as tokenizer_config.json writes it: a string or an AddedToken dict."""
    if isinstance(value, str) and value:
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str) and value["content"]:
        return str(value["content"])
    return None


@dataclass(frozen=True)
class TokenizerSettings:
    """What transformers' ``BertTokenizer`` takes from ``tokenizer_config.json``.

    Attributes:
        do_lower_case: Lower-case the text (and strip accents, unless ``strip_accents`` says).
        strip_accents: Strip accents; None follows ``do_lower_case``, as in original BERT.
        tokenize_chinese_chars: Split CJK ideographs into one word each.
        special_tokens: ``cls_token``, ``sep_token``, ``pad_token``, ``unk_token`` texts.
        model_max_length: The tokenizer's own limit (what bert-score truncates to).
    """

    do_lower_case: bool
    strip_accents: bool | None
    tokenize_chinese_chars: bool
    special_tokens: dict[str, str]
    model_max_length: int


def tokenizer_settings(folder: Path, config: BertConfig) -> TokenizerSettings | str:
    """Read the tokenizer settings of ``folder`` as transformers would, or say why not.

    ``model_max_length`` is the tokenizer's stated limit, capped at the model's positions: with
    no limit (or a larger one) transformers would hand the model inputs it cannot take.
    """
    settings = read_json_object(folder / TOKENIZER_CONFIG_FILE) or {}
    special_map = read_json_object(folder / SPECIAL_TOKENS_FILE) or {}
    tokenizer_class = settings.get("tokenizer_class")
    if tokenizer_class not in _TOKENIZER_CLASSES:
        return f"tokenizer_class {tokenizer_class!r}"
    for side in ("truncation_side", "padding_side"):
        # Transformers cuts and pads on the right unless told otherwise; so does this module.
        if settings.get(side, "right") != "right":
            return f"tokenizer_config.json {side} {settings.get(side)!r}"
    flags: dict[str, bool | None] = {}
    for key, default in (
        ("do_lower_case", True),
        ("tokenize_chinese_chars", True),
        ("strip_accents", None),
    ):
        flag = settings.get(key, default)
        if flag is not None and not isinstance(flag, bool):
            return f"tokenizer_config.json {key} {flag!r}"
        flags[key] = flag
    special: dict[str, str] = {}
    for key, default_token in _DEFAULT_SPECIAL_TOKENS.items():
        given = settings.get(key, special_map.get(key))
        text = default_token if given is None else _token_text(given)
        if text is None:
            return f"tokenizer_config.json {key} {given!r}"
        special[key] = text
    limit = settings.get("model_max_length")
    if isinstance(limit, bool) or not isinstance(limit, int) or not 0 < limit < _LIMIT_SENTINEL:
        limit = config.max_positions
    return TokenizerSettings(
        do_lower_case=bool(flags["do_lower_case"]),
        strip_accents=flags["strip_accents"],
        tokenize_chinese_chars=bool(flags["tokenize_chinese_chars"]),
        special_tokens=special,
        model_max_length=min(limit, config.max_positions),
    )


def _wordpiece_reason(tokenizer_json: dict[str, Any], unk_token: str) -> str | None:
    """Why the tokenizer.json model differs from the WordPiece transformers would build."""
    model = tokenizer_json.get("model")
    if not isinstance(model, dict) or model.get("type") != "WordPiece":
        kind = model.get("type") if isinstance(model, dict) else None
        return f"tokenizer.json model is {kind!r}, not WordPiece"
    if model.get("continuing_subword_prefix", _WORDPIECE_PREFIX) != _WORDPIECE_PREFIX:
        return "tokenizer.json has a non-default continuing_subword_prefix"
    if model.get("max_input_chars_per_word", _WORDPIECE_MAX_CHARS) != _WORDPIECE_MAX_CHARS:
        return "tokenizer.json has a non-default max_input_chars_per_word"
    if model.get("unk_token") != unk_token:
        return f"tokenizer.json unk_token {model.get('unk_token')!r} is not {unk_token!r}"
    vocab = model.get("vocab")
    if not isinstance(vocab, dict):
        return "tokenizer.json has no WordPiece vocabulary"
    return None


def _weight_names(layers: int) -> list[str]:
    """The tensors (BertModel's names, no prefix) the forward pass reads, in a fixed order."""
    names = [
        "embeddings.word_embeddings.weight",
        "embeddings.position_embeddings.weight",
        "embeddings.token_type_embeddings.weight",
        "embeddings.LayerNorm.weight",
        "embeddings.LayerNorm.bias",
    ]
    for index in range(layers):
        base = f"encoder.layer.{index}."
        for part in (
            "attention.self.query",
            "attention.self.key",
            "attention.self.value",
            "attention.output.dense",
            "attention.output.LayerNorm",
            "intermediate.dense",
            "output.dense",
            "output.LayerNorm",
        ):
            names += [f"{base}{part}.weight", f"{base}{part}.bias"]
    return names


def _stored_names(available: set[str], layers: int) -> dict[str, str] | str:
    """Map each needed tensor name to its name in the file, or say which one is missing.

    Checkpoints saved from a task model prefix every name with ``bert.``; old ones call layer
    norm parameters ``gamma`` and ``beta``. transformers reads both; so does this.
    """
    found: dict[str, str] = {}
    for name in _weight_names(layers):
        candidates = [name]
        if name.endswith("LayerNorm.weight"):
            candidates.append(name[: -len("weight")] + "gamma")
        elif name.endswith("LayerNorm.bias"):
            candidates.append(name[: -len("bias")] + "beta")
        stored = next(
            (
                prefix + candidate
                for prefix in ("", "bert.")
                for candidate in candidates
                if prefix + candidate in available
            ),
            None,
        )
        if stored is None:
            return f"model.safetensors has no tensor {name!r}"
        found[name] = stored
    return found


def _safetensors_header(path: Path) -> dict[str, Any] | None:
    """The JSON header of a ``.safetensors`` file (names, dtypes, shapes), read without torch."""
    try:
        with path.open("rb") as handle:
            size = int.from_bytes(handle.read(8), "little")
            if not 0 < size <= 100_000_000:
                return None
            header = json.loads(handle.read(size))
    except (OSError, ValueError):
        return None
    return header if isinstance(header, dict) else None


def _expected_shapes(config: BertConfig) -> dict[str, tuple[int, ...]]:
    """The shape of every tensor the forward pass reads, from the config."""
    hidden, inner = config.hidden_size, config.intermediate_size
    shapes: dict[str, tuple[int, ...]] = {
        "embeddings.word_embeddings.weight": (config.vocab_size, hidden),
        "embeddings.position_embeddings.weight": (config.max_positions, hidden),
        "embeddings.token_type_embeddings.weight": (config.type_vocab_size, hidden),
    }
    for name in _weight_names(config.num_layers):
        if name in shapes:
            continue
        if name.endswith(("LayerNorm.weight", "LayerNorm.bias")):
            shapes[name] = (hidden,)
        elif ".intermediate.dense." in name:
            shapes[name] = (inner, hidden) if name.endswith("weight") else (inner,)
        elif ".output.dense." in name and ".attention." not in name:
            shapes[name] = (hidden, inner) if name.endswith("weight") else (hidden,)
        else:  # query, key, value, attention.output.dense
            shapes[name] = (hidden, hidden) if name.endswith("weight") else (hidden,)
    return shapes


@dataclass(frozen=True)
class BertFolder:
    """A model folder this module can run: its parsed settings and where each tensor is stored.

    Attributes:
        path: The folder.
        config: The architecture.
        tokenizer: The tokenizer settings.
        tensor_names: Needed tensor name (BertModel's) -> name in ``model.safetensors``.
    """

    path: Path
    config: BertConfig
    tokenizer: TokenizerSettings
    tensor_names: dict[str, str]


def inspect_folder(folder: str | Path) -> BertFolder | str:
    """Decide whether ``folder`` can run on this module, reading only small files and headers.

    Args:
        folder: A local model folder.

    Returns:
        A :class:`BertFolder` when the folder holds a BERT encoder this module runs exactly as
        transformers' ``BertModel`` and ``BertTokenizer`` would (``model_type`` ``bert``,
        ``tokenizer.json`` with a WordPiece model, ``model.safetensors`` with float32 weights of
        the configured shapes); otherwise a short reason, for the caller's log or tests.
    """
    path = Path(folder)
    config_data = read_json_object(path / CONFIG_FILE)
    if config_data is None:
        return f"no readable {CONFIG_FILE}"
    config = parse_config(config_data)
    if isinstance(config, str):
        return config
    if not (path / WEIGHTS_FILE).is_file():
        return f"no {WEIGHTS_FILE}"
    tokenizer_json = read_json_object(path / TOKENIZER_FILE)
    if tokenizer_json is None:
        return f"no readable {TOKENIZER_FILE}"
    settings = tokenizer_settings(path, config)
    if isinstance(settings, str):
        return settings
    reason = _wordpiece_reason(tokenizer_json, settings.special_tokens["unk_token"])
    if reason is not None:
        return reason
    vocab = tokenizer_json["model"]["vocab"]
    for key, token in settings.special_tokens.items():
        if token not in vocab and not any(
            isinstance(added, dict) and added.get("content") == token
            for added in tokenizer_json.get("added_tokens") or []
        ):
            return f"{key} {token!r} is not in the vocabulary"
    header = _safetensors_header(path / WEIGHTS_FILE)
    if header is None:
        return f"{WEIGHTS_FILE} has no readable header"
    names = _stored_names({key for key in header if key != "__metadata__"}, config.num_layers)
    if isinstance(names, str):
        return names
    for name, shape in _expected_shapes(config).items():
        entry = header[names[name]]
        if not isinstance(entry, dict) or entry.get("dtype") != "F32":
            return f"{names[name]} is not float32"
        if tuple(entry.get("shape") or ()) != shape:
            return f"{names[name]} has shape {entry.get('shape')}, expected {list(shape)}"
    return BertFolder(path=path, config=config, tokenizer=settings, tensor_names=names)


def unsupported_reason(folder: str | Path) -> str | None:
    """Why ``folder`` must be run by transformers rather than this module; None when it need not.

    Args:
        folder: A local model folder.

    Returns:
        None for a folder :func:`inspect_folder` accepts, else its reason.
    """
    found = inspect_folder(folder)
    return found if isinstance(found, str) else None


class BertTokenizer:
    """``tokenizer.json`` run the way transformers' ``BertTokenizer`` runs it, minus transformers.

    Thread-safe: the ``tokenizers`` object is configured once, never per call (transformers sets
    truncation on its backend for every call), and the truncation below is done on the ids.

    Attributes:
        cls_token_id: Id of the classifier token that starts every encoded text.
        sep_token_id: Id of the separator token that ends every encoded text.
        pad_token_id: Id padding fills batches with.
        model_max_length: The tokenizer's token limit (see :func:`tokenizer_settings`).
    """

    def __init__(self, folder: BertFolder) -> None:
        """Load ``tokenizer.json`` from an inspected folder.

        Args:
            folder: The folder, as :func:`inspect_folder` returned it.

        Raises:
            BertFolderError: the file cannot be parsed by the ``tokenizers`` library.
        """
        from tokenizers import Tokenizer, normalizers, pre_tokenizers, processors

        settings = folder.tokenizer
        try:
            tokenizer = Tokenizer.from_file(str(folder.path / TOKENIZER_FILE))
        except Exception as exc:  # the Rust side raises plain Exception for a bad file
            raise BertFolderError(
                f"{folder.path / TOKENIZER_FILE} cannot be loaded: {exc}"
            ) from exc
        # What transformers' BertTokenizer.__init__ sets, whatever the file says: the normaliser
        # from tokenizer_config.json's flags, BERT's pre-tokenizer, and "[CLS] $A [SEP]".
        tokenizer.normalizer = normalizers.BertNormalizer(
            clean_text=True,
            handle_chinese_chars=settings.tokenize_chinese_chars,
            strip_accents=settings.strip_accents,
            lowercase=settings.do_lower_case,
        )
        tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tokens = settings.special_tokens
        ids = {key: tokenizer.token_to_id(text) for key, text in tokens.items()}
        missing = sorted(key for key, value in ids.items() if value is None)
        if missing:
            raise BertFolderError(f"{folder.path / TOKENIZER_FILE}: no id for {', '.join(missing)}")
        cls, sep = tokens["cls_token"], tokens["sep_token"]
        tokenizer.post_processor = processors.TemplateProcessing(
            single=f"{cls}:0 $A:0 {sep}:0",
            pair=f"{cls}:0 $A:0 {sep}:0 $B:1 {sep}:1",
            special_tokens=[(cls, ids["cls_token"]), (sep, ids["sep_token"])],
        )
        # The file's own settings (128 tokens, fixed padding, for the packaged model) are the
        # sentence-transformers export's, not what the callers ask for.
        tokenizer.no_truncation()
        tokenizer.no_padding()
        self._tokenizer: Tokenizer = tokenizer
        self.cls_token_id: int = int(ids["cls_token"] or 0)
        self.sep_token_id: int = int(ids["sep_token"] or 0)
        self.pad_token_id: int = int(ids["pad_token"] or 0)
        self.model_max_length: int = settings.model_max_length

    def encode(self, texts: Sequence[str], *, max_length: int) -> list[list[int]]:
        """Token ids of each text: ``[CLS] tokens [SEP]``, cut to ``max_length`` ids in all.

        The same ids as transformers' ``tokenizer(texts, add_special_tokens=True,
        truncation=True, max_length=max_length)["input_ids"]``: a single sequence loses tokens
        from its end (transformers' default ``truncation_side``) and keeps both special tokens.

        Args:
            texts: The texts (already validated as strings by the caller).
            max_length: The most ids per text, special tokens included (at least 2).

        Returns:
            One list of ids per text, in order.

        Raises:
            ValueError: ``max_length`` below 2 (no room for the special tokens).
        """
        if max_length < 2:
            raise ValueError(f"max_length must be at least 2, got {max_length}")
        if not texts:
            return []
        keep = max_length - 2
        encodings = self._tokenizer.encode_batch(list(texts), add_special_tokens=False)
        return [
            [self.cls_token_id, *encoding.ids[:keep], self.sep_token_id] for encoding in encodings
        ]

    def pad(self, batch: Sequence[Sequence[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        """Right-pad id lists into ``(input_ids, attention_mask)`` int64 tensors, as transformers.

        Args:
            batch: One id list per text (at least one).

        Returns:
            ``input_ids`` (texts x longest, padded with :attr:`pad_token_id`) and
            ``attention_mask`` (1 for a real token, 0 for padding).
        """
        import torch

        longest = max(len(ids) for ids in batch)
        input_ids = torch.full((len(batch), longest), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(batch), longest), dtype=torch.long)
        for row, ids in enumerate(batch):
            input_ids[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
            mask[row, : len(ids)] = 1
        return input_ids, mask


@dataclass(frozen=True)
class _Layer:
    """One transformer layer's tensors."""

    query: tuple[torch.Tensor, torch.Tensor]
    key: tuple[torch.Tensor, torch.Tensor]
    value: tuple[torch.Tensor, torch.Tensor]
    attention_out: tuple[torch.Tensor, torch.Tensor]
    attention_norm: tuple[torch.Tensor, torch.Tensor]
    intermediate: tuple[torch.Tensor, torch.Tensor]
    output: tuple[torch.Tensor, torch.Tensor]
    output_norm: tuple[torch.Tensor, torch.Tensor]


class BertEncoderModel:
    """BERT's encoder forward pass in plain torch, on weights read from ``model.safetensors``.

    Eval mode only (no dropout), no pooler, token types all 0, positions ``0..n-1``: what
    transformers' ``BertModel`` computes for ``model(input_ids, attention_mask)``. Read-only after
    loading, so one instance serves every thread.

    Attributes:
        config: The architecture.
        device: The ``torch.device`` the weights live on.
    """

    def __init__(self, folder: BertFolder, device: torch.device) -> None:
        """Read the weights of an inspected folder onto ``device``.

        Args:
            folder: The folder, as :func:`inspect_folder` returned it.
            device: Where the weights go (CPU, or a GPU when one is available).

        Raises:
            BertFolderError: the weights file cannot be read.
        """
        from safetensors import SafetensorError, safe_open

        self.config = folder.config
        self.device = device
        tensors: dict[str, torch.Tensor] = {}
        try:
            # Only the tensors the encoder reads (not the pooler nor any task head), straight
            # onto the device.
            with safe_open(str(folder.path / WEIGHTS_FILE), framework="pt", device="cpu") as f:
                for name, stored in folder.tensor_names.items():
                    tensors[name] = f.get_tensor(stored).to(device)
        except (SafetensorError, OSError) as exc:
            raise BertFolderError(f"{folder.path / WEIGHTS_FILE} cannot be read: {exc}") from exc
        self._word = tensors["embeddings.word_embeddings.weight"]
        self._position = tensors["embeddings.position_embeddings.weight"]
        self._token_type = tensors["embeddings.token_type_embeddings.weight"]
        self._embedding_norm = (
            tensors["embeddings.LayerNorm.weight"],
            tensors["embeddings.LayerNorm.bias"],
        )

        def pair(prefix: str) -> tuple[torch.Tensor, torch.Tensor]:
            return tensors[f"{prefix}.weight"], tensors[f"{prefix}.bias"]

        self._layers = [
            _Layer(
                query=pair(f"encoder.layer.{i}.attention.self.query"),
                key=pair(f"encoder.layer.{i}.attention.self.key"),
                value=pair(f"encoder.layer.{i}.attention.self.value"),
                attention_out=pair(f"encoder.layer.{i}.attention.output.dense"),
                attention_norm=pair(f"encoder.layer.{i}.attention.output.LayerNorm"),
                intermediate=pair(f"encoder.layer.{i}.intermediate.dense"),
                output=pair(f"encoder.layer.{i}.output.dense"),
                output_norm=pair(f"encoder.layer.{i}.output.LayerNorm"),
            )
            for i in range(self.config.num_layers)
        ]
        self._activation = _activation(self.config.activation)
        # transformers' BertSelfAttention.scaling, a Python float as there.
        self._scaling = self.config.head_size**-0.5

    @property
    def num_parameters(self) -> int:
        """Numbers held (the encoder's; no pooler), for logs and tests."""
        total = self._word.numel() + self._position.numel() + self._token_type.numel()
        total += sum(t.numel() for t in self._embedding_norm)
        for layer in self._layers:
            for weight, bias in (
                layer.query,
                layer.key,
                layer.value,
                layer.attention_out,
                layer.attention_norm,
                layer.intermediate,
                layer.output,
                layer.output_norm,
            ):
                total += weight.numel() + bias.numel()
        return total

    def _attention_mask(self, attention_mask: torch.Tensor, length: int) -> torch.Tensor | None:
        """The mask transformers' ``sdpa_mask`` builds: None without padding, else boolean.

        A (texts x 1 x length x length) boolean tensor, True where a query may attend to a key.
        Passing no mask when nothing is padded matters beyond speed: SDPA may take another kernel,
        whose sums round differently.
        """
        import torch

        padding = attention_mask.to(device=self.device, dtype=torch.bool)
        if bool(padding.all()):
            return None
        queries = torch.arange(length, device=self.device)[None, None, :, None]
        # (q >= 0) & padding[b, k], broadcast and materialised as transformers does.
        return (queries >= 0) & padding[:, None, None, :]

    def _embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        """The embedding layer's output: word + token type 0 + position, layer-normed."""
        import torch
        from torch.nn import functional

        batch, length = input_ids.shape
        if length > self.config.max_positions:
            raise ValueError(
                f"input of {length} tokens is longer than the model's "
                f"{self.config.max_positions} positions"
            )
        token_types = torch.zeros((batch, length), dtype=torch.long, device=self.device)
        positions = torch.arange(length, device=self.device)[None, :]
        hidden = functional.embedding(input_ids, self._word)
        hidden = hidden + functional.embedding(token_types, self._token_type)
        hidden = hidden + functional.embedding(positions, self._position)
        weight, bias = self._embedding_norm
        return functional.layer_norm(
            hidden, (self.config.hidden_size,), weight, bias, self.config.layer_norm_eps
        )

    def _layer(
        self, hidden: torch.Tensor, mask: torch.Tensor | None, layer: _Layer
    ) -> torch.Tensor:
        """One transformer layer, in transformers' order of operations (eval mode)."""
        from torch.nn import functional

        batch, length, _ = hidden.shape
        shape = (batch, length, -1, self.config.head_size)
        query = functional.linear(hidden, *layer.query).view(*shape).transpose(1, 2)
        key = functional.linear(hidden, *layer.key).view(*shape).transpose(1, 2)
        value = functional.linear(hidden, *layer.value).view(*shape).transpose(1, 2)
        attended = functional.scaled_dot_product_attention(
            query,
            key,
            value,
            attn_mask=mask,
            dropout_p=0.0,
            scale=self._scaling,
            is_causal=False,
        )
        attended = attended.transpose(1, 2).contiguous().reshape(batch, length, -1).contiguous()
        size, eps = (self.config.hidden_size,), self.config.layer_norm_eps
        attention = functional.layer_norm(
            functional.linear(attended, *layer.attention_out) + hidden,
            size,
            *layer.attention_norm,
            eps,
        )
        inner = self._activation(functional.linear(attention, *layer.intermediate))
        return functional.layer_norm(
            functional.linear(inner, *layer.output) + attention, size, *layer.output_norm, eps
        )

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, *, layer: int | None = None
    ) -> torch.Tensor:
        """The hidden state after ``layer`` layers (0 = the embeddings; None = the last layer).

        Layers past ``layer`` are not computed: their output would be thrown away.

        Args:
            input_ids: Token ids, texts x tokens (int64).
            attention_mask: 1 for real tokens, 0 for padding, same shape.
            layer: How many transformer layers to run.

        Returns:
            A float32 tensor, texts x tokens x hidden size, on :attr:`device`.

        Raises:
            ValueError: ``layer`` out of range, or an input longer than the model's positions.
        """
        stop = self.config.num_layers if layer is None else layer
        if not 0 <= stop <= self.config.num_layers:
            raise ValueError(f"layer must be in 0..{self.config.num_layers}, got {layer}")
        input_ids = input_ids.to(self.device)
        hidden = self._embed(input_ids)
        mask = self._attention_mask(attention_mask, input_ids.shape[1])
        for weights in self._layers[:stop]:
            hidden = self._layer(hidden, mask, weights)
        return hidden

    def hidden_states(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor
    ) -> tuple[torch.Tensor, ...]:
        """Every hidden state, as ``BertModel(..., output_hidden_states=True).hidden_states``.

        Args:
            input_ids: Token ids, texts x tokens (int64).
            attention_mask: 1 for real tokens, 0 for padding, same shape.

        Returns:
            ``num_layers + 1`` tensors: the embeddings' output, then each layer's.
        """
        input_ids = input_ids.to(self.device)
        states = [self._embed(input_ids)]
        mask = self._attention_mask(attention_mask, input_ids.shape[1])
        for weights in self._layers:
            states.append(self._layer(states[-1], mask, weights))
        return tuple(states)


def _activation(name: str) -> Callable[[torch.Tensor], torch.Tensor]:
    """The torch function transformers' ``ACT2FN[name]`` calls."""
    from torch.nn import functional

    if name == "gelu":
        return functional.gelu
    if name == "gelu_pytorch_tanh":
        return lambda x: functional.gelu(x, approximate="tanh")
    if name == "relu":
        return functional.relu
    raise ValueError(f"unsupported activation {name!r}")  # parse_config admits only the above


def load(folder: BertFolder, device: torch.device) -> tuple[BertTokenizer, BertEncoderModel]:
    """Load the tokenizer and the model of an inspected folder.

    Args:
        folder: The folder, as :func:`inspect_folder` returned it.
        device: Where the weights go.

    Returns:
        The tokenizer and the model.

    Raises:
        BertFolderError: a file cannot be read.
    """
    return BertTokenizer(folder), BertEncoderModel(folder, device)


__all__ = [
    "BertConfig",
    "BertEncoderModel",
    "BertFolder",
    "BertFolderError",
    "BertTokenizer",
    "TokenizerSettings",
    "inspect_folder",
    "load",
    "parse_config",
    "read_json_object",
    "tokenizer_settings",
    "unsupported_reason",
]
