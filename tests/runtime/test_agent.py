"""The folder's agent: one resident process per state folder starts, watches and stops every job.

Real processes throughout: the ranks are the agent's own children, racing commands start one
agent, it leaves when nothing runs, and kill -9 or SIGSTOP of it at random moments loses no job
and starts none twice."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ringleader.engines.embedded import agentctl
from ringleader.engines.embedded.engine import Runtime
from ringleader.jobs.states import JobStatus
from statedb import agent_pids, kill_agents, supervisor_of
from waiting import WAIT_S

REPO = Path(__file__).resolve().parents[2]


def parent_of(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as fh:
        return int(fh.read().rpartition(")")[2].split()[1])


def test_the_ranks_of_every_job_are_the_one_agents_children_and_it_leaves_when_nothing_runs(
    small: Runtime, h, tmp_path: Path
) -> None:
    release = tmp_path / "release"
    small.submit(h.spec("one", h.py(h.waiting_rank(release)), workers=2))
    small.submit(h.spec("two", h.py(h.waiting_rank(release)), workers=1))
    for job in ("one", "two"):
        h.wait_for(lambda job=job: all("up" in small.logs(job, i.name) for i in small.get(job).instances),
                   what=f"{job}'s ranks to start")  # fmt: skip
    holder, _ = supervisor_of(small, "one")
    assert supervisor_of(small, "two")[0] == holder  # one agent holds both
    wrappers = [i.pid for job in ("one", "two") for i in small.get(job).instances]
    assert wrappers and all(pid is not None and parent_of(pid) == holder for pid in wrappers)
    # ... beside one standby, waiting for its lock.
    h.wait_for(lambda: len(agent_pids(small.home)) == 2, what="the agent's standby")
    release.touch()
    assert small.wait("one", 60).status is JobStatus.SUCCEEDED
    assert small.wait("two", 60).status is JobStatus.SUCCEEDED
    h.wait_for(lambda: not agent_pids(small.home), what="the agent and its standby to leave")


def cli(home: Path, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "RINGLEADER_HOME": str(home)}
    return subprocess.Popen([sys.executable, "-m", "ringleader.cli.main", *args], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip


def test_racing_commands_start_one_agent(small: Runtime, h, tmp_path: Path) -> None:
    small.close()
    commands = [cli(small.home, "submit", "mpi", "--name", f"race{i}", "--gpus", "0", "--", sys.executable, "-c",
                    "import time; time.sleep(1)") for i in range(6)]  # fmt: skip
    for command in commands:
        _, err = command.communicate(timeout=120)
        assert command.returncode == 0, err
    rt = Runtime.open(small.home)
    for i in range(6):
        assert rt.wait(f"race{i}", 90).status is JobStatus.SUCCEEDED
    log = (small.home / "run" / agentctl.LOG).read_text()
    assert log.count("serving, started by a command") == 1, log


def ranks_ran(marks: Path, job: str) -> list[str]:
    return sorted(p.name for p in marks.glob(f"{job}.*"))


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["kill", "stop"])
def test_an_agent_killed_or_stopped_at_random_moments_loses_no_job_and_starts_none_twice(
    small: Runtime, h, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fault: str
) -> None:
    """Each rank creates a file of its own with O_EXCL: a rank started twice fails its job. The
    agent (and, when stopped, whichever replaced it) is hit while jobs are submitted, started,
    watched and recorded; every job must end SUCCEEDED with each rank run exactly once."""
    import signal

    monkeypatch.setenv("RINGLEADER_LEASE_S", "3")  # commands and agents inherit it
    marks = tmp_path / "marks"
    marks.mkdir()
    code = ("import os, sys, time\n"
            "os.close(os.open(os.path.join(sys.argv[1], os.environ['RINGLEADER_JOB'] + '.' + os.environ['RANK']),"
            " os.O_CREAT | os.O_EXCL | os.O_WRONLY))\n"
            "time.sleep(float(sys.argv[2]))\n")  # fmt: skip
    shaken = random.Random(f"{fault}-agent")
    jobs = [f"j{i}" for i in range(6)]
    for job in jobs:
        small.submit(h.spec(job, [*h.py(code), str(marks), f"{shaken.uniform(0.2, 1.5):.2f}"], workers=2))
        time.sleep(shaken.uniform(0.0, 0.4))
        pids = agent_pids(small.home)
        if not pids:
            continue
        holder = supervisor_of(small, job)[0] or shaken.choice(pids)
        if holder not in pids:
            continue
        if fault == "kill":
            os.kill(holder, signal.SIGKILL)
        else:
            os.kill(holder, signal.SIGSTOP)  # left stopped: its replacement kills it
    for job in jobs:
        view = small.wait(job, 120)
        # on a failure, what the agents said and what the job's run folder holds (an agent killed
        # as it wrote a plan left half of one: test_safety's half-written plan test)
        said = (small.home / "run" / agentctl.LOG).read_text()[-4000:]
        folder = sorted(p.name for p in (small.home / "run" / job).glob("*"))
        assert view.status is JobStatus.SUCCEEDED, (job, view.reason, [e.message for e in view.events], folder, said)
        assert ranks_ran(marks, job) == [f"{job}.0", f"{job}.1"], (ranks_ran(marks, job), folder, said)
    kill_agents(small.home)  # a stopped one that was never noticed (its jobs had ended) included


def test_an_agent_whose_state_no_command_can_open_says_why_and_leaves(small: Runtime, tmp_path: Path) -> None:
    """A state folder refused to every command (here a link in place of its logs folder): the
    agent says why in its log and exits, instead of living for ever."""
    import shutil

    logs = small.home / "logs"
    shutil.rmtree(logs, ignore_errors=True)
    logs.symlink_to(tmp_path)
    try:
        done = subprocess.run([sys.executable, "-m", agentctl.AGENT_MODULE, str(small.home), "--standby"],
                              capture_output=True, text=True, timeout=WAIT_S)  # fmt: skip
    finally:
        logs.unlink()
    assert done.returncode == 1 and "stopped:" in done.stdout and "symbolic link" in done.stdout, done


def test_a_delete_asks_the_agent_and_returns_once_the_job_is_forgotten(small: Runtime, h, tmp_path: Path) -> None:
    release = tmp_path / "never"
    small.submit(h.spec("gone", h.py(h.waiting_rank(release)), workers=2))
    h.wait_for(lambda: all("up" in small.logs("gone", i.name) for i in small.get("gone").instances),
               what="the ranks to start")  # fmt: skip
    wrappers = [i.pid for i in small.get("gone").instances]
    small.delete(["gone"])
    assert [j.name for j in small.list_jobs()] == []
    assert not (small.home / "logs" / "gone").exists() and not (small.home / "run" / "gone").exists()
    assert all(p is not None and not Path(f"/proc/{p}").exists() for p in wrappers)  # stopped and reaped
    assert small.nodes().free_gpus == small.nodes().total_gpus


@pytest.mark.slow
def test_racing_deletes_of_the_same_jobs_each_return_and_none_is_failed(small: Runtime, h, tmp_path: Path) -> None:
    """`delete a b c d` racing `delete a` and `delete a`: each command deletes its jobs, or, when
    another deleted one first, says so in one line and changes nothing; nobody is killed and no
    job ends FAILED on the way."""
    for name in "abcd":
        small.submit(h.spec(name, h.py(h.waiting_rank(tmp_path / "never")), workers=1, gpus=1))
    h.wait_for(lambda: all("up" in small.logs(n, f"{n}-worker-0") for n in "abcd"), what="the ranks to start")
    env = {**os.environ, "RINGLEADER_HOME": str(small.home)}
    line = [sys.executable, "-m", "ringleader.cli.main", "delete"]
    asked = (["a", "b", "c", "d"], ["a"], ["a"])
    racers = [subprocess.Popen([*line, *names], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
              for names in asked]  # fmt: skip
    left = set("abcd")
    for names, racer in zip(asked, racers, strict=True):
        out, err = racer.communicate(timeout=120)
        if racer.returncode == 0:
            assert out.splitlines() == [f"job {n!r} deleted" for n in names]
            left -= set(names)
        else:
            assert (racer.returncode, err) == (1, "error: job 'a' not found. To fix: see `ringleader list`\n")
    jobs = small.list_jobs()
    assert {j.name for j in jobs} == left and "a" not in left
    assert all(j.status is JobStatus.RUNNING for j in jobs)  # never FAILED by a sibling's stop


@pytest.mark.slow
def test_a_job_the_agent_cannot_supervise_is_failed_not_held_for_ever(small: Runtime, h, tmp_path: Path) -> None:
    """Its row damaged while no agent ran (its placement no longer JSON): each thread the new
    agent gives it fails; after the third the job is FAILED saying why, its ranks are stopped,
    and its GPUs go back to the queue, where a waiting job starts."""
    import json
    import sqlite3

    small.submit(h.spec("damaged", h.py(h.waiting_rank(tmp_path / "never")), workers=2, gpus=2))
    small.submit(h.spec("behind", h.py("print('ran')"), workers=2, gpus=2))
    small.submit(h.spec("waits", h.py("print('ran')"), workers=1, gpus=4))
    h.wait_for(lambda: all("up" in small.logs("damaged", i.name) for i in small.get("damaged").instances),
               what="the ranks to start")  # fmt: skip
    states = [json.loads((small.home / "run" / "damaged" / f"damaged-worker-{r}.json").read_text()) for r in (0, 1)]
    kill_agents(small.home)
    with sqlite3.connect(small.home / "state.db") as conn:
        conn.execute("UPDATE jobs SET placement = 'not JSON' WHERE name = 'damaged'")

    def status() -> tuple[str, str | None]:
        with sqlite3.connect(small.home / "state.db") as conn:
            return conn.execute("SELECT status, reason FROM jobs WHERE name = 'damaged'").fetchone()

    Runtime.open(small.home).close()  # starts an agent
    h.wait_for(lambda: status()[0] == "FAILED", what="the job to be failed")
    assert "the agent could not supervise it" in (status()[1] or "") and "processes were stopped" in status()[1]
    from ringleader.runtime.procs import alive

    assert not any(alive(s[p], s[s_]) for s in states for p, s_ in (("pid", "pid_start"), ("child_pid", "child_start")))
    h.wait_for(lambda: small.get("waits").status.is_terminal(), what="the waiting job to start and end")
    assert small.get("waits").status is JobStatus.SUCCEEDED
    assert "job damaged" in (small.home / "run" / agentctl.LOG).read_text()
