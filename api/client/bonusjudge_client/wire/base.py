"""The base of every model of the contract: validators built on first use, not at import.

A harness imports the client to grade a few items; building the validators of every model of
the contract (about fifty) at import would cost it more than pydantic and httpx themselves. With
``defer_build`` a model's validator and serializer are built the first time it validates or
dumps, so a process pays only for the models it uses, once.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

__all__ = ["WireModel"]


class WireModel(BaseModel):
    """A pydantic model whose schema is built on first use (subclasses add their own config)."""

    model_config = ConfigDict(defer_build=True)
