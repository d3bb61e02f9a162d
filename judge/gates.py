"""Per provider (model, base URL): one circuit breaker and one connection limit.

They stand between a judge call and its provider. An outage of one provider must not pause
another, and one judge's recovery must not close the breaker of a judge still failing; the
connection limit bounds the requests in flight to one provider, since items in flight each send
up to two at once and providers limit requests. The ``Caller`` holds one ``ProviderGates`` and
passes every request through it.
"""

from __future__ import annotations

import asyncio

from judge.config import JudgeConfig
from judge.retry import CircuitBreaker

__all__ = ["ProviderGates", "provider_key"]


def provider_key(config: JudgeConfig) -> tuple[str, str | None]:
    """Which provider ``config`` reaches, and so which breaker and limit serve it."""
    return (config.model, config.api_base)


class ProviderGates:
    """The circuit breaker and connection limit of each provider met so far.

    Args:
        template: The settings a provider's new breaker gets (default ``CircuitBreaker()``).

    Attributes:
        template: As given.
        breakers: Each provider's breaker, by :func:`provider_key`.
        connections: Each provider's semaphore of requests in flight, by :func:`provider_key`.
    """

    def __init__(self, template: CircuitBreaker | None = None) -> None:
        self.template = template or CircuitBreaker()
        self.breakers: dict[tuple[str, str | None], CircuitBreaker] = {}
        self.connections: dict[tuple[str, str | None], asyncio.Semaphore] = {}

    def breaker_for(self, config: JudgeConfig) -> CircuitBreaker:
        """The circuit breaker of ``config``'s judge.

        A judge met for the first time gets a new breaker with the template's settings.
        """
        key = provider_key(config)
        breaker = self.breakers.get(key)
        if breaker is None:
            template = self.template
            breaker = CircuitBreaker(
                threshold=template.threshold,
                cooldown=template.cooldown,
                max_cooldown=template.max_cooldown,
                recheck=template.recheck,
            )
            self.breakers[key] = breaker
        return breaker

    def set_breaker(self, config: JudgeConfig, breaker: CircuitBreaker) -> None:
        """Use ``breaker`` for ``config``'s judge from now on."""
        self.breakers[provider_key(config)] = breaker

    def connection(self, config: JudgeConfig) -> asyncio.Semaphore:
        """The semaphore every request to ``config``'s provider holds while it is in flight.

        Sized by the ``max_connections`` of the first configuration that reaches it.
        """
        key = provider_key(config)
        limit = self.connections.get(key)
        if limit is None:
            limit = self.connections[key] = asyncio.Semaphore(config.max_connections)
        return limit
