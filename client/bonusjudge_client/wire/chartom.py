"""How an item in CharToM-QA's format reads as a grading request: its keys and plot windows.

CharToM-QA lines name the reference ``answer`` and carry the story in three plot windows
(``context_0``, ``context_1000``, ``context_2000``); the CLI and the service's uploads
(``judge.io``) and the harness scorers (``bonusjudge_client.harness``) all read such items, with
these two rules.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import AliasChoices

from bonusjudge_client.wire.grading import GradeRequest

__all__ = ["CHARTOM_CONTEXT_KEYS", "REQUEST_KEYS", "chosen_window"]

CHARTOM_CONTEXT_KEYS = {0: "context_0", 1000: "context_1000", 2000: "context_2000"}
"""CharToM-QA's plot windows (tokens of story before the question) and the keys that hold them."""


def _request_keys() -> dict[str, str]:
    keys: dict[str, str] = {}
    for name, info in GradeRequest.model_fields.items():
        keys[name] = name
        if isinstance(info.validation_alias, AliasChoices):
            for choice in info.validation_alias.choices:
                if isinstance(choice, str):
                    keys[choice] = name
    return keys


REQUEST_KEYS = _request_keys()
"""Every key a ``GradeRequest`` field is read from (its name and aliases: ``answer`` for
``reference``, ``model_name`` for ``respondent``...) -> the field."""


def chosen_window(item: Mapping[str, Any], context_window: int | None) -> int | None:
    """The plot window whose text becomes the item's ``context``; None when it has none.

    The one asked for, else the largest the item holds (as ``bonusjudge grade`` does).

    Raises:
        ValueError: ``context_window`` is not one of CharToM's windows.
    """
    if context_window is not None and context_window not in CHARTOM_CONTEXT_KEYS:
        raise ValueError(f"context window must be one of {sorted(CHARTOM_CONTEXT_KEYS)}")
    present = [window for window, key in CHARTOM_CONTEXT_KEYS.items() if key in item]
    chosen = context_window if context_window is not None else max(present, default=None)
    return chosen if chosen is not None and CHARTOM_CONTEXT_KEYS[chosen] in item else None
