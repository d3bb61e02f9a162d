"""Run every benchmark section and regenerate the table in ``bench/README.md``.

``.venv/bin/python -m bench.run_all`` (from the project root) runs each section in its own
interpreter (fresh imports, its own peak memory), collects the JSON each one writes, stores them
in ``bench/results.json`` and rewrites the part of ``bench/README.md`` between the
``<!-- bench:results -->`` markers. ``--only`` picks sections, ``--render`` only re-renders the
README from ``bench/results.json``, ``--quick`` runs every section with small sizes (a smoke test
of the scripts; its figures are not the reference ones).

The load average (``uptime``) is taken before and after each section and printed next to its
figures: on a shared 2-core machine, CPU-bound figures scale with the share of the CPU we get.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import BenchError, log, machine, set_bench_env, workload_path
from core import markdown

__all__ = ["SECTIONS", "Section", "main", "render"]

BENCH_DIR = Path(__file__).resolve().parent
RESULTS = BENCH_DIR / "results.json"
README = BENCH_DIR / "README.md"
BEGIN = "<!-- bench:results:begin -->"
END = "<!-- bench:results:end -->"


@dataclass(frozen=True)
class Section:
    """One benchmark subprocess.

    Attributes:
        key: Name in ``results.json`` and for ``--only``.
        module: The ``bench`` module to run with ``-m``.
        args: Its arguments (reference run).
        quick_args: Its arguments for ``--quick``.
        timeout: Seconds before the section is killed.
    """

    key: str
    module: str
    args: tuple[str, ...] = ()
    quick_args: tuple[str, ...] = ()
    timeout: float = 900.0


SECTIONS: tuple[Section, ...] = (
    Section(
        "throughput", "bench.throughput",
        quick_args=("--concurrency", "8", "64", "--subset", "8=40", "64=80",
                    "--public-items", "4", "--latency", "0.05"),
        timeout=1200,
    ),
    Section(
        "transport", "bench.transport",
        # c=32 and 64 put 64 and 128 calls in flight: the stricter reading of the limit.
        args=("--concurrency", "32", "64", "128"),
        quick_args=("--items", "120", "--public-items", "4"),
        timeout=900,
    ),
    Section("layers", "bench.layers", ("--calls", "200"), ("--calls", "40"), timeout=300),
    Section("metrics", "bench.metrics_cost", (), ("--chunked-pairs", "100"), timeout=600),
    # The embedded judge at 16x (16,560 items) takes 3-5 minutes on the 2-core machine.
    Section("memory", "bench.memory", (), ("--runs", "standin:1", "embedded:1", "embedded:2"),
            timeout=1800),
    Section("long_answers", "bench.long_answers", (), ("--items", "30"), timeout=900),
    Section("scaling_x1", "bench.scaling", ("--repeat", "1", "--base", "256"),
            ("--repeat", "1", "--base", "32"), timeout=300),
    Section("scaling_x4", "bench.scaling", ("--repeat", "4", "--base", "256"),
            ("--repeat", "4", "--base", "32"), timeout=600),
    Section("scaling_x16", "bench.scaling", ("--repeat", "16", "--base", "256"),
            ("--repeat", "16", "--base", "32"), timeout=1200),
    Section("service", "bench.service", (),
            ("--cold", "24", "--cached", "100", "--workers", "1"), timeout=600),
    # Issue 20: start-up (--help, serve, the CLI's first result) and per-request overhead.
    Section("overhead", "bench.overhead", (),
            ("--requests", "40", "--help-runs", "2", "--serve-runs", "1", "--cli-runs", "1",
             "--no-steady"), timeout=600),
)


def _run_section(section: Section, quick: bool) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-") as folder:
        out = Path(folder) / "result.json"
        args = section.quick_args if quick else section.args
        command = [sys.executable, "-m", section.module, *args, "--json", str(out)]
        load_before = os.getloadavg()
        started = time.perf_counter()
        log(f"section {section.key}: {' '.join(command[1:])}")
        try:
            completed = subprocess.run(
                command, cwd=BENCH_DIR.parent, timeout=section.timeout, check=False
            )
        except subprocess.TimeoutExpired:
            return {"error": f"timed out after {section.timeout:g} s"}
        if completed.returncode != 0 or not out.is_file():
            return {"error": f"exited {completed.returncode}"}
        payload: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
        payload["section_wall_s"] = round(time.perf_counter() - started, 1)
        payload["load_before"] = [round(x, 2) for x in load_before]
        payload["load_after"] = [round(x, 2) for x in os.getloadavg()]
        return payload


# -- rendering ------------------------------------------------------------------------------


def _load(payload: dict[str, Any]) -> str:
    before = payload.get("load_before") or ["?"]
    after = payload.get("load_after") or ["?"]
    return f"load {before[0]} -> {after[0]}"


def _met(ok: bool | None) -> str:
    return "n/a" if ok is None else ("yes" if ok else "**no**")


def _target(number: int | str, measure: str, figure: str, target: str, ok: bool | None) -> str:
    """A row of the summary table: the measure, its figure, the target and whether it is met."""
    return markdown.table_row(number, measure, figure, target, _met(ok))


def _table(head: Sequence[str], body: Iterable[str] = ()) -> list[str]:
    """A Markdown table: the header row of ``head``, its rule, then the ``body`` rows (lines)."""
    return [*markdown.table(head), *body]


def _blocks(*blocks: str | list[str]) -> list[str]:
    """Markdown blocks, each after a blank line: a paragraph (a string) or its lines (a table)."""
    lines: list[str] = []
    for block in blocks:
        lines += ["", block] if isinstance(block, str) else ["", *block]
    return lines


def _section(heading: str, *blocks: str | list[str]) -> list[str]:
    """A section of the results block: its ``### heading``, then its ``blocks``."""
    return _blocks(f"### {heading}", *blocks)


