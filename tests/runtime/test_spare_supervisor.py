"""Supervisors started before their job. The spare: while jobs run, the folder's watchdog keeps
one supervisor waiting with its modules imported, and the next job a command places starts
under it; a command whose process context differs, or facing a stopped spare, starts a
supervisor of its own; the spare leaves with the watchdog. In an idle folder, a command starts
its job's supervisor early, while it asks the runtime and commits; that one starts the ranks
before its imports, forks the folder's watchdog meanwhile, and, killed at either end of the
hand-over (the command after its commit, the early supervisor after the ranks' start), loses
no job; refused, it leaves none."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ringleader.engines.embedded import early as supervisors_before_jobs
from ringleader.engines.embedded.engine import Runtime
from ringleader.engines.embedded.liveness import PEER_CHECK_S
from ringleader.engines.embedded.spare import ANSWER_S, socket_path
from ringleader.errors import DependencyError
from ringleader.jobs.states import JobStatus
from ringleader.runtime.procs import alive
from statedb import supervisor_of

SPARE_UP_S = PEER_CHECK_S + 15.0  # its first check, then an interpreter and imports on a loaded box


def spares(home: Path) -> list[int]:
    """The pids of the folder's spare supervisors, whether or not they have become a job's
    supervisor since."""
    return _started_as(home, ["ringleader.engines.embedded.supervisor", str(home), "--spare"])


def early_supervisors(home: Path) -> list[int]:
    """The pids of the folder's early supervisors (and of the watchdogs they forked)."""
    return _started_as(home, ["ringleader.engines.embedded.early", str(home)])


def _started_as(home: Path, tail: list[str]) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")[:-1]
        except OSError:
            continue
        if argv[-len(tail):] == [part.encode() for part in tail]:
            found.append(int(entry))
    return found


def comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


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
    assert pid in early_supervisors(small.home)
    log = small.home / "run" / "first" / "supervisor.log"  # claimed for it at the commit: it may not be up yet
    said = f"supervisor {pid}: started early by the command that placed job first"
    h.wait_for(lambda: log.exists() and said in log.read_text(), 30, "the early supervisor's first line")
    release.touch()
    assert small.wait("first", 60).status is JobStatus.SUCCEEDED
    h.wait_for(lambda: not socket_path(small.home).exists(), PEER_CHECK_S + 10, "the queue to be idle again")

    started: list[supervisors_before_jobs.EarlySupervisor | None] = []
    real = supervisors_before_jobs.start_early
    monkeypatch.setattr(supervisors_before_jobs, "start_early",
                        lambda home, job: started.append(real(home, job)) or started[-1])  # fmt: skip
    empty = tmp_path / "no-runtime"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))  # no podman, no docker: the image is refused after the start
    with pytest.raises(DependencyError, match="needs a container runtime"):
        small.submit(h.spec("refused", ["true"], gpus=0, image="localhost/ringleader-refused:1"))
    assert len(started) == 1 and started[0] is not None  # one was started for it
    assert started[0].proc.wait(10) == 0  # and left, told of no job
    assert [j.name for j in small.list_jobs()] == ["first"]
    assert not (small.home / "run" / "refused").exists()


def idle_folder(rt: Runtime, h) -> None:  # type: ignore[no-untyped-def]
    """A folder that ran a job (so it has its run/ folder) and whose watchdog has left."""
    rt.submit(h.spec("prior", ["true"], gpus=0))
    assert rt.wait("prior", 60).status is JobStatus.SUCCEEDED
    h.wait_for(lambda: not watchdog_pid(rt.home), PEER_CHECK_S + 10, "the watchdog to leave")


def watchdog_pid(home: Path) -> int | None:
    from ringleader.engines.embedded.liveness import read_beat

    beat = read_beat(home / "run" / "watchdog.beat")
    return beat[0] if beat is not None and alive(beat[0], beat[1]) else None


@pytest.mark.slow
def test_in_an_idle_folder_the_early_supervisor_starts_the_ranks_itself_beside_a_forked_watchdog(
    small: Runtime, h, tmp_path: Path
) -> None:
    idle_folder(small, h)
    release = tmp_path / "release"
    small.submit(h.spec("ranks-first", h.py(h.waiting_rank(release)), workers=2, gpus=1))
    pid = claimed_by(small, h, "ranks-first")
    assert pid in early_supervisors(small.home)
    log = small.home / "run" / "ranks-first" / "supervisor.log"
    h.wait_for(lambda: log.exists() and "started 2 rank(s) before its imports" in log.read_text(), 30, "the start")
    # The ranks are its own children (it stops them, and waits for them, as any supervisor does).
    wrappers = h.wait_for(lambda: [i.pid for i in small.get("ranks-first").instances if i.pid], 30, "pids")
    for wrapper in wrappers:
        assert int(Path(f"/proc/{wrapper}/stat").read_text().rpartition(")")[2].split()[1]) == pid
    # The watchdog it forked watches the queue: a copy of it, named for what it does.
    watchdog = h.wait_for(lambda: watchdog_pid(small.home), 10, "a watchdog")
    assert watchdog != pid and comm(watchdog) == "rl-watchdog"
    release.touch()
    done = small.wait("ranks-first", 60)
    assert done.status is JobStatus.SUCCEEDED
    assert [i.exit_code for i in done.instances] == [0, 0]
    assert "GPU" in small.get("ranks-first").events[-1].message  # freed, and said so
    h.wait_for(lambda: not watchdog_pid(small.home), PEER_CHECK_S + 10, "the watchdog to leave with the queue")


