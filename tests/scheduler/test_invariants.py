"""Placement invariants over random clusters and jobs (hypothesis), checked against brute force."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from builders import job, node
from ringleader.scheduler import BackfillConfig, ClusterState, Code, JobRequest, QueuedJob, place, schedule_queue
from ringleader.scheduler.cycle import Holding, Snapshot, Waiting, run_cycle
from ringleader.scheduler.types import NodeState

PRESETS = ["dgx1v", "pcie-8gpu-2socket", "pcie-4gpu-workstation", "dgx-a100"]


@st.composite
def clusters(draw: st.DrawFn) -> ClusterState:
    count = draw(st.integers(1, 4))
    nodes = []
    for i in range(count):
        kind = draw(st.sampled_from(PRESETS))
        n = {"pcie-4gpu-workstation": 4}.get(kind, 8)
        busy = draw(st.sets(st.integers(0, n - 1), max_size=n))
        nodes.append(node(f"n{i}", kind, busy=tuple(sorted(busy))))
    return ClusterState(tuple(nodes))


jobs = st.builds(
    lambda w, g, topo: job(w, g, topo=topo), st.integers(1, 10), st.integers(0, 4), st.booleans()
)


def worker_slots_free(state: ClusterState, request: JobRequest) -> int:
    return sum(ns.n_free // request.gpus_per_worker for ns in state.nodes) if request.gpus_per_worker else 10**9


def min_nodes(state: ClusterState, request: JobRequest) -> int:
    caps = sorted((ns.n_free // request.gpus_per_worker for ns in state.nodes), reverse=True)
    total = 0
    for used, cap in enumerate(caps, start=1):
        total += cap
        if total >= request.workers:
            return used
    raise AssertionError("infeasible")


@settings(max_examples=300, deadline=None)
@given(clusters(), jobs)
def test_a_placement_is_a_whole_gang_on_free_gpus(state: ClusterState, request: JobRequest) -> None:
    decision = place(state, request)
    if not decision.ok:
        assert decision.placement is None and decision.reasons
        return
    placement = decision.placement
    assert placement is not None
    assert len(placement.slots) == request.workers
    seen = set()
    for slot in placement.slots:
        assert len(slot.gpus) == request.gpus_per_worker
        ns = state.node(slot.node)
        for gpu in slot.gpus:
            assert ns.free_mask >> gpu & 1, "placed on a busy GPU"
            assert (slot.node, gpu) not in seen, "GPU handed out twice"
            seen.add((slot.node, gpu))
    state.with_placement(placement)  # commits without a clash


@settings(max_examples=300, deadline=None)
@given(clusters(), jobs)
def test_gang_fails_only_when_no_placement_exists(state: ClusterState, request: JobRequest) -> None:
    decision = place(state, request)
    fits = worker_slots_free(state, request) >= request.workers
    assert decision.ok == fits
    if not fits:
        assert decision.code in (Code.UNSCHEDULABLE, Code.UNRESOLVABLE)


@settings(max_examples=300, deadline=None)
@given(clusters(), st.integers(1, 10), st.integers(1, 4))
def test_topology_policy_uses_the_fewest_nodes(state: ClusterState, workers: int, gpus: int) -> None:
    request = job(workers, gpus)
    decision = place(state, request)
    if decision.placement is not None:
        assert len(decision.placement.nodes) == min_nodes(state, request)


def brute_force_best(state: ClusterState, k: int) -> tuple[float, float]:
    """Max bottleneck, then max summed bandwidth, over every k-subset of every node's free GPUs."""
    best = (-1.0, -1.0)
    for ns in state.nodes:
        bw = ns.spec.topology.bandwidth_gbs
        for subset in itertools.combinations(ns.free_gpus, k):
            pairs = [bw[a][b] for a, b in itertools.combinations(subset, 2)]
            best = max(best, (min(pairs), sum(pairs)))
    return best


@settings(max_examples=300, deadline=None)
@given(clusters(), st.integers(2, 8))
def test_single_node_choice_equals_the_exhaustive_optimum(state: ClusterState, k: int) -> None:
    decision = place(state, job(k))
    if decision.placement is None or len(decision.placement.nodes) != 1:
        return
    assert decision.chosen is not None
    metrics = decision.chosen.metrics
    assert (metrics.bottleneck.gbs, metrics.sum_pair_gbs) == brute_force_best(state, k)


@settings(max_examples=150, deadline=None)
@given(clusters(), st.lists(jobs, min_size=1, max_size=8))
def test_a_queue_pass_never_double_allocates(state: ClusterState, requests: list[JobRequest]) -> None:
    pending = [
        QueuedJob(JobRequest(f"j{i}", r.workers, r.gpus_per_worker, r.topology_aware), i)
        for i, r in enumerate(requests)
    ]
    after, decisions = schedule_queue(state, pending)
    placed = [d for d in decisions if d.ok]
    used_before = sum(ns.used_mask.bit_count() for ns in state.nodes)
    used_after = sum(ns.used_mask.bit_count() for ns in after.nodes)
    assert used_after - used_before == sum(d.job.total_gpus for d in placed)
    for d in placed:
        after = after.without_job(d.job.name)
    assert after == state