def _summary_rows(results: dict[str, Any]) -> list[str]:
    rows = _table(("#", "Measure", "Figure", "Target", "Met"))
    throughput = results.get("throughput", {})
    cold = {row["concurrency"]: row for row in throughput.get("cold", [])}
    c64 = cold.get(64)
    if c64:
        rows.append(_target(
            1, f"Cold throughput at c=64 ({c64['items']} items, {c64['latency_s']:g} s/call)",
            f"{c64['items_per_s']} items/s = {c64['pct_of_ideal']}% of ideal "
            f"{c64['ideal_items_per_s']}", ">= 90% of ideal", c64["pct_of_ideal"] >= 90,
        ))
    public = throughput.get("public_scorer")
    if c64 and public:
        ratio = c64["items_per_s"] / public["items_per_s"]
        rows.append(_target(
            2, f"vs the public scorer's sequential loop ({public['items_per_s']} items/s)",
            f"{ratio:.1f}x", ">= 50x", ratio >= 50,
        ))
    rows += _transport_summary(results)
    warm = throughput.get("warm")
    if warm:
        rows.append(_target(
            3, f"Warm re-grade of {warm['items']} items",
            f"{warm['server_requests']} provider calls, {warm['wall_s']} s, cache "
            f"{warm['cache_mb']} MiB", "0 calls, < 5 s",
            warm["server_requests"] == 0 and warm["wall_s"] < 5,
        ))
    for row in results.get("service", {}).get("service", []):
        cold_s, cached = row["cold"], row["cached"]
        rows.append(_target(
            4, f"Service, {row['workers']} worker(s): overhead over the judge p50/p95/p99",
            f"{cold_s['p50_overhead_ms']} / {cold_s['p95_overhead_ms']} / "
            f"{cold_s['p99_overhead_ms']} ms; cached {cached['requests_per_s']} req/s",
            "(no target)", None,
        ))
    rows += _overhead_rows(results.get("overhead", {}), summary=True)
    metrics = results.get("metrics", {})
    if "bertscore_batched_pairs_per_s" in metrics:
        value = metrics["bertscore_batched_pairs_per_s"]
        rows.append(_target(
            5, f"BERTScore, batched ({metrics['pairs']} pairs); ROUGE-L",
            f"{value} pairs/s; ROUGE-L {metrics['rouge_l_pairs_per_s']} pairs/s",
            ">= 60 pairs/s", value >= 60,
        ))
    for row in metrics.get("matcher", []):
        if row["set"] == "EVOUNA TQ short answers":
            rows.append(_target(
                5, f"Embedded matcher, short answers ({row['items']} EVOUNA items)",
                f"{row['items_per_s']} items/s", ">= 100 items/s", row["items_per_s"] >= 100,
            ))
    memory = results.get("memory", {})
    if "peak_rss_mb" in memory:
        rows.append(_target(
            6, f"Peak RSS, `bonusjudge grade` ({memory['metrics']})",
            f"{memory['peak_rss_mb']} MiB", "< 1024 MiB", memory["peak_rss_mb"] < 1024,
        ))
    rows += _memory_growth_rows(memory)
    rows += _long_answer_rows(results.get("long_answers", {}))
    for row in results.get("service", {}).get("service", []):
        peak = row.get("peak_rss_mb_max")
        if peak is not None:
            rows.append(_target(
                6, f"Peak RSS, service with {row['workers']} worker(s) under load "
                "(largest process)", f"{peak} MiB", "< 1536 MiB", peak < 1536,
            ))
    scales = [results[k] for k in ("scaling_x1", "scaling_x4", "scaling_x16") if k in results]
    scales = [s for s in scales if "items" in s]
    if len(scales) >= 2:
        first, last = scales[0], scales[-1]
        # CPU per item, not wall per item: on a shared machine wall time follows the load.
        cpu_ratio = _cpu_per_item(last) / _cpu_per_item(first)
        growth = last["peak_rss_mb"] - first["peak_rss_mb"]
        rows.append(_target(
            7, f"Cost growth x{first['repeat']} -> x{last['repeat']}",
            f"CPU per item x{cpu_ratio:.2f} (wall per item x"
            f"{last['s_per_1000_items'] / first['s_per_1000_items']:.2f}); peak RSS "
            f"{first['peak_rss_mb']} -> {last['peak_rss_mb']} MiB",
            "linear cost, flat memory (< +10% RSS)",
            cpu_ratio < 1.25 and growth < 0.10 * first["peak_rss_mb"],
        ))
    return rows


