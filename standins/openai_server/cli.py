"""``python -m standins.openai_server``: run the stand-in until SIGINT/SIGTERM.

It serves OpenAI's chat completions, Anthropic's Messages API and Gemini's ``generateContent``
on one port. It prints its OpenAI base URL (``http://HOST:PORT/v1``) on the first line of stdout
once it accepts connections, so a parent process can read where to point its client; the
Anthropic (``http://HOST:PORT``) and Gemini (``http://HOST:PORT/v1beta``) ``api_base`` values go
to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from collections.abc import Sequence
from typing import Any

from core.errors import ConfigError
from standins.openai_server.plan import FAULT_KINDS, FaultPlan
from standins.openai_server.server import OpenAIStandIn


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m standins.openai_server",
        description="Run the stand-in judge server until SIGINT/SIGTERM. One port speaks "
        "OpenAI's chat completions (api_base http://HOST:PORT/v1), Anthropic's Messages API "
        "(api_base http://HOST:PORT) and Gemini's generateContent (api_base "
        "http://HOST:PORT/v1beta).",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (loopback only)")
    parser.add_argument("--port", type=int, default=8011, help="port to bind (0: a free one)")
    parser.add_argument("--latency", type=float, default=0.0, help="seconds per completion")
    parser.add_argument("--jitter", type=float, default=0.0, help="+/- seconds of latency jitter")
    parser.add_argument(
        "--fault",
        action="append",
        default=[],
        metavar="KIND=P",
        help=f"inject a fault with probability P (repeatable); kinds: {', '.join(FAULT_KINDS)}",
    )
    parser.add_argument("--fault-seed", type=int, default=0, help="seed of the fault RNG")
    parser.add_argument(
        "--fault-sequence",
        default=None,
        metavar="K1,K2,...",
        help="scripted faults for the first requests (ok = no fault), before the probabilities",
    )
    parser.add_argument("--retry-after", type=float, default=1.0, help="Retry-After of 429s")
    parser.add_argument(
        "--timeout-hold", type=float, default=60.0, help="seconds a 'timeout' request is held"
    )
    parser.add_argument("--plain-reply", default=None, help="text of plain (unstructured) answers")
    parser.add_argument(
        "--allow-remote", action="store_true", help="allow binding a non-loopback address"
    )
    parser.add_argument(
        "--lenient",
        action="store_true",
        help="accept undocumented request fields (as llama.cpp/vLLM do); by default they get "
        "their API's 400 (OpenAI's 'Unrecognized request argument supplied', Anthropic's "
        "'Extra inputs are not permitted', Google's 'Unknown name')",
    )
    parser.add_argument(
        "--prompt-cache",
        nargs="?",
        const="1024,128",
        default=None,
        metavar="MIN,BLOCK",
        help="report usage.prompt_tokens_details.cached_tokens as a provider with prefix "
        "caching does: prefixes from MIN tokens in steps of BLOCK (default OpenAI's 1024,128)",
    )
    return parser


def _plan_from_args(args: argparse.Namespace) -> FaultPlan | None:
    sequence: list[Any] | None = None
    if args.fault_sequence:
        sequence = [part.strip() for part in args.fault_sequence.split(",") if part.strip()]
    if not args.fault and sequence is None:
        return None
    options: dict[str, Any] = {
        "seed": args.fault_seed,
        "retry_after": args.retry_after,
        "timeout_hold": args.timeout_hold,
        "sequence": sequence,
    }
    return FaultPlan.from_specs(args.fault, **options)


def _prompt_cache_from_args(value: str | None) -> tuple[int, int] | None:
    if value is None:
        return None
    minimum, _, block = value.partition(",")
    try:
        return int(minimum), int(block or "128")
    except ValueError as exc:
        raise ConfigError(
            f"--prompt-cache: {value!r} is not MIN,BLOCK", field="prompt_cache"
        ) from exc


async def _serve_forever(server: OpenAIStandIn) -> None:
    await server.astart()
    print(server.base_url, flush=True)
    print(
        f"openai api_base {server.base_url} | anthropic api_base {server.anthropic_base_url} | "
        f"gemini api_base {server.gemini_base_url}",
        file=sys.stderr,
        flush=True,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    try:
        await stop.wait()
    finally:
        await server.aclose()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the stand-in server from the command line.

    Args:
        argv: Arguments without the program name; None reads ``sys.argv``.

    Returns:
        The process exit status: 0 after a clean stop, 2 for invalid options.
    """
    parser = _build_parser()
    args = parser.parse_args(argv)
    try:
        server = OpenAIStandIn(
            latency=args.latency,
            jitter=args.jitter,
            faults=_plan_from_args(args),
            plain_reply=args.plain_reply,
            host=args.host,
            port=args.port,
            allow_remote=args.allow_remote,
            strict=not args.lenient,
            prompt_cache=_prompt_cache_from_args(args.prompt_cache),
        )
        asyncio.run(_serve_forever(server))
    except ConfigError as exc:
        where = f" ({exc.field})" if exc.field else ""
        print(f"error{where}: {exc}", file=sys.stderr)
        return 2
    return 0
