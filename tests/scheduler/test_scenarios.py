"""Placement decisions a user would check by hand, on real machine layouts."""

from __future__ import annotations

import pytest

from builders import cluster, job, node
from ringleader.scheduler import Code, QueuedJob, place, schedule_queue


def test_seeds_topology_job_takes_one_fully_nvlinked_quad() -> None:
    decision = place(cluster(node("node-a"), node("node-b")), job(4))
    assert decision.ok
    placement = decision.placement
    assert placement is not None
    assert placement.nodes == ("node-a",)
    assert set(placement.gpus_on("node-a")) in ({0, 1, 2, 3}, {4, 5, 6, 7})
    assert decision.chosen is not None
    assert decision.chosen.metrics.bottleneck.kind == "NV1"
    assert decision.runner_up is not None  # the same quad on node-b


def test_seeds_default_job_spreads_two_and_two() -> None:
    decision = place(cluster(node("node-a"), node("node-b")), job(4, topo=False))
    placement = decision.placement
    assert placement is not None
    # workers numbered node by node, as torchrun and Slurm number ranks (not in the order the
    # policy handed them out, a, b, a, b: a ring would cross the network at every rank)
    assert [s.node for s in placement.slots] == ["node-a", "node-a", "node-b", "node-b"]
    assert placement.gpus_on("node-a") == (0, 1)
    assert decision.chosen is not None and decision.chosen.metrics.bottleneck.kind == "network"


def test_half_busy_quad_sends_the_job_to_the_other_quad() -> None:
    decision = place(cluster(node("a", busy=(0, 1))), job(4))
    assert decision.placement is not None
    assert decision.placement.gpus_on("a") == (4, 5, 6, 7)


def test_two_gpu_job_takes_a_double_nvlink_pair_and_keeps_a_quad_whole() -> None:
    decision = place(cluster(node("a")), job(2))
    assert decision.placement is not None and decision.chosen is not None
    gpus = set(decision.placement.gpus_on("a"))
    assert decision.chosen.metrics.bottleneck.kind == "NV2"
    assert gpus <= {0, 1, 2, 3} or gpus <= {4, 5, 6, 7}


def test_best_fit_prefers_the_node_whose_quad_is_exactly_free() -> None:
    # node-a has exactly one free quad; node-b is empty: keep node-b whole for an 8-GPU job.
    decision = place(cluster(node("node-b"), node("node-a", busy=(4, 5, 6, 7))), job(4))
    assert decision.placement is not None and decision.placement.nodes == ("node-a",)


def test_pcie_server_keeps_a_job_on_one_socket() -> None:
    decision = place(cluster(node("p", "pcie-8gpu-2socket", busy=(0,))), job(4))
    assert decision.placement is not None and decision.chosen is not None
    assert set(decision.placement.gpus_on("p")) == {4, 5, 6, 7}
    assert decision.chosen.metrics.bottleneck.kind == "NODE"


def test_multi_gpu_workers_pair_the_best_links() -> None:
    decision = place(cluster(node("a")), job(2, 2))
    assert decision.placement is not None
    for slot in decision.placement.slots:
        a, b = slot.gpus
        assert str(node("a").spec.topology.link(a, b)) == "NV2"


def test_twelve_workers_use_two_nodes_not_three() -> None:
    decision = place(cluster(node("a"), node("b"), node("c")), job(12))
    assert decision.placement is not None and len(decision.placement.nodes) == 2


def test_topology_job_on_default_mode_nodes_pends_with_the_label_reason() -> None:
    decision = place(cluster(node("a", mode="default"), node("b", mode="topology", busy=(0, 1, 2, 3, 4))), job(4))
    assert decision.code is Code.UNSCHEDULABLE
    assert "most free on any such node: 3 (b)" in decision.reasons[0]
    assert "gpu-schedule=default" in decision.node_reasons["a"]


def test_default_job_skips_topology_mode_nodes() -> None:
    decision = place(cluster(node("a", mode="topology"), node("b")), job(2, topo=False))
    assert decision.placement is not None and decision.placement.nodes == ("b",)


def test_request_no_cluster_could_hold_is_unresolvable() -> None:
    assert place(cluster(node("a"), node("b")), job(3, 8)).code is Code.UNRESOLVABLE
    assert place(cluster(node("a")), job(1, 9)).code is Code.UNRESOLVABLE
    assert place(cluster(node("a", busy=tuple(range(8)))), job(1, 8)).code is Code.UNSCHEDULABLE


def test_cpu_only_jobs_run_on_a_node_without_gpus() -> None:
    decision = place(cluster(node("local", "pcie-4gpu-workstation", busy=(0, 1, 2, 3))), job(2, 0))
    assert decision.placement is not None
    assert [s.gpus for s in decision.placement.slots] == [(), ()]


def test_queue_runs_priority_first_then_fifo_without_double_allocation() -> None:
    state = cluster(node("a"))
    pending = [
        QueuedJob(job(4, name="first"), 1),
        QueuedJob(job(4, name="urgent", priority=5), 2),
        QueuedJob(job(4, name="third"), 3),
    ]
    state, decisions = schedule_queue(state, pending)
    assert [(d.job.name, d.ok) for d in decisions] == [("urgent", True), ("first", True), ("third", False)]
    assert state.free_gpus == 0


@pytest.mark.parametrize("preset_name", ["dgx2", "dgx-h100"])
def test_uniform_nvswitch_nodes_place_fast_and_exactly(preset_name: str) -> None:
    decision = place(cluster(node("s", preset_name)), job(8))
    assert decision.placement is not None and len(decision.placement.gpus_on("s")) == 8
