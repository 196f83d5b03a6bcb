"""Stopping jobs the way training programs expect: SIGTERM once, a grace period to write a
checkpoint, then SIGKILL; `delete --now` kills at once; `--time-limit` stops a job at its limit."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from rankprograms import (
    LAUNCHERS,
    STOPS,
    assert_checkpoints_kept,
    checkpointing_rank,
    slow_checkpointing_program,
)
from ringleader.engines.embedded.engine import Runtime
from ringleader.errors import UsageError
from ringleader.jobs.spec import parse_duration
from ringleader.jobs.states import JobStatus

# A time limit the ranks reach training, their SIGTERM handler set: it counts from the job's start,
# and on a loaded 2-core machine starting two interpreters (and a launcher) takes seconds.
LIMIT_S = 10.0


def training(rt: Runtime, job: str) -> bool:
    return all("training" in rt.logs(job, i.name) for i in rt.get(job).instances)


@pytest.mark.slow
def test_delete_lets_every_rank_write_its_checkpoint_on_sigterm(small: Runtime, h, tmp_path: Path) -> None:
    small.submit(h.spec("ckpt", h.py(checkpointing_rank(tmp_path)), workers=2))
    h.wait_for(lambda: training(small, "ckpt"), what="both ranks to train")
    small.delete(["ckpt"])
    # Returned once the ranks were gone: each wrote its last file, after its checkpoint, before it.
    for rank in ("0", "1"):
        assert (tmp_path / f"ckpt-{rank}").read_text() == "step 42"
        assert (tmp_path / f"ckpt-{rank}.terms").read_text() == "1"  # SIGTERM exactly once
    assert all(ns.allocated == () for ns in small.nodes().nodes)


@pytest.mark.slow
def test_delete_now_kills_at_once_without_a_checkpoint(small: Runtime, h, tmp_path: Path) -> None:
    small.submit(h.spec("hasty", h.py(checkpointing_rank(tmp_path)), workers=2))
    h.wait_for(lambda: training(small, "hasty"), what="both ranks to train")
    env = {**os.environ, "RINGLEADER_HOME": str(small.home), "RINGLEADER_GRACE_S": "30"}
    out = subprocess.run([sys.executable, "-m", "ringleader.cli.main", "delete", "--now", "hasty"], env=env,
                         capture_output=True, text=True, timeout=300)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "job 'hasty' deleted"
    assert not list(tmp_path.glob("ckpt-*"))  # no handler ran: SIGKILL at once, no SIGTERM first
    assert all(ns.allocated == () for ns in Runtime.open(small.home).nodes().nodes)


@pytest.mark.slow
def test_time_limit_stops_the_job_at_its_limit_and_fails_it_as_timeout(small: Runtime, h, tmp_path: Path) -> None:
    small.submit(h.spec("limited", h.py(checkpointing_rank(tmp_path)), workers=2, time_limit_s=LIMIT_S))
    view = small.wait("limited", 300)
    assert view.status is JobStatus.FAILED
    assert view.reason is not None and view.reason.startswith(f"TIMEOUT: reached its time limit of {LIMIT_S:g} s")
    assert view.duration is not None and view.duration >= LIMIT_S  # not stopped before its limit
    assert (tmp_path / "ckpt-0").read_text() == "step 42"  # stopped gracefully: the handler ran
    assert [i.exit_code for i in view.instances] == [0, 0]  # each exited by itself after its checkpoint
    assert all(ns.allocated == () for ns in small.nodes().nodes)


@pytest.mark.parametrize(("text", "seconds"), [("90s", 90), ("30m", 1800), ("2h", 7200), ("1h30m", 5400),
                                               ("600", 600), ("2.5", 2.5)])  # fmt: skip
def test_time_limit_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["soon", "0", "-5", "10x", "nan", "inf", "1h30", "400d"])
def test_bad_time_limit_is_refused(text: str) -> None:
    with pytest.raises(UsageError, match="--time-limit"):
        parse_duration(text)


def test_bad_time_limit_is_one_usage_line(tmp_path: Path) -> None:
    env = {**os.environ, "RINGLEADER_HOME": str(tmp_path / "home")}
    out = subprocess.run([sys.executable, "-m", "ringleader.cli.main", "submit", "mpi", "--name", "j",
                          "--time-limit", "soon", "--", "true"], env=env, capture_output=True, text=True)  # fmt: skip
    assert out.returncode == 2
    assert len(out.stderr.strip().splitlines()) == 1 and "--time-limit 'soon' is not a duration" in out.stderr
    assert not (tmp_path / "home" / "state.db").exists()



def users_line(kind: str, program: Path) -> list[str]:
    """The same two-rank program as a user writes it for each launcher."""
    return {
        "plain": [sys.executable, str(program)],
        "mpirun": ["mpirun", "-np", "2", sys.executable, str(program)],
        "horovodrun": ["horovodrun", "-np", "2", sys.executable, str(program)],
        "torchrun": ["torchrun", "--nproc-per-node", "2", str(program)],
    }[kind]


@pytest.mark.slow
@pytest.mark.parametrize(("kind", "stop"), [(k, s) for k in LAUNCHERS for s in STOPS])
def test_a_slow_checkpoint_is_kept_on_every_launcher(
    small: Runtime, h, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str, stop: str
) -> None:
    program = slow_checkpointing_program(tmp_path, monkeypatch.setenv)
    limit = {"time_limit_s": LIMIT_S} if stop == "time-limit" else {}
    small.submit(h.spec("slow", users_line(kind, program), workers=2, gpus=0, **limit))
    monkeypatch.setenv("RINGLEADER_GRACE_S", "1")  # what a later command's environment says does not count
    if stop == "delete":
        h.wait_for(lambda: training(small, "slow"), what="both ranks to train")
        small.delete(["slow"])
    else:
        view = small.wait("slow", 300)
        assert view.reason is not None and "SIGKILL after 6 s" in view.reason, view.reason
    assert_checkpoints_kept(tmp_path)



@pytest.mark.slow
def test_a_sibling_of_a_failed_mpirun_rank_keeps_its_slow_checkpoint(
    small: Runtime, h, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rank 1 crashes while rank 0 trains: rank 0 gets one SIGTERM at once and the whole grace
    (mpirun, aborting, forwards nothing and would signal it only after its own kill timeout)."""
    program = slow_checkpointing_program(tmp_path, monkeypatch.setenv)
    # An hour's grace: a job that sat it out instead of ending with rank 0's checkpoint would not
    # end within the wait below, however loaded the machine.
    monkeypatch.setenv("RINGLEADER_GRACE_S", "3600")
    crashing = tmp_path / "crashing.py"
    crashed_at = tmp_path / "crashed-at"
    crashing.write_text("import os, sys, time\nif os.environ['RANK'] == '1':\n    time.sleep(1)\n"
                        f"    open({str(crashed_at)!r}, 'w').write(repr(time.time()))\n    sys.exit(3)\n"
                        f"exec(open({str(program)!r}).read())\n")  # fmt: skip
    small.submit(h.spec("crash", ["mpirun", "-np", "2", sys.executable, str(crashing)], workers=2, gpus=0))
    view = small.wait("crash", 300)
    assert view.reason is not None and view.reason.startswith("root cause: crash-worker-1 failed (exit code 3)")
    assert (tmp_path / "ckpt-0").read_text() == "step 42"
    assert (tmp_path / "ckpt-0.terms").read_text() == "1"
    # The job ended once rank 0 had written its checkpoint, after the crash, not when the grace ran out.
    assert view.ended_at is not None and view.ended_at >= float(crashed_at.read_text())
