"""Small simulations with hand-checkable JCTs, rejection of never-fitting jobs, and the fast
pass agreeing with a naive one that runs schedule_queue over the whole queue on every event."""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping

import pytest

from ringleader.errors import UsageError
from ringleader.scheduler import (
    NO_RESERVATIONS,
    BackfillConfig,
    ClusterState,
    JobRequest,
    NodeState,
    Placement,
    QueuedJob,
    schedule_queue,
)
from ringleader.sim import StepTime, TraceJob, generate_trace, simulate, summarise, wait_by_size
from ringleader.topology import NodeSpec, preset


def one_second_steps(nodes: Mapping[str, NodeState], placement: Placement, job: TraceJob) -> StepTime:
    """Every step takes 1 s (2 s across nodes); images/s = batch x GPUs / step."""
    del nodes
    step = 2.0 if len(placement.nodes) > 1 else 1.0
    return StepTime(step, job.batch_size * sum(len(s.gpus) for s in placement.slots) / step)


def nodes(n: int) -> list[NodeSpec]:
    return [NodeSpec(f"n{i}", preset("dgx1v")) for i in range(n)]


def job(name: str, at: float, workers: int, gpus: int, iters: int, priority: int = 0) -> TraceJob:
    return TraceJob(name, at, workers, gpus, "resnet50", 10, iters, priority)


def times(run) -> dict[str, tuple[float | None, float | None]]:  # type: ignore[no-untyped-def]
    return {r.job.name: (r.start_s, r.finish_s) for r in run.records}


def test_fifo_jcts_by_hand() -> None:
    # a takes the whole node 0-100; b and c wait, then share it: b 100-150, c 100-130.
    trace = [job("a", 0, 1, 8, 100), job("b", 10, 4, 1, 50), job("c", 20, 1, 4, 30)]
    run = simulate(nodes(1), trace, "topology", one_second_steps)
    assert times(run) == {"a": (0, 100), "b": (100, 150), "c": (100, 130)}
    s = summarise(run)
    assert s["avg_jct_s"] == pytest.approx((100 + 140 + 110) / 3)
    assert s["avg_queue_s"] == pytest.approx((0 + 90 + 80) / 3)
    assert s["makespan_s"] == 150
    assert s["gpu_utilization"] == pytest.approx((8 * 100 + 4 * 50 + 4 * 30) / (8 * 150))
    assert s["jobs_per_hour"] == pytest.approx(3 / 150 * 3600)
    assert s["images_per_s"] == pytest.approx((80 * 100 + 40 * 50 + 40 * 30) / 150)
    assert s["p95_jct_s"] == pytest.approx(110 + 0.9 * (140 - 110))
    assert wait_by_size(run) == {
        4: {"jobs": 2, "p50_s": 85, "p95_s": pytest.approx(89.5), "max_s": 90},
        8: {"jobs": 1, "p50_s": 0, "p95_s": 0, "max_s": 0},
    }


def test_priority_then_fifo_and_backfill() -> None:
    # At t=100 the node frees: d (priority 5) goes before b although b came first; the 8-GPU
    # head e cannot fit behind them, yet the small f backfills.
    trace = [
        job("a", 0, 1, 8, 100),
        job("b", 10, 1, 4, 50),
        job("d", 20, 1, 4, 10, priority=5),
        job("e", 30, 1, 8, 10, priority=9),
        job("f", 40, 1, 1, 5),
    ]
    run = simulate(nodes(1), trace, "default", one_second_steps)
    assert times(run) == {
        "a": (0, 100), "e": (100, 110), "d": (110, 120), "b": (110, 160), "f": (120, 125),
    }  # fmt: skip


def test_multi_node_step_time_and_spread() -> None:
    # default spreads 4 single-GPU workers 2+2 over two nodes: 2 s steps; topology packs: 1 s.
    trace = [job("a", 0, 4, 1, 100)]
    assert times(simulate(nodes(2), trace, "default", one_second_steps))["a"] == (0, 200)
    assert times(simulate(nodes(2), trace, "topology", one_second_steps))["a"] == (0, 100)


def test_a_spread_gang_that_accumulates_loses_less_to_the_network() -> None:
    """Under the throughput model, VGG-16 on 2 + 2 GPUs of two DGX-1Vs over 25 Gb/s runs its
    micro-batches several times faster when a step sums 16 of them: one allreduce per 16."""
    from dataclasses import replace

    from ringleader.sim import model_step_time

    plain = TraceJob("vgg", 0, 4, 1, "vgg16", 32, 100)
    spread = {s: simulate(nodes(2), [replace(plain, accumulation=s)], "default", model_step_time()) for s in (1, 16)}
    per_micro_batch = {s: (run.records[0].finish_s or 0) / (100 * s) for s, run in spread.items()}
    assert per_micro_batch[16] < per_micro_batch[1] / 3


