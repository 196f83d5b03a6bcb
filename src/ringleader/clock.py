"""The clock the queue's cycle and the engines' loops read time from: one object handed to them,
so a test or the simulator drives time instead of waiting for it.

    clock = ManualClock(1_000.0)
    engine = SlurmEngine(home, clock=clock)
    clock.advance(60)   # a minute later, for every reader of this clock at once
"""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Wall-clock seconds since the epoch: submit times, expected ends, events."""
        ...

    def monotonic(self) -> float:
        """Seconds that never go back: timeouts, backoffs, leases."""
        ...


class SystemClock:
    """The machine's clocks."""

    def now(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()


class ManualClock:
    """A clock that moves only when told: both readings advance together."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = start
        self._monotonic = 0.0

    def now(self) -> float:
        return self._now

    def monotonic(self) -> float:
        return self._monotonic

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError(f"a clock does not go back: advance({seconds})")
        self._now += seconds
        self._monotonic += seconds


SYSTEM_CLOCK = SystemClock()
