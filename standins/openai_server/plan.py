"""The stand-in's fault plan: which faults it injects, per chat-completion request, and when."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from core.errors import ConfigError

FaultKind = Literal[
    "rate_limit",
    "rate_limit_no_header",
    "server_error",
    "timeout",
    "reset",
    "malformed_json",
    "invalid",
    "truncated",
    "refusal",
    "empty",
]
"""What can go wrong with one request.

- ``rate_limit``: HTTP 429 with a ``Retry-After`` header (:attr:`FaultPlan.retry_after`).
- ``rate_limit_no_header``: HTTP 429 without ``Retry-After``.
- ``server_error``: HTTP 500/502/503 (:attr:`FaultPlan.server_error_statuses`, cycled or random).
- ``timeout``: the answer is held :attr:`FaultPlan.timeout_hold` seconds (far past any client
  timeout), then sent; server shutdown releases held requests at once.
- ``reset``: the TCP connection is reset (RST) without any response.
- ``malformed_json``: tool-call arguments / content that are not JSON (single-quoted keys);
  plain requests get ``"Null"`` (the unparseable reply of protocol.md section 4).
- ``invalid``: valid JSON that fails the schema (an enum field out of range, two items sharing an
  enum value, or a missing required field; see :attr:`FaultPlan.invalid_variant`); plain requests
  get ``"[Included Bonus Points]: 99"`` (an index no rubric has).
- ``truncated``: ``finish_reason: "length"`` and the payload cut in half (mid-JSON).
- ``refusal``: ``message.refusal`` set and ``content`` null; plain requests get the refusal text
  as content (as real models do outside structured outputs).
