"""Every process of a job, even one that left its process group (setsid) or was orphaned, is
ended by `delete` and when the job ends: the rank wrapper is a child subreaper, and stopping an
instance stops all its descendants."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ringleader.engines.embedded.engine import JobSpec, Runtime
from waiting import wait_for

ESCAPE = (
    "import subprocess, sys, time\n"
    "subprocess.Popen(['setsid', sys.executable, '-c', 'import time; time.sleep(300)', sys.argv[1]])\n"
    "print('up', flush=True)\n"
    "time.sleep({sleep})\n"
)


def running(marker: str) -> list[str]:
    out = subprocess.run(["ps", "-ww", "-eo", "pid=,args="], capture_output=True, text=True).stdout
    return [ln for ln in out.splitlines() if marker in ln]


def escapee(marker: str) -> list[str]:
    """The escapee itself: the program's own line carries the marker too, before it has made one."""
    return [ln for ln in running(marker) if "print(" not in ln]


@pytest.mark.slow
@pytest.mark.parametrize("ending", ["delete", "job ends"])
def test_a_setsid_escapee_does_not_outlive_its_job(tmp_path, monkeypatch, ending: str) -> None:
    monkeypatch.setenv("RINGLEADER_GRACE_S", "1")
    rt = Runtime.open(tmp_path / "home")
    marker = f"escapee-{os.getpid()}-{ending.replace(' ', '-')}"
    sleep = 300 if ending == "delete" else 1
    rt.submit(JobSpec("esc", 1, 0, [sys.executable, "-c", ESCAPE.format(sleep=sleep), marker]))
    wait_for(lambda: bool(escapee(marker)), what=f"the escapee to start: {rt.get('esc')}")
    if ending == "delete":
        rt.delete(["esc"])
    else:
        rt.wait("esc", timeout=60)
    wait_for(lambda: not running(marker), what="the escapee to be stopped")
    rt.close()


# Ignores SIGTERM, and on it makes an escapee: one no scan before the first signal could find.
LATE_ESCAPE = (
    "import signal, subprocess, sys, time\n"
    "def escape(*_):\n"
    "    subprocess.Popen(['setsid', sys.executable, '-c', 'import time; time.sleep(300)', sys.argv[1]])\n"
    "signal.signal(signal.SIGTERM, escape)\n"
    "print('up', flush=True)\n"
    "time.sleep(300)\n"
)


@pytest.mark.slow
def test_an_escapee_made_during_the_grace_does_not_outlive_a_deleted_job(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("RINGLEADER_GRACE_S", "2")
    rt = Runtime.open(tmp_path / "home")
    marker = f"late-escapee-{os.getpid()}"
    rt.submit(JobSpec("late", 1, 0, [sys.executable, "-c", LATE_ESCAPE, marker]))
    wait_for(lambda: "up" in rt.logs("late"), what=f"the program to start: {rt.get('late')}")
    rt.delete(["late"])  # SIGTERM (the escapee is made), 2 s, then SIGKILL to the wrapper and all below it
    wait_for(lambda: not running(marker), what="the late escapee to be stopped")
    rt.close()