def test_a_job_in_mixed_precision_finishes_sooner_on_tensor_cores() -> None:
    """The simulator prices each job at its own precision: ResNet-50 in fp16 on V100s runs
    its steps well over twice as fast as in fp32, as the published rates have it."""
    from dataclasses import replace

    from ringleader.sim import model_step_time

    plain = TraceJob("r50", 0, 1, 8, "resnet50", 64, 100)
    runs = {p: simulate(nodes(1), [replace(plain, precision=p)], "default", model_step_time())
            for p in ("fp32", "fp16")}  # fmt: skip
    took = {p: run.records[0].finish_s or 0 for p, run in runs.items()}
    assert took["fp16"] < took["fp32"] / 1.8


def test_never_fitting_job_is_reported_not_dropped() -> None:
    trace = [job("small", 0, 1, 2, 10), job("huge", 1, 3, 8, 10), job("wide", 2, 1, 9, 10)]
    run = simulate(nodes(2), trace, "topology", one_second_steps)
    rejected = {r.job.name: r.rejected for r in run.records if r.rejected}
    assert set(rejected) == {"huge", "wide"}
    assert all(reason and reason.startswith("never fits this cluster") for reason in rejected.values())
    assert "24 GPUs" in (rejected["huge"] or "")
    s = summarise(run)
    assert (s["completed"], s["rejected"]) == (1, 2)


def test_unknown_policy_lists_known_ones() -> None:
    with pytest.raises(UsageError) as info:  # a name typed on the command line: exit 2
        simulate(nodes(1), [job("a", 0, 1, 1, 1)], "fastest", one_second_steps)
    assert "use one of ack, besteffort, default, throughput, topology" in info.value.one_line()


def test_empty_trace() -> None:
    s = summarise(simulate(nodes(1), [], "topology", one_second_steps))
    assert s["completed"] == 0 and math.isnan(s["avg_jct_s"])


def naive(
    specs: list[NodeSpec], trace: list[TraceJob], policy: str, config: BackfillConfig
) -> dict[str, tuple[float, float]]:
    """The obvious simulator: schedule_queue over the whole queue after every instant."""
    state = ClusterState.empty(specs)
    ends: dict[str, float] = {}
    events = [(j.arrival_s, 1, i, j) for i, j in enumerate(trace)]
    heapq.heapify(events)
    pending: list[QueuedJob] = []
    by_name = {j.name: j for j in trace}
    out: dict[str, tuple[float, float]] = {}
    while events:
        now = events[0][0]
        while events and events[0][0] == now:
            _, kind, i, j = heapq.heappop(events)
            if kind == 0:
                state = state.without_job(j.name)
                ends.pop(j.name, None)
            else:
                request = JobRequest(j.name, j.workers, j.gpus, priority=j.priority, time_limit_s=j.time_limit_s)
                pending.append(QueuedJob(request, i, j.arrival_s))
        state, decisions = schedule_queue(state, pending, policy, now=now, expected_ends=ends, config=config)
        for d in decisions:
            if d.placement is not None:
                tj = by_name[d.job.name]
                step = one_second_steps(state.by_name, d.placement, tj).step_time_s
                out[tj.name] = (now, now + tj.iterations * step)
                if tj.time_limit_s is not None:
                    ends[tj.name] = now + tj.time_limit_s
                heapq.heappush(events, (now + tj.iterations * step, 0, len(out) + len(trace), tj))
        placed = {d.job.name for d in decisions if d.placement is not None}
        pending = [q for q in pending if q.job.name not in placed]
    return out


RESERVING = BackfillConfig(reservation_depth=2, age_weight=2.0, max_age_s=600.0)  # age acts within the trace


@pytest.mark.parametrize("config", [NO_RESERVATIONS, RESERVING], ids=["no-reservations", "reservations"])
@pytest.mark.parametrize("policy", ["topology", "default", "besteffort", "ack"])
def test_fast_pass_matches_schedule_queue_over_whole_queue(policy: str, config: BackfillConfig) -> None:
    # A loaded queue with three priority levels, so passes place, skip and backfill; two jobs in
    # three have a time limit (never exceeded: steps take at most 2 s), so some backfill onto
    # reserved GPUs and some may not.
    trace = []
    for i, j in enumerate(generate_trace(60, seed=3, arrival_rate_per_h=200.0, cluster_gpus=16)):
        iters = j.iterations // 50 + 1
        limit = None if i % 3 == 0 else 2.0 * iters + 5
        trace.append(TraceJob(j.name, j.arrival_s, j.workers, j.gpus, j.model, 10, iters, i % 3, limit))
    run = simulate(nodes(2), trace, policy, one_second_steps, max_failures=10**6, backfill=config)
    assert times(run) == naive(nodes(2), trace, policy, config)
    if config == NO_RESERVATIONS:
        assert run.stats.place_calls == len(trace)  # no hopeless place() calls
    assert times(run) != naive(nodes(2), trace, policy, NO_RESERVATIONS if config == RESERVING else RESERVING)