- ``empty``: ``content: ""`` and no tool calls.
"""

FAULT_KINDS: tuple[FaultKind, ...] = get_args(FaultKind)
"""Every fault kind, in declaration order."""


InvalidVariantChoice = Literal["cycle", "out_of_range", "duplicate", "missing"]
"""How the ``invalid`` fault breaks a payload (``cycle`` rotates through the other three)."""


@dataclass(frozen=True)
class FaultPlan:
    """Which faults the server injects, per chat-completion request.

    A scripted ``sequence`` is consumed first, one entry per request (``None`` or ``"ok"`` means
    no fault); after it runs out (or when it is None), each request draws one fault from
    ``probabilities`` with a ``random.Random(seed)``, so a run is reproducible.

    Attributes:
        probabilities: Probability of each fault kind per request; their sum must not exceed 1.
        sequence: Scripted faults for the first requests, in order.
        seed: Seed of the RNG that draws faults (and random 5xx statuses).
        retry_after: Value of the ``Retry-After`` header of ``rate_limit`` answers, in seconds.
        server_error_statuses: The statuses ``server_error`` answers with.
        server_error_order: ``cycle`` through the statuses in order, or draw them at ``random``.
        timeout_hold: How long a ``timeout`` request is held before it is answered, in seconds.
        invalid_variant: How ``invalid`` breaks a payload (``cycle``: out_of_range, duplicate,
            missing, in turn; each falls back to the next that the schema allows).
    """

    probabilities: Mapping[FaultKind, float] = field(default_factory=dict)
    sequence: Sequence[FaultKind | Literal["ok"] | None] | None = None
    seed: int = 0
    retry_after: float = 1.0
    server_error_statuses: tuple[int, ...] = (500, 502, 503)
    server_error_order: Literal["cycle", "random"] = "cycle"
    timeout_hold: float = 60.0
    invalid_variant: InvalidVariantChoice = "cycle"

    def __post_init__(self) -> None:
        total = 0.0
        for kind, probability in self.probabilities.items():
            if kind not in FAULT_KINDS:
                raise ConfigError(
                    f"unknown fault kind {kind!r}; expected one of {', '.join(FAULT_KINDS)}",
                    field=f"probabilities.{kind}",
                )
            if not isinstance(probability, int | float) or not 0.0 <= probability <= 1.0:
                raise ConfigError(
                    f"fault probability for {kind!r} must be in [0, 1], got {probability!r}",
                    field=f"probabilities.{kind}",
                )
            total += probability
        if total > 1.0 + 1e-9:
            raise ConfigError(
                f"fault probabilities sum to {total:.3f}, more than 1", field="probabilities"
            )
        for position, entry in enumerate(self.sequence or ()):
            if entry is not None and entry != "ok" and entry not in FAULT_KINDS:
                raise ConfigError(
                    f"unknown fault kind {entry!r} in sequence; expected one of "
                    f"ok, {', '.join(FAULT_KINDS)}",
                    field=f"sequence[{position}]",
                )
        if self.retry_after < 0:
            raise ConfigError("retry_after must be >= 0", field="retry_after")
        if not self.server_error_statuses or any(
            not 500 <= status <= 599 for status in self.server_error_statuses
        ):
            raise ConfigError(
                "server_error_statuses must be a non-empty tuple of 5xx codes",
                field="server_error_statuses",
            )
        if self.server_error_order not in ("cycle", "random"):
            raise ConfigError(
                "server_error_order must be cycle or random", field="server_error_order"
            )
        if self.timeout_hold < 0:
            raise ConfigError("timeout_hold must be >= 0", field="timeout_hold")
        if self.invalid_variant not in get_args(InvalidVariantChoice):
            raise ConfigError(
                f"invalid_variant must be one of {', '.join(get_args(InvalidVariantChoice))}",
                field="invalid_variant",
            )

    @classmethod
    def from_specs(cls, specs: Sequence[str], **options: Any) -> FaultPlan:
        """Build a plan from ``kind=probability`` strings (the CLI's ``--fault`` values).

        Args:
            specs: Strings such as ``"malformed_json=0.3"``.
            **options: Other :class:`FaultPlan` fields (``seed``, ``retry_after``...).

        Returns:
            The plan.

        Raises:
            ConfigError: If a spec is not ``kind=probability`` or names an unknown kind.
        """
        probabilities: dict[FaultKind, float] = {}
        for spec in specs:
            name, sep, value = spec.partition("=")
            name = name.strip()
            if not sep:
                raise ConfigError(
                    f"fault spec {spec!r} must look like kind=probability", field="fault"
                )
            try:
                probability = float(value)
            except ValueError:
                raise ConfigError(
                    f"fault spec {spec!r}: {value!r} is not a number", field="fault"
                ) from None
            if name not in FAULT_KINDS:
                raise ConfigError(
                    f"fault spec {spec!r}: unknown kind; expected one of {', '.join(FAULT_KINDS)}",
                    field="fault",
                )
            probabilities[name] = probabilities.get(name, 0.0) + probability
        return cls(probabilities=probabilities, **options)


class FaultDecider:
    """The stateful side of a :class:`FaultPlan` (RNG, sequence position, rotations).

    Private to the stand-in in spirit (it is state, not API), but public within the package: the
    fault-injection suite replays a plan with it, so the replay cannot drift from the server.
    """

    def __init__(self, plan: FaultPlan) -> None:
        self.plan = plan
        self.rng = random.Random(plan.seed)
        self.position = 0
        self.server_errors = 0
        self.invalids = 0

    def next_fault(self) -> FaultKind | None:
        """The fault of the next request: the script's next entry, else a seeded draw."""
        sequence = self.plan.sequence
        if sequence is not None and self.position < len(sequence):
            entry = sequence[self.position]
            self.position += 1
            return None if entry is None or entry == "ok" else entry
        if not self.plan.probabilities:
            return None
        draw = self.rng.random()
        cumulative = 0.0
        for kind, probability in self.plan.probabilities.items():
            cumulative += probability
            if draw < cumulative:
                return kind
        return None

    def server_error_status(self) -> int:
        """The status of the next ``server_error`` answer (cycled or drawn)."""
        statuses = self.plan.server_error_statuses
        if self.plan.server_error_order == "random":
            return self.rng.choice(statuses)
        status = statuses[self.server_errors % len(statuses)]
        self.server_errors += 1
        return status

    def invalid_variant(self) -> Literal["out_of_range", "duplicate", "missing"]:
        """How the next ``invalid`` fault breaks its payload."""
        if self.plan.invalid_variant != "cycle":
            return self.plan.invalid_variant
        order: tuple[Literal["out_of_range", "duplicate", "missing"], ...] = (
            "out_of_range",
            "duplicate",
            "missing",
        )
        variant = order[self.invalids % len(order)]
        self.invalids += 1
        return variant
