"""Queue orders beyond FIFO (scheduler/order.py) through the queue every engine runs."""

from __future__ import annotations

from dataclasses import replace
from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ringleader.scheduler import BackfillConfig, ClusterState, JobRequest
from ringleader.scheduler.order import (
    NO_SERVICE,
    OrderConfig,
    QueueOrder,
    Service,
    las_level,
    running_service,
    service_of_runs,
)
from ringleader.scheduler.queue import QueuedJob, queue_order
from ringleader.scheduler.teams import TeamQueue, Teams
from ringleader.topology import NodeSpec, preset

NOW = 100_000.0
LAS = BackfillConfig(order=QueueOrder.LAS)
SRTF = BackfillConfig(order=QueueOrder.SRTF)


def queued(seq: int, *, priority: int = 0, attained: float = 0.0, since: float | None = None,
           remaining: float | None = None, submit: float = 0.0, queue: str | None = None) -> QueuedJob:  # fmt: skip
    job = JobRequest(f"j{seq}", 1, 1, priority=priority, queue=queue)
    return QueuedJob(job, seq, submit, service=Service(attained, since, 0.0, remaining))


jobs_strategy = st.lists(
    st.tuples(st.integers(0, 2), st.floats(0, 50_000), st.floats(0, NOW), st.one_of(st.none(), st.floats(1, 1e6))),
    min_size=1, max_size=12,
)  # fmt: skip


def build(drawn: list[tuple[int, float, float, float | None]]) -> list[QueuedJob]:
    return [queued(i, priority=p, attained=a, since=s, remaining=r, submit=min(s, 1000.0 * i))
            for i, (p, a, s, r) in enumerate(drawn)]  # fmt: skip


@settings(max_examples=60, deadline=None)
@given(jobs_strategy)
def test_fifo_order_is_the_order_before_orders_existed(drawn: list[tuple[int, float, float, float | None]]) -> None:
    jobs = build(drawn)
    config = BackfillConfig()
    before = sorted(jobs, key=lambda q: (-(q.job.priority + 100.0 * min(NOW - (q.submit_s or 0), 86400) / 86400),
                                         q.seq))  # fmt: skip
    assert [q.seq for q in queue_order(jobs, NOW, config)] == [q.seq for q in before]


@settings(max_examples=60, deadline=None)
@given(jobs_strategy)
def test_las_puts_less_attained_service_first_within_a_priority(
    drawn: list[tuple[int, float, float, float | None]],
) -> None:
    jobs = build(drawn)
    ordered = queue_order(jobs, NOW, LAS)
    levels = [(q.job.priority, las_level(q.service, NOW, LAS.orders)) for q in ordered]
    for (p1, l1), (p2, l2) in pairwise(levels):
        assert p1 >= p2  # priority first, always
        if p1 == p2:
            assert l1 <= l2  # then the lower level (less attained service, or promoted)


@settings(max_examples=60, deadline=None)
@given(jobs_strategy)
def test_srtf_passes_no_job_over_beyond_the_bound(drawn: list[tuple[int, float, float, float | None]]) -> None:
    jobs = build(drawn)
    bound = SRTF.orders.max_passed_over_s
    ordered = queue_order(jobs, NOW, SRTF)
    for i, overdue in enumerate(ordered):
        if overdue.service.queued_since_s is not None and NOW - overdue.service.queued_since_s >= bound:
            # nobody of its priority that waited less is ahead of it
            ahead = [q for q in ordered[:i] if q.job.priority == overdue.job.priority]
            assert all(q.service.queued_since_s is not None and NOW - q.service.queued_since_s >= bound
                       for q in ahead)  # fmt: skip


def test_srtf_runs_the_shortest_predicted_job_first_and_unknown_last() -> None:
    now = 1000.0  # nobody has waited long
    jobs = [queued(0, remaining=7200.0, since=900.0), queued(1, remaining=None, since=950.0),
            queued(2, remaining=60.0, since=990.0)]  # fmt: skip
    assert [q.seq for q in queue_order(jobs, now, SRTF)] == [2, 0, 1]


def test_srtf_reads_the_jobs_predicted_work_where_the_host_gives_no_remaining_time() -> None:
    long = QueuedJob(JobRequest("long", 1, 1, work_s=9000.0), 0, 0.0)
    short = QueuedJob(JobRequest("short", 1, 1, time_limit_s=600.0), 1, 0.0)
    assert [q.job.name for q in queue_order([long, short], 10.0, SRTF)] == ["short", "long"]


