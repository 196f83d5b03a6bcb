"""Team queues in the shared queue: a gang starts within its queue's quota and what its cohort
lends, pends with the queue's numbers when over it, a lender reclaims borrowed GPUs by stopping
whole borrowing gangs, quotas per GPU type steer a gang to the types it may use, and queues'
fair-share factors order the queue."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ringleader.model  # noqa: F401  (installs the throughput model's estimator)
from ringleader.scheduler import (
    ClusterState,
    Holding,
    JobRequest,
    Placement,
    QueuedJob,
    RunningGang,
    Snapshot,
    Waiting,
    WorkerSlot,
    run_cycle,
)
from ringleader.scheduler import schedule_queue as run_pass
from ringleader.scheduler.queue import BackfillConfig, queue_order
from ringleader.scheduler.teams import (
    ANY_TYPE,
    GpuSpan,
    KeptUsage,
    TeamQueue,
    Teams,
    decayed,
    fair_merge,
    fair_share,
    run_usage,
    usage_at,
)
from ringleader.topology import NodeSpec, preset

NOW = 1000.0
LAB = (TeamQueue("a", ((ANY_TYPE, 8),), cohort="lab"), TeamQueue("b", ((ANY_TYPE, 8),), cohort="lab"))


def nodes(*kinds: str) -> ClusterState:
    return ClusterState.empty([NodeSpec(f"n{i}", preset(kind)) for i, kind in enumerate(kinds)])


def holding(state: ClusterState, *gangs: tuple[str, str, tuple[int, ...]]) -> ClusterState:
    for gang, node, gpus in gangs:
        state = state.with_placement(Placement(gang, (WorkerSlot(0, node, gpus),)))
    return state


def gang(name: str, queue: str, gpus: int, **extra: object) -> JobRequest:
    return JobRequest(name, 1, gpus, topology_aware=True, model="vgg16", queue=queue, **extra)  # type: ignore[arg-type]


def decide(state: ClusterState, queues: tuple[TeamQueue, ...], owners: dict[str, str], *jobs: JobRequest):  # type: ignore[no-untyped-def]
    teams = Teams.of(queues, state, owners)
    running = {g: RunningGang(g, 0) for g in owners}
    _, decisions = run_pass(state, [QueuedJob(j, i, NOW) for i, j in enumerate(jobs)], now=NOW, teams=teams,
                            running=running)  # fmt: skip
    return decisions


def test_a_queue_borrows_its_cohorts_idle_quota_and_says_so() -> None:
    first, second = decide(nodes("dgx1v", "dgx1v"), LAB, {}, gang("b1", "b", 8), gang("b2", "b", 8))
    assert first.ok and second.ok
    assert first.borrows is None
    assert second.borrows == ("queue b borrows 8 GPU(s) of cohort lab's idle quota (reclaimed when their queues "
                              "need them)")  # fmt: skip
    assert second.summary().endswith(second.borrows)


def test_over_quota_it_pends_with_the_queues_numbers_and_holds_nothing() -> None:
    alone = (TeamQueue("c", ((ANY_TYPE, 4),)),)
    state = holding(nodes("dgx1v", "dgx1v"), ("c1", "n0", (0, 1, 2, 3)))
    (decision,) = decide(state, alone, {"c1": "c"}, gang("c2", "c", 4))
    assert not decision.ok and decision.reservation is None and decision.preemption is None
    assert decision.reasons == ("queue c holds 4 of its quota of 4 GPUs; it needs 4 more and the queue is in no "
                                "cohort to borrow from",)  # fmt: skip
    # in a cohort whose other queue uses its own quota, there is nothing to lend either
    state = holding(nodes("dgx1v", "dgx1v", "dgx1v"), ("a1", "n0", tuple(range(8))), ("b1", "n1", tuple(range(8))))
    (decision,) = decide(state, LAB, {"a1": "a", "b1": "b"}, gang("a2", "a", 2))
    assert decision.reasons == ("queue a holds 8 of its quota of 8 GPUs; it needs 2 more, and cohort lab has 0 "
                                "idle to lend",)  # fmt: skip


def test_what_the_cohort_lends_is_counted_once() -> None:
    queues = (*LAB, TeamQueue("c", ((ANY_TYPE, 0),), cohort="lab"))
    # a lends its 8 idle GPUs; b borrowed 6 of them already: c may borrow 2, not 8
    state = holding(nodes("dgx1v", "dgx1v", "dgx1v"), ("b1", "n0", tuple(range(8))), ("b2", "n1", tuple(range(6))))
    owners = {"b1": "b", "b2": "b"}
    two, four = decide(state, queues, owners, gang("c1", "c", 2)), decide(state, queues, owners, gang("c2", "c", 4))
    assert two[0].ok and not four[0].ok
    assert "cohort lab has 2 idle to lend" in four[0].reasons[0]


def test_a_non_preemptible_gang_never_borrows() -> None:
    state = holding(nodes("dgx1v", "dgx1v"), ("b1", "n0", tuple(range(8))))
    (decision,) = decide(state, LAB, {"b1": "b"}, gang("b2", "b", 4, preemptible=False))
    assert not decision.ok
    assert decision.reasons[0].endswith("it needs 4 more, and a --non-preemptible job does not borrow")


def test_a_lender_reclaims_by_stopping_a_whole_borrowing_gang_whatever_its_priority() -> None:
    state = holding(nodes("dgx1v", "dgx1v"), ("b1", "n0", tuple(range(8))), ("b2", "n1", tuple(range(8))))
    owners = {"b1": "b", "b2": "b"}
    teams = Teams.of(LAB, state, owners)
    running = {"b1": RunningGang("b1", 50), "b2": RunningGang("b2", 50)}
    job = gang("a1", "a", 4)  # priority 0, no --preempt: within its quota, it reclaims
    _, (decision,) = run_pass(state, [QueuedJob(job, 0, NOW)], now=NOW, teams=teams, running=running)
    assert not decision.ok and decision.preemption is not None
    assert len(decision.preemption.names) == 1 and decision.preemption.names[0] in owners
    assert decision.reservation is not None and decision.reservation.start_s == NOW
    # b within its own quota lends nothing, so nothing of it is reclaimed
    state = holding(nodes("dgx1v", "dgx1v"), ("b1", "n0", tuple(range(8))), ("x", "n1", tuple(range(8))))
    teams = Teams.of(LAB, state, {"b1": "b"})
    _, (decision,) = run_pass(state, [QueuedJob(job, 0, NOW)], now=NOW, teams=teams,
                              running={"b1": RunningGang("b1", 0), "x": RunningGang("x", 0)})  # fmt: skip
    assert decision.preemption is None
    assert "queue a holds 0 of its quota of 8 GPUs" in decision.reasons


def test_a_gang_over_its_own_quota_reclaims_nothing() -> None:
    state = holding(nodes("dgx1v", "dgx1v"), ("a1", "n0", tuple(range(6))), ("b1", "n1", tuple(range(8))),
                    ("b2", "n0", (6, 7)))  # fmt: skip
    owners = {"a1": "a", "b1": "b", "b2": "b"}
    (decision,) = decide(state, LAB, owners, gang("a2", "a", 4))  # 6 + 4 > 8: it would have to borrow
    assert decision.preemption is None


def test_a_quota_per_gpu_type_steers_the_gang_to_the_types_it_may_use() -> None:
    state = nodes("dgx-a100", "dgx1v")
    queues = (TeamQueue("v", (("v100", 8),)),)
    (decision,) = decide(state, queues, {}, gang("v1", "v", 4))
    assert decision.ok and decision.placement is not None and decision.placement.nodes == ("n1",)
    # with the V100s held, the A100s (no quota of its own, no cohort) are not taken
    state = holding(state, ("v0", "n1", tuple(range(8))))
    (decision,) = decide(state, queues, {"v0": "v"}, gang("v1", "v", 4))
    assert not decision.ok and decision.reasons[0].startswith("queue v holds 8 of its quota of 8 v100 GPUs")


def test_teams_fair_share_follows_slurms_factor() -> None:
    queues = [TeamQueue("a", weight=1), TeamQueue("b", weight=2), TeamQueue("c", weight=1)]
    assert fair_share(queues, {}) == {"a": 1.0, "b": 1.0, "c": 1.0}
    shares = fair_share(queues, {"a": 25.0, "b": 50.0, "c": 25.0})  # each used exactly its share
    assert shares == pytest.approx({"a": 0.5, "b": 0.5, "c": 0.5})
    shares = fair_share(queues, {"a": 50.0, "b": 50.0})
    assert shares["c"] == 1.0 and shares["b"] > shares["a"]
    # between queues, the factor goes first, before priority and age: every job of c (it used
    # nothing), then b's (it used less than its weight entitles it to), then a's
    jobs = [QueuedJob(gang(f"{q}{i}", q, 1, priority=10 * (q == "a")), i * 3 + k, NOW - 3600 * (q == "a"))
            for i in range(3) for k, q in enumerate("abc")]  # fmt: skip
    teams = Teams({q.name: q for q in queues}, shares=shares)
    order = [q.job.queue for q in queue_order(jobs, NOW, BackfillConfig(), teams)]
    assert order == ["c", "c", "c", "b", "b", "b", "a", "a", "a"]
    # while no queue has used anything, the one holding the fewest GPUs per weight, counting the
    # jobs ordered before: b, weighted 2, gets two for a's one; c, which holds 4, waits its turn
    jobs = [QueuedJob(gang(f"{q}{i}", q, 1), i * 3 + k, NOW) for i in range(3) for k, q in enumerate("abc")]
    busy = Teams({q.name: q for q in queues}, {"c0": ("c", {ANY_TYPE: 4})})
    order = [q.job.queue for q in queue_order(jobs, NOW, BackfillConfig(), busy)]
    assert order == ["a", "b", "b", "a", "b", "a", "c", "c", "c"]


@settings(max_examples=80, deadline=None)
@given(
    weights=st.lists(st.sampled_from([0.5, 1.0, 2.0, 3.0]), min_size=2, max_size=4),
    held=st.lists(st.integers(0, 16), min_size=4, max_size=4),
    sizes=st.lists(st.lists(st.sampled_from([1, 2, 4, 8]), max_size=10), min_size=4, max_size=4),
)
def test_fair_merge_serves_the_queue_holding_least_per_weight_first(
    weights: list[float], held: list[int], sizes: list[list[int]]
) -> None:
    """Each queue's jobs keep their order, and every next job is of a queue that holds (with the
    jobs ordered before it) no more GPUs per weight than any other queue with jobs left."""
    names = [f"q{i}" for i in range(len(weights))]
    teams = Teams({n: TeamQueue(n, weight=w) for n, w in zip(names, weights, strict=False)},
                  {f"{n}-run": (n, {ANY_TYPE: h}) for n, h in zip(names, held, strict=False) if h})  # fmt: skip
    queued = {n: [(n, i, gpus) for i, gpus in enumerate(sizes[k])] for k, n in enumerate(names)}
    merged = fair_merge(queued, teams, lambda j: j[2], lambda j: 0.0, lambda j: (j[1],))
    assert sorted(merged) == sorted(j for jobs in queued.values() for j in jobs)
    for name in names:
        assert [j for j in merged if j[0] == name] == queued[name]
    holds = {n: float(h) for n, h in zip(names, held, strict=False)}
    left = {n: len(queued[n]) for n in names}
    for name, _, gpus in merged:
        per_weight = {n: holds[n] / teams.queues[n].weight for n in names if left[n]}
        assert per_weight[name] <= min(per_weight.values())
        holds[name] += gpus
        left[name] -= 1


def test_usage_decays_with_its_half_life() -> None:
    assert decayed(100.0, 0.0, 7 * 24 * 3600.0) == pytest.approx(50.0)
    assert run_usage(2, 0.0, 10.0, 10.0, half_life_s=1e12) == pytest.approx(20.0)
    steps = 100_000  # the closed form against a sum over the run, a half-life long
    h = 3600.0
    numeric = sum(2 * 2 ** (-(h - (i + 0.5) * h / steps) / h) * h / steps for i in range(steps))
    assert run_usage(2, 0.0, h, h, half_life_s=h) == pytest.approx(numeric, rel=1e-6)
    assert run_usage(2, 5.0, 100.0, 50.0, half_life_s=h) == pytest.approx(run_usage(2, 5.0, 50.0, 50.0, half_life_s=h))
    assert math.isclose(run_usage(3, 10.0, 5.0, 20.0), 0.0)



@settings(max_examples=80, deadline=None)
@given(
    runs=st.lists(st.tuples(st.integers(1, 8), st.floats(0, 5e5), st.floats(0, 5e5)), min_size=1, max_size=6),
    kept_at=st.lists(st.floats(0, 1e6), max_size=4),
)
def test_usage_kept_again_and_again_counts_every_gpu_second_once(
        runs: list[tuple[int, float, float]], kept_at: list[float]) -> None:  # fmt: skip
    """Usage kept at any moments, each time from the last kept and the runs as seen then (running
    ones to that moment), ends where counting every run once at the end does: a run seen at
    every keep, ended or not, adds only what followed the last one."""
    half_life = 3600.0 * 24
    spans = [GpuSpan("a", gpus, min(s, e), max(s, e)) for gpus, s, e in runs]
    end = 1e6
    kept: dict[str, KeptUsage] = {}
    for at in sorted(kept_at):
        seen = [GpuSpan(sp.queue, sp.gpus, sp.start_s, min(sp.end_s, at)) for sp in spans if sp.start_s <= at]
        kept = usage_at(kept, seen, at, half_life)
    once = sum(run_usage(sp.gpus, sp.start_s, sp.end_s, end, half_life) for sp in spans)
    total = usage_at(kept, spans, end, half_life).get("a", KeptUsage(0.0, end)).gpu_s
    assert total == pytest.approx(once, rel=1e-9, abs=1e-6)


def test_kept_usage_covers_a_run_it_counted_and_never_moves_back() -> None:
    """A run that ended before its queue's usage was kept adds nothing again; a queue kept
    nowhere counts its runs whole; a clock behind the last writer's keeps its ``as_of``."""
    kept = {"a": KeptUsage(1000.0, 500.0)}
    later = usage_at(kept, [GpuSpan("a", 4, 0.0, 400.0), GpuSpan("b", 2, 0.0, 100.0)], 600.0, half_life_s=1e12)
    assert later["a"].gpu_s == pytest.approx(1000.0) and later["a"].as_of == 600.0
    assert later["b"].gpu_s == pytest.approx(200.0) and later["b"].as_of == 600.0
    assert usage_at(kept, [GpuSpan("a", 4, 0.0, 550.0)], 550.0, half_life_s=1e12)["a"].gpu_s == pytest.approx(1200.0)
    assert usage_at(kept, [], 100.0)["a"] == KeptUsage(1000.0, 500.0)

