"""The supervisor's wait between checks: woken at once by the exit of a process it started, and
never kept awake by one that has already ended (real processes and pidfds)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from ringleader.engines.embedded import supervisor
from ringleader.engines.embedded.supervisor import Supervisor, Watched
from ringleader.jobs.states import InstanceStatus
from waiting import wait_for


def watched(argv: list[str], status: InstanceStatus) -> Watched:
    popen = subprocess.Popen(argv)
    return Watched("job-worker-0", "worker", Path("/nonexistent"), status, popen.pid, popen=popen,
                   exit_fd=os.pidfd_open(popen.pid))  # fmt: skip


def test_the_exit_of_a_started_process_ends_the_wait_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(supervisor, "POLL_S", 3600.0)  # a wait that ends within the test was woken by the exit
    w = watched([sys.executable, "-c", "import time; time.sleep(0.2)"], InstanceStatus.RUNNING)
    pausing = threading.Thread(target=Supervisor.pause, args=(SimpleNamespace(watched=[w]),), daemon=True)
    pausing.start()
    wait_for(lambda: not pausing.is_alive(), what="the wait to end on the process's exit")
    assert w.popen is not None and w.popen.poll() == 0


def test_an_instance_already_recorded_as_ended_does_not_make_the_wait_return_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Its state file said it ended, so it is done, but its process was not reaped yet: its pidfd
    # is readable for good. The wait must reap it, close the pidfd and still wait a full period
    # (it used to return at once, every time: a busy loop until the other instances ended).
    monkeypatch.setattr(supervisor, "POLL_S", 0.5)
    w = watched(["true"], InstanceStatus.SUCCEEDED)
    time.sleep(0.3)  # `true` has exited: a zombie until reaped
    fd = w.exit_fd
    started = time.monotonic()
    Supervisor.pause(SimpleNamespace(watched=[w]))
    assert time.monotonic() - started >= 0.4
    assert w.exit_fd is None and w.popen is not None and w.popen.returncode == 0
    with pytest.raises(OSError):
        os.fstat(fd)
