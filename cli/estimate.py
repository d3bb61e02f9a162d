"""``bonusjudge grade IN.jsonl --estimate``: what grading the file would cost, with no call sent.

The judge calls the run would make after the cache, their prompt tokens (counted with the
model's tokenizer on the exact requests), the expected completion tokens and the price, per task
and in all (``judge.estimate``); with ``--server`` the service's estimate (``POST /v1/estimate``),
made against its own cache. A table, or the answer as JSON with ``--json``.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bonusjudge_client import JudgeClient
    from bonusjudge_client.wire.grading import GradeRequest
    from bonusjudge_client.wire.schemas import EstimateResponse

TASK_LABELS = {"extract_points": "extraction", "coverage": "coverage", "defects": "defects",
               "all": "all"}
"""How the table names each task."""


def add_estimate_options(parser: argparse.ArgumentParser) -> None:
    """Add ``--estimate``, ``--price-in``, ``--price-out`` and ``--json`` to ``grade``."""
    group = parser.add_argument_group("estimate (no judge call is sent)")
    group.add_argument(
        "--estimate",
        action="store_true",
        help="grade nothing: print the judge calls the run would make after the cache, their "
        "prompt tokens (the model's tokenizer on the exact requests), the expected completion "
        "tokens and the price, per task (--out is not needed)",
    )
    group.add_argument(
        "--price-in", type=float, metavar="USD",
        help="with --estimate or --max-cost: USD per million prompt tokens, for a model "
        "litellm's cost map does not price (with --price-out)",
    )
    group.add_argument(
        "--price-out", type=float, metavar="USD",
        help="with --estimate or --max-cost: USD per million completion tokens (with "
        "--price-in)",
    )
    group.add_argument(
        "--json", action="store_true", help="with --estimate: print the estimate as JSON"
    )


def run_estimate(
    args: argparse.Namespace,
    entries: list[tuple[str, GradeRequest]],
    invalid: int,
    client: JudgeClient | None = None,
    overrides: dict[str, Any] | None = None,
) -> int:
    """Estimate grading ``entries`` (locally, or with ``client`` by the service) and print it.

    Args:
        args: The ``grade`` options (the judge's, the cache's, the prices, ``--json``).
        entries: The input's valid items, ``(item_id, request)``.
        invalid: The input's lines that could not be read (not sent anywhere).
        client: The service's client (``--server``), or None to estimate in this process.
        overrides: The judge options given, sent to the service as its per-request overrides.

    Raises:
        ConfigError: an invalid option or setting, or a service that cannot be reached.
        InputError: only one of the prices was given.
    """
    if client is not None:
        answer = _by_service(args, client, [request for _, request in entries], overrides)
        # Lines this process could not read never reached the service: counted here.
        answer = answer.model_copy(update={"invalid": answer.invalid + invalid})
    else:
        import asyncio

        answer = asyncio.run(_locally(args, entries, invalid))
    print(answer.model_dump_json(indent=2) if args.json else format_estimate(answer))
    return 0


async def _locally(
    args: argparse.Namespace, entries: list[tuple[str, GradeRequest]], invalid: int
) -> EstimateResponse:
    """The estimate of this process's judge, against this machine's cache (read only)."""
    from cli.common import settings_from_args
    from judge.cache import open_cache
    from judge.estimate import check_prices, estimate

    settings = settings_from_args(args)
    config = settings.judge
    check_prices(args.price_in, args.price_out)
    cache = open_cache(settings, enabled=config.cache)
    try:
        return await estimate(
            entries, config, cache=cache, price_in=args.price_in, price_out=args.price_out,
            invalid=invalid,
        )
    finally:
        cache.close()


def _by_service(
    args: argparse.Namespace,
    client: JudgeClient,
    requests: list[GradeRequest],
    overrides: dict[str, Any] | None,
) -> EstimateResponse:
    """The service's estimate of ``requests`` (``POST /v1/estimate``), against its cache.

    Raises:
        ConfigError: the service cannot be reached or refused the request.
    """
    from bonusjudge_client import JudgeClientError
    from core.errors import ConfigError

    try:
        return client.estimate(
            requests, judge=overrides, price_in=args.price_in, price_out=args.price_out
        )
    except JudgeClientError as exc:
        raise ConfigError(f"server: {exc}", field="server") from exc
    finally:
        client.close()


def format_estimate(answer: EstimateResponse) -> str:
    """The estimate as a table, with what counted the tokens, the prices and the notes."""
    lines = [
        f"estimate for {answer.judge}: {answer.items} item(s), {answer.invalid} invalid; "
        "no judge call sent",
        "",
        f"{'task':<12}{'calls':>8}{'cached':>8}{'prompt tokens':>15}"
        f"{'completion (expected)':>23}{'cost USD':>12}",
    ]
    for task in [*answer.tasks, answer.total]:
        cost = "-" if task.cost_usd is None else f"{task.cost_usd:.4f}"
        lines.append(
            f"{TASK_LABELS[task.task]:<12}{task.calls:>8,}{task.cached:>8,}"
            f"{task.prompt_tokens:>15,}{task.completion_tokens:>23,}{cost:>12}"
        )
    lines.append("")
    if answer.tokenizer:
        lines.append(f"prompt tokens: {answer.tokenizer}, on the exact first requests")
    if answer.price_in is not None and answer.price_out is not None:
        source = "litellm's cost map" if answer.price_source == "litellm" else "as given"
        lines.append(
            f"price ({source}): ${answer.price_in:g} in, ${answer.price_out:g} out, per million "
            "tokens"
        )
    if answer.total.calls:
        lines.append(f"completion tokens: {answer.completion_method}")
    if answer.repeated:
        lines.append(
            f"{answer.repeated} call(s) repeat an earlier one of the run and are counted once "
            "(sent again only when both are in flight at once)"
        )
    lines.extend(f"note: {note}" for note in answer.notes)
    return "\n".join(lines)


def check_estimate_options(args: argparse.Namespace) -> None:
    """Refuse what only an estimate takes without ``--estimate``, and a run without ``--out``.

    Raises:
        ConfigError: ``--price-in``, ``--price-out`` without ``--estimate`` or ``--max-cost``,
            or ``--json`` without ``--estimate`` (they would do nothing), or no ``--out`` for a
            run that grades.
    """
    from core.errors import ConfigError

    if args.estimate:
        return
    if args.json:
        raise ConfigError("--json: only with --estimate", field="json")
    # The prices also price a cost cap (--max-cost) for a model litellm does not price.
    if getattr(args, "max_cost", None) is None:
        given = [flag for flag, dest in (("--price-in", "price_in"), ("--price-out", "price_out"))
                 if getattr(args, dest, None) is not None]
        if given:
            raise ConfigError(f"{', '.join(given)}: only with --estimate or --max-cost",
                              field=given[0][2:])
    if args.out is None:
        raise ConfigError("--out is required (the results file), unless --estimate",
                          field="out")