def test_las_promotes_a_job_that_waited_past_the_starve_limit() -> None:
    limit = OrderConfig().starve_limit_s
    assert limit is not None
    served = queued(0, attained=20_000.0, since=NOW - limit)  # ran 20,000 GPU-s, then waited the limit
    fresh = queued(1, attained=0.0, since=NOW - 10.0)
    assert las_level(served.service, NOW, LAS.orders) == 0
    assert [q.seq for q in queue_order([fresh, served], NOW, LAS)] == [0, 1]  # first in, first out in level 0
    recent = replace(served, service=replace(served.service, queued_since_s=NOW - 60.0))
    assert [q.seq for q in queue_order([fresh, recent], NOW, LAS)] == [1, 0]


def test_tiresias_promote_knob_promotes_after_a_multiple_of_the_last_run() -> None:
    knob = OrderConfig(starve_limit_s=None, promote_knob=2.0)
    ran = Service(attained_gpu_s=36_000.0, queued_since_s=NOW - 7200.0, last_run_s=3600.0)
    assert las_level(ran, NOW, knob) == 0
    assert las_level(replace(ran, queued_since_s=NOW - 7100.0), NOW, knob) == 3


def test_each_team_queue_keeps_its_own_order() -> None:
    state = ClusterState.empty([NodeSpec("n0", preset("dgx1v"))])
    queues = (TeamQueue("fast", order=QueueOrder.SRTF), TeamQueue("plain"))
    teams = Teams.of(queues, state, {}, {})
    jobs = [
        queued(0, remaining=9000.0, queue="fast", since=900.0),
        queued(1, remaining=60.0, queue="fast", since=990.0),
        queued(2, remaining=9000.0, queue="plain", submit=0.0),
        queued(3, remaining=60.0, queue="plain", submit=10.0),
    ]
    ordered = [q.seq for q in queue_order(jobs, 1000.0, BackfillConfig(), teams)]
    assert ordered.index(1) < ordered.index(0)  # srtf in "fast"
    assert ordered.index(2) < ordered.index(3)  # fifo in "plain"


def test_a_requeued_jobs_service_is_counted_from_the_runs_its_engine_recorded() -> None:
    # a 4-GPU gang ran 100 s, was preempted, ran 50 s more and was preempted again at 400
    service = service_of_runs(4, [(250.0, 400.0 - 100.0), (0.0, 100.0)])
    assert service == Service(attained_gpu_s=600.0, queued_since_s=300.0, last_run_s=50.0)
    assert service_of_runs(4, []) == service_of_runs(4, [(10.0, 10.0)]) == NO_SERVICE
    tiers = OrderConfig(las_thresholds_gpu_s=(500.0,))
    assert las_level(service, 310.0, tiers) == 1  # it ran more than the first threshold


def test_a_running_gangs_service_adds_its_current_run_to_the_ended_ones() -> None:
    # the gang above, running again since 500 on its 4 GPUs, due to end at 900
    ended = service_of_runs(4, [(250.0, 300.0), (0.0, 100.0)])
    assert running_service(4, ended, 500.0, 600.0, 900.0) == (500.0, 600.0 + 4 * 100.0, 300.0)
    # 50 s past its expected end: as much again left (the overrun rule of QueuePass.free_at)
    assert running_service(4, ended, 500.0, 950.0, 900.0)[2] == 50.0
    assert running_service(4, ended, 500.0, 600.0, None)[2] is None  # its end unknown
    assert running_service(4, ended, None, 600.0, 900.0) == (None, 0.0, None)  # not started: nothing to stop it for


def test_bad_thresholds_are_refused() -> None:
    with pytest.raises(ValueError, match="ascending"):
        OrderConfig(las_thresholds_gpu_s=(7200.0, 3600.0))


def test_the_cycle_starts_the_job_its_queues_order_puts_first() -> None:
    from ringleader.scheduler.cycle import Snapshot, Waiting, run_cycle

    state = ClusterState.empty([NodeSpec("n0", preset("dgx1v"))])
    long = Waiting(JobRequest("long", 1, 8, work_s=36_000.0), 0, 0.0)
    short = Waiting(JobRequest("short", 1, 8, work_s=600.0), 1, 5.0)
    started = {
        order: [n.waiting.job.name for n in run_cycle(Snapshot(state, [long, short], 10.0, config=config)).nominated
                if n.ok]
        for order, config in (("fifo", BackfillConfig()), ("srtf", SRTF))
    }  # fmt: skip
    assert started == {"fifo": ["long"], "srtf": ["short"]}
