"""The gang decision over the cache: Kubernetes' filters around place(), pure (no server)."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kube.kubeobjs import node, pod, podgroup
from ringleader.engines.kubernetes import manifests, names
from ringleader.engines.kubernetes.cache import Cache
from ringleader.engines.kubernetes.decide import Members, decide, job_request
from ringleader.jobs.spec import JobSpec
from ringleader.scheduler import Code, Snapshot, run_cycle
from ringleader.scheduler.teams import TeamQueue


def cache_with(nodes: list[dict], pods: list[dict], groups: list[dict] = ()) -> Cache:  # type: ignore[assignment,type-arg]
    cache = Cache()
    cache.replace("nodes", nodes)
    cache.replace("podgroups", list(groups))
    cache.replace("pods", pods)
    return cache


def only_gang(cache: Cache):  # type: ignore[no-untyped-def]
    gangs = cache.gangs()
    assert len(gangs) == 1
    return gangs[0]


def test_taint_needs_a_toleration() -> None:
    taint = [{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}]
    nodes = [node("tainted", taints=taint), node("plain", gpus_preset=None)]
    cache = cache_with(nodes, [pod("w", gpus=2)])
    out = decide(cache, only_gang(cache))
    assert out.code is Code.UNSCHEDULABLE
    assert "1 node(s) had untolerated taint dedicated=ml:NoSchedule" in out.reason
    tolerating = pod("w", gpus=2, tolerations=[{"key": "dedicated", "operator": "Equal", "value": "ml",
                                                "effect": "NoSchedule"}])  # fmt: skip
    cache = cache_with(nodes, [tolerating])
    out = decide(cache, only_gang(cache))
    assert out.ok and out.assignments[0].node == "tainted"


def test_cordoned_node_and_node_selector() -> None:
    nodes = [node("a", unschedulable=True), node("b", labels={"zone": "z1"}), node("c", labels={"zone": "z2"})]
    cache = cache_with(nodes, [pod("w", gpus=1, nodeSelector={"zone": "z2"})])
    out = decide(cache, only_gang(cache))
    assert out.ok and out.assignments[0].node == "c"
    cache = cache_with(nodes, [pod("w", gpus=1, nodeSelector={"zone": "nowhere"})])
    out = decide(cache, only_gang(cache))
    assert not out.ok
    assert "1 node(s) cordoned" in out.reason and "2 node(s) didn't match the pod's nodeSelector" in out.reason


def test_required_node_affinity() -> None:
    nodes = [node("a", labels={"gpu": "v100"}), node("b", labels={"gpu": "a100", "rack": "3"}), node("c")]
    term = {"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["a100", "h100"]},
                                 {"key": "rack", "operator": "Gt", "values": ["2"]}]}  # fmt: skip
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}
    cache = cache_with(nodes, [pod("w", gpus=1, affinity=affinity)])
    out = decide(cache, only_gang(cache))
    assert out.ok and out.assignments[0].node == "b"
    by_name = {"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["a", "b"]}]}
    affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"] = [by_name]
    cache = cache_with(nodes, [pod("w", gpus=1, affinity=affinity)])
    out = decide(cache, only_gang(cache))
    assert out.ok and out.assignments[0].node == "c"
    nowhere = {"matchExpressions": [{"key": "gpu", "operator": "DoesNotExist"}, {"key": "x", "operator": "Exists"}]}
    affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"] = [nowhere]
    cache = cache_with(nodes, [pod("w", gpus=1, affinity=affinity)])
    out = decide(cache, only_gang(cache))
    assert not out.ok and "3 node(s) didn't match the pod's node affinity" in out.reason


def test_schedule_mode_labels_as_the_local_runtime() -> None:
    nodes = [node("topo", mode="topology"), node("dflt", mode="default")]
    cache = cache_with(nodes, [pod("t", gpus=1, topology=True), pod("d", gpus=1, topology=False)])
    placed = {}
    for gang in cache.gangs():
        out = decide(cache, gang)
        assert out.ok
        placed[gang.key] = out.assignments[0].node
    assert placed == {"default/t": "topo", "default/d": "dflt"}
    # A value that is neither mode: the node serves no GPU job, and says why.
    cache = cache_with([node("odd", mode="topolgy")], [pod("t", gpus=1)])
    out = decide(cache, only_gang(cache))
    assert not out.ok and "ack.node.gpu.schedule=topolgy is not topology or default" in out.reason


def test_cpu_room_moves_the_gang_and_launcher_joins_its_workers() -> None:
    nodes = [node("small", cpu="2"), node("big", cpu="64")]
    pods = [pod(f"j-worker-{i}", gang="j", gpus=1, cpu="1") for i in range(4)]
    pods.append(pod("j-launcher", gang="j", gpus=0, cpu="500m"))
    cache = cache_with(nodes, pods, [podgroup("j", 5)])
    out = decide(cache, only_gang(cache))
    assert out.ok, out.reason
    assert {a.node for a in out.assignments} == {"big"}
    workers = sorted((a for a in out.assignments if a.worker is not None), key=lambda a: a.worker)  # type: ignore[arg-type,return-value]
    assert [a.pod.name for a in workers] == [f"j-worker-{i}" for i in range(4)]
    assert sorted(g for a in workers for g in a.gpus) in ([0, 1, 2, 3], [4, 5, 6, 7])


def test_higher_priority_gangs_first_then_oldest() -> None:
    old = pod("old", gpus=1)
    old["metadata"]["creationTimestamp"] = "2026-11-23T09:00:00Z"
    new = pod("new", gpus=1)
    new["metadata"]["creationTimestamp"] = "2026-11-23T10:00:00Z"
    urgent = pod("urgent", gpus=1, priority=1000)
    urgent["metadata"]["creationTimestamp"] = "2026-11-23T11:00:00Z"
    cache = cache_with([node("a")], [new, urgent, old])
    assert [g.key for g in cache.gangs()] == ["default/urgent", "default/old", "default/new"]


def test_incomplete_gang_waits_and_podgroup_missing_waits() -> None:
    cache = cache_with([node("a")], [pod(f"g-{i}", gang="g") for i in range(3)], [podgroup("g", 4)])
    assert not only_gang(cache).ready
    cache = cache_with([node("a")], [pod("h-0", gang="h")])
    gang = only_gang(cache)
    assert gang.group_missing and not gang.ready


def test_assumed_gang_survives_a_stale_event_and_forget_frees_it() -> None:
    stale = pod("w", gpus=8)
    cache = cache_with([node("a")], [stale])
    out = decide(cache, only_gang(cache))
    cache.assume_gang((a.pod, a.node, a.gpus) for a in out.assignments)
    assert cache.state.node("a").n_free == 0
    cache.apply("pods", "MODIFIED", stale)  # the watch replays the pod from before our bind
    assert cache.gangs() == [] and cache.state.node("a").n_free == 0
    cache.forget("default/w")  # the bind failed
    assert cache.state.node("a").n_free == 8 and len(cache.gangs()) == 1


def bound(name: str, on: str, gpus: int, ids: tuple[int, ...], marked: bool = True) -> dict:  # type: ignore[type-arg]
    """A running pod on node ``on`` with the GPU ids annotation; ``marked``: written for this pod
    by the scheduler's Binding (its UID beside the ids)."""
    p = pod(name, gpus=gpus)
    p["spec"]["nodeName"] = on
    p["status"]["phase"] = "Running"
    notes = {names.GPU_IDS_ANNOTATION: ",".join(map(str, ids))}
    if marked:
        notes[names.GPU_IDS_UID_ANNOTATION] = p["metadata"]["uid"]
    p["metadata"]["annotations"] = notes
    return p