def _memory_growth_rows(memory: dict[str, Any]) -> list[str]:
    """Issue 17's memory targets for `bonusjudge grade` with the embedded judge, 1x -> 16x."""
    runs = sorted((r for r in memory.get("runs", []) if r["judge"] == "embedded"),
                  key=lambda r: r["repeat"])
    if len(runs) < 2:
        return []
    first, last = runs[0], runs[-1]
    growth = memory.get("growth_pct", {}).get("embedded")
    peak = max(r["peak_rss_mb"] for r in runs)
    return [_target(
        6, f"Peak RSS, `bonusjudge grade`, embedded judge, x{first['repeat']} -> "
        f"x{last['repeat']} ({first['items']} -> {last['items']} items)",
        f"{first['peak_rss_mb']} -> {last['peak_rss_mb']} MiB ({growth:+}%)",
        "< 1024 MiB, < +10%", peak < 1024 and growth is not None and growth < 10,
    )]


def _long_answer_rows(long: dict[str, Any]) -> list[str]:
    """Issue 17's long-answer targets: `bonusjudge calibrate` on the SQuALITY-like set."""
    if "wall_s" not in long:
        return []
    ok = long["wall_s"] < 100 and long["peak_rss_mb"] < 1024
    return [_target(
        9, f"`bonusjudge calibrate`, {long['items']} long answers x "
        f"{long['references_per_question']} references (rouge_l, bertscore, coverage)",
        f"{long['wall_s']} s, peak RSS {long['peak_rss_mb']} MiB ({_load(long)})",
        "< 100 s, < 1024 MiB", ok,
    )]


