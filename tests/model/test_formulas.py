"""The model's formulas on hand-computed cases."""

from __future__ import annotations

import math

import pytest

from ringleader.errors import UsageError
from ringleader.model import allreduce_time_s, compute_rate, known_gpu_types, known_models, predict_placement
from ringleader.model.comm import best_ring_gbs, intra_node_hop, nic_flows, ring_time_s, tree_time_s
from ringleader.model.tables import grad_bytes, step_overhead_s
from ringleader.scheduler import ClusterState, NodeState, Placement, WorkerSlot
from ringleader.topology import NodeSpec, preset

MB = 1e6


def two_dgx1v(gbps: float = 25.0) -> ClusterState:
    return ClusterState.empty([NodeSpec(n, preset("dgx1v"), gbps) for n in ("node-a", "node-b")])


def placement(*parts: tuple[str, tuple[int, ...]]) -> Placement:
    return Placement("j", tuple(WorkerSlot(i, n, g) for i, (n, g) in enumerate(parts)))


def test_ring_and_tree_alpha_beta():
    # 4 ranks, 100 MB, 10 GB/s, 5 us: ring 6 steps x 5 us + 1.5 x 100 MB / 10 GB/s
    assert ring_time_s(4, 100 * MB, 10.0, 5.0) == pytest.approx(6 * 5e-6 + 0.015)
    # tree: 2 ceil(log2 4) = 4 steps x 5 us + 2 x 100 MB / 10 GB/s
    assert tree_time_s(4, 100 * MB, 10.0, 5.0) == pytest.approx(4 * 5e-6 + 0.02)
    assert ring_time_s(1, 100 * MB, 10.0, 5.0) == 0.0


def test_best_ring_is_the_best_hamiltonian_cycle():
    # 0-1 fast, 1-2 fast, 2-3 fast, 3-0 fast; the diagonals slow: ring 0-1-2-3 at 50
    bw = ((0, 50, 1, 50), (50, 0, 50, 1), (1, 50, 0, 50), (50, 1, 50, 0))
    assert best_ring_gbs(tuple(tuple(float(x) for x in r) for r in bw)) == 50.0
    assert best_ring_gbs(((0.0, 7.0), (7.0, 0.0))) == 7.0


def test_intra_node_hops_on_the_dgx1v():
    ns = NodeState(NodeSpec("a", preset("dgx1v")))
    # the NVLinked quad: every GPU has 4 NVLinks (NV1+NV1+NV2) to the others -> 100 GB/s
    assert intra_node_hop(ns, (0, 1, 2, 3)).gbs == pytest.approx(100.0)
    assert intra_node_hop(ns, (0, 3)).gbs == pytest.approx(50.0)  # NV2 pair
    assert intra_node_hop(ns, (0, 1)).gbs == pytest.approx(25.0)  # NV1 pair
    assert intra_node_hop(ns, (0, 5)).gbs == pytest.approx(5.0)  # SYS pair
    # 0-1 NV1, 1-5 NV2, 0-5 SYS: no NVLink ring, the ring crosses SYS
    hop = intra_node_hop(ns, (0, 1, 5))
    assert (hop.kind, hop.gbs) == ("SYS", pytest.approx(5.0))
    assert intra_node_hop(ns, (2,)) is None


def test_nic_flows_follow_the_ring_order():
    alternating = placement(("node-a", (0,)), ("node-b", (0,)), ("node-a", (1,)), ("node-b", (1,)))
    assert nic_flows(alternating, "nodes") == 1
    assert nic_flows(alternating, "ranks") == 2
    blocked = placement(("node-a", (0,)), ("node-a", (1,)), ("node-b", (0,)), ("node-b", (1,)))
    assert nic_flows(blocked, "ranks") == 1


def test_allreduce_time_on_two_nodes_is_the_network_ring():
    state = two_dgx1v()
    p = placement(("node-a", (0,)), ("node-b", (0,)), ("node-a", (1,)), ("node-b", (1,)))
    gbs = 25 / 8 * 0.5
    t = allreduce_time_s(state.by_name, p, 100 * MB, network_efficiency=0.5, algorithm="ring")
    assert t == pytest.approx(6 * 10e-6 + 1.5 * 100 * MB / (gbs * 1e9))
    # gloo follows rank order: two flows share each NIC direction -> half the bandwidth
    t2 = allreduce_time_s(state.by_name, p, 100 * MB, network_efficiency=0.5, algorithm="ring", backend="gloo")
    assert t2 == pytest.approx(6 * 10e-6 + 1.5 * 100 * MB / (gbs / 2 * 1e9))


def test_compute_rate_follows_t0_plus_b_over_peak():
    # resnet50 t0 from the P100 pair (batch 64: 219/s, batch 32: 195/s)
    t64, t32 = 64 / 219, 32 / 195
    t0 = t64 - 64 * (t64 - t32) / 32
    assert step_overhead_s("resnet50") == pytest.approx(t0)
    # V100 fp32 published 432 images/s at batch 192
    per_image = (192 / 432 - t0) / 192
    rate = compute_rate("resnet50", "V100", "fp32", 64)
    assert rate.step_s == pytest.approx(t0 + 64 * per_image)
    assert compute_rate("resnet50", "V100", "fp32", 192).images_per_s == pytest.approx(432)
    assert rate.backward_s == pytest.approx(0.6667 * 64 * per_image)


