"""Supervisors started before their job. The spare: while jobs run, the folder's watchdog keeps
one supervisor waiting with its modules imported, and the next job a command places starts
under it; a command whose process context differs, or facing a stopped spare, starts a
supervisor of its own; the spare leaves with the watchdog. In an idle folder, a command starts
its job's supervisor early, while it asks the runtime and commits; refused, it leaves none."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

import pytest

from ringleader.engines.embedded import spare as supervisors_before_jobs
from ringleader.engines.embedded.engine import Runtime
from ringleader.engines.embedded.liveness import PEER_CHECK_S
from ringleader.engines.embedded.spare import ANSWER_S, socket_path
from ringleader.errors import DependencyError
from ringleader.jobs.states import JobStatus
from statedb import supervisor_of

SPARE_UP_S = PEER_CHECK_S + 15.0  # its first check, then an interpreter and imports on a loaded box


def spares(home: Path, flag: str = "--spare") -> list[int]:
    """The pids of the spare (or early) supervisors of this folder, whether or not they have
    become a job's supervisor since."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")[:-1]
        except OSError:
            continue
        if argv[-2:] == [str(home).encode(), flag.encode()] and b"ringleader.engines.embedded.supervisor" in argv:
            found.append(int(entry))
    return found


def claimed_by(rt: Runtime, h, job: str) -> int:  # type: ignore[no-untyped-def]
    """The pid of the supervisor that claimed ``job`` (a supervisor claims it just after its start)."""
    return int(h.wait_for(lambda: supervisor_of(rt, job)[0], 30, f"{job}'s supervisor to claim it"))


def running_queue(rt: Runtime, h, tmp_path: Path) -> tuple[Path, int]:  # type: ignore[no-untyped-def]
    """A job that runs until released (so the watchdog runs), and the spare it keeps waiting."""
    release = tmp_path / "release"
    rt.submit(h.spec("long", h.py(h.waiting_rank(release)),
                     workers=1, gpus=0))  # fmt: skip
    (spare,) = h.wait_for(lambda: spares(rt.home), SPARE_UP_S, "a spare supervisor")
    h.wait_for(lambda: socket_path(rt.home).exists(), 10, "the spare to listen")
    return release, spare


@pytest.mark.slow
def test_a_job_placed_while_another_runs_starts_under_the_spare_and_the_spare_leaves_with_the_queue(
    small: Runtime, h, tmp_path: Path
) -> None:
    release, spare = running_queue(small, h, tmp_path)
    small.submit(h.spec("quick", h.py("print('quick ran')"), workers=2, gpus=0))
    assert claimed_by(small, h, "quick") == spare
    view = small.wait("quick", 60)
    assert view.status is JobStatus.SUCCEEDED and "quick ran" in small.logs("quick", "worker-1")
    log = (small.home / "run" / "quick" / "supervisor.log").read_text()  # the job's own, not the watchdog's
    assert f"supervisor {spare}: started as the folder's spare, took job quick" in log
    (second,) = h.wait_for(lambda: [p for p in spares(small.home) if p != spare], SPARE_UP_S, "the next spare")
    h.wait_for(lambda: socket_path(small.home).exists(), 10, "the next spare to listen")
    small.submit(h.spec("again", h.py("pass"), workers=1, gpus=0))
    assert claimed_by(small, h, "again") == second
    assert small.wait("again", 60).status is JobStatus.SUCCEEDED
    release.touch()
    assert small.wait("long", 60).status is JobStatus.SUCCEEDED
    # No job runs: the watchdog leaves, and its spare with it.
    h.wait_for(lambda: not spares(small.home) and not socket_path(small.home).exists(), PEER_CHECK_S + 10, "no spare")


@pytest.mark.slow
def test_a_command_from_another_context_or_facing_a_stopped_spare_starts_its_own_supervisor(
    small: Runtime, h, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    release, spare = running_queue(small, h, tmp_path)
    # Another grace period: the job's processes must get the supervisor this command would start.
    monkeypatch.setenv("RINGLEADER_GRACE_S", "7")
    small.submit(h.spec("other-env", h.py("pass"), gpus=0))
    assert claimed_by(small, h, "other-env") != spare
    assert small.wait("other-env", 60).status is JobStatus.SUCCEEDED
    monkeypatch.delenv("RINGLEADER_GRACE_S")
    umask = os.umask(0o077)  # a umask other than the spare's (the one its ranks would inherit)
    if umask == 0o077:
        os.umask(0o027)
    try:
        small.submit(h.spec("other-umask", h.py("pass"), gpus=0))
    finally:
        os.umask(umask)
    assert claimed_by(small, h, "other-umask") != spare
    assert small.wait("other-umask", 60).status is JobStatus.SUCCEEDED
    assert spares(small.home) == [spare]  # still waiting: it took neither

    os.kill(spare, signal.SIGSTOP)
    try:
        started = time.monotonic()
        small.submit(h.spec("stopped-spare", h.py("pass"), gpus=0))
        took = time.monotonic() - started
        assert claimed_by(small, h, "stopped-spare") != spare
        assert small.wait("stopped-spare", 60).status is JobStatus.SUCCEEDED
    finally:
        with contextlib.suppress(ProcessLookupError):  # the watchdog's check found it stopped: killed
            os.kill(spare, signal.SIGCONT)
    print(f"\nsubmit facing a stopped spare: {took:.2f} s (answer awaited {ANSWER_S} s)")
    assert took < ANSWER_S + 10.0  # waits for the answer, then goes on: never for the spare itself
    # Woken, it refuses the request its command stopped waiting for (or, found stopped by the
    # watchdog's check, it was killed and replaced): a spare waits again.
    h.wait_for(lambda: socket_path(small.home).exists() and spares(small.home), SPARE_UP_S, "a spare waiting again")
    assert claimed_by(small, h, "stopped-spare") != spare
    release.touch()
    assert small.wait("long", 60).status is JobStatus.SUCCEEDED


@pytest.mark.slow
def test_in_an_idle_folder_a_jobs_supervisor_starts_early_and_a_refused_submit_leaves_none(
    small: Runtime, h, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    release = tmp_path / "release"
    assert not spares(small.home)  # no job runs: no watchdog, no spare
    small.submit(h.spec("first", h.py(h.waiting_rank(release)),
                        gpus=0))  # fmt: skip
    pid = claimed_by(small, h, "first")
    assert pid in spares(small.home, "--early")
    log = (small.home / "run" / "first" / "supervisor.log").read_text()
    assert f"supervisor {pid}: started early by the command that placed job first" in log
    release.touch()
    assert small.wait("first", 60).status is JobStatus.SUCCEEDED
    h.wait_for(lambda: not socket_path(small.home).exists(), PEER_CHECK_S + 10, "the queue to be idle again")

    started: list[supervisors_before_jobs.EarlySupervisor | None] = []
    real = supervisors_before_jobs.start_early
    monkeypatch.setattr(supervisors_before_jobs, "start_early", lambda home: started.append(real(home)) or started[-1])
    empty = tmp_path / "no-runtime"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))  # no podman, no docker: the image is refused after the start
    with pytest.raises(DependencyError, match="needs a container runtime"):
        small.submit(h.spec("refused", ["true"], gpus=0, image="localhost/ringleader-refused:1"))
    assert len(started) == 1 and started[0] is not None  # one was started for it
    assert started[0].proc.wait(10) == 0  # and left, told of no job
    assert [j.name for j in small.list_jobs()] == ["first"]
    assert not (small.home / "run" / "refused").exists()