@pytest.mark.slow
def test_a_command_killed_after_its_commit_leaves_its_job_to_the_early_supervisor(
    small: Runtime, h, tmp_path: Path
) -> None:
    idle_folder(small, h)
    env = {**os.environ, "RINGLEADER_HOME": str(small.home), "RINGLEADER_CRASH_AT": "submit-committed"}
    done = subprocess.run([sys.executable, "-m", "ringleader.cli.main", "submit", "mpi", "--name", "orphaned",
                           "--workers", "2", "--gpus", "1", "--", *h.py("print('ran')")],
                          env=env, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == -9, done.stderr
    # No command runs after it: the early supervisor, told the job's name but not how to start
    # it, finds the job committed for itself and starts it the usual way.
    finished = small.wait("orphaned", 60)
    assert finished.status is JobStatus.SUCCEEDED, finished.reason
    assert small.logs("orphaned").strip() == "ran"
    log = (small.home / "run" / "orphaned" / "supervisor.log").read_text()
    assert "started early by the command that placed job orphaned" in log
    assert "before its imports" not in log
    assert "Adopted" not in [e.kind for e in small.get("orphaned").events]


@pytest.mark.slow
def test_an_early_supervisor_killed_after_starting_the_ranks_loses_nothing(
    small: Runtime, h, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    idle_folder(small, h)
    release = tmp_path / "release"
    monkeypatch.setenv("RINGLEADER_CRASH_AT", "early-started")  # the early supervisor's environment has it
    small.submit(h.spec("adopted", h.py(h.waiting_rank(release)), workers=2, gpus=1))
    monkeypatch.delenv("RINGLEADER_CRASH_AT")
    first = claimed_by(small, h, "adopted")
    first_start = supervisor_of(small, "adopted")[1]  # claimed for it by the command, with its start time
    h.wait_for(lambda: not alive(first, first_start) or None, 30, "the early supervisor's end")
    # Its ranks run on; the watchdog it forked finds it lost and a new supervisor adopts them.
    adopted = lambda: "Adopted" in [e.kind for e in small.get("adopted").events] or None  # noqa: E731
    h.wait_for(adopted, PEER_CHECK_S + 30, "adoption")
    assert supervisor_of(small, "adopted")[0] != first
    release.touch()
    done = small.wait("adopted", 60)
    assert done.status is JobStatus.SUCCEEDED, done.reason
    assert [i.exit_code for i in done.instances] == [0, 0]


@pytest.mark.slow
def test_an_early_supervisor_stopped_before_it_was_told_is_replaced_and_its_job_started(
    small: Runtime, h, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Committed for a process that then never read how to start it (stopped, as a Ctrl-Z'd
    command leaves it waiting): its first heartbeat, written by the command, goes stale, it is
    killed as stuck, and as it wrote no plan, the job is started afresh, not failed."""
    idle_folder(small, h)
    monkeypatch.setenv("RINGLEADER_LEASE_S", "3")
    stopped: list[int] = []
    real = supervisors_before_jobs.EarlySupervisor.start

    def stop_then_tell(self, *args):  # type: ignore[no-untyped-def]
        os.kill(self.proc.pid, signal.SIGSTOP)
        stopped.append(self.proc.pid)
        return real(self, *args)

    monkeypatch.setattr(supervisors_before_jobs.EarlySupervisor, "start", stop_then_tell)
    small.submit(h.spec("untold", h.py("print('ran')"), workers=2, gpus=1))
    assert supervisor_of(small, "untold")[0] == stopped[0]  # claimed for it in the commit
    done = small.wait("untold", 60)  # reconciles every 2 s, as any waiting command does
    assert done.status is JobStatus.SUCCEEDED, done.reason
    assert small.logs("untold").strip() == "ran"
    kinds = [e.kind for e in done.events]
    assert "SupervisorStuck" in kinds and "Adopted" not in kinds
    assert not alive(stopped[0], None)


@pytest.mark.slow
def test_an_early_supervisor_gone_before_it_was_told_leaves_the_job_to_a_supervisor_of_the_command(
    small: Runtime, h, monkeypatch: pytest.MonkeyPatch
) -> None:
    idle_folder(small, h)
    real = supervisors_before_jobs.EarlySupervisor.start

    def kill_then_tell(self, *args):  # type: ignore[no-untyped-def]
        self.proc.kill()
        self.proc.wait()
        return real(self, *args)  # the pipe has no reader: False

    monkeypatch.setattr(supervisors_before_jobs.EarlySupervisor, "start", kill_then_tell)
    small.submit(h.spec("retold", h.py("print('ran')"), workers=2, gpus=1))
    done = small.wait("retold", 30)
    assert done.status is JobStatus.SUCCEEDED, done.reason
    assert "started early" not in (small.home / "run" / "retold" / "supervisor.log").read_text()