@pytest.mark.parametrize("forger_marks_itself", [False, True], ids=["plain-forgery", "uid-marked-forgery"])
@pytest.mark.parametrize("order", ["forger-first", "forger-last", "forger-by-watch"])
def test_a_forged_gpu_ids_annotation_never_frees_gpus_kubelet_counts(order: str, forger_marks_itself: bool) -> None:
    """A pod bound by someone else that claims GPUs the scheduler gave another pod: both count
    (kubelet admits both against the node's 8), so nothing more fits there; the pod the
    scheduler bound keeps its ids. Once, the clashing claim dropped the forger from the snapshot."""
    legit = bound("legit", "a", 4, (0, 1, 2, 3))
    legit["metadata"]["creationTimestamp"] = "2026-11-23T09:00:00Z"
    forger = bound("forger", "a", 4, (0, 1, 2, 3), marked=forger_marks_itself)
    forger["metadata"]["creationTimestamp"] = "2026-11-23T10:00:00Z"  # made after it saw the ids
    forger["spec"]["schedulerName"] = "default-scheduler"
    waiting = pod("next", gpus=1)
    if order == "forger-by-watch":
        cache = cache_with([node("a")], [legit, waiting])
        cache.apply("pods", "ADDED", forger)
    else:
        listed = [forger, legit, waiting] if order == "forger-first" else [legit, forger, waiting]
        cache = cache_with([node("a")], listed)
    state = cache.state.node("a")
    assert state.n_free == 0, state.allocated
    assert [state.owner(g) for g in range(4)] == ["default/legit"] * 4
    assert not decide(cache, only_gang(cache)).ok


