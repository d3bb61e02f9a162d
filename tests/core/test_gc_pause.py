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


def test_as_a_decorator_every_call_runs_paused() -> None:
    @gc_paused()
    def collector_on() -> bool:
        return gc.isenabled()

    assert collector_on() is False
    assert collector_on() is False  # a new pause per call, not a used-up one
    assert gc.isenabled()
