"""The supervisor's phases: one table says what may follow what, and a supervised job goes through
them in that order. Real state folder and real processes; the supervisor runs in this process
(no agent is started) on a clock the test moves, so a time limit is reached without waiting.
The engine dates what it records by the same kind of clock."""

from __future__ import annotations

import threading
from collections import deque

import pytest

from ringleader.clock import ManualClock
from ringleader.engines.embedded.engine import Runtime
from ringleader.engines.embedded.supervisor import ALLOWED, Phase, Supervisor
from ringleader.jobs.states import JobStatus


def reachable(start: Phase) -> set[Phase]:
    seen, todo = {start}, deque([start])
    while todo:
        for nxt in ALLOWED[todo.popleft()] - seen:
            seen.add(nxt)
            todo.append(nxt)
    return seen


def test_every_phase_is_reachable_and_every_one_leads_to_released() -> None:
    assert set(ALLOWED) == set(Phase)
    assert reachable(Phase.CLAIMING) == set(Phase)
    assert all(Phase.RELEASED in reachable(phase) for phase in Phase)
    assert ALLOWED[Phase.RELEASED] == frozenset()
    assert Phase.CLAIMING not in set().union(*ALLOWED.values())  # a job is claimed once


def test_a_phase_the_table_does_not_allow_is_refused(small: Runtime) -> None:
    sup = Supervisor(small.home, "nothing", (1, None))
    try:
        sup.enter(Phase.LAUNCHING)
        with pytest.raises(RuntimeError, match="job nothing: ended cannot follow launching"):
            sup.enter(Phase.ENDED)
        assert (sup.phase, sup.passed) == (Phase.LAUNCHING, [Phase.CLAIMING, Phase.LAUNCHING])
    finally:
        sup.db.close()


@pytest.fixture
def unattended(small: Runtime, monkeypatch: pytest.MonkeyPatch) -> Runtime:
    """Submits commit the job and start no agent: the test supervises it itself."""
    monkeypatch.setattr(Runtime, "_wake", lambda self, needed=None: None)
    return small


class Supervised(threading.Thread):
    """A job's supervisor in a thread of its own, made there (as the agent makes it: its
    connection to the state belongs to that thread)."""

    def __init__(self, rt: Runtime, job: str, clock: ManualClock) -> None:
        super().__init__(daemon=True)
        self.home, self.job, self.clock = rt.home, job, clock
        self.made = threading.Event()
        self.sup: Supervisor | None = None
        self.start()
        self.made.wait(10)

    def run(self) -> None:
        self.sup = Supervisor(self.home, self.job, (10**6, None), clock=self.clock)
        self.made.set()
        self.sup.run()

    @property
    def phase(self) -> Phase:
        assert self.sup is not None
        return self.sup.phase

    @property
    def passed(self) -> list[Phase]:
        assert self.sup is not None
        return self.sup.passed


@pytest.mark.parametrize(("code", "status", "phases"), [
    ("pass", JobStatus.SUCCEEDED, [Phase.RUNNING, Phase.ENDED]),
    ("raise SystemExit(3)", JobStatus.FAILED, [Phase.RUNNING, Phase.FAILING, Phase.ENDED]),
])  # fmt: skip
def test_a_job_goes_through_its_phases_to_its_end(unattended: Runtime, h, code, status, phases) -> None:
    unattended.submit(h.spec("p", h.py(code)))
    sup = thread = Supervised(unattended, "p", ManualClock(1_000_000.0))
    thread.join(60)
    assert not thread.is_alive()
    assert sup.passed == [Phase.CLAIMING, Phase.LAUNCHING, *phases, Phase.RELEASED]
    job = unattended.get("p")
    assert job.status is status
    started = next(e for e in job.events if e.kind == "Started")
    assert started.at == 1_000_000.0  # what the supervisor records, it dates by the clock it was given


def test_a_time_limit_is_reached_when_the_clock_says_so(unattended: Runtime, h, tmp_path) -> None:
    unattended.submit(h.spec("t", h.py(h.waiting_rank(tmp_path / "never")), time_limit_s=3600.0))
    clock = ManualClock(1_000_000.0)
    sup = thread = Supervised(unattended, "t", clock)
    h.wait_for(lambda: unattended.get("t").instances[0].status == "Running", what="the rank to run")
    clock.advance(3599.0)
    thread.join(1.0)
    assert sup.phase is Phase.RUNNING  # a second before its hour is up it runs on
    clock.advance(1.0)
    thread.join(60)
    assert not thread.is_alive()
    assert sup.passed == [Phase.CLAIMING, Phase.LAUNCHING, Phase.RUNNING, Phase.TIMING_OUT, Phase.ENDED,
                          Phase.RELEASED]  # fmt: skip
    job = unattended.get("t")
    assert job.status is JobStatus.FAILED and job.reason is not None and job.reason.startswith("TIMEOUT")


def test_the_engine_dates_a_submit_and_its_pass_by_its_clock(home, monkeypatch: pytest.MonkeyPatch, h) -> None:
    monkeypatch.setattr(Runtime, "_wake", lambda self, needed=None: None)
    clock = ManualClock(2_000_000.0)
    rt = Runtime.open(home, clock=clock)
    try:
        rt.apply_cluster(h.EXAMPLES / "seeds-cluster.yaml")
        clock.advance(30.0)
        rt.submit(h.spec("dated", h.py("pass")))
        job = rt.get("dated")
        assert job.created_at == 2_000_030.0 and job.started_at == 2_000_030.0  # placed by the submit's pass
        assert {e.kind: e.at for e in job.events}["Submitted"] == 2_000_030.0
    finally:
        rt.close()