def test_malformed_or_out_of_range_ids_still_count_as_many_gpus() -> None:
    cache = cache_with([node("a")], [bound("odd", "a", 2, (7, 7)), bound("far", "a", 2, (40, 41)),
                                     bound("short", "a", 2, (3,))])  # fmt: skip
    assert cache.state.node("a").n_free == 2


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 6), st.sampled_from([1, 2, 4]), st.booleans()), min_size=1, max_size=12))
def test_property_no_gpu_twice_gangs_whole_cpu_never_oversubscribed(jobs: list[tuple[int, int, bool]]) -> None:
    nodes = [node(f"n{i}", mode=None, cpu="6") for i in range(4)]
    pods, groups = [], []
    for j, (workers, gpus, topo) in enumerate(jobs):
        groups.append(podgroup(f"j{j}", workers))
        pods += [pod(f"j{j}-worker-{w}", gang=f"j{j}", gpus=gpus, topology=topo, cpu="1") for w in range(workers)]
    cache = cache_with(nodes, pods, groups)
    for gang in cache.gangs():
        out = decide(cache, gang)
        if out.ok:
            assert len(out.assignments) == len(gang.pending)  # all of it ...
            cache.assume_gang((a.pod, a.node, a.gpus) for a in out.assignments)
        else:
            assert out.assignments == () and out.reason  # ... or none, with a reason
    held = Counter((h.node, g) for h in cache.assumed.values() for g in h.gpus)
    assert all(n == 1 for n in held.values())
    for name in cache.nodes:
        assert cache.usage(name).cpu <= 6
        state_used = 8 - cache.state.node(name).n_free
        assert state_used == sum(1 for (n, _g) in held if n == name)
    # The snapshot maintained gang by gang equals one built from scratch.
    incremental = {ns.name: ns.free_mask for ns in cache.state.nodes}
    cache._state = None
    assert {ns.name: ns.free_mask for ns in cache.state.nodes} == incremental


def test_pods_listed_before_their_node_still_hold_its_gpus() -> None:
    """Informers list in parallel: pods bound by someone else may arrive before their node.
    Once the node is known they hold its GPUs, so no gang is placed on them."""
    cache = Cache()
    cache.replace("pods", [pod(f"other-{i}", gpus=2, nodeName="gpu-0") | {"status": {"phase": "Running"}}
                           for i in range(3)])  # fmt: skip
    cache.replace("nodes", [node("gpu-0")])
    assert cache.state.node("gpu-0").n_free == 2
    cache.replace("pods", [*(pod(f"other-{i}", gpus=2, nodeName="gpu-0") | {"status": {"phase": "Running"}}
                             for i in range(3)), pod("w", gpus=4)])  # fmt: skip
    assert decide(cache, only_gang(cache)).code is not Code.SUCCESS


def test_the_gang_as_the_shared_queue_sees_it() -> None:
    """Priority is the gang's highest; a time limit only when every member has one."""
    from ringleader.engines.kubernetes.decide import job_request

    cache = cache_with([node("gpu-0")], [pod("g-worker-0", gang="g", gpus=2, priority=5, activeDeadlineSeconds=60),
                                         pod("g-worker-1", gang="g", gpus=2, activeDeadlineSeconds=90)],
                       [podgroup("g", 2)])  # fmt: skip
    job = job_request(only_gang(cache))
    assert (job.workers, job.gpus_per_worker, job.priority, job.time_limit_s) == (2, 2, 5, 90.0)
    cache = cache_with([node("gpu-0")], [pod("h-worker-0", gang="h", activeDeadlineSeconds=60),
                                         pod("h-launcher", gang="h", gpus=0)], [podgroup("h", 2)])  # fmt: skip
    assert job_request(only_gang(cache)).time_limit_s is None


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 8), min_size=2, max_size=3),
       st.lists(st.tuples(st.integers(1, 3), st.sampled_from([1, 2])), min_size=1, max_size=6))  # fmt: skip
