"""Metric cost: ROUGE-L and BERTScore pairs/s on the workload's (response, reference) pairs.

* ROUGE-L: ``judge.metrics.rouge_l`` once per pair (it is per pair by design).
* BERTScore: ``judge.metrics.bertscore(responses, references)`` on all pairs at once (the encoder
  sorts texts by length and batches them), and the same pairs scored 100 at a time, the way a
  caller without batching would. The encoder is loaded (and warmed on 8 pairs) before timing;
  the load time is reported separately.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from bench.common import Timer, load_requests, log, machine, set_bench_env, write_json

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

    return {
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


def main(argv: Sequence[str] | None = None) -> int:
    """Measure ROUGE-L and BERTScore throughput and print a table.

    Args:
        argv: Command-line arguments (see ``--help``).

    Returns:
        The exit status.
    """
    parser = argparse.ArgumentParser(prog="python -m bench.metrics_cost", description=__doc__)
    parser.add_argument("--chunk", type=int, default=100, help="pairs per call, unbatched run")
    parser.add_argument(
        "--chunked-pairs", type=int, default=300, help="pairs scored in the unbatched run"
    )
    parser.add_argument("--json", help="write the figures here (for bench.run_all)")
    args = parser.parse_args(argv)
    set_bench_env()
    row = _run(args.chunk, args.chunked_pairs)
    row["machine"] = machine()
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