def _transport_summary(results: dict[str, Any]) -> list[str]:
    """Issue 17's targets, from the transport section (direct transport, the issue's limit)."""
    transport = results.get("transport", {})
    public = transport.get("public_scorer")
    rows = []
    for row in transport.get("runs", []):
        if row["transport"] != "direct" or not public:
            continue
        ratio = row["items_per_s"] / public["items_per_s"]
        met = row["pct_of_issue_limit"] >= 90 and ratio >= 50 and row["cpu_ms_per_call"] <= 1.5
        rows.append(_target(
            "1-2", f"Direct transport, c={row['concurrency']} ({row['items']} items, "
            f"{row['latency_s']:g} s/call)",
            f"{row['items_per_s']} items/s = {row['pct_of_issue_limit']}% of c/(2 x latency) = "
            f"{row['issue_limit']:g} ({row['pct_of_engine_limit']}% of c/latency); "
            f"{ratio:.1f}x the public scorer; {row['cpu_ms_per_call']} CPU ms/call",
            ">= 90%, >= 50x, <= 1.5 ms", met,
        ))
        calls = 2 * row["concurrency"]
        if calls in (64, 128):
            # The stricter reading: the c counts calls in flight, ours counts items.
            rows.append(_target(
                "1-2", f"Direct transport, {calls} calls in flight (c={row['concurrency']})",
                f"{row['items_per_s']} items/s = {row['pct_of_engine_limit']}% of "
                f"calls/(2 x latency) = {row['engine_limit']:g}", ">= 90%",
                row["pct_of_engine_limit"] >= 90,
            ))
    return rows


def _transport_rows(results: dict[str, Any]) -> list[str]:
    transport = results.get("transport", {})
    public = transport.get("public_scorer")
    if not transport.get("runs") or not public:
        return []

    def line(row: dict[str, Any]) -> str:
        every = ", ".join(f"{rate:g}" for rate in row.get("items_per_s_all", []))
        return markdown.table_row(
            row["concurrency"], row["transport"], f"{row['items_per_s']} ({every})",
            f"{row['pct_of_engine_limit']} ({row['engine_limit']:g})",
            f"{row['pct_of_issue_limit']} ({row['issue_limit']:g})",
            f"{row['items_per_s'] / public['items_per_s']:.1f}x", row["cpu_ms_per_call"],
            row["standin_cpu_ms_per_call"], "yes" if row["same_results"] else "**no**",
        )

    return _section(
        "1b. Transports: direct vs litellm, with the public scorer in the same run "
        f"({_load(transport)})",
        f"The {transport['workload_items']}-item workload, coverage + defects, fresh caches, "
        "each level and transport run 3 times interleaved (the median run is shown), "
        f"stand-in at {public['latency_s']:g} s/call. Two limits: c/latency (the engine's: an "
        "item's two calls run concurrently, so the stand-in sees 2 x c requests in flight) and "
        "c/(2 x latency) (c calls in flight, the basis of the peer comparison). CPU ms/call: "
        "the grading process's; the stand-in's (its own process, on the same cores) beside it.",
        _table(
            ("c", "transport", "items/s, median (all runs)", "% of c/latency",
             "% of c/(2 x latency)", "x public scorer", "CPU ms/call", "stand-in CPU ms/call",
             "same results"),
            map(line, transport["runs"]),
        ),
        f"Public scorer's loop in the same run: **{public['items_per_s']} items/s** "
        f"({public['items']} items, 2 sequential plain calls each).",
    )


def _cpu_per_item(scale: dict[str, Any]) -> float:
    return float(scale["cpu_s"]) / max(1, int(scale["items"]))