def test_binned_utilization_integrates_the_timeline() -> None:
    from ringleader.sim.plots import binned_utilization

    run = simulate(nodes(1), [job("a", 0, 1, 8, 100), job("b", 100, 1, 4, 100)], "topology", one_second_steps)
    xs, ys = binned_utilization(run, width_s=50)
    assert [round(x * 3600) for x in xs] == [0, 50, 100, 150]  # bin starts
    assert ys == pytest.approx([1.0, 1.0, 0.5, 0.5])
    xs, ys = binned_utilization(run, width_s=120)  # the last bin covers only 120..200 s
    assert ys == pytest.approx([(100 * 8 + 20 * 4) / (120 * 8), 0.5])


# -- start rules ----------------------------------------------------------------------------------


def blocked_vgg_trace(blocker_b_iters: int) -> list[TraceJob]:
    """node n0 busy for 600 s, n1 for ``blocker_b_iters`` s (6 GPUs each); then 4 one-GPU
    workers with 3,600 s of work: they fit now only spread, 2 + 2, at half speed."""
    return [job("blocker-a", 0, 6, 1, 600), job("blocker-b", 0, 6, 1, blocker_b_iters), job("vgg", 1, 4, 1, 3600)]


@pytest.mark.parametrize(("rule", "blocker_b", "vgg_jct"), [
    ("now", 36_000, 2 * 3600),  # spread at once: twice as slow
    ("finish", 36_000, 599 + 3600),  # waits for n0 (599 s), then its hour
    ("best", 36_000, 599 + 3600),
    ("finish", 300, 299 + 3600),  # n1 frees first: waits for n1
])  # fmt: skip
def test_start_rules_in_the_simulator(rule: str, blocker_b: int, vgg_jct: float) -> None:
    run = simulate(nodes(2), blocked_vgg_trace(blocker_b), "topology", one_second_steps, start_rule=rule)
    vgg = next(r for r in run.records if r.job.name == "vgg")
    assert vgg.jct_s == pytest.approx(vgg_jct)
    assert vgg.nodes_used == (2 if rule == "now" else 1)


def test_finish_starts_spread_when_waiting_is_longer_than_the_slowdown() -> None:
    # n0 frees after 2 h: spread (2 h of running) finishes first
    trace = [job("blocker-a", 0, 6, 1, 7300), job("blocker-b", 0, 6, 1, 36_000), job("vgg", 1, 4, 1, 3600)]
    run = simulate(nodes(2), trace, "topology", one_second_steps, start_rule="finish")
    vgg = next(r for r in run.records if r.job.name == "vgg")
    assert vgg.queue_s == 0 and vgg.nodes_used == 2
    # misjudging the work by up to 4x changes the queue's view, not the runs: the blockers' and
    # the gang's real run times are the same
    misjudged = simulate(nodes(2), trace, "topology", one_second_steps, start_rule="finish", work_error=3.0, seed=5)
    took = [(r.start_s, r.finish_s) for r in run.records]
    assert [(r.start_s, r.finish_s) for r in misjudged.records] == took


# -- preemption -----------------------------------------------------------------------------------


def test_a_priority_gang_preempts_one_whole_gang_which_resumes_from_its_checkpoint() -> None:
    from ringleader.sim import PreemptionCost

    trace = [job("low-a", 0, 8, 1, 1000), job("low-b", 0, 8, 1, 2000), job("urgent", 100, 8, 1, 200, priority=5)]
    rule = PreemptionCost(checkpoint_s=30.0, restart_s=10.0)
    run = simulate(nodes(2), trace, "topology", one_second_steps, backfill=BackfillConfig(), preemption=rule)
    by = {r.job.name: r for r in run.records}
    urgent, a, b = by["urgent"], by["low-a"], by["low-b"]
    assert urgent.queue_s == 0 and urgent.finish_s == 300  # low-a (first by name among equals) stops at 100
    assert (a.preempted, b.preempted) == (1, 0)
    # low-a trained 100 s, kept its 90 s checkpoint, lost 10 s; back at 300: 10 s restart + 910 s
    assert a.lost_s == pytest.approx(10.0)
    assert a.start_s == 0 and a.finish_s == pytest.approx(300 + 10 + 910)
    assert b.finish_s == 2000
    # without preemption the urgent gang waits for low-a's end
    plain = simulate(nodes(2), trace, "topology", one_second_steps, backfill=BackfillConfig())
    assert {r.job.name: r.finish_s for r in plain.records}["urgent"] == 1200
