"""The base of every model of the contract: validators built on first use, not at import.

A harness imports the client to grade a few items; building the validators of every model of
the contract (about fifty) at import would cost it more than pydantic and httpx themselves. With
``defer_build`` a model's validator and serializer are built the first time it validates or
dumps, so a process pays only for the models it uses, once.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

__all__ = ["StrictWireModel", "WireModel"]


class WireModel(BaseModel):
    """A pydantic model whose schema is built on first use (subclasses add their own config)."""

    model_config = ConfigDict(defer_build=True)


class StrictWireModel(WireModel):
    """A wire model that refuses unknown fields and cannot be changed once validated.

    The contract's results and request parts that must not grow silently (a misspelt field is
    an error, not ignored) derive from it instead of each repeating the same configuration.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