def _throughput_rows(results: dict[str, Any]) -> list[str]:
    throughput = results.get("throughput", {})
    if not throughput.get("cold"):
        return []
    rows = _section(
        f"1-3. Throughput, public scorer, warm re-grade ({_load(throughput)})",
        "Ideal = concurrency / latency: an item's coverage and defect calls run concurrently, so "
        "an item holds one concurrency slot for one latency (the stand-in saw up to 2 x "
        "concurrency requests in flight). CPU ms/call is this process's CPU per judge call.",
        _table(
            ("concurrency", "items", "latency s", "items/s", "ideal items/s", "% of ideal",
             "max in flight", "CPU ms/call"),
            (
                markdown.table_row(
                    row["concurrency"], f"{row['items']}{' (first N)' if row['subset'] else ''}",
                    f"{row['latency_s']:g}", row["items_per_s"], row["ideal_items_per_s"],
                    row["pct_of_ideal"], row["max_in_flight"], row["cpu_ms_per_call"],
                )
                for row in throughput["cold"]
            ),
        ),
    )
    public = throughput.get("public_scorer")
    if public:
        ideal = 1 / (2 * public["latency_s"])
        rows += _blocks(
            f"Public scorer's loop (2 plain `litellm.completion` calls per item, one after "
            f"another, first {public['items']} items, {public['latency_s']:g} s/call): "
            f"**{public['items_per_s']} items/s** (its own ideal {ideal:g} items/s; "
            f"{public['parsed']}/{public['calls']} replies parsed).",
        )
    warm = throughput.get("warm")
    if warm:
        rows += _blocks(
            f"Warm re-grade (c={warm['concurrency']}, same cache folder, new `Grader`): "
            f"**{warm['server_requests']} provider requests**, {warm['cache_hits']} cache hits, "
            f"{warm['wall_s']} s for {warm['items']} items ({warm['wall_with_open_s']} s "
            f"including opening the cache), cache on disk {warm['cache_mb']} MiB.",
        )
    return rows


def _layer_rows(results: dict[str, Any]) -> list[str]:
    layers = results.get("layers", {})
    if not layers.get("layers"):
        return []
    return _section(
        f"What bounds cold throughput: CPU per judge call by layer ({_load(layers)})",
        f"The same coverage request, {layers['calls']} calls per layer at concurrency 16, "
        "zero-latency stand-in. One process on one core serves at most 1000 / (CPU ms/call) "
        "calls/s, half that in items/s.",
        _table(
            ("layer", "CPU ms/call", "calls/s"),
            (markdown.table_row(row["layer"], row["cpu_ms_per_call"], row["calls_per_s"])
             for row in layers["layers"]),
        ),
    )


def _overhead_rows(overhead: dict[str, Any], *, summary: bool = False) -> list[str]:
    """Issue 20's figures (``bench/overhead.py``): summary rows, or the section with its table."""
    if not overhead.get("serve") and not overhead.get("overhead") and not overhead.get("help"):
        return []
    from bench.overhead import summary_rows, table

    if summary:
        return summary_rows(overhead)
    return _section(
        f"10. Start-up and overhead per request (`bench/overhead.py`, {_load(overhead)})",
        "Fresh interpreters started as users start them; the stand-in judge at "
        f"{overhead['latency_s']:g} s/call. Overhead: `POST /v1/grade` (coverage + defects) "
        "minus a bare call to the same stand-in (the two bodies the service sends, posted "
        "concurrently) at the same percentile, in alternating rounds of the same run.",
        table(overhead),
    )