@settings(max_examples=60, deadline=None)
@given(
    quotas=st.lists(st.integers(0, 16), min_size=2, max_size=3),
    jobs=st.lists(st.tuples(st.integers(0, 2), st.sampled_from([1, 2, 4, 8]), st.booleans()), min_size=1, max_size=10),
)
def test_no_pass_takes_more_than_quota_plus_what_the_cohort_lends(quotas: list[int], jobs: list) -> None:  # type: ignore[type-arg]
    """Whatever arrives, after one pass every queue holds at most its quota plus GPUs borrowed
    from queues of its cohort that had them idle, and a non-preemptible gang never borrows."""
    queues = tuple(TeamQueue(f"q{i}", ((ANY_TYPE, n),), cohort="lab") for i, n in enumerate(quotas))
    state = nodes("dgx1v", "dgx1v", "dgx1v")
    requests = [gang(f"j{i}", f"q{q % len(queues)}", g, preemptible=p) for i, (q, g, p) in enumerate(jobs)]
    teams = Teams.of(queues, state, {})
    after, decisions = run_pass(state, [QueuedJob(j, i, NOW) for i, j in enumerate(requests)], now=NOW, teams=teams)
    held = {q.name: 0 for q in queues}
    for decision in decisions:
        if decision.ok:
            held[decision.job.queue or ""] += decision.job.total_gpus
            if not decision.job.preemptible:
                assert decision.borrows is None
    over = sum(max(held[q.name] - q.quota[0][1], 0) for q in queues)
    idle = sum(max(q.quota[0][1] - held[q.name], 0) for q in queues)
    assert over <= idle  # what is borrowed came from quota left idle
    assert sum(held.values()) == 24 - after.free_gpus


