"""Crash safety: kill -9 the folder's agent; the next one adopts its jobs, or finishes them from
their rank state files and frees the GPUs."""

from __future__ import annotations

import json
import os
import signal

from ringleader.engines.embedded.engine import Runtime
from ringleader.jobs.states import JobStatus
from ringleader.runtime.procs import alive, start_time
from statedb import kill_agents, supervisor_of


def started(rt: Runtime, job: str, text: str) -> bool:
    return all(text in rt.logs(job, i.name) for i in rt.get(job).instances)


def test_pid_reuse_is_detected() -> None:
    me = os.getpid()
    assert alive(me, start_time(me))
    assert not alive(me, (start_time(me) or 0) + 1)  # same pid, another start time: not ours


def test_killed_agent_is_replaced_and_the_job_adopted(small: Runtime, h, tmp_path) -> None:
    release = tmp_path / "release"  # the workers run until the test creates it
    small.submit(h.spec("adopt", h.py(h.waiting_rank(release)), workers=2))
    h.wait_for(lambda: started(small, "adopt", "up"), what="both workers to start")
    pid, st = supervisor_of(small, "adopt")
    kill_agents(small.home)  # its standby too: the next command starts an agent
    assert not alive(pid, st)
    rt = Runtime.open(small.home)  # any command starts the agent
    h.wait_for(lambda: supervisor_of(rt, "adopt")[0] != pid, what="a new agent to hold the job")
    assert rt.get("adopt").status is JobStatus.RUNNING
    release.touch()
    view = rt.wait("adopt", 90)
    assert view.status is JobStatus.SUCCEEDED
    assert [e.kind for e in view.events].count("Adopted") == 1
    assert all(ns.allocated == () for ns in rt.nodes().nodes)


def test_dead_agent_and_processes_fail_the_job_and_free_gpus(small: Runtime, h) -> None:
    code = "import os, time; print('up', flush=True); os.environ['RANK'] == '1' and time.sleep(300)"
    small.submit(h.spec("lost", h.py(code), workers=2))
    h.wait_for(lambda: small.get("lost").instances[0].status == "Succeeded", what="worker 0 to finish")
    h.wait_for(lambda: started(small, "lost", "up"), what="worker 1 to start")
    pid, _ = supervisor_of(small, "lost")
    kill_agents(small.home)
    state = json.loads((small.home / "run" / "lost" / "lost-worker-1.json").read_text())
    for key in ("child_pid", "pid"):
        os.kill(state[key], signal.SIGKILL)
    gone = lambda: not any(alive(state[p], state[s]) for p, s in (("pid", "pid_start"), ("child_pid", "child_start")))  # noqa: E731
    h.wait_for(gone, what="worker 1 (wrapper and program) to die")
    rt = Runtime.open(small.home)
    view = rt.wait("lost", 60)
    assert view.status is JobStatus.FAILED
    assert view.reason is not None and "lost-worker-1 failed" in view.reason, view.reason
    assert f"its agent pid {pid} was lost" in next(e.message for e in view.events if e.kind == "Adopted")
    by_name = {i.name: i for i in view.instances}
    assert by_name["lost-worker-0"].exit_code == 0  # taken from the rank wrapper's file
    assert by_name["lost-worker-1"].status == "Failed"
    assert all(ns.allocated == () for ns in rt.nodes().nodes)


def test_a_submit_whose_agent_cannot_start_is_still_submitted_and_says_so(small: Runtime, h, monkeypatch) -> None:
    """The job is committed before the agent is woken: an agent that cannot start (a full disk,
    no processes left) must not make the command report a failure for a job that is in the state;
    the next command starts the agent, which starts the job."""
    import subprocess

    def no_process(*args: object, **kwargs: object) -> None:
        raise OSError(11, "Resource temporarily unavailable")

    kill_agents(small.home)
    monkeypatch.setattr(subprocess, "Popen", no_process)
    result = small.submit(h.spec("lonely", h.py("print('ran')")))
    monkeypatch.undo()
    assert result.job is not None and result.job.status is JobStatus.RUNNING
    note = next(n for n in small.notes if "which starts job lonely, could not start yet" in n)
    assert "Resource temporarily unavailable" in note and "the next ringleader command starts it" in note
    rt = Runtime.open(small.home)
    assert rt.wait("lonely", 60).status is JobStatus.SUCCEEDED
