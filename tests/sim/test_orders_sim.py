"""Queue orders, published-trace families and estimate errors in the simulator."""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Mapping

import pytest

from ringleader.errors import UsageError
from ringleader.scheduler import BackfillConfig, NodeState, Placement
from ringleader.scheduler.order import QueueOrder
from ringleader.sim import PreemptionCost, StepTime, TraceJob, simulate
from ringleader.sim.families import EstimateError, draw_gpus, draw_runtime_s, family_trace, window_load
from ringleader.topology import NodeSpec, preset


def one_second_steps(nodes: Mapping[str, NodeState], placement: Placement, job: TraceJob) -> StepTime:
    del nodes
    return StepTime(1.0, job.batch_size * sum(len(s.gpus) for s in placement.slots))


def job(name: str, at: float, gpus: int, iters: int, priority: int = 0) -> TraceJob:
    return TraceJob(name, at, 1, gpus, "resnet50", 10, iters, priority)


def one_node() -> list[NodeSpec]:
    return [NodeSpec("n0", preset("dgx1v"))]


def finishes(order: QueueOrder, trace: list[TraceJob], **kw: object) -> dict[str, float | None]:
    run = simulate(one_node(), trace, "topology", one_second_steps, backfill=BackfillConfig(order=order), **kw)  # type: ignore[arg-type]
    return {r.job.name: r.finish_s for r in run.records}


def test_srtf_runs_the_short_job_first_and_fifo_does_not() -> None:
    trace = [job("blocker", 0, 8, 100), job("long", 1, 8, 1000), job("short", 2, 8, 10)]
    assert finishes(QueueOrder.FIFO, trace) == {"blocker": 100, "long": 1100, "short": 1110}
    assert finishes(QueueOrder.SRTF, trace) == {"blocker": 100, "short": 110, "long": 1110}


def test_las_ranks_a_preempted_job_by_the_gpu_seconds_it_ran_before() -> None:
    # "served" ran 100 s on 8 GPUs (800 GPU-s) before an urgent job stopped it; with a threshold
    # under that it waits behind "fresh", which never ran, though it came first
    from ringleader.scheduler.order import OrderConfig

    trace = [job("served", 0, 8, 1000), job("urgent", 100, 8, 50, priority=5), job("fresh", 120, 8, 50)]
    config = BackfillConfig(order=QueueOrder.LAS, orders=OrderConfig(las_thresholds_gpu_s=(500.0,)))
    cost = PreemptionCost(checkpoint_s=50.0, restart_s=0.0)
    run = simulate(one_node(), trace, "topology", one_second_steps, backfill=config, preemption=cost)
    by = {r.job.name: r for r in run.records}
    assert by["served"].preempted == 1
    assert by["fresh"].finish_s == 200  # right after the urgent job
    assert by["served"].finish_s == 200 + 900  # then the rest of served (kept its 100 s checkpoint)
    fifo = simulate(one_node(), trace, "topology", one_second_steps, backfill=BackfillConfig(), preemption=cost)
    assert {r.job.name: r.finish_s for r in fifo.records}["fresh"] == 1100


@pytest.mark.parametrize("family", ["philly", "helios", "pai"])
def test_a_family_trace_offers_the_load_it_was_asked_for_over_its_arrival_window(family: str) -> None:
    jobs = family_trace(family, 400, 3, 0.8, 128, lambda j: 0.5)
    runs = [(j.total_gpus, j.iterations * 0.5) for j in jobs]
    assert window_load(runs, [j.arrival_s for j in jobs], 128) == pytest.approx(0.8, rel=0.01)
    heavier = family_trace(family, 400, 3, 1.2, 128, lambda j: 0.5)
    assert heavier[-1].arrival_s < jobs[-1].arrival_s  # the same jobs, arriving faster
    assert [j.iterations for j in heavier] == [j.iterations for j in jobs]
    assert all(j.gpus <= 8 and j.total_gpus <= 128 for j in jobs)
    assert family_trace(family, 60, 3, 0.1, 16, lambda j: 0.5) == family_trace(family, 60, 3, 0.1, 16, lambda j: 0.5)
    with pytest.raises(UsageError, match="cannot offer load 50"):
        family_trace(family, 20, 3, 50.0, 128, lambda j: 0.5)