@settings(max_examples=100, deadline=None)
@given(clusters(), st.lists(jobs, min_size=1, max_size=6))
def test_the_carried_index_equals_a_rebuilt_one(state: ClusterState, requests: list[JobRequest]) -> None:
    _ = state.index  # built once, then maintained commit by commit
    placements = []
    for i, r in enumerate(requests):
        decision = place(state, JobRequest(f"j{i}", r.workers, r.gpus_per_worker, r.topology_aware))
        if decision.placement is not None:
            state = state.with_placement(decision.placement)
            placements.append(decision.placement)
            assert state.carried_index is not None
            assert dict(state.index) == dict(ClusterState(state.nodes).index)
    for placement in placements:
        state = state.without_placement(placement)
        assert dict(state.index) == dict(ClusterState(state.nodes).index)


def split_value(state: ClusterState, shares: dict[str, tuple[int, ...]]) -> tuple[float, ...]:
    """(nodes, bottleneck, in-node phase, summed GB/s, NUMA nodes) of a placement, higher is
    better, from the objective's definition (docs/scheduler.md)."""
    used = {name: gpus for name, gpus in shares.items() if gpus}
    bottleneck, phase, total, numa = float("inf"), 0.0, 0.0, 0
    for name, gpus in used.items():
        ns = state.node(name)
        bw = ns.spec.topology.bandwidth_gbs
        pairs = [bw[a][b] for a, b in itertools.combinations(gpus, 2)]
        share = min(pairs, default=float("inf"))
        bottleneck = min(bottleneck, share, ns.spec.network_gbs if len(used) > 1 else float("inf"))
        phase = max(phase, (len(gpus) - 1) / (len(gpus) * share) if len(gpus) > 1 else 0.0)
        total += sum(pairs)
        numa += len({ns.spec.topology.numa_groups[g] for g in gpus})
    return (-len(used), bottleneck, -phase, total, -numa)


@st.composite
def small_clusters(draw: st.DrawFn) -> ClusterState:
    """Two or three nodes with at most 5 free GPUs each, so every placement can be enumerated."""
    nodes = []
    for i in range(draw(st.integers(2, 3))):
        kind = draw(st.sampled_from(PRESETS))
        n = {"pcie-4gpu-workstation": 4}.get(kind, 8)
        free = draw(st.sets(st.integers(0, n - 1), min_size=1, max_size=5))
        nodes.append(node(f"n{i}", kind, busy=tuple(g for g in range(n) if g not in free)))
    return ClusterState(tuple(nodes))


@settings(max_examples=150, deadline=None)
@given(small_clusters(), st.integers(2, 12))
def test_splits_across_nodes_equal_the_exhaustive_optimum(state: ClusterState, k: int) -> None:
    decision = place(state, job(k))
    if decision.placement is None:
        return
    placement = decision.placement
    got = split_value(state, {ns.name: placement.gpus_on(ns.name) for ns in state.nodes})
    options = [
        [sub for size in range(k + 1) for sub in itertools.combinations(ns.free_gpus, size)] for ns in state.nodes
    ]
    best = max(
        split_value(state, {ns.name: sub for ns, sub in zip(state.nodes, subs, strict=True)})
        for subs in itertools.product(*options)
        if sum(len(s) for s in subs) == k
    )
    assert got == best


@st.composite
def repeated_nodes(draw: st.DrawFn) -> ClusterState:
    """3-8 DGX-1V nodes drawn from two or three busy patterns, so nodes often have twins (the
    groups the split search works on have several members)."""
    patterns = draw(st.lists(st.sets(st.integers(0, 7), max_size=6), min_size=2, max_size=3))
    picks = draw(st.lists(st.integers(0, len(patterns) - 1), min_size=3, max_size=8))
    return ClusterState(tuple(node(f"n{i}", busy=tuple(sorted(patterns[p]))) for i, p in enumerate(picks)))


@settings(max_examples=150, deadline=None)
@given(repeated_nodes(), st.integers(5, 20))
def test_the_runner_up_of_a_split_is_the_best_plan_without_the_chosen_first_node(state: ClusterState, k: int) -> None:
    decision = place(state, job(k))
    if decision.chosen is None or decision.runner_up is None or len(decision.chosen.placement.nodes) < 2:
        return
    first = decision.chosen.placement.slots[0].node
    assert first not in decision.runner_up.placement.nodes
    without = place(ClusterState(tuple(ns for ns in state.nodes if ns.name != first)), job(k))
    assert without.chosen is not None
    assert decision.runner_up.objective == without.chosen.objective


