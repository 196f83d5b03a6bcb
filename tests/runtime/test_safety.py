"""Process safety: a job's environment is its own, pids are never signalled blindly, a deleted
job's processes stop, an adopted half-launched job fails, a killed agent's jobs are finished."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ringleader.engines.embedded import store
from ringleader.engines.embedded.engine import Runtime
from ringleader.jobs.states import JobStatus
from ringleader.runtime.plan import RANK_FILE, RANK_MODULE, instance_targets, plan_path, state_path
from ringleader.runtime.procs import alive, start_time
from statedb import kill_agents, supervisor_of

WAIT = "import os, sys, time\nprint('up', flush=True)\nwhile not os.path.exists(sys.argv[1]): time.sleep(0.1)"


def waiter(release: Path) -> list[str]:
    """A program that prints 'up' and runs until ``release`` exists."""
    return [sys.executable, "-c", WAIT, str(release)]


def started(rt: Runtime, job: str) -> bool:
    return all("up" in rt.logs(job, i.name) for i in rt.get(job).instances)


def state(home: Path, job: str, instance: str) -> dict:
    return dict(json.loads(state_path(home, job, instance).read_text()))


def kill_instance(home: Path, job: str, instance: str) -> dict:
    st = state(home, job, instance)
    for key in ("child_pid", "pid"):
        with contextlib.suppress(ProcessLookupError):
            os.kill(st[key], signal.SIGKILL)
    return st


def kill_agent(rt: Runtime, job: str, h) -> None:
    """The agent holding the job killed -9; its standby takes over."""
    pid, st = supervisor_of(rt, job)
    os.kill(pid, signal.SIGKILL)
    h.wait_for(lambda: not alive(pid, st), what="the agent to die")


def test_a_job_gets_its_recorded_environment_not_the_starters(small: Runtime, h, monkeypatch) -> None:
    monkeypatch.setenv("RL_LEAK", "from-the-starting-process")
    code = "import os; print('leak=' + os.environ.get('RL_LEAK', 'absent'), 'omp=' + os.environ['OMP_NUM_THREADS'])"
    env = {"PATH": os.environ["PATH"], "OMP_NUM_THREADS": "3"}
    small.submit(h.spec("envjob", h.py(code), gpus=0, submit_env=env))
    assert small.wait("envjob", 90).status is JobStatus.SUCCEEDED
    assert "leak=absent omp=3" in small.logs("envjob")


def test_final_state_keeps_start_times_and_finished_pids_are_never_signalled(small: Runtime, h, tmp_path) -> None:
    release = tmp_path / "release"
    up = "print('up', flush=True)\n"
    code = WAIT.replace(up, up + "os.environ['RANK'] == '0' and sys.exit(0)\n")
    small.submit(h.spec("reuse", [*h.py(code), str(release)], workers=2))
    h.wait_for(lambda: small.get("reuse").instances[0].status == "Succeeded", what="worker 0 to finish")
    h.wait_for(lambda: "up" in small.logs("reuse", "reuse-worker-1"), what="worker 1 to start")
    done = state(small.home, "reuse", "reuse-worker-0")
    assert done["exit_code"] == 0 and done["child_start"] is not None
    assert instance_targets(small.home, "reuse", "reuse-worker-0", done["pid"], done["pid_start"]) == []
    # An unrelated process now holds the finished program's pid (as after PID reuse), start unknown.
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
    try:
        path = state_path(small.home, "reuse", "reuse-worker-0")
        reused = {k: v for k, v in done.items() if k != "exit_code"}  # and even were it not over
        path.write_text(json.dumps({**reused, "child_pid": other.pid, "child_start": None}))
        small.delete(["reuse"])
        assert other.poll() is None, "delete killed a process that was not the job's"
    finally:
        other.kill()
        other.wait()


def half_start(small: Runtime, h, name: str, release: Path) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    """A 2-worker gang whose agent died in its launch loop after starting worker 0 only: worker
    1 killed and forgotten, the job back to `starting`, no agent running. Worker 0's state."""
    small.submit(h.spec(name, waiter(release), workers=2))
    h.wait_for(lambda: started(small, name), what="both workers to start")
    kill_agents(small.home)  # its standby too: nothing adopts the job while it is changed below
    st = kill_instance(small.home, name, f"{name}-worker-1")
    h.wait_for(lambda: not alive(st["pid"], st["pid_start"]), what="worker 1 to die")
    state_path(small.home, name, f"{name}-worker-1").unlink()
    with small.db.write() as conn:
        store.update_instance(conn, name, f"{name}-worker-1", status="Pending", pid=None, pid_start=None,
                              started_at=None)  # fmt: skip
        conn.execute("UPDATE jobs SET launch = 'starting' WHERE name = ?", (name,))
    return state(small.home, name, f"{name}-worker-0")


def test_a_gang_half_started_by_a_lost_agent_is_completed_and_no_rank_runs_twice(small: Runtime, h, tmp_path) -> None:
    release = tmp_path / "release"
    w0 = half_start(small, h, "half", release)
    rt = Runtime.open(small.home)  # starts an agent: it starts worker 1, worker 0 keeps running
    h.wait_for(lambda: "Completed" in {e.kind for e in rt.get("half").events}, what="the gang to be completed")
    said = next(e.message for e in rt.get("half").events if e.kind == "Completed")
    assert said == ("its lost agent had started 1 of 2 instance(s): they keep running, and half-worker-1 started "
                    "now (no rank runs twice)")
    assert alive(w0["child_pid"], w0["child_start"])  # the rank that had started was left alone
    h.wait_for(lambda: started(rt, "half"), what="worker 1 to run")
    assert rt.get("half").instances[0].pid == w0["pid"]
    release.touch()
    view = rt.wait("half", 60)
    assert view.status is JobStatus.SUCCEEDED, view.reason
    assert [i.status for i in view.instances] == ["Succeeded", "Succeeded"]
    assert all(ns.allocated == () for ns in rt.nodes().nodes)
    rt.close()


