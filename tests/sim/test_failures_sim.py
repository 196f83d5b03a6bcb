"""Node failures in the simulator: a node that fails stops every gang on it, which restarts from
its last checkpoint once placed again, and gives no GPU while it is repaired; the same seed
gives the same failures."""

from __future__ import annotations

from ringleader.sim import NodeFailures, PreemptionCost, TraceJob, simulate
from sim.test_teams_sim import dgx1v, one_second_steps


def test_a_gang_on_a_failed_node_restarts_from_its_checkpoint_after_the_repair() -> None:
    """One node, one 8-GPU job of 10,000 one-second steps: the node fails during the run, the job
    keeps its 1,000-second checkpoints, waits out the repair and pays its restart."""
    job = TraceJob("long", 0.0, 1, 8, "resnet50", 10, 10_000)
    failures = NodeFailures(mtbf_s=4_000.0, repair_s=1_800.0, cost=PreemptionCost(1_000.0, 60.0), seed=3)
    run = simulate(dgx1v(1), [job], "topology", one_second_steps, failures=failures)
    [record] = run.records
    assert record.failed >= 1 and run.node_failures == record.failed and record.finish_s is not None
    for (_, failed_at), (restart_at, _) in zip(record.runs, record.runs[1:], strict=False):
        assert restart_at >= failed_at + 1_800.0  # the node's GPUs came back only after the repair
    trained = sum(end - start for start, end in record.runs) - 60.0 * record.failed
    assert trained == 10_000 + record.lost_s  # what each failure lost since its checkpoint, run again
    assert record.lost_s < 1_000.0 * record.failed  # each failure loses less than a checkpoint interval


def test_failures_slow_a_busy_cluster_and_the_same_seed_gives_the_same_run() -> None:
    trace = [TraceJob(f"j{i:03d}", i * 30.0, 1, (1, 2, 4, 8)[i % 4], "resnet50", 10, 2_000) for i in range(200)]
    calm = simulate(dgx1v(4), trace, "topology", one_second_steps)
    failing = [simulate(dgx1v(4), trace, "topology", one_second_steps, failures=NodeFailures(20_000.0, 1_800.0,
                                                                                             seed=1))
               for _ in range(2)]  # fmt: skip
    assert all(r.finish_s is not None for r in failing[0].records)
    assert [r.runs for r in failing[0].records] == [r.runs for r in failing[1].records]
    restarted = sum(r.failed for r in failing[0].records)
    assert restarted > 0 and failing[0].node_failures and failing[0].node_failures > 0
    mean = [sum(r.jct_s or 0.0 for r in run.records) / len(trace) for run in (calm, failing[0])]
    assert mean[1] > mean[0]
    assert calm.node_failures is None
