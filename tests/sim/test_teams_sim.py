"""Team queues in the simulator: weighted fair share converges to the weights' shares over a
1,000-job trace, and a lender's jobs reclaim the quota a borrowing queue took while it was idle."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ringleader.scheduler import BackfillConfig, NodeState, Placement
from ringleader.scheduler.teams import ANY_TYPE, TeamQueue
from ringleader.sim import Memoised, StepTime, TraceJob, model_step_time, simulate
from ringleader.sim.families import best_step_fn, family_trace
from ringleader.sim.summary import contended_shares
from ringleader.topology import NodeSpec, preset

pytestmark = pytest.mark.slow  # simulations of 600-1,000 jobs, seconds each: run early (tests/conftest.py)

REPO = Path(__file__).resolve().parents[2]


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


@pytest.mark.parametrize("quotas", [(8, 16, 8), (32, 32, 32)], ids=["proportional", "equal-whole"])
def test_weights_deliver_shares_in_a_cohort_while_every_queue_has_work_waiting(quotas: tuple[int, ...]) -> None:
    """Philly-shaped jobs arriving over time at half again what 32 GPUs hold, a third to each of
    three queues weighted 1:2:1 in one cohort: while all three have a job waiting, each holds
    its weight's share of the GPU-time within 5 points, with quotas in proportion to the weights
    and with quotas that do not bind."""
    specs = [NodeSpec(f"n{i}", preset("dgx1v"), 25.0) for i in range(4)]
    memo = Memoised(model_step_time())
    jobs = family_trace("philly", 600, 1, 1.5, 32, best_step_fn(specs, memo))
    trace = [replace(j, queue="abc"[i % 3]) for i, j in enumerate(jobs)]
    queues = tuple(TeamQueue(n, ((ANY_TYPE, q),), w, "lab") for n, q, w in zip("abc", quotas, (1, 2, 1), strict=True))
    run = simulate(specs, trace, "topology", memo, backfill=BackfillConfig(), queues=queues)
    shares, contended = contended_shares(run, ("a", "b", "c"))
    assert contended > 24 * 3600  # a day and more of contention
    for name, want in (("a", 0.25), ("b", 0.5), ("c", 0.25)):
        assert shares[name] == pytest.approx(want, abs=0.05), shares


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


def ringleader(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ringleader.cli.main", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300)  # fmt: skip


def test_simulate_compares_queues_from_a_file_and_refuses_a_bad_one_in_one_line(tmp_path: Path) -> None:
    cluster = REPO / "examples" / "sim" / "cluster-2x8-v100.yaml"
    out = ringleader("simulate", "gen-trace", "--jobs", "60", "--seed", "1", "--arrival-rate", "60", "--cluster-gpus",
                     "8", "--queues", "vision,speech", "--out", "t.csv", cwd=tmp_path)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert {row.split(",")[-1] for row in (tmp_path / "t.csv").read_text().splitlines()[1:]} == {"vision", "speech"}
    (tmp_path / "q.yaml").write_text("queues:\n  - {name: vision, gpus: 8, cohort: lab}\n"
                                     "  - {name: speech, gpus: 8, weight: 2, cohort: lab}\n")  # fmt: skip
    out = ringleader("simulate", "--cluster", str(cluster), "--trace", "t.csv", "--policies", "topology", "--queues",
                     "q.yaml", "-o", "json", cwd=tmp_path)  # fmt: skip
    assert out.returncode == 0, out.stderr
    [summary] = json.loads(out.stdout)["policies"]
    rows = {q["queue"]: q for q in summary["queues"]}
    assert set(rows) == {"vision", "speech"} and rows["speech"]["weight_share"] == pytest.approx(2 / 3)
    assert sum(q["jobs"] for q in rows.values()) == 60
    bad = {
        "queues:\n  - {name: a, gpus: 8, colour: red}\n": "q.yaml line 2: unknown key 'colour'",
        "queues:\n  - {name: a, gpus: -1}\n": "q.yaml line 2: queues[0].gpus",
        "queues:\n  - {name: a, gpus: 8, cohort: lab}\n  - {name: b, gpus: {v100: 8}, cohort: lab}\n":
            "q.yaml line 3: queue a of cohort lab counts its quota for every GPU type at once",
        "queues:\n  - {name: a, gpus: 8}\n  - {name: a, gpus: 4}\n": "q.yaml: queue 'a' declared twice",
    }  # fmt: skip
    for text, said in bad.items():
        (tmp_path / "q.yaml").write_text(text)
        out = ringleader("simulate", "--cluster", str(cluster), "--trace", "t.csv", "--queues", "q.yaml", cwd=tmp_path)
        assert out.returncode == 2 and out.stderr.count("\n") == 1, (text, out.stderr)
        assert out.stderr.startswith(f"error: {said}"), (text, out.stderr)


@settings(max_examples=40, deadline=None)
@given(
    quotas=st.lists(st.tuples(st.integers(0, 16), st.sampled_from([0.5, 1.0, 2.0, 3.0])), min_size=2, max_size=3),
    jobs=st.lists(st.tuples(st.integers(0, 2), st.sampled_from([1, 2, 4, 8]), st.integers(0, 400),
                            st.integers(20, 300), st.integers(0, 2)), min_size=1, max_size=25),
)
def test_reclaims_never_go_back_and_forth_and_every_job_ends(quotas: list, jobs: list) -> None:  # type: ignore[type-arg]
    """Whatever the quotas, weights and arrivals in one cohort: no instant needs the simulator's
    bound on passes that preempt (a reclaim undone and redone would), and every job the
    cohort's quota can hold finishes."""
    queues = tuple(TeamQueue(f"q{i}", ((ANY_TYPE, n),), w, cohort="lab") for i, (n, w) in enumerate(quotas))
    trace = [TraceJob(f"j{i}", float(at), 1, gpus, "resnet50", 10, steps, priority, queue=f"q{q % len(queues)}")
             for i, (q, gpus, at, steps, priority) in enumerate(jobs)]  # fmt: skip
    run = simulate(dgx1v(2), trace, "topology", one_second_steps, backfill=BackfillConfig(), queues=queues)
    assert run.stats.capped_passes == 0
    cohort = sum(n for n, _ in quotas)  # a gang bigger than the cohort's quota never starts
    assert all(r.finish_s is not None for r in run.records if r.job.total_gpus <= cohort)
