"""The throughput objective: fewest nodes, then the highest predicted images/s, then best fit and
the best-connected leftover. The estimate is a plug-in (the scheduler may not import the model)."""

from __future__ import annotations

from collections.abc import Mapping

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ringleader.model  # noqa: F401  (installs the model's estimator)
from builders import preset_cluster
from ringleader.model import MODEL_ESTIMATOR, placement_images_per_s
from ringleader.scheduler import JobRequest, NodeState, Placement, place, policy_names
from ringleader.scheduler.policies.throughput import TOLERANCE, ThroughputPolicy, bandwidth_estimate
from ringleader.topology import NodeSpec, preset


def test_registered_and_plugged_into_the_model():
    assert "throughput" in policy_names()
    assert ThroughputPolicy.installed is MODEL_ESTIMATOR


def test_contract_with_a_fake_estimator_it_takes_what_the_estimate_prefers():
    # contract test: a fake estimator that likes GPUs 4-7 of a PCIe node (an estimate may depend
    # on the node's shape, not its name); the policy must follow it
    def likes_b_upper(nodes: Mapping[str, NodeState], placement: Placement, job: JobRequest) -> float:
        del job
        (name,) = placement.nodes
        gpus = {g for s in placement.slots for g in s.gpus}
        pcie = not nodes[name].spec.topology.links[0][1].is_nvlink
        return 100.0 if pcie and gpus == {4, 5, 6, 7} else 1.0

    state = preset_cluster(("a", "dgx1v", ()), ("b", "pcie-8gpu-2socket", ()))
    cands = ThroughputPolicy(likes_b_upper).choose(list(state.nodes), JobRequest("j", 4, 1))
    assert [(s.node, s.gpus) for s in cands[0].placement.slots] == [("b", (4,)), ("b", (5,)), ("b", (6,)), ("b", (7,))]
    assert cands[0].objective_names[:2] == ("-nodes", "images_per_s")


def test_near_equal_estimates_tie_and_best_fit_decides():
    # both nodes offer an NVLinked quad at the same predicted rate: the fuller node is used,
    # so the empty node stays whole for an 8-GPU gang
    state = preset_cluster(("a", "dgx1v", ()), ("b", "dgx1v", (4, 5, 6, 7)))
    decision = place(state, JobRequest("j", 4, 1, model="vgg16"), "throughput")
    assert decision.placement is not None and decision.placement.nodes == ("b",)


def test_without_an_estimator_it_ranks_by_the_bottleneck_link():
    state = preset_cluster(("a", "dgx1v", ()))
    policy = ThroughputPolicy(bandwidth_estimate)
    (best, *_) = policy.choose(list(state.nodes), JobRequest("j", 2, 1))
    a, b = (g for s in best.placement.slots for g in s.gpus)
    assert str(preset("dgx1v").links[a][b]) == "NV2"  # the fastest link of a DGX-1V


def test_a_gang_that_needs_two_nodes_uses_two():
    state = preset_cluster(("a", "dgx1v", (0, 1)), ("b", "dgx1v", (0,)))
    decision = place(state, JobRequest("j", 12, 1, model="resnet50"), "throughput")
    assert decision.placement is not None and len(decision.placement.nodes) == 2
    assert len(decision.placement.slots) == 12


BUSY = st.lists(st.integers(0, 7), max_size=7, unique=True).map(lambda xs: tuple(sorted(xs)))


@settings(max_examples=40, deadline=None)
@given(
    busy_a=BUSY, busy_b=BUSY, workers=st.integers(1, 8), gpus=st.sampled_from([1, 2]),
    model=st.sampled_from(["vgg16", "resnet50", "alexnet", None]),
)  # fmt: skip
def test_never_more_nodes_nor_slower_than_the_topology_policy(busy_a, busy_b, workers, gpus, model):
    state = preset_cluster(("a", "dgx1v", busy_a), ("b", "dgx1v", busy_b))
    job = JobRequest("j", workers, gpus, topology_aware=True, model=model)
    mine, theirs = place(state, job, "throughput"), place(state, job, "topology")
    assert (mine.placement is None) == (theirs.placement is None)
    if mine.placement is None or theirs.placement is None:
        return
    p = mine.placement
    assert len(p.slots) == workers and all(len(s.gpus) == gpus for s in p.slots)
    for name in p.nodes:  # only free GPUs, each once
        used = p.gpus_on(name)
        assert len(set(used)) == len(used)
        assert not set(used) & set(busy_a if name == "a" else busy_b)
    assert len(p.nodes) <= len(theirs.placement.nodes)
    if len(p.nodes) == len(theirs.placement.nodes):
        rate = placement_images_per_s(state.by_name, p, job)
        other = placement_images_per_s(state.by_name, theirs.placement, job)
        assert rate >= other * (1 - 2 * TOLERANCE)


@pytest.mark.parametrize("gpus", [3, 5, 6])
def test_on_an_empty_dgx1v_it_never_predicts_less_than_topology(gpus):
    state = preset_cluster(("a", "dgx1v", ()))
    job = JobRequest("j", 1, gpus, model="vgg16")
    mine, theirs = place(state, job, "throughput"), place(state, job, "topology")
    assert mine.placement is not None and theirs.placement is not None
    assert placement_images_per_s(state.by_name, mine.placement, job) >= (
        placement_images_per_s(state.by_name, theirs.placement, job) * (1 - 2 * TOLERANCE)
    )


def test_the_simulator_compares_it_with_the_model_plugged_in():
    from ringleader.sim import compare_policies
    from ringleader.sim.steptime import linear_step_time
    from ringleader.sim.trace import TraceJob

    specs = [NodeSpec(n, preset("dgx1v")) for n in ("a", "b")]
    jobs = [TraceJob(f"j{i}", float(i), 4, 1, "vgg16", 64, 100) for i in range(6)]
    result = compare_policies(specs, jobs, ["throughput", "topology"], step_time=linear_step_time())
    by = {s["policy"]: s for s in result.summaries}
    assert by["throughput"]["completed"] == by["topology"]["completed"] == 6
    assert ThroughputPolicy.installed is MODEL_ESTIMATOR