def test_a_family_trace_with_a_process_per_gpu_has_gangs_that_may_spread() -> None:
    """One worker per GPU, as torchrun and mpirun start them: the same jobs, GPUs and arrivals,
    and a gang of up to a node is its GPUs' count of one-GPU workers (so it fits on several
    nodes); a bigger one stays whole nodes."""
    whole = family_trace("helios", 300, 2, 0.9, 128, lambda j: 0.5)
    split = family_trace("helios", 300, 2, 0.9, 128, lambda j: 0.5, process_per_gpu=True)
    assert [(j.name, j.arrival_s, j.total_gpus) for j in split] == [(j.name, j.arrival_s, j.total_gpus) for j in whole]
    assert all(j.gpus == 1 for j in split if j.total_gpus <= 8)
    assert all(j.gpus == 8 and j.workers == j.total_gpus // 8 for j in split if j.total_gpus > 8)
    assert any(j.workers == 1 and j.gpus > 1 for j in whole)


def test_family_draws_match_the_published_statistics() -> None:
    import random

    rng = random.Random(1)
    philly = sorted(draw_runtime_s("philly", rng) for _ in range(4000))
    assert statistics.median(philly) == pytest.approx(1186.0, rel=0.15)  # the trace's median
    helios = [draw_runtime_s("helios", rng) for _ in range(4000)]
    assert statistics.median(helios) == pytest.approx(204.0, rel=0.15)
    pai = [draw_runtime_s("pai", rng) for _ in range(4000)]
    assert statistics.median(pai) == pytest.approx(655.0, rel=0.15)
    assert sum(draw_gpus("pai", rng, 128) == 1 for _ in range(2000)) / 2000 > 0.95
    gpus = [draw_gpus("helios", rng, 1024) for _ in range(8000)]
    assert statistics.median(gpus) == 1 and statistics.fmean(gpus) == pytest.approx(6.736, rel=0.1)


def test_an_unknown_family_is_refused_with_the_known_ones() -> None:
    with pytest.raises(UsageError, match="unknown trace family 'alibaba'"):
        family_trace("alibaba", 10, 0, 0.5, 16, lambda j: 1.0)


def test_biased_estimates_mostly_over_estimate_within_half_to_three_times() -> None:
    factors = [EstimateError("biased").factor(7, f"job-{i}") for i in range(2000)]
    assert min(factors) >= 0.5 and max(factors) <= 3.0
    assert sum(f > 1 for f in factors) / len(factors) > 0.6
    spread = [math.log(EstimateError("lognormal", 0.5).factor(7, f"job-{i}")) for i in range(2000)]
    assert statistics.pstdev(spread) == pytest.approx(0.5, rel=0.1)
    assert EstimateError("uniform", 0.0).factor(7, "x") == 1.0


def test_srtf_orders_by_the_estimate_so_a_bad_estimate_changes_the_order() -> None:
    trace = [job("blocker", 0, 8, 100), job("a", 1, 8, 300), job("b", 2, 8, 200)]
    exact = finishes(QueueOrder.SRTF, trace)
    assert exact["b"] == 300 and exact["a"] == 600
    # a factor that makes "b" look longer than "a" for some seed flips them; find one
    flipped = [
        s
        for s in range(40)
        if EstimateError("biased").factor(s, "b") * 200 > EstimateError("biased").factor(s, "a") * 300
    ]
    assert flipped
    wrong = simulate(one_node(), trace, "topology", one_second_steps, backfill=BackfillConfig(order=QueueOrder.SRTF),
                     seed=flipped[0], estimate_error=EstimateError("biased"))  # fmt: skip
    assert {r.job.name: r.finish_s for r in wrong.records} == {"blocker": 100, "a": 400, "b": 600}


def test_risk_gives_the_queue_the_models_ranges_and_the_jobs_their_risk() -> None:
    from ringleader.sim.engine import Simulation

    trace = [job("a", 0, 8, 10)]
    ranged = Simulation(one_node(), trace, "topology", one_second_steps, risk="neutral")
    assert hasattr(ranged._estimator, "likely") and ranged._request(trace[0]).risk == "neutral"
    plain = Simulation(one_node(), trace, "topology", one_second_steps)
    assert not hasattr(plain._estimator, "likely")
    with pytest.raises(ValueError, match="risk 'bold'"):
        Simulation(one_node(), trace, "topology", one_second_steps, risk="bold")


def test_prediction_error_spreads_true_run_times_as_the_models_held_out_errors() -> None:
    from ringleader.reference import reference

    trace = [job(f"j{i}", 0, 1, 1000) for i in range(400)]
    specs = [NodeSpec(f"n{i}", preset("dgx1v")) for i in range(50)]  # every job starts at once, alone on a GPU
    run = simulate(specs, trace, "topology", one_second_steps, prediction_error=True, seed=4)
    off = sorted((r.finish_s or 0) / 1000 - 1 for r in run.records)  # (1 + e) - 1 = e
    low, high = reference()["intervals"]["one_node"]
    assert off[len(off) // 10] == pytest.approx(low, abs=0.03)
    assert off[9 * len(off) // 10] == pytest.approx(high, abs=0.06)
    exact = simulate(specs, trace, "topology", one_second_steps)
    assert {r.finish_s for r in exact.records} == {1000}


def test_a_queues_file_names_each_queues_order(tmp_path: object) -> None:
    from pathlib import Path

    from ringleader.sim.queues_file import load_queues

    path = Path(str(tmp_path)) / "q.yaml"
    path.write_text("queues:\n  - {name: a, gpus: 8, order: las}\n  - {name: b, gpus: 8}\n")
    assert [(q.name, q.order) for q in load_queues(str(path))] == [("a", QueueOrder.LAS), ("b", None)]
    path.write_text("queues:\n  - {name: a, gpus: 8, order: sjf}\n")
    with pytest.raises(UsageError, match="line 2"):
        load_queues(str(path))


def test_las_with_preemption_stops_a_long_job_for_a_short_one_and_resumes_it() -> None:
    # "long" has run 2 h (past the 30 min minimum run, level 3 of LAS) when "short" arrives: with
    # preemption short starts at once; long keeps its work up to its last checkpoint and ends later
    trace = [job("long", 0, 8, 20_000), job("short", 7200, 8, 600)]
    cost = PreemptionCost(checkpoint_s=600.0, restart_s=60.0)
    config = BackfillConfig(order=QueueOrder.LAS)
    run = simulate(one_node(), trace, "topology", one_second_steps, backfill=config, preemption=cost)
    by = {r.job.name: r for r in run.records}
    assert by["long"].preempted == 1 and by["short"].finish_s == 7200 + 600
    assert by["long"].finish_s == 7800 + 60 + (20_000 - 7200)  # its restart, then the rest: no work lost
    plain = simulate(one_node(), trace, "topology", one_second_steps, backfill=config)  # nobody may be stopped
    assert {r.job.name: r.finish_s for r in plain.records}["short"] == 20_000 + 600


@pytest.mark.parametrize("order", [QueueOrder.LAS, QueueOrder.SRTF])
def test_no_run_is_stopped_for_order_before_the_minimum_run_time(order: QueueOrder) -> None:
    draw = random.Random(f"thrash:{order}")
    jobs = [job(f"j{i}", draw.uniform(0, 40_000), draw.choice([1, 2, 4, 8]), int(draw.expovariate(1 / 5000)) + 1)
            for i in range(120)]  # fmt: skip
    trace = sorted(jobs, key=lambda j: j.arrival_s)
    config = BackfillConfig(order=order)
    run = simulate(one_node(), trace, "topology", one_second_steps, backfill=config, preemption=PreemptionCost())
    stopped = [end - start for r in run.records for start, end in r.runs[:-1]]  # every run but the last was stopped
    assert stopped, "the trace should make the order preempt"
    assert min(stopped) >= config.reorder.min_run_s
    assert all(r.finish_s is not None for r in run.records)  # nobody is passed over for good
