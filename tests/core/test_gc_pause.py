"""core.gc_pause: the collector is off inside the block and as it was after, even on an error."""

from __future__ import annotations

import gc

import pytest

from core.gc_pause import gc_paused


def test_the_collector_is_off_inside_and_back_on_after_even_when_the_block_raises() -> None:
    assert gc.isenabled()
    with gc_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(ValueError), gc_paused():
        raise ValueError("bad line")
    assert gc.isenabled()


def test_a_collector_already_off_stays_off() -> None:
    gc.disable()
    try:
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()
