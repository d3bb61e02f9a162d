"""``bonusjudge grade --server URL``: the same run, graded by a bonusjudge service."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from cli.common import (
    Parser,
    add_judge_options,
)
from core.errors import ConfigError
from judge.config import JudgeConfig, JudgeOverrides
from judge.resume import JudgeStamp

if TYPE_CHECKING:
    from bonusjudge_client import JudgeClient
    from bonusjudge_client.wire.grading import GradeRequest, GradeResult
    from cli.grade import Entry


CLIENT_SIDE_OPTIONS = ("concurrency", "verbose")
"""Judge-group options that still mean something with ``--server`` (they shape this process), so
they are not refused there: every other option the service does not take per request is."""

# -- through a service ---------------------------------------------------------------------------


def _local_only_options() -> list[tuple[str, str]]:
    """``(dest, flag)`` of the options that configure this process's judge, in help order.

    Derived from the judge options themselves: whatever ``JudgeOverrides`` (what a service
    honours per request) does not hold, and that does not shape this process, is local-only.
    """
    scratch = Parser(prog="bonusjudge grade", add_help=False)
    return [
        (action.dest, action.option_strings[0])
        for action in add_judge_options(scratch)
        if action.dest not in JudgeOverrides.model_fields
        and action.dest not in CLIENT_SIDE_OPTIONS
    ]


def server_client(args: argparse.Namespace) -> JudgeClient:
    """The client for ``--server``; refuses options the service would silently ignore.

    Raises:
        ConfigError: a local-only option was given with ``--server``.
    """
    from bonusjudge_client import JudgeClient

    ignored = [
        (dest, flag) for dest, flag in _local_only_options()
        if getattr(args, dest, None) is not None
    ]
    if ignored:
        flags = ", ".join(flag for _, flag in ignored)
        raise ConfigError(
            f"{flags}: not honoured with --server (the service grades with its own provider, "
            f"encoder and cache); drop them or grade locally",
            field=ignored[0][0],
        )
    return JudgeClient(args.server)


def server_overrides(args: argparse.Namespace) -> dict[str, Any] | None:
    """The judge options given on the command line, as the service's per-request overrides."""
    judge = {
        name: getattr(args, name) for name in JudgeOverrides.model_fields
        if getattr(args, name, None) is not None
    }
    return judge or None


def with_id(item_id: str, request: GradeRequest) -> GradeRequest:
    """The request with its id set (the line number when the input gave none)."""
    return request if request.id else request.model_copy(update={"id": item_id})


class ServerGrading:
    """Grading through a bonusjudge service (``--server``), with its judge.

    An item the service fails is reported on stderr and left for the next run; it never stops
    the others.
    """

    server = True

    def __init__(self, args: argparse.Namespace, config: JudgeConfig) -> None:
        self._args = args
        self._config = config
        self._client = server_client(args)
        self._overrides = server_overrides(args)
        self._probe: GradeResult | None = None

    def start(self, first: Entry | None) -> tuple[JudgeStamp, GradeResult | None]:
        """Grade the first item through the service, to learn its judge.

        The service's configuration hash is known only from its answer: the first item is graded
        before any output exists (so an unreachable service leaves no file behind). Its result is
        written later if the output does not have it yet; otherwise it costs the service only a
        cache hit.

        Raises:
            ConfigError: the service cannot be reached or refused the request.
        """
        from bonusjudge_client import JudgeClientError

        metrics = list(self._config.metrics)
        if first is None:
            return JudgeStamp("", self._config.judge_version, metrics), None
        item_id, request = first
        try:
            self._probe = self._client.grade(with_id(item_id, request), judge=self._overrides)
        except JudgeClientError as exc:
            raise ConfigError(f"server: {exc}", field="server") from exc
        # The service's judge, as its answer names it (its matcher may not be ours).
        provenance = self._probe.provenance
        return JudgeStamp(str(provenance.config_hash), provenance.judge_version, metrics), (
            self._probe
        )

    def grade(
        self, todo: Iterable[Entry], total: int, emit: Callable[[GradeResult], None]
    ) -> dict[str, Any]:
        """Grade ``todo`` with ``JudgeClient.grade_stream``, emitting each result as it arrives.

        Returns:
            The judge calls the service made for this run (the probe's included), summed from
            the results' provenance: this process made none.
        """
        from bonusjudge_client import ClientItemError
        from judge.aggregate import ProvenanceCalls

        calls = ProvenanceCalls()
        if self._probe is not None:
            calls.add(self._probe)
        failed = 0
        requests = [with_id(item_id, req) for item_id, req in todo]
        for _, outcome in self._client.grade_stream(
            requests, judge=self._overrides, progress=not self._args.quiet
        ):
            if isinstance(outcome, ClientItemError):
                failed += 1
                print(f"item {outcome}: not graded (the next run tries it again)",
                      file=sys.stderr)
                continue
            emit(outcome)
            calls.add(outcome)
        if failed:
            print(f"{failed} item(s) failed at the service and were not written", file=sys.stderr)
        return calls.counters()

    def close(self) -> None:
        """Close the client's connections."""
        self._client.close()
