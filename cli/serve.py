"""``bonusjudge serve``: the options of the HTTP service; ``api.serve`` runs it.

Only the arguments are handled here (checked before anything heavy loads); building the app and
starting uvicorn belong to the service, which never imports this package.
"""

from __future__ import annotations

import argparse
import sys

from api.serve import GRACE_SECONDS, check_bind, check_port_free, serve
from api.settings import ServiceSettings
from cli.common import add_judge_options, add_model_options, settings_from_args
from judge.config import JudgeConfig


def _whole_number(value: str, low: int, high: int | None = None) -> int:
    """``value`` as a whole number in ``[low, high]``, or the argparse error that says why."""
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {value!r}") from None
    if number < low or (high is not None and number > high):
        bounds = f"{low}-{high}" if high is not None else f"at least {low}"
        raise argparse.ArgumentTypeError(f"must be {bounds}, got {number}")
    return number


def _port(value: str) -> int:
    """A TCP port number, 1-65535."""
    return _whole_number(value, 1, 65535)


def _positive(value: str) -> int:
    """A whole number of at least 1."""
    return _whole_number(value, 1)


def _seconds(value: str) -> float:
    """A number of seconds, 0 or more."""
    try:
        seconds = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {value!r}") from None
    if not seconds >= 0:  # also refuses nan
        raise argparse.ArgumentTypeError(f"must be at least 0, got {value}")
    return seconds


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add the ``serve`` subcommand to the ``bonusjudge`` parser."""
    parser = subparsers.add_parser("serve", help="start the HTTP grading service")
    parser.add_argument(
        "--host", default="127.0.0.1",
        help="address to listen on (default 127.0.0.1; another address needs API keys)",
    )
    parser.add_argument("--port", type=_port, default=8000, help="TCP port (default 8000)")
    parser.add_argument(
        "--workers", type=_positive, default=1,
        help="worker processes (default 1; jobs are shared through the jobs database)",
    )
    parser.add_argument(
        "--local-llm",
        action="store_true",
        help="start the packaged Gemma 3 270M (smoke-test quality) as the judge",
    )
    parser.add_argument(
        "--grace", type=_seconds, default=GRACE_SECONDS,
        help="on SIGTERM or SIGINT, seconds in-flight requests and job items have to finish "
        f"(default {GRACE_SECONDS:g}; a second signal exits at once)",
    )
    parser.add_argument(
        "--no-preflight",
        action="store_true",
        help="skip the one-token call that checks an LLM judge answers before the service "
        "starts (credentials and the model name are still checked)",
    )
    add_judge_options(parser)
    service = parser.add_argument_group("service")
    add_model_options(service, ServiceSettings, ["jobs_url"])
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Serve until stopped (SIGTERM or SIGINT); 0 after a clean stop.

    Raises:
        ConfigError: an invalid option or setting, a port in use, a non-loopback host
            without API keys, an LLM judge that cannot work, or a service that failed to
            start.
    """
    # The service's settings (API keys, quotas, the job store); the other commands read only
    # the engine's.
    settings = settings_from_args(args, ServiceSettings, jobs_url=args.jobs_url)
    check_port_free(args.host, args.port)
    # Before the preflight: an exposed service is refused without sending the key anywhere.
    check_bind(settings, args.host)
    if not args.local_llm:  # the packaged local LLM replaces the judge, and is checked as it starts
        preflight_judge(settings.judge, call=not args.no_preflight)
    return serve(
        settings, host=args.host, port=args.port, workers=args.workers,
        local_llm=args.local_llm, grace=args.grace,
    )


def preflight_judge(config: JudgeConfig, *, call: bool) -> None:
    """Find out before the service listens whether its default LLM judge can work at all.

    ``grade``'s preflight (``judge.providers.routing.preflight``): the provider is known, its
    credentials
    are set and, with ``call``, one one-token request is answered. Otherwise every grade would end
    unscored ``provider_error`` behind a ``/readyz`` that says ready. Any LLM judge is checked,
    whatever the default metrics: a request may ask for the LLM metrics. A busy (429) or failing
    (5xx) provider passes with a warning on stderr.

    Raises:
        ConfigError: the judge cannot work (``unknown model``, ``missing credentials``,
            ``unreachable``, ``refused``), naming the model and where it was asked.
    """
    if config.is_embedded or not config.model.strip():
        return  # the embedded matcher needs no provider; no model is reported by /readyz
    from judge.providers.base import describe_spend
    from judge.providers.routing import preflight

    checked = preflight(config, call=call)
    if checked.warning:
        print(checked.warning, file=sys.stderr)
    if checked.requests:
        # The probe is billed like any judge call, and comes before the service counts
        # anything (/metrics, /v1/usage): said here, so the operator's bill adds up.
        print(f"preflight: {describe_spend(checked)} to {config.model}", file=sys.stderr)
