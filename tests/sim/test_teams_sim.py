"""Team queues in the simulator: weighted fair share converges to the weights' shares over a
1,000-job trace, and a lender's jobs reclaim the quota a borrowing queue took while it was idle."""

from __future__ import annotations

import random
from collections.abc import Mapping

import pytest

from ringleader.scheduler import BackfillConfig, NodeState, Placement
from ringleader.scheduler.teams import ANY_TYPE, TeamQueue
from ringleader.sim import StepTime, TraceJob, simulate
from ringleader.topology import NodeSpec, preset


def one_second_steps(nodes: Mapping[str, NodeState], placement: Placement, job: TraceJob) -> StepTime:
    del nodes
    return StepTime(1.0, job.batch_size * sum(len(s.gpus) for s in placement.slots))


def dgx1v(n: int) -> list[NodeSpec]:
    return [NodeSpec(f"n{i}", preset("dgx1v")) for i in range(n)]


def gpu_seconds_until(run, end: float) -> dict[str, float]:  # type: ignore[no-untyped-def]
    """GPU-seconds each queue's jobs ran before ``end``."""
    out: dict[str, float] = {}
    for record in run.records:
        if record.start_s is None or record.start_s >= end:
            continue
        finish = record.finish_s if record.finish_s is not None else end
        queue = record.job.queue or "default"
        out[queue] = out.get(queue, 0.0) + record.job.total_gpus * (min(finish, end) - record.start_s)
    return out


def test_three_queues_weighted_1_2_1_get_their_shares_under_contention() -> None:
    rng = random.Random(7)
    names = ("a", "b", "c")
    trace = [TraceJob(f"j{i:04d}", 0.0, 1, rng.choice((1, 2, 4)), "resnet50", 10, rng.randint(50, 150),
                      queue=names[i % 3]) for i in range(1000)]  # fmt: skip
    queues = (TeamQueue("a", weight=1), TeamQueue("b", weight=2), TeamQueue("c", weight=1))
    run = simulate(dgx1v(4), trace, "topology", one_second_steps, backfill=BackfillConfig(), queues=queues)
    assert all(r.finish_s is not None for r in run.records)
    # contention lasts while every queue still has jobs waiting: until the first queue's last start
    last_start = {q: max(r.start_s or 0.0 for r in run.records if r.job.queue == q) for q in names}
    window = min(last_start.values())
    used = gpu_seconds_until(run, window)
    total = sum(used.values())
    for queue, want in (("a", 0.25), ("b", 0.5), ("c", 0.25)):
        assert used[queue] / total == pytest.approx(want, rel=0.10), (queue, used[queue] / total)
    # without weights the same trace shares alike
    plain = simulate(dgx1v(4), trace, "topology", one_second_steps, backfill=BackfillConfig(),
                     queues=tuple(TeamQueue(q) for q in names))  # fmt: skip
    used = gpu_seconds_until(plain, min(max(r.start_s or 0.0 for r in plain.records if r.job.queue == q)
                                        for q in names))  # fmt: skip
    assert used["b"] / sum(used.values()) == pytest.approx(1 / 3, rel=0.10)


def test_a_lender_reclaims_its_quota_from_a_borrowing_queue() -> None:
    lab = (TeamQueue("a", ((ANY_TYPE, 16),), cohort="lab"), TeamQueue("b", ((ANY_TYPE, 16),), cohort="lab"))
    # b fills all 32 GPUs while a is idle (half of it borrowed); a's four 4-GPU gangs come at 100
    trace = [TraceJob(f"b{i}", 0.0, 1, 8, "resnet50", 10, 1000, queue="b") for i in range(4)]
    trace += [TraceJob(f"a{i}", 100.0, 1, 4, "resnet50", 10, 200, queue="a") for i in range(4)]
    run = simulate(dgx1v(4), trace, "topology", one_second_steps, backfill=BackfillConfig(), queues=lab)
    by = {r.job.name: r for r in run.records}
    assert all(by[f"b{i}"].start_s == 0 for i in range(4))  # b borrowed a's idle quota
    assert all(by[f"a{i}"].start_s == 100 for i in range(4))  # taken back at once
    assert sum(by[f"b{i}"].preempted for i in range(4)) == 2  # two 8-GPU gangs: a's 16 GPUs
    # without a cohort b waits within its own quota, and a starts at once on the GPUs b left
    alone = tuple(TeamQueue(q.name, q.quota) for q in lab)
    run = simulate(dgx1v(4), trace, "topology", one_second_steps, backfill=BackfillConfig(), queues=alone)
    by = {r.job.name: r for r in run.records}
    assert sorted(by[f"b{i}"].start_s or 0 for i in range(4)) == [0, 0, 1000, 1000]
    assert all(by[f"a{i}"].start_s == 100 and by[f"a{i}"].preempted == 0 for i in range(4))