def _other_rows(results: dict[str, Any]) -> list[str]:
    rows: list[str] = []
    service = results.get("service", {})
    if service.get("service"):

        def line(row: dict[str, Any]) -> str:
            cold, cached = row["cold"], row["cached"]
            return markdown.table_row(
                row["workers"], cold["requests"],
                f"{cold['p50_overhead_ms']} / {cold['p95_overhead_ms']} / "
                f"{cold['p99_overhead_ms']}",
                cached["requests"], cached["requests_per_s"],
                f"{cached['p50_ms']} / {cached['p95_ms']} / {cached['p99_ms']}",
                cold["errors"] + cached["errors"],
                f"{row['peak_rss_mb_max']} / {row['peak_rss_mb_sum']}",
            )

        rows += _section(
            f"4. Service (`bonusjudge serve`, {_load(service)})",
            f"`POST /v1/grade`, coverage + defects, stand-in at {service['latency_s']:g} s/call. "
            f"Cold: distinct items, {service['cold_concurrency']} in flight, overhead = latency "
            f"minus one judge latency. Cached: the same items again, "
            f"{service['cached_concurrency']} in flight.",
            _table(
                ("workers", "cold requests", "cold overhead p50 / p95 / p99 ms",
                 "cached requests", "cached req/s", "cached p50 / p95 / p99 ms", "errors",
                 "peak RSS MiB (largest / all)"),
                map(line, service["service"]),
            ),
        )
    rows += _overhead_rows(results.get("overhead", {}))
    metrics = results.get("metrics", {})
    if "pairs" in metrics:
        rows += _section(
            f"5. Metric cost ({_load(metrics)}, torch threads {metrics['torch_threads']})",
            _table(
                ("metric", "pairs", "pairs/s", "CPU s"),
                (
                    markdown.table_row(
                        "ROUGE-L (per pair)", metrics["pairs"], metrics["rouge_l_pairs_per_s"],
                        round(metrics["pairs"] / metrics["rouge_l_pairs_per_cpu_s"], 2),
                    ),
                    markdown.table_row(
                        "BERTScore, all pairs in one call", metrics["pairs"],
                        metrics["bertscore_batched_pairs_per_s"],
                        metrics["bertscore_batched_cpu_s"],
                    ),
                    markdown.table_row(
                        f"BERTScore, {metrics['bertscore_chunk']} pairs per call",
                        metrics["bertscore_chunked_pairs"],
                        metrics["bertscore_chunked_pairs_per_s"],
                        metrics["bertscore_chunked_cpu_s"],
                    ),
                ),
            ),
            f"Encoder load + warm-up (not in the rates): {metrics['encoder_load_s']} s.",
        )
        if metrics.get("matcher"):
            rows += _blocks(
                "Embedded matcher through `Grader.grade_many` (coverage only, cache off, "
                "concurrency 64, after a warm-up batch):",
                _table(
                    ("set", "items", "points", "items/s", "points/s", "CPU s"),
                    (markdown.table_row(r["set"], r["items"], r["points"], r["items_per_s"],
                                        r["points_per_s"], r["cpu_s"]) for r in metrics["matcher"]),
                ),
            )
    memory = results.get("memory", {})
    if "peak_rss_mb" in memory:
        rows += _section(
            f"6. Memory of the CLI ({_load(memory)})",
            f"`bonusjudge grade` on the {memory['items']} items, `--metrics {memory['metrics']}`, "
            f"`--concurrency {memory['concurrency']}`, stand-in at {memory['latency_s']:g} s: "
            f"**peak RSS {memory['peak_rss_mb']} MiB** (the child's own `ru_maxrss`), "
            f"{memory['wall_s']} s wall including start-up and encoder load, "
            f"{memory['cpu_s']} s CPU.",
        )
        if memory.get("runs"):
            rows += _blocks(
                "Every run (`--runs`; xN = N copies of the workload with new ids and responses):",
                _table(
                    ("judge", "copies", "items", "wall s", "items/s", "CPU s", "peak RSS MiB",
                     "load"),
                    (markdown.table_row(r["judge"], f"x{r['repeat']}", r["items"], r["wall_s"],
                                        r["items_per_s"], r["cpu_s"], r["peak_rss_mb"],
                                        f"{r['load_before'][0]} -> {r['load_after'][0]}")
                     for r in memory["runs"]),
                ),
            )
    long = results.get("long_answers", {})
    if "wall_s" in long:
        rows += _section(
            f"9. Long answers (`bench/long_answers.py`, {_load(long)})",
            f"`bonusjudge calibrate` on a generated SQuALITY-like set: {long['items']} candidate "
            f"summaries of ~{long['mean_candidate_words']:g} words, {long['questions']} "
            f"questions with {long['references_per_question']} references of ~300 words each, "
            f"`--metrics {long['metrics']}` (coverage from the embedded matcher): "
            f"**{long['wall_s']} s, peak RSS {long['peak_rss_mb']} MiB**, {long['cpu_s']} s CPU.",
        )
    scales = [results[k] for k in ("scaling_x1", "scaling_x4", "scaling_x16") if k in results]
    scales = [s for s in scales if "items" in s]
    if scales:
        first = scales[0]
        rows += _section(
            f"7. Cost growth (stand-in {first['latency_s']:g} s/call, "
            f"c={first['concurrency']}, base {first['base_items']} items repeated with new ids "
            "and responses)",
            _table(
                ("scale", "items", "wall s", "items/s", "wall s per 1000 items",
                 "CPU ms per item", "peak RSS MiB (after warm-up -> end)", "load"),
                (markdown.table_row(f"x{s['repeat']}", s["items"], s["wall_s"], s["items_per_s"],
                                    s["s_per_1000_items"], f"{1000 * _cpu_per_item(s):.1f}",
                                    f"{s['peak_rss_before_mb']} -> {s['peak_rss_mb']}", _load(s))
                 for s in scales),
            ),
        )
    errors = [f"- {key}: {value['error']}" for key, value in results.items()
              if isinstance(value, dict) and "error" in value]
    if errors:
        rows += _blocks("Sections that failed in this run:", errors)
    return rows


