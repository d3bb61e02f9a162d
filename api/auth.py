"""API-key authentication: ``Authorization: Bearer KEY`` checked against sha256 digests.

Settings hold only digests (``Settings.api_keys``), so neither a settings dump nor the service's
memory reveals a key. A request's key is hashed and compared with every configured digest in
constant time (``hmac.compare_digest``). The digest that matched is the caller's identity: jobs are
owned by it, and another key's jobs are invisible. With no key configured, every caller is the
anonymous owner ``""`` and the service binds to loopback only (``api.serve``).
"""

from __future__ import annotations

import hashlib
import hmac

from fastapi import Request

from api.errors import Unauthorized
from judge.config import Settings

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


def authenticate(request: Request, settings: Settings) -> str:
    """The caller's identity: the digest of its valid key, or ``ANONYMOUS`` when auth is off.

    Raises:
        Unauthorized: keys are configured and the request has none, or an unknown one. The
            message never echoes the key.
    """
    if not settings.api_keys:
        return ANONYMOUS
    token = bearer_token(request)
    if token is None:
        raise Unauthorized("missing API key: send `Authorization: Bearer <key>`")
    digest = hash_key(token)
    matched = False
    # Compare with every digest (no early exit), so timing says nothing about which matched.
    for known in settings.api_keys:
        matched |= hmac.compare_digest(digest, known)
    if not matched:
        raise Unauthorized("invalid API key")
    return digest
