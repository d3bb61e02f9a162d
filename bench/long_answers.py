"""Long answers: ``bonusjudge calibrate`` on a SQuALITY-like set of long, multi-reference summaries.

The set is generated (deterministically, from ``--seed``) into a temporary folder at bench time,
never committed: ``--items`` candidate summaries of about ``--words`` words, in groups of five
candidates per question (as SQuALITY rates several systems' summaries of one story), each
question with ``--references`` reference summaries of about ``--words`` words, and a human score
on a 1-100 scale that follows how many of the story's facts the candidate states. The text is
English-like (common words, names, numbers, sentences of 10-24 words), so the tokenizer, the
sentence splitter and the lexical features see what long real answers give them.

The CLI runs in a subprocess, as a user runs it: ``bonusjudge calibrate SET --metrics
rouge_l,bertscore,coverage`` (coverage from the default judge, the embedded matcher), with a
fresh cache folder. Its wall time and peak RSS (the child's own ``ru_maxrss``, via ``os.wait4``)
are the figures; the issue's goal is under 100 s and under 1 GiB for 300 items.
"""

from __future__ import annotations

import json
import random
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.common import log, parse_section_args, section_parser, write_json
from bench.memory import bonusjudge_command, run_measured

__all__ = ["generate_set", "main", "run_calibrate"]

_WORDS = """
ability able accept account across action activity actually address admit adult affect afraid
agency agent agree ahead allow almost alone along already although always amount analysis animal
answer anyone appear apply approach area argue army around arrive article artist assume attack
attention author avoid away baby bank beat beautiful become bed behavior behind believe benefit
best better beyond bill billion black blood blue board body book born box boy break bring brother
budget build building business buy call camera campaign cancer capital captain car card care
career carry case catch cause cell center central century certain chair challenge chance change
character charge check child choice choose church citizen city civil claim class clear close coach
cold collection college color commercial common community company compare computer concern
condition conference consider consumer contain continue control cost country couple course court
cover create crime cultural culture cup current customer cut dark data daughter dead deal death
debate decade decide decision deep defense degree democrat describe design despite detail
determine develop difference difficult dinner direction director discover discuss disease doctor
door draw dream drive drop drug during early east easy economic economy edge education effect
effort eight either election else employee energy enjoy enough enter entire environment
especially establish evening event eventually evidence exactly example executive exist expect
experience expert explain face fact factor fail fall family far fast father fear federal feel
field fight figure fill film final finally financial find fine finger finish fire firm fish five
floor fly focus follow food foot force foreign forget form former forward free friend front full
fund future game garden gas general generation girl give glass goal good government great green
ground group grow growth guess gun guy hair half hand hang happen happy hard head health hear heart
heat heavy help herself high himself history hit hold home hope hospital hot hotel hour house
however huge human hundred husband idea identify image imagine impact important improve include
increase indeed indicate individual industry information inside instead institution interest
interview investment issue item itself job join just keep key kid kill kind kitchen know knowledge
land language large last late later laugh law lawyer lay lead leader learn least leave left leg
legal less letter level lie life light like likely line list listen little live local long look
lose loss lot love low machine magazine main maintain major majority make manage manager many
market marriage material matter maybe mean measure media medical meet meeting member memory mention
message method middle might military million mind minute miss mission model modern moment money
month morning mother mouth move movement movie much music myself name nation natural nature near
nearly necessary need network never news newspaper next nice night none north note nothing notice
number occur offer office officer official often oil ok old once open operation opportunity option
order organization others outside owner page pain painting paper parent part participant particular
partner party pass past patient pattern pay peace people perform perhaps period person personal
phone physical pick picture piece place plan plant play player point police policy political poor
popular population position positive possible power practice prepare present president pressure
pretty prevent price private probably problem process produce product production professional
program project property protect prove provide public pull purpose push quality question quickly
quite race radio raise range rate rather reach read ready real reality realize reason receive recent
recently recognize record red reduce reflect region relate relationship religious remain remember
remove report represent require research resource respond response rest result return reveal rich
right rise risk road rock role room rule run safe scene school science scientist score sea season
seat second section security seek seem sell send senior sense series serious serve service set
seven several shake share ship shoot short shot shoulder show side sign significant similar simple
simply since sing single sister sit site situation size skill skin small smile social society
soldier somebody someone something sometimes son song soon sort sound source south southern space
speak special specific speech spend sport spring staff stage stand standard star start state
statement station stay step still stock stop store story strategy street strong structure student
study stuff style subject success successful suddenly suffer suggest summer support sure surface
system table take talk task teach teacher team technology television tell ten tend term test thank
theory thing think third thousand threat three through throughout throw thus today together
tonight total tough toward town trade traditional training travel treat treatment tree trial trip
trouble true truth try turn two type under understand unit until upon usually value various very
victim view violence visit voice vote wait walk wall want war watch water way weapon wear week
weight well west western whatever whether white whole wide wife win wind window wish within without
woman wonder word work worker world worry write writer wrong yard yeah year yes yet young yourself
"""
_FUNCTION_WORDS = "the a of to and in that for on with as by at from into over after before"
_NAME_WORDS = """Aldan Briggs Corva Delmar Elkins Farrow Gideon Halvey Isko Jarrow Kestin Lomax
Marrick Norvell Orrin Pelham Quillon Rasko Sorrel Tamsin Ulric Varga Wendal Xavian Yorick Zelda"""
_FUNCTION = _FUNCTION_WORDS.split()
_NAMES = _NAME_WORDS.split()