def test_step_time_combines_compute_exposed_comm_and_overlap():
    state = two_dgx1v()
    p = placement(("node-a", (0,)), ("node-b", (0,)))
    rate = compute_rate("vgg16", "V100", "fp32", 32)
    nbytes = grad_bytes("vgg16", "fp32")
    assert nbytes == pytest.approx(138.36e6 * 4)
    comm = allreduce_time_s(state.by_name, p, nbytes, network_efficiency=1.0)
    for phi in (0.0, 0.5, 1.0):
        pred = predict_placement(state.by_name, p, "vgg16", 32, overlap=phi, network_efficiency=1.0)
        step = rate.step_s + comm - phi * min(comm, rate.backward_s)
        assert pred.step_time_s == pytest.approx(step)
        assert pred.images_per_s == pytest.approx(2 * 32 / step)
        assert pred.scaling_efficiency == pytest.approx(rate.step_s / step)
        assert pred.bound == "communication"


def test_one_gpu_is_compute_bound_and_data_caps():
    state = two_dgx1v()
    p = placement(("node-a", (0,)))
    pred = predict_placement(state.by_name, p, "resnet50", 64)
    assert pred.comm_s == 0 and pred.bound == "compute" and pred.scaling_efficiency == pytest.approx(1.0)
    capped = predict_placement(state.by_name, p, "resnet50", 64, data_images_per_s=100.0)
    assert (capped.images_per_s, capped.bound) == (100.0, "data")
    assert capped.step_time_s == pytest.approx(0.64)


def test_gpu_type_from_the_node_and_unknown_names():
    state = two_dgx1v()
    p = placement(("node-a", (0,)))
    assert predict_placement(state.by_name, p, "vgg16", 64).gpu_type == "V100"
    a100 = predict_placement(state.by_name, p, "vgg16", 64, gpu_type="a100")
    assert a100.gpu_type == "A100" and a100.images_per_s > 0
    with pytest.raises(UsageError, match="unknown GPU type 'TPU'") as err:
        predict_placement(state.by_name, p, "vgg16", 64, gpu_type="TPU")
    assert "A100, V100" in err.value.one_line()
    with pytest.raises(UsageError, match="unknown model 'bert'") as err:
        predict_placement(state.by_name, p, "bert", 64)
    assert "resnet50" in err.value.one_line()
    with pytest.raises(UsageError, match="no single-V100 fp32 training rate for googlenet"):
        predict_placement(state.by_name, p, "googlenet", 64)
    assert "V100" in known_gpu_types() and "vgg16" in known_models()
    pcie = ClusterState.empty([NodeSpec("w", preset("pcie-4gpu-workstation"))])
    with pytest.raises(UsageError, match="declares no GPU model"):
        predict_placement(pcie.by_name, placement(("w", (0,))), "vgg16", 64)


def test_more_gpus_on_a_faster_ring_never_predict_less_per_gpu():
    state = two_dgx1v()
    quad = predict_placement(state.by_name, placement(*(("node-a", (g,)) for g in range(4))), "vgg16", 64)
    spread = predict_placement(state.by_name, placement(("node-a", (0,)), ("node-a", (5,))), "vgg16", 64)
    assert quad.scaling_efficiency > spread.scaling_efficiency
    assert math.isfinite(quad.images_per_s)


def test_allreduce_time_is_monotone_in_bytes_and_network():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    state = two_dgx1v()
    p = placement(("node-a", (0,)), ("node-a", (1,)), ("node-b", (0,)))

    @settings(max_examples=60, deadline=None)
    @given(st.floats(1e3, 1e9), st.floats(1e3, 1e9), st.floats(0.01, 1.0), st.floats(0.01, 1.0))
    def check(b1, b2, e1, e2):
        lo_b, hi_b = sorted((b1, b2))
        lo_e, hi_e = sorted((e1, e2))
        t = lambda nbytes, eff: allreduce_time_s(state.by_name, p, nbytes, network_efficiency=eff)  # noqa: E731
        assert t(lo_b, lo_e) <= t(hi_b, lo_e)
        assert t(lo_b, hi_e) <= t(lo_b, lo_e)

    check()


def test_compare_policies_on_a_labelled_cluster_and_a_job_too_big():
    from ringleader.model import compare_policies
    from ringleader.scheduler import JobRequest

    labels = {"node-a": "topology", "node-b": "default"}
    state = ClusterState.empty(
        [NodeSpec(n, preset("dgx1v"), 25.0, (("gpu-schedule", m),)) for n, m in labels.items()]
    )
    job = JobRequest("j", 4, 1)
    preds = compare_policies(state, job, model="vgg16", batch_size=64, policies=["topology", "default"])
    assert preds["topology"] is not None and preds["topology"].placement.startswith("node-a")
    assert preds["default"] is not None and preds["default"].placement.startswith("node-b")
    big = compare_policies(state, JobRequest("j", 20, 1), model="vgg16", batch_size=64)
    assert set(big.values()) == {None}


def test_comparison_line_for_the_scheduler():
    from ringleader.model import compare_policies, comparison_line
    from ringleader.scheduler import JobRequest

    preds = compare_policies(two_dgx1v(), JobRequest("j", 4, 1), model="vgg16", batch_size=64)
    line = comparison_line(preds, "topology")
    assert line.startswith("predicted 900 images/s (compute-bound); default placement would give 200 (4.5x)")
    assert comparison_line({"topology": None}, "topology") == "topology cannot place the job"