def render(results: dict[str, Any]) -> str:
    """The README's results block (between the markers) for a ``results.json`` payload."""
    info = results.get("machine", {})
    lines = [
        BEGIN,
        "",
        f"Run {info.get('time', '?')} on {info.get('cores', '?')} cores "
        f"({info.get('platform', '?')}, Python {info.get('python', '?')}), "
        f"load average at start {info.get('load_avg', '?')}"
        f"{' — QUICK smoke run, not reference figures' if results.get('quick') else ''}.",
        "",
        *_summary_rows(results),
        *_throughput_rows(results),
        *_transport_rows(results),
        *_layer_rows(results),
        *_other_rows(results),
        "",
        END,
    ]
    return "\n".join(lines)


def write_readme(results: dict[str, Any]) -> None:
    """Replace the results block of ``bench/README.md`` (append one if it has none).

    Raises:
        BenchError: The README has a begin marker without an end marker.
    """
    block = render(results)
    text = README.read_text(encoding="utf-8") if README.is_file() else "# Benchmarks\n"
    if BEGIN in text:
        head, _, rest = text.partition(BEGIN)
        if END not in rest:
            raise BenchError(f"{README}: {BEGIN} without {END}")
        _, _, tail = rest.partition(END)
        text = head + block + tail
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    README.write_text(text, encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the sections, store ``bench/results.json`` and regenerate the README table.

    Args:
        argv: Command-line arguments (see ``--help``).

    Returns:
        The exit status: 0 when every section ran, 1 otherwise.
    """
    parser = argparse.ArgumentParser(prog="python -m bench.run_all", description=__doc__)
    keys = [section.key for section in SECTIONS]
    parser.add_argument("--only", nargs="+", choices=keys, help="run only these sections")
    parser.add_argument("--quick", action="store_true", help="small sizes (smoke test)")
    parser.add_argument("--render", action="store_true", help="only re-render the README")
    parser.add_argument(
        "--results", type=Path, default=RESULTS, help="results file (default bench/results.json)"
    )
    args = parser.parse_args(argv)
    set_bench_env()
    if args.render:
        write_readme(json.loads(args.results.read_text(encoding="utf-8")))
        return 0
    try:
        workload_path()
    except BenchError as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return 2
    previous: dict[str, Any] = {}
    if args.only and args.results.is_file():
        # A partial run keeps the other sections' figures.
        previous = json.loads(args.results.read_text(encoding="utf-8"))
    results: dict[str, Any] = {**previous, "machine": machine(), "quick": args.quick}
    failed = 0
    started = time.perf_counter()
    for section in SECTIONS:
        if args.only and section.key not in args.only:
            continue
        results[section.key] = _run_section(section, args.quick)
        if "error" in results[section.key]:
            failed += 1
            log(f"section {section.key} failed: {results[section.key]['error']}")
        # Saved after every section, so an interrupted run keeps what it measured.
        args.results.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    results["total_wall_s"] = round(time.perf_counter() - started, 1)
    args.results.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    write_readme(results)
    print(render(results))
    log(f"done in {results['total_wall_s']} s; README updated")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
