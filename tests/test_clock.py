"""The clock object the queue's cycle and the engines' loops read (ringleader/clock.py)."""

from __future__ import annotations

import time

import pytest

from ringleader.clock import SYSTEM_CLOCK, Clock, ManualClock


def test_a_manual_clock_moves_only_when_told_and_never_back() -> None:
    clock: Clock = ManualClock(1_000.0)
    assert (clock.now(), clock.monotonic()) == (1_000.0, 0.0)
    assert isinstance(clock, ManualClock)
    clock.advance(60)
    assert (clock.now(), clock.monotonic()) == (1_060.0, 60.0)
    with pytest.raises(ValueError, match="does not go back"):
        clock.advance(-1)
    assert clock.now() == 1_060.0


def test_the_system_clock_reads_the_machines_clocks() -> None:
    before, reading, after = time.time(), SYSTEM_CLOCK.now(), time.time()
    assert before <= reading <= after
    first = SYSTEM_CLOCK.monotonic()
    assert SYSTEM_CLOCK.monotonic() >= first