def _sentence(rng: random.Random, vocabulary: list[str], names: list[str]) -> str:
    """One sentence of 10-24 words: content words, function words, a name, maybe a number."""
    length = rng.randint(10, 24)
    words: list[str] = []
    for position in range(length):
        roll = rng.random()
        if roll < 0.30:
            words.append(rng.choice(_FUNCTION))
        elif roll < 0.37:
            words.append(rng.choice(names))
        elif roll < 0.40 and position > 0:
            words.append(str(rng.randint(2, 1990)))
        else:
            words.append(rng.choice(vocabulary))
    words[0] = words[0][0].upper() + words[0][1:]
    return " ".join(words) + "."


def _paraphrase(rng: random.Random, sentence: str, vocabulary: list[str], rate: float) -> str:
    """The sentence with about ``rate`` of its words replaced: another writer's wording."""
    words = sentence.rstrip(".").split(" ")
    for index in range(1, len(words)):
        if rng.random() < rate:
            words[index] = rng.choice(vocabulary)
    return " ".join(words) + "."


def _summary(
    rng: random.Random,
    facts: list[str],
    share: float,
    words: int,
    vocabulary: list[str],
    names: list[str],
    rate: float,
) -> str:
    """About ``words`` words: a ``share`` of the story's facts (paraphrased), the rest filler."""
    out: list[str] = []
    count = 0
    picked = [f for f in facts if rng.random() < share]
    rng.shuffle(picked)
    while count < words:
        if picked and rng.random() < max(share, 0.05) + 0.1:
            sentence = _paraphrase(rng, picked.pop(), vocabulary, rate)
        else:
            sentence = _sentence(rng, vocabulary, names)
        out.append(sentence)
        count += len(sentence.split())
    # Paragraphs of four sentences, as summaries are written.
    return "\n\n".join(" ".join(out[i : i + 4]) for i in range(0, len(out), 4))


