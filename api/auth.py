"""API-key authentication: ``Authorization: Bearer KEY`` checked against sha256 digests.

The settings hold only digests (``ServiceSettings.api_keys``), so neither a settings dump nor
the service's memory reveals a key. A request's key is hashed and compared with every configured
digest in constant time (``hmac.compare_digest``). The digest that matched is the caller's
identity: jobs are owned by it, and another key's jobs are invisible. With no key configured,
every caller is the anonymous owner ``""`` and the service binds to loopback only
(``api.serve``).

``/metrics`` is the operator's: its counters span every key (jobs, tokens, cost, cache hits), so
it takes one of ``ServiceSettings.operator_keys`` (a Prometheus scraper's bearer token), never a
tenant's API key (403). With neither kind of key configured (loopback development) it is open.
"""

from __future__ import annotations

import hashlib
import hmac

from fastapi import Request

from api.errors import Forbidden, Unauthorized
from api.settings import ServiceSettings

ANONYMOUS = ""
"""Owner of every job when no API key is configured."""


def hash_key(key: str) -> str:
    """The sha256 hex digest under which a key is configured."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def bearer_token(request: Request) -> str | None:
    """The token of an ``Authorization: Bearer ...`` header, or None when absent/malformed."""
    header = request.headers.get("authorization")
    if not header:
        return None
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def authenticate(request: Request, settings: ServiceSettings) -> str:
    """The caller's identity: the digest of its valid key, or ``ANONYMOUS`` when auth is off.

    Worked out once per request: the answer (or the refusal) is kept in the request's state, so
    the synchronous-work limits, which need the caller before the body is read, and the route
    hash the key and compare it with every digest once between them, not twice.

    Raises:
        Unauthorized: keys are configured and the request has none, or an unknown one. The
            message never echoes the key.
    """
    digests = tuple(settings.api_keys)
    memo = getattr(request.state, _CALLER, None)
    # Kept with the digests it was checked against: settings can differ between the app's
    # middleware and a route (a dependency override in tests).
    if isinstance(memo, tuple) and memo[0] == digests:
        if isinstance(memo[1], Unauthorized):
            raise memo[1]
        return str(memo[1])
    try:
        caller = _caller(request, settings)
    except Unauthorized as exc:
        setattr(request.state, _CALLER, (digests, exc))
        raise
    setattr(request.state, _CALLER, (digests, caller))
    return caller


_CALLER = "bonusjudge_caller"
"""The request-state attribute that keeps ``authenticate``'s answer."""


def _caller(request: Request, settings: ServiceSettings) -> str:
    """``authenticate``'s work: the digest of the request's valid key (see there)."""
    if not settings.api_keys:
        return ANONYMOUS
    token = bearer_token(request)
    if token is None:
        raise Unauthorized("missing API key: send `Authorization: Bearer <key>`")
    digest = hash_key(token)
    if not _known(digest, settings.api_keys):
        raise Unauthorized("invalid API key")
    return digest


def authenticate_operator(request: Request, settings: ServiceSettings) -> None:
    """Let an operator through to service-wide data (``/metrics``); refuse anyone else.

    Open when no key of either kind is configured, as every route is then.

    Raises:
        Unauthorized: keys are configured and the request has no key, or an unknown one.
        Forbidden: the key is a tenant's API key, not an operator key.
    """
    if not settings.api_keys and not settings.operator_keys:
        return
    token = bearer_token(request)
    if token is None:
        raise Unauthorized("missing operator key: send `Authorization: Bearer <key>`")
    digest = hash_key(token)
    if _known(digest, settings.operator_keys):
        return
    if _known(digest, settings.api_keys):
        raise Forbidden(
            "this API key cannot read /metrics: its counters cover every key, so it needs an "
            "operator key (setting operator_keys)"
        )
    raise Unauthorized("invalid operator key")


def _known(digest: str, digests: list[str]) -> bool:
    """Whether ``digest`` is one of ``digests``, compared in constant time."""
    matched = False
    # Compare with every digest (no early exit), so timing says nothing about which matched.
    for known in digests:
        matched |= hmac.compare_digest(digest, known)
    return matched
