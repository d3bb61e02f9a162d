"""Metric cost: ROUGE-L and BERTScore pairs/s on the workload's (response, reference) pairs.

* ROUGE-L: ``judge.metrics.rouge_l`` once per pair (it is per pair by design).
* BERTScore: ``judge.metrics.bertscore(responses, references)`` on all pairs at once (the encoder
  sorts texts by length and batches them), and the same pairs scored 100 at a time, the way a
  caller without batching would. The encoder is loaded (and warmed on 8 pairs) before timing;
  the load time is reported separately.
* Embedded matcher (issue target: 100 short items/s on 2 cores once the encoder is loaded):
  ``Grader.grade_many`` with the ``embedded-matcher`` judge, coverage only, no cache, on the
  workload's CharToM items (several bonus points each) and on short answers (the first 1,000
  EVOUNA TriviaQA rows of the shared calibration sets, read in place, the first reference as the
  one point; and 200 rows with every alias judged, which costs one match per alias), after a
  warm-up batch. Chinese goes through the multilingual encoder: the 24 Chinese CharToM-style
  items of the matcher's tests, each with its paraphrase and its opposite (48 responses; no
  Chinese workload is shared), repeated 4 times as new responses.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.common import Timer, load_requests, log, parse_section_args, section_parser, write_json

__all__ = ["main"]


def _run(chunk: int, chunked_pairs: int) -> dict[str, Any]:
    import torch

    from judge.metrics import bertscore, get_encoder, rouge_l

    items = load_requests()
    responses = [request.response for _, request in items]
    references = [request.reference for _, request in items]
    pairs = len(items)

    with Timer() as rouge_timer:
        for response, reference in zip(responses, references, strict=True):
            rouge_l(response, reference)
    log(f"ROUGE-L: {pairs} pairs in {rouge_timer.wall:.2f} s")

    with Timer() as load_timer:
        get_encoder()
        bertscore(responses[:8], references[:8])
    log(f"encoder loaded and warmed in {load_timer.wall:.2f} s")

    with Timer() as batched:
        scores = bertscore(responses, references)
    if len(scores) != pairs:
        raise RuntimeError(f"bertscore returned {len(scores)} scores for {pairs} pairs")
    log(f"BERTScore batched: {pairs} pairs in {batched.wall:.2f} s")

    subset = min(pairs, chunked_pairs)
    with Timer() as chunked:
        for start in range(0, subset, chunk):
            stop = min(start + chunk, subset)
            bertscore(responses[start:stop], references[start:stop])
    log(f"BERTScore {chunk} at a time: {subset} pairs in {chunked.wall:.2f} s")

    matcher_rows = _matcher_speed(items)

    return {
        "matcher": matcher_rows,
        "pairs": pairs,
        "torch_threads": torch.get_num_threads(),
        "rouge_l_pairs_per_s": round(pairs / rouge_timer.wall, 1),
        "rouge_l_pairs_per_cpu_s": round(pairs / max(rouge_timer.cpu, 1e-9), 1),
        "encoder_load_s": round(load_timer.wall, 2),
        "bertscore_batched_pairs_per_s": round(pairs / batched.wall, 1),
        "bertscore_batched_cpu_s": round(batched.cpu, 2),
        "bertscore_chunk": chunk,
        "bertscore_chunked_pairs": subset,
        "bertscore_chunked_pairs_per_s": round(subset / chunked.wall, 1),
        "bertscore_chunked_cpu_s": round(chunked.cpu, 2),
        "scored": sum(1 for s in scores if s.f1 is not None),
    }


def _evouna_requests(limit: int) -> list[tuple[str, Any]]:
    """The first ``limit`` EVOUNA TriviaQA rows as requests, or [] when the set is not here."""
    from calibration.runner import item_request
    from calibration.sets import load_shared_set
    from core.errors import JudgeError

    try:
        dataset = load_shared_set("evouna_tq")
    except (JudgeError, OSError) as exc:
        log(f"short-answer set unavailable ({exc}); matcher measured on the workload only")
        return []
    return [(item.id, item_request(item)) for item in dataset.items[:limit]]


CHINESE_CASES = (
    Path(__file__).parent.parent / "tests" / "judge" / "data" / "matcher_paraphrase_cases.jsonl"
)
"""Chinese CharToM-style items (the matcher's test cases), the only Chinese bonus points here."""


def _chinese_requests(copies: int = 4) -> list[tuple[str, Any]]:
    """Each Chinese case's paraphrase and opposite as requests, ``copies`` times as new texts."""
    from bonusjudge_client.wire.grading import GradeRequest
    from core.jsonl import read_rows

    if not CHINESE_CASES.is_file():
        return []
    requests: list[tuple[str, Any]] = []
    cases = read_rows(CHINESE_CASES, field="chinese_cases")
    for copy in range(copies):
        for case in cases:
            if case["language"] != "zh":
                continue
            for kind in ("paraphrase", "opposite"):
                # A new response per copy (a trailing mark), so each copy is embedded anew.
                response = case[kind] + "。" * copy
                request = GradeRequest(
                    question=case["question"],
                    reference=case["reference"],
                    bonus_points=case["points"],
                    response=response,
                    language="zh",
                )
                requests.append((f"{case['id']}-{kind}~{copy}", request))
    return requests


def _matcher_speed(workload: list[tuple[str, Any]]) -> list[dict[str, Any]]:
    """Items/s of the embedded matcher through the engine, coverage only, cache off."""
    import asyncio

    from judge.config import JudgeConfig
    from judge.engine import Grader

    config = JudgeConfig(
        model="embedded-matcher", metrics=("coverage",), cache=False, concurrency=64
    )

    async def grade(requests: list[tuple[str, Any]]) -> tuple[int, int]:
        grader = Grader(config)
        scored = points = 0
        try:
            async for result in grader.grade_many(requests):
                if result.coverage is not None and result.coverage.status == "scored":
                    scored += 1
                    points += result.coverage.total
        finally:
            await grader.aclose()
        return scored, points

    rows: list[dict[str, Any]] = []
    evouna = _evouna_requests(1000)
    # Short answers: the first reference as the one point; with aliases, each is one match.
    first_only = [(i, r.model_copy(update={"references": None})) for i, r in evouna]
    sets = [
        ("CharToM workload (bonus points)", workload),
        ("EVOUNA TQ short answers", first_only),
        ("EVOUNA TQ, each alias judged (up to 16)", evouna[:200]),
        ("Chinese CharToM-style items (multilingual encoder)", _chinese_requests()),
    ]
    for name, requests in sets:
        if not requests:
            continue
        asyncio.run(grade(requests[:32]))  # warm-up: encoder load, parameter file, imports
        with Timer() as timer:
            scored, points = asyncio.run(grade(requests))
        log(f"matcher, {name}: {len(requests)} items in {timer.wall:.2f} s")
        rows.append(
            {
                "set": name,
                "items": len(requests),
                "scored": scored,
                "points": points,
                "items_per_s": round(len(requests) / timer.wall, 1),
                "points_per_s": round(points / timer.wall, 1),
                "cpu_s": round(timer.cpu, 2),
            }
        )
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    """Measure ROUGE-L and BERTScore throughput and print a table."""
    parser = section_parser("bench.metrics_cost", __doc__)
    parser.add_argument("--chunk", type=int, default=100, help="pairs per call, unbatched run")
    parser.add_argument(
        "--chunked-pairs", type=int, default=300, help="pairs scored in the unbatched run"
    )
    args = parse_section_args(parser, argv)
    row = _run(args.chunk, args.chunked_pairs)
    print(
        "| metric | pairs/s |\n|---|---|\n"
        f"| ROUGE-L | {row['rouge_l_pairs_per_s']} |\n"
        f"| BERTScore, all {row['pairs']} pairs in one call | "
        f"{row['bertscore_batched_pairs_per_s']} |\n"
        f"| BERTScore, {args.chunk} pairs per call ({row['bertscore_chunked_pairs']} pairs) | "
        f"{row['bertscore_chunked_pairs_per_s']} |"
    )
    write_json(args.json, row)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