def test_a_plan_left_half_written_by_a_killed_agent_starts_the_gang_afresh(small: Runtime, h, tmp_path) -> None:
    """An agent killed while it wrote a gang's plan, before any rank started: the next agent
    must not take the plan's name for a launch (its ranks would read half a plan, exit without
    a word, and fail the job); it starts the gang afresh, whole."""
    release = tmp_path / "release"
    small.submit(h.spec("torn", waiter(release), workers=2))
    h.wait_for(lambda: started(small, "torn"), what="both workers to start")
    kill_agents(small.home)  # its standby too: nothing adopts the job while it is changed below
    for instance in ("torn-worker-0", "torn-worker-1"):
        st = kill_instance(small.home, "torn", instance)
        h.wait_for(lambda st=st: not alive(st["pid"], st["pid_start"]), what=f"{instance} to die")
        state_path(small.home, "torn", instance).unlink()
    with small.db.write() as conn:  # back to its launch's start, as the killed agent left it
        for instance in ("torn-worker-0", "torn-worker-1"):
            store.update_instance(conn, "torn", instance, status="Pending", pid=None, pid_start=None,
                                  started_at=None)  # fmt: skip
        conn.execute("UPDATE jobs SET launch = 'starting' WHERE name = ?", ("torn",))
    plan = plan_path(small.home, "torn")
    plan.write_bytes(plan.read_bytes()[:100])  # the first bytes a killed write got to the disk
    release.touch()  # the ranks started afresh end at once
    rt = Runtime.open(small.home)  # starts an agent
    view = rt.wait("torn", 60)
    assert view.status is JobStatus.SUCCEEDED, (view.reason, [e.message for e in view.events])
    assert [e.kind for e in view.events].count("Started") == 2  # started afresh, not completed as adopted
    assert json.loads(plan.read_text())["job"] == "torn"  # written whole again
    rt.close()


def test_a_rank_forked_but_not_recorded_by_a_lost_agent_is_adopted_not_doubled(small: Runtime, h, tmp_path) -> None:
    release = tmp_path / "release"
    half_start(small, h, "fork", release)
    # worker 1's wrapper as the lost agent had forked it, its pid never recorded
    stray = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", RANK_FILE,
                              str(plan_path(small.home, "fork")), "--rank", "1", "--", "true"],
                             start_new_session=True)  # fmt: skip
    try:
        h.wait_for(lambda: start_time(stray.pid) is not None, what="the stray to start")
        rt = Runtime.open(small.home)
        h.wait_for(lambda: "Completed" in {e.kind for e in rt.get("fork").events}, what="the gang to be completed")
        said = next(e.message for e in rt.get("fork").events if e.kind == "Completed")
        assert said.endswith("and none started now (no rank runs twice)")
        assert rt.get("fork").instances[1].pid == stray.pid
        rt.delete(["fork"])
        h.wait_for(lambda: stray.poll() is not None, what="delete to stop the adopted wrapper")
        rt.close()
    finally:
        if stray.poll() is None:
            stray.kill()
        stray.wait()


def test_the_agent_stops_a_jobs_processes_when_the_job_disappears(small: Runtime, h, tmp_path) -> None:
    small.submit(h.spec("vanish", waiter(tmp_path / "release")))
    h.wait_for(lambda: started(small, "vanish"), what="the worker to start")
    st = state(small.home, "vanish", "vanish-worker-0")
    with small.db.write() as conn:  # gone behind the agent's back
        store.delete_job(conn, "vanish")
    h.wait_for(lambda: not alive(st["child_pid"], st["child_start"]) and not alive(st["pid"], st["pid_start"]),
               what="the agent to stop the job's processes")  # fmt: skip


@pytest.mark.parametrize("wrapper", [RANK_MODULE, RANK_FILE], ids=["launcher", "rank"])
def test_delete_stops_a_wrapper_not_yet_recorded(small: Runtime, h, tmp_path, wrapper: str) -> None:
    small.submit(h.spec("race", waiter(tmp_path / "release")))
    h.wait_for(lambda: started(small, "race"), what="the worker to start")
    # A wrapper started for this job whose pid nobody recorded yet (found by its plan file).
    stray = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", wrapper,
                              str(plan_path(small.home, "race"))], start_new_session=True)  # fmt: skip
    try:
        h.wait_for(lambda: start_time(stray.pid) is not None, what="the stray to start")
        small.delete(["race"])
        h.wait_for(lambda: stray.poll() is not None, what="delete to stop the unrecorded wrapper")
    finally:
        if stray.poll() is None:
            stray.kill()
        stray.wait()


def test_a_killed_agents_job_whose_rank_died_meanwhile_fails(small: Runtime, h, tmp_path) -> None:
    small.submit(h.spec("victim", waiter(tmp_path / "never")))
    small.submit(h.spec("peer", waiter(tmp_path / "go")))
    h.wait_for(lambda: started(small, "victim") and started(small, "peer"), what="both jobs to start")
    kill_agent(small, "victim", h)
    st = kill_instance(small.home, "victim", "victim-worker-0")
    h.wait_for(lambda: not alive(st["pid"], st["pid_start"]), what="the victim's worker to die")
    (tmp_path / "go").touch()  # the peer ends; no command runs (get starts no agent)
    h.wait_for(lambda: small.get("victim").status is JobStatus.FAILED, what="the standby to finish the victim")
    assert all("victim" not in (j for _, j in ns.allocated) for ns in small.nodes().nodes)