def generate_set(
    path: Path, *, items: int = 300, references: int = 4, words: int = 300, seed: int = 17
) -> dict[str, Any]:
    """Write a SQuALITY-like calibration set (calibration line format) to ``path``.

    Args:
        path: The JSONL file to write.
        items: Candidate summaries (five per question).
        references: Reference summaries per question (SQuALITY has four).
        words: About how many words each candidate and reference has.
        seed: The random seed: the same arguments always write the same bytes.

    Returns:
        What was written: items, questions, references per question, mean words.
    """
    rng = random.Random(seed)
    vocabulary = _WORDS.split()
    per_question = 5
    lines: list[str] = []
    total_words = 0
    question_count = (items + per_question - 1) // per_question
    for q in range(question_count):
        names = rng.sample(_NAMES, 4)
        facts = [_sentence(rng, vocabulary, names) for _ in range(40)]
        refs = [
            _summary(rng, facts, 0.85, words, vocabulary, names, rate=0.15)
            for _ in range(references)
        ]
        question = f"What happens to {names[0]} and {names[1]} in the story, and why?"
        for c in range(per_question):
            index = q * per_question + c
            if index >= items:
                break
            quality = rng.random()
            candidate = _summary(rng, facts, quality, words, vocabulary, names, rate=0.3)
            total_words += len(candidate.split())
            score = max(1.0, min(100.0, round(1 + 99 * quality + rng.gauss(0, 8), 1)))
            line = {
                "id": f"squality-like-{index}",
                "source": "squality_like",
                "question": question,
                "reference": refs[0],
                "references": refs,
                "candidate": candidate,
                "human_score": score,
                "score_scale": "1-100",
                "question_id": f"q{q}",
                "system": f"system-{c}",
            }
            lines.append(json.dumps(line, ensure_ascii=False))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return {
        "items": len(lines),
        "questions": question_count,
        "references_per_question": references,
        "mean_candidate_words": round(total_words / max(1, len(lines)), 1),
    }


def run_calibrate(set_path: Path, work: Path, *, metrics: str, timeout: float) -> dict[str, Any]:
    """Run ``bonusjudge calibrate`` on ``set_path`` in a subprocess; wall time and peak RSS.

    Raises:
        BenchError: The CLI failed or ran past ``timeout`` seconds.
    """
    command = [
        *bonusjudge_command(),
        "calibrate",
        str(set_path),
        "--metrics",
        metrics,
        "--out",
        str(work / "report"),
        "--cache-dir",
        str(work / "cache"),
        "--quiet",
    ]
    row = run_measured(command, work, timeout=timeout, label="bonusjudge calibrate")
    report = json.loads((work / "report" / "report.json").read_text(encoding="utf-8"))
    row["metrics"] = metrics
    row["report_metrics"] = sorted(report.get("metrics", {})) if isinstance(report, dict) else []
    return row


def main(argv: Sequence[str] | None = None) -> int:
    """Generate the set, calibrate it through the CLI and print wall time and peak RSS."""
    parser = section_parser("bench.long_answers", __doc__)
    parser.add_argument("--items", type=int, default=300, help="candidate summaries")
    parser.add_argument("--references", type=int, default=4, help="references per question")
    parser.add_argument("--words", type=int, default=300, help="words per summary")
    parser.add_argument("--seed", type=int, default=17)
    parser.add_argument("--metrics", default="rouge_l,bertscore,coverage", help="--metrics")
    parser.add_argument("--timeout", type=float, default=900, help="seconds before giving up")
    args = parse_section_args(parser, argv)
    work = Path(tempfile.mkdtemp(prefix="bench-long-"))
    set_path = work / "squality_like.jsonl"
    shape = generate_set(
        set_path, items=args.items, references=args.references, words=args.words, seed=args.seed
    )
    log(f"generated {shape} into {set_path}")
    row = run_calibrate(set_path, work, metrics=args.metrics, timeout=args.timeout)
    row.update(shape)
    print(
        f"bonusjudge calibrate: {row['items']} long items ({shape['references_per_question']} "
        f"references each) in {row['wall_s']} s, peak RSS {row['peak_rss_mb']} MiB, "
        f"{row['cpu_s']} s CPU"
    )
    write_json(args.json, row)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