def test_quota_kept_for_a_gang_too_big_for_it_is_lent_by_a_queue_above_its_share() -> None:
    """a holds 2 of its 4 GPUs, above its weight's share (1 of 4) of the 7 the cohort holds, and
    waits with a 4-GPU gang: bigger than a's idle 2, it could only start by borrowing, so those 2
    are not kept from b, whose 8-GPU gang needs 3 GPUs beyond b's own quota. Keeping them left
    every queue's big gang waiting for the others' quota while 9 GPUs stood idle."""
    queues = (TeamQueue("a", ((ANY_TYPE, 4),), 1.0, "lab"), TeamQueue("b", ((ANY_TYPE, 8),), 2.0, "lab"),
              TeamQueue("c", ((ANY_TYPE, 4),), 1.0, "lab"))  # fmt: skip
    state = holding(nodes("dgx1v", "dgx1v"), ("a0", "n1", (0, 1)), ("b0", "n1", (2, 3, 4)), ("c0", "n1", (5, 6)))
    running = [Holding(name, 0, name[0], started_s=NOW) for name in ("a0", "b0", "c0")]
    waiting = [Waiting(gang(name, name[0], gpus, preemptible=True), i, NOW)
               for i, (name, gpus) in enumerate((("b1", 8), ("a1", 4)))]  # fmt: skip
    decisions = {d.job.name: d for d in run_cycle(Snapshot(state, waiting, NOW, running, queues)).decisions}
    assert decisions["b1"].ok and decisions["b1"].borrows is not None and "borrows 3 GPU(s)" in decisions["b1"].borrows
    assert not decisions["a1"].ok  # the one GPU left cannot hold it


