"""The one way a test waits for what another process or thread does: poll a check until it
holds, and fail naming what it waited for.

A test asserts what happened and in which order, never how long it took: the deadline only ends
a test that would otherwise hang, so it is generous enough for a 2-core machine that other test
files load too (a check that holds returns at its first poll after; only a failure waits it out).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

WAIT_S = 120.0  # the default deadline: minutes are rare even at a load average of 25
POLL_S = 0.1


def wait_for(check: Callable[[], T | None], timeout: float = WAIT_S, what: str | Callable[[], str] = "the condition",
             every: float = POLL_S) -> T:  # fmt: skip
    """``check()``'s first true value, polled every ``every`` seconds; an AssertionError saying
    ``what`` was awaited (a callable: said as it stands then) when none came within ``timeout``
    seconds. The check runs once more at the deadline, so a slow poll never fails one that holds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what() if callable(what) else what}")
        time.sleep(every)