@settings(max_examples=150, deadline=None)
@given(repeated_nodes(), st.lists(st.sampled_from([3, 6, 10, 12]), min_size=3, max_size=6))
def test_a_decision_does_not_depend_on_the_decisions_before_it(state: ClusterState, sizes: list[int]) -> None:
    """The split search keeps what it derived per free mask across decisions: each decision of a
    queue (each committed before the next) must equal the same decision made with every cache
    empty."""
    from ringleader.scheduler.gpuset import _SEARCHES

    for i, k in enumerate(sizes):
        warm = place(state, job(k, name=f"j{i}"))
        _SEARCHES.clear()
        cold = place(state, job(k, name=f"j{i}"))
        assert cold.placement == warm.placement
        assert (cold.chosen and cold.chosen.objective) == (warm.chosen and warm.chosen.objective)
        assert (cold.runner_up and cold.runner_up.objective) == (warm.runner_up and warm.runner_up.objective)
        if warm.placement is not None:
            state = state.with_placement(warm.placement)


@settings(max_examples=200, deadline=None)
@given(clusters(), st.lists(jobs, min_size=1, max_size=10), st.integers(0, 2))
def test_a_cycle_without_reasons_starts_what_one_with_reasons_starts(
    state: ClusterState, requests: list[JobRequest], depth: int
) -> None:
    """The simulator's cycle skips the jobs that cannot fit once no reservation is left (their
    decision would change nothing): skipping, with its answers kept per gang shape while the
    state stays the same, must start exactly the jobs and placements a full cycle starts."""
    waiting = [
        Waiting(JobRequest(f"j{i}", r.workers, r.gpus_per_worker, r.topology_aware), i)
        for i, r in enumerate(requests)
    ]
    config = BackfillConfig(reservation_depth=depth)

    def started(explain: bool) -> list[tuple[str, object]]:
        cycle = run_cycle(Snapshot(state, waiting, 0.0, config=config, explain=explain))
        return [(d.job.name, d.placement) for d in cycle.decisions if d.ok]

    assert started(explain=False) == started(explain=True)


@st.composite
def held_clusters(draw: st.DrawFn) -> tuple[ClusterState, list[Holding]]:
    """A cluster whose busy GPUs belong to one running gang per node, each preemptible at a
    priority of its own and expected to end at a time of its own (unknown for some)."""
    nodes, holding = [], []
    for i in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(PRESETS))
        n = {"pcie-4gpu-workstation": 4}.get(kind, 8)
        busy = sorted(draw(st.sets(st.integers(0, n - 1), max_size=n)))
        spec = node(f"n{i}", kind).spec
        nodes.append(NodeState(spec, tuple((g, f"run{i}") for g in busy)))
        if busy:
            end = draw(st.one_of(st.none(), st.floats(10.0, 5000.0)))
            holding.append(Holding(f"run{i}", draw(st.integers(0, 3)), expected_end_s=end,
                                   preemptible=draw(st.booleans()), started_s=0.0))  # fmt: skip
    return ClusterState(tuple(nodes)), holding


@settings(max_examples=200, deadline=None)
@given(held_clusters(), st.lists(st.tuples(jobs, st.integers(0, 3), st.one_of(st.none(), st.floats(60.0, 9000.0))),
                                 min_size=1, max_size=10), st.integers(0, 2))  # fmt: skip
def test_the_sieve_of_a_cycle_without_reasons_keeps_every_job_that_may_start_or_preempt(
    held: tuple[ClusterState, list[Holding]], requests: list[tuple[JobRequest, int, float | None]], depth: int
) -> None:
    """Past the reservations the simulator's cycle looks at a waiting job only when it fits the
    free GPUs or may stop a gang of lower priority; the jobs it passes over must be those a full
    cycle leaves waiting: the same starts, placements and preemptions, with gangs running at
    several priorities and the waiting jobs' time limits reaching past the reservations or not."""
    state, holding = held
    waiting = [
        Waiting(JobRequest(f"j{i}", r.workers, r.gpus_per_worker, r.topology_aware, priority=priority,
                           time_limit_s=limit, may_preempt=True), i)
        for i, (r, priority, limit) in enumerate(requests)
    ]  # fmt: skip
    config = BackfillConfig(reservation_depth=depth)

    def decided(explain: bool) -> list[tuple[str, object, object]]:
        snapshot = Snapshot(state, waiting, 0.0, holding, config=config, explain=explain, stop_at_preemption=True)
        cycle = run_cycle(snapshot)
        return [(d.job.name, d.placement, d.preemption and d.preemption.names) for d in cycle.decisions
                if d.ok or d.preemption is not None]  # fmt: skip

    assert decided(explain=False) == decided(explain=True)
