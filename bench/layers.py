"""CPU cost of one judge call at each layer of the client stack (what bounds cold throughput).

With a provider that answers in ``L`` seconds and ``C`` items in flight, the ideal is ``C / L``
items/s; but each call also costs the grading process some CPU, and one process can serve at most
``1 / (2 x cpu_per_call)`` items/s (two calls per item) on one core, whatever the concurrency. This
section sends the same coverage request (a real workload item, rendered by the shipped rubric,
with the tools schema instructor sends) through each layer, bottom to top, ``--calls`` times at
concurrency 16 against a zero-latency stand-in, and reports CPU ms per call of this process:

1. ``aiohttp``: a raw POST of the JSON body (the transport litellm uses underneath);
2. ``openai``: ``AsyncOpenAI.chat.completions.create`` (request transform, response parsing);
3. ``litellm``: ``litellm.acompletion`` (parameter mapping, logging, cost, ``ModelResponse``);
4. ``instructor``: ``from_litellm(acompletion, TOOLS)`` with the coverage response model;
5. ``provider``: ``judge.providers.litellm.LiteLLMProvider.complete`` (adds our cost and usage
reading);
6. ``engine``: ``Grader.grade`` of coverage-only items with a fresh cache (rendering, cache
   key, cache write, result assembly), per judge call.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from bench.common import Timer, load_requests, log, parse_section_args, section_parser, write_json
from bench.standin import StandInProcess

__all__ = ["main", "measure"]

_CONCURRENCY = 16


async def measure(call: Callable[[int], Awaitable[Any]], count: int) -> dict[str, float]:
    """Run ``call(i)`` for ``i < count`` at concurrency 16 after 8 warm-up calls.

    Returns:
        ``cpu_ms_per_call``, ``wall_ms_per_call`` and ``calls_per_s`` (CPU of this process).
    """
    for i in range(8):
        await call(-1 - i)
    semaphore = asyncio.Semaphore(_CONCURRENCY)

    async def bounded(i: int) -> None:
        async with semaphore:
            await call(i)

    with Timer() as timer:
        await asyncio.gather(*(bounded(i) for i in range(count)))
    return {
        "cpu_ms_per_call": round(1000 * timer.cpu / count, 2),
        "wall_ms_per_call": round(1000 * timer.wall / count, 2),
        "calls_per_s": round(count / timer.wall, 1),
    }


async def _layers(base_url: str, count: int) -> list[dict[str, Any]]:
    import aiohttp
    import instructor
    import litellm
    import openai

    from judge.config import JudgeConfig
    from judge.engine import Grader
    from judge.providers.litellm import LiteLLMProvider
    from judge.verdicts import coverage_model
    from rubrics.loader import load_library

    items = load_requests()
    _, request = items[0]
    points = list(request.bonus_points or [request.reference])
    library = load_library()
    rubric = library.for_task("chartom", "coverage")
    prompt = library.render(
        rubric, "en",
        {"question": request.question, "reference": request.reference, "points": points,
         "response": request.response, "book_name": request.book_name, "domain": None},
    )
    model = coverage_model(len(points))
    schema = model.model_json_schema()
    tool = {"type": "function", "function": {"name": model.__name__, "parameters": schema}}
    body = {
        "model": "standin",
        "messages": prompt.messages,
        "tools": [tool],
        "tool_choice": {"type": "function", "function": {"name": model.__name__}},
        "temperature": 0.0,
        "max_tokens": 1024,
    }
    config = JudgeConfig(model="openai/standin", api_base=base_url, metrics=("coverage",))
    rows: list[dict[str, Any]] = []

    connector = aiohttp.TCPConnector(limit=_CONCURRENCY)
    async with aiohttp.ClientSession(connector=connector) as session:
        async def raw(_: int) -> None:
            async with session.post(f"{base_url}/chat/completions", json=body) as reply:
                json.loads(await reply.read())

        rows.append({"layer": "aiohttp POST", **await measure(raw, count)})

    client = openai.AsyncOpenAI(base_url=base_url, api_key="sk-bench")

    async def sdk(_: int) -> None:
        await client.chat.completions.create(**body)  # type: ignore[call-overload]

    rows.append({"layer": "openai SDK", **await measure(sdk, count)})
    await client.close()

    lite_body = {**body, "model": "openai/standin"}

    async def lite(_: int) -> None:
        await litellm.acompletion(api_base=base_url, api_key="sk-bench", num_retries=0, **lite_body)

    rows.append({"layer": "litellm.acompletion", **await measure(lite, count)})

    patched = instructor.from_litellm(litellm.acompletion, mode=instructor.Mode.TOOLS)

    async def structured(_: int) -> None:
        # from_litellm returns an async client for a coroutine function; its stubs say sync.
        create: Any = patched.chat.completions.create
        await create(
            model="openai/standin", api_base=base_url, api_key="sk-bench", num_retries=0,
            messages=prompt.messages, response_model=model, max_retries=2,
            context={"n_points": len(points)}, temperature=0.0, max_tokens=1024,
        )

    rows.append({"layer": "instructor + litellm", **await measure(structured, count)})

    provider = LiteLLMProvider()

    async def ours(_: int) -> None:
        await provider.complete(
            prompt.messages, model, config, validation_context={"n_points": len(points)}
        )

    rows.append({"layer": "LiteLLMProvider.complete", **await measure(ours, count)})

    from judge.cache import JudgeCache

    cache = JudgeCache(tempfile.mkdtemp(prefix="bench-layers-"))
    grader = Grader(config, cache=cache)
    pool = load_requests(repeat=1 + (count + 8) // max(1, len(items)))

    async def engine(i: int) -> None:
        # Each call grades a different item (coverage only: one judge call), so nothing hits.
        item_id, req = pool[i + 8]
        await grader.grade(req, item_id=item_id)

    rows.append({"layer": "Grader.grade (1 call/item)", **await measure(engine, count)})
    await grader.aclose()
    cache.close()
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    """Measure and print the CPU cost per call of each client layer."""
    parser = section_parser("bench.layers", __doc__)
    parser.add_argument("--calls", type=int, default=200, help="measured calls per layer")
    args = parse_section_args(parser, argv, litellm=True)
    with StandInProcess(latency=0.0) as srv:
        log(f"layers: {args.calls} calls each at concurrency {_CONCURRENCY}, zero latency")
        rows = asyncio.run(_layers(srv.base_url, args.calls))
    print("| layer | CPU ms/call | calls/s (one process) |\n|---|---|---|")
    for row in rows:
        print(f"| {row['layer']} | {row['cpu_ms_per_call']} | {row['calls_per_s']} |")
    write_json(args.json, {"layers": rows, "calls": args.calls})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
