"""The one comma-list reader (``bonusjudge_client.wire.options.comma_list``) of list options."""

from __future__ import annotations

import pytest

from bonusjudge_client.wire.options import comma_list


@pytest.mark.parametrize(
    ("value", "names"),
    [
        ("coverage", ("coverage",)),
        (" coverage , rouge_l ", ("coverage", "rouge_l")),
        ("a,,b,", ("a", "b")),
        ("", ()),
        (["coverage,rouge_l", "bertscore"], ("coverage", "rouge_l", "bertscore")),
        (("topic", " language "), ("topic", "language")),
    ],
)
def test_comma_list_reads_every_form(value: str | list[str], names: tuple[str, ...]) -> None:
    assert comma_list(value) == names
