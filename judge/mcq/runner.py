"""Score multiple-choice runs from JSONL files (and in memory), with an optional LLM extractor.

The file runner streams: it reads one line at a time, writes each result line as soon as its batch
is scored and flushes, so a crash leaves every finished line on disk. Lines that are not valid
items are reported with their line numbers and skipped; the rest are scored. The LLM extractor, if
given, only sees answers the rules could not parse, a batch at a time and with bounded
concurrency; its readings are recorded as ``llm``.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TextIO, TypedDict, Unpack

from pydantic import ValidationError

from bonusjudge_client.wire.mcq import (
    Aggregate,
    LlmExtractor,
    McqItem,
    McqResult,
    McqSummary,
    SkippedLine,
)
from core.errors import ConfigError, InputError, every_error
from core.jsonl import BadLine, read_jsonl
from judge.mcq.extract import DEFAULT_FUZZY_MARGIN, DEFAULT_FUZZY_THRESHOLD, Extraction
from judge.mcq.score import check_group_fields, extract_item, result_from_extraction, summarize

__all__ = [
    "FileOptions",
    "format_validation_error",
    "read_items",
    "score_file",
    "score_file_async",
    "score_items",
]

_BATCH = 64
# How core.jsonl words a line of invalid UTF-8 (this reader turns it into an InputError).
_NOT_UTF8 = "not valid UTF-8"


def format_validation_error(exc: ValidationError) -> str:
    """One line naming each offending field: ``"answer: label 'E' is not among ..."``."""
    return every_error(exc)


def skipped_line(bad: BadLine) -> SkippedLine:
    """The summary entry of a bad line the reader reported."""
    # MCQ summaries (and the CLI lines printed from them) have always said "invalid JSON";
    # core.jsonl says "not valid JSON". Keep the wording users of this output already see.
    error = bad.message.replace("not valid JSON", "invalid JSON", 1)
    return SkippedLine(line=bad.line, error=error)


def read_items(path: str | Path) -> Iterator[tuple[int, McqItem | BadLine]]:
    """Yield ``(line number, item or bad line)`` for each non-blank line of a JSONL file.

    Raises:
        InputError: If the file cannot be opened or a line is not UTF-8 text.
    """
    for entry in read_jsonl(path, field="input"):
        if isinstance(entry, tuple):
            number, data = entry
            parsed: McqItem | BadLine
            try:
                parsed = McqItem.model_validate(data)
            except ValidationError as exc:
                parsed = BadLine(number, format_validation_error(exc))
            yield number, parsed
        elif entry.message.startswith(_NOT_UTF8):
            # This reader has always refused a file that is not UTF-8 text as a whole (most
            # likely the wrong encoding throughout) rather than skip its lines one by one.
            raise InputError(
                f"{path}: line {entry.line} is not UTF-8 text", field="input", line=entry.line
            )
        else:
            yield entry.line, entry


def _check_settings(
    fuzzy_threshold: float, max_concurrency: int, group_by: Sequence[str] | None = None
) -> None:
    if group_by is not None:
        try:
            check_group_fields(group_by)
        except ValueError as exc:
            raise ConfigError(str(exc), field="group_by") from exc
    if not 0 <= fuzzy_threshold <= 101:
        raise ConfigError(
            f"fuzzy_threshold must be between 0 and 100 (101 disables), got {fuzzy_threshold}",
            field="fuzzy_threshold",
        )
    if max_concurrency < 1:
        raise ConfigError(
            f"max_concurrency must be at least 1, got {max_concurrency}", field="max_concurrency"
        )


async def _llm_read(
    item: McqItem, extractor: LlmExtractor, semaphore: asyncio.Semaphore
) -> tuple[Extraction, bool]:
    """Ask the extractor about one rule-unparseable answer; return (extraction, failed)."""
    async with semaphore:
        try:
            found = await extractor.extract(item, item.response)
        except Exception as exc:  # any provider failure leaves the item unparseable, not lost
            detail = f"llm extractor failed: {type(exc).__name__}: {exc}"
            return Extraction((), "unparseable", detail), True
    if not found:
        return Extraction((), "unparseable", "llm extractor found no answer"), False
    by_fold = {label.casefold(): label for label in item.display_labels}
    labels = {by_fold.get(str(label).strip().casefold()) for label in found}
    if None in labels:
        shown = ", ".join(sorted(map(str, found)))
        return Extraction((), "unparseable", f"llm extractor named non-options: {shown}"), False
    chosen = tuple(label for label in item.display_labels if label in labels)
    if len(chosen) > 1 and not item.is_multi_select:
        detail = f"llm extractor named several options ({', '.join(chosen)})"
        return Extraction((), "unparseable", detail), False
    return Extraction(chosen, "llm", "read by the llm extractor"), False


async def _score_batch(
    items: Sequence[McqItem],
    *,
    fuzzy_threshold: float,
    fuzzy_margin: float,
    llm_extractor: LlmExtractor | None,
    semaphore: asyncio.Semaphore,
) -> tuple[list[McqResult], int]:
    extractions = [
        extract_item(item, fuzzy_threshold=fuzzy_threshold, fuzzy_margin=fuzzy_margin)
        for item in items
    ]
    failures = 0
    if llm_extractor is not None:
        pending = [i for i, extraction in enumerate(extractions) if not extraction.parsed]
        answers = await asyncio.gather(
            *(_llm_read(items[i], llm_extractor, semaphore) for i in pending)
        )
        for i, (extraction, failed) in zip(pending, answers, strict=True):
            failures += failed
            if extraction.parsed:
                extractions[i] = extraction
            else:
                # Keep the rules' reason and add the extractor's, so both are visible.
                extractions[i] = Extraction(
                    (), "unparseable", f"{extractions[i].detail}; {extraction.detail}"
                )
    results = [
        result_from_extraction(item, extraction)
        for item, extraction in zip(items, extractions, strict=True)
    ]
    return results, failures


async def score_items(
    items: Iterable[McqItem],
    *,
    fuzzy_threshold: float = DEFAULT_FUZZY_THRESHOLD,
    fuzzy_margin: float = DEFAULT_FUZZY_MARGIN,
    llm_extractor: LlmExtractor | None = None,
    max_concurrency: int = 8,
) -> list[McqResult]:
    """Score items in memory, in order (the HTTP endpoint's entry point).

    Args:
        items: Validated items.
        fuzzy_threshold: rapidfuzz score (0-100) an option text must reach; 101 disables fuzzy.
        fuzzy_margin: Points the best option text must lead the runner-up by.
        llm_extractor: Optional reader for rule-unparseable answers.
        max_concurrency: Most extractor calls in flight at once.

    Raises:
        ConfigError: If a setting is out of range.
    """
    _check_settings(fuzzy_threshold, max_concurrency)
    semaphore = asyncio.Semaphore(max_concurrency)
    results, _ = await _score_batch(
        list(items),
        fuzzy_threshold=fuzzy_threshold,
        fuzzy_margin=fuzzy_margin,
        llm_extractor=llm_extractor,
        semaphore=semaphore,
    )
    return results


class FileOptions(TypedDict, total=False):
    """The settings :func:`score_file` passes on to :func:`score_file_async` (all optional)."""

    aggregate: Aggregate
    fuzzy_threshold: float
    fuzzy_margin: float
    group_by: Sequence[str] | None
    llm_extractor: LlmExtractor | None
    max_concurrency: int


def _write_json_atomic(path: Path, text: str) -> None:
    """Write via a temporary file and rename, so a reader never sees half a summary."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


async def score_file_async(
    input_path: str | Path,
    out_path: str | Path,
    summary_path: str | Path,
    *,
    aggregate: Aggregate = "mean",
    fuzzy_threshold: float = DEFAULT_FUZZY_THRESHOLD,
    fuzzy_margin: float = DEFAULT_FUZZY_MARGIN,
    group_by: Sequence[str] | None = None,
    llm_extractor: LlmExtractor | None = None,
    max_concurrency: int = 8,
) -> McqSummary:
    """Async form of :func:`score_file`, for callers already inside an event loop.

    Args:
        input_path: JSONL file of items (see :class:`McqItem`).
        out_path: Where the result lines go.
        summary_path: Where the :class:`McqSummary` JSON goes.
        aggregate: How permuted runs of a question combine (``mean`` or ``majority``).
        fuzzy_threshold: rapidfuzz score an option text must reach; 101 disables fuzzy.
        fuzzy_margin: Points the best option text must lead the runner-up by.
        group_by: Breakdown fields; default task, ability, tom_dimension, language and tags.
        llm_extractor: Optional reader for rule-unparseable answers.
        max_concurrency: Most extractor calls in flight at once.
    """
    _check_settings(fuzzy_threshold, max_concurrency, group_by)
    out = Path(out_path)
    summary_file = Path(summary_path)
    for target in (out, summary_file):
        target.parent.mkdir(parents=True, exist_ok=True)
    semaphore = asyncio.Semaphore(max_concurrency)
    results: list[McqResult] = []
    bad_lines: list[BadLine] = []
    seen: dict[tuple[str, str, int | None], int] = {}
    failures = 0
    batch: list[McqItem] = []

    async def flush(handle: TextIO) -> None:
        nonlocal failures
        scored, failed = await _score_batch(
            batch,
            fuzzy_threshold=fuzzy_threshold,
            fuzzy_margin=fuzzy_margin,
            llm_extractor=llm_extractor,
            semaphore=semaphore,
        )
        failures += failed
        for result in scored:
            handle.write(result.model_dump_json() + "\n")
        handle.flush()
        results.extend(scored)
        batch.clear()

    with out.open("w", encoding="utf-8") as handle:
        for number, parsed in read_items(input_path):
            if isinstance(parsed, BadLine):
                bad_lines.append(parsed)
                continue
            run = parsed.permutation.run if parsed.permutation is not None else None
            key = (parsed.id, parsed.language or "", run)
            if key in seen:
                bad_lines.append(
                    BadLine(
                        number,
                        f"id: duplicate of line {seen[key]} (id {parsed.id!r}, "
                        f"language {parsed.language!r}, permutation run {run})",
                        field="id",
                        id=parsed.id,
                    )
                )
                continue
            seen[key] = number
            batch.append(parsed)
            if len(batch) >= _BATCH:
                await flush(handle)
        if batch:
            await flush(handle)
    summary = summarize(
        results,
        aggregate=aggregate,
        group_by=group_by,
        fuzzy_threshold=fuzzy_threshold,
        llm_extractor=llm_extractor is not None,
        llm_failures=failures,
        bad_lines=[skipped_line(bad) for bad in bad_lines],
    )
    _write_json_atomic(summary_file, summary.model_dump_json(indent=2) + "\n")
    return summary


def score_file(
    input_path: str | Path,
    out_path: str | Path,
    summary_path: str | Path,
    **options: Unpack[FileOptions],
) -> McqSummary:
    """Score a JSONL run: one result line per valid item to ``out_path``, summary to JSON.

    ``out_path`` is overwritten; each line is written and flushed as its batch finishes. Bad
    lines (invalid JSON, invalid item, duplicate id/language/run) are skipped and listed in the
    summary's ``bad_lines`` with their line numbers.

    Args:
        input_path: JSONL file of items (see :class:`McqItem`).
        out_path: Where the result lines go.
        summary_path: Where the :class:`McqSummary` JSON goes.
        **options: The settings of :class:`FileOptions`, with the defaults of
            :func:`score_file_async`.

    Returns:
        The summary that was written.

    Raises:
        InputError: If the input file cannot be read.
        ConfigError: If a setting is out of range.
        RuntimeError: If called from a running event loop (use :func:`score_file_async`).
    """
    return asyncio.run(score_file_async(input_path, out_path, summary_path, **options))
