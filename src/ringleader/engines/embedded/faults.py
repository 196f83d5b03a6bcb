"""Named points where a test can kill the running command (RINGLEADER_CRASH_AT=point): how the
fault-injection tests prove that a kill -9 at every step of submit and delete leaves the state
truthful. Nothing happens unless that variable names the point."""

from __future__ import annotations

import os
import signal

from ringleader import settings

POINTS = settings.CRASH_POINTS


def crash_point(name: str) -> None:
    if settings.text("RINGLEADER_CRASH_AT") == name:
        os.kill(os.getpid(), signal.SIGKILL)