def test_property_no_gang_without_a_time_limit_takes_reserved_gpus(busy: list[int],
                                                                   small: list[tuple[int, int]]) -> None:
    """Through the shared queue, as a cycle decides: once a big gang that cannot start holds a
    reservation, no gang behind it without a time limit is given any GPU of that reservation,
    and gangs that do start never share a GPU."""
    nodes = [node(f"n{i}", mode=None) for i in range(len(busy))]
    running = [pod(f"run{i}-{g}", gpus=1, nodeName=f"n{i}") | {"status": {"phase": "Running"}}
               for i, count in enumerate(busy) for g in range(count)]  # fmt: skip
    free = sum(8 - b for b in busy)
    big = [pod(f"big-worker-{w}", gang="big", gpus=1, priority=100) for w in range(free + 1)]  # never fits now
    pods, groups = running + big, [podgroup("big", free + 1)]
    for j, (workers, gpus) in enumerate(small):
        groups.append(podgroup(f"s{j}", workers))
        pods += [pod(f"s{j}-worker-{w}", gang=f"s{j}", gpus=gpus) for w in range(workers)]
    cache = cache_with(nodes, pods, groups)
    members = Members(cache)  # each gang that starts is assumed at once: two never share a GPU
    cycle = run_cycle(Snapshot(cache.state, [members.waiting(g, i) for i, g in enumerate(cache.gangs())], 1000.0))
    outcomes = [members.outcome(one) for one in cycle.nominated]
    assert outcomes[0].gang.key == "default/big"  # priority first: the big gang is decided first
    held = [o.reservation for o in outcomes if o.reservation is not None]
    reserved: set[tuple[str, int]] = set()  # held for the gangs decided before
    for out in outcomes:
        taken = {(a.node, g) for a in out.assignments for g in a.gpus}
        assert not taken & reserved, (out.gang.key, taken & reserved)
        if out.reservation is not None:
            reserved |= {(s.node, g) for s in out.reservation.placement.slots for g in s.gpus}
    if free + 1 <= 8 * len(busy):
        assert held, "a big gang that fits the cluster once it empties gets a reservation"
    # Each start is committed once, in the cache: the cycle hands on the cache's own state.
    assert {ns.name: ns.allocated for ns in cycle.state.nodes} == {ns.name: ns.allocated for ns in cache.state.nodes}


def _group_with_spec(name: str, members: int, **spec: object) -> dict:  # type: ignore[type-arg]
    group = podgroup(name, members)
    job = JobSpec(name, members, 1, ["mpirun", "python", "t.py"], **spec)  # type: ignore[arg-type]
    group["metadata"]["annotations"] = {names.SPEC_ANNOTATION: manifests.stored_spec(job)}
    return group


def test_a_gangs_queue_is_its_own_never_its_launchers() -> None:
    """mpi-operator's launcher names no queue and is seen after the workers: the gang still counts
    in the queue its PodGroup's spec names; a gang submit did not make (no spec), in the queue its
    members name, whichever member was seen first."""
    workers = [pod(f"b1-worker-{i}", gang="b1", nodeName="gpu-0") for i in range(2)]
    for worker in workers:
        worker["metadata"]["annotations"] = {names.QUEUE_ANNOTATION: "team-b"}
    launcher = pod("b1-launcher", gang="b1", gpus=0, nodeName="gpu-0")
    hand_made = [pod("h-launcher", gang="h", gpus=0, nodeName="gpu-0"), pod("h-worker-0", gang="h", nodeName="gpu-0")]
    hand_made[1]["metadata"]["annotations"] = {names.QUEUE_ANNOTATION: "team-h"}
    cache = cache_with([node("gpu-0")], [*workers, launcher, *hand_made],
                       [_group_with_spec("b1", 2, queue="team-b"), podgroup("h", 2)])  # fmt: skip
    assert cache.gang_queues(cache.pods.values()) == {"default/b1": "team-b", "default/h": "team-h"}
    # the spec is the gang's: workers changed by hand afterwards do not move it
    workers[0]["metadata"]["annotations"] = {names.QUEUE_ANNOTATION: "team-x"}
    cache.replace("pods", [*workers, launcher])
    assert cache.gang_queues(cache.pods.values()) == {"default/b1": "team-b"}


def test_a_gang_may_use_only_a_queue_for_its_namespace() -> None:
    group = _group_with_spec("g", 1, queue="team-a", preempt=True)
    cache = cache_with([node("gpu-0")], [pod("g-worker-0", gang="g")], [group])
    cache.queues = (TeamQueue("team-a", (("*", 8),), namespaces=("team-a",)),)
    gang = only_gang(cache)
    assert gang.spec is not None and gang.spec.preempt and job_request(gang).may_preempt
    out = decide(cache, gang)
    assert out.code is Code.UNSCHEDULABLE
    assert out.reason.startswith("queue team-a is for namespace(s) team-a, not default"), out.reason
    assert job_request(gang).queue is None  # never counted in it
    cache.queues = (TeamQueue("team-a", (("*", 8),), namespaces=("default", "team-a")),)
    gang = only_gang(cache)
    assert decide(cache, gang).ok and job_request(gang).queue == "team-a"