def test_with_fair_share_preemption_a_queue_above_its_held_share_waits_for_those_below() -> None:
    """b (weight 2) holds 80 of the cohort's 128 GPUs, above its half, but used least over the
    days (the highest factor). Where gangs are stopped for fair share by the GPUs held now, the
    GPUs that free go to a and c first: b taking them by its usage undid the stops made for a
    and c, and the queues stopped each other's gangs in turn. Without that preemption the factor
    still goes first."""
    from ringleader.scheduler.reorder import NO_REORDER

    queues = {q.name: q for q in (TeamQueue("a", ((ANY_TYPE, 128),), 1.0, "lab"),
                                  TeamQueue("b", ((ANY_TYPE, 128),), 2.0, "lab"),
                                  TeamQueue("c", ((ANY_TYPE, 128),), 1.0, "lab"))}  # fmt: skip
    held = {"a0": ("a", {ANY_TYPE: 24}), "b0": ("b", {ANY_TYPE: 80}), "c0": ("c", {ANY_TYPE: 24})}
    teams = Teams(queues, held, shares={"a": 0.3, "b": 0.6, "c": 0.3})
    jobs = [QueuedJob(gang(f"{q}1", q, 8), i, NOW) for i, q in enumerate("bac")]
    order = [q.job.queue for q in queue_order(jobs, NOW, BackfillConfig(), teams)]
    assert order == ["a", "c", "b"]  # a and c alike: in submit order
    plain = queue_order(jobs, NOW, BackfillConfig(reorder=NO_REORDER), teams)
    assert [q.job.queue for q in plain] == ["b", "a", "c"]
