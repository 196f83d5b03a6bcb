"""The model's formulas on hand-computed cases."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from ringleader.errors import UsageError
from ringleader.model import allreduce_time_s, compute_rate, gpu_types, known_models, predict_placement
from ringleader.model.comm import best_ring_gbs, intra_node_hop, nic_flows, ring_time_s, tree_time_s
from ringleader.model.predict import sync_time_s
from ringleader.model.tables import derived_rate, exposed_allreduce_s, grad_bytes, half_batch
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
    # resnet50's half batch from the P100 pair (batch 64: 219/s, batch 32: 195/s)
    t64, t32 = 64 / 219, 32 / 195
    per_p100 = (t64 - t32) / 32
    h = (t64 - 64 * per_p100) / per_p100
    assert half_batch("resnet50") == pytest.approx(h)
    # V100 fp32 published 432 images/s at batch 192: peak = 432 (192 + h) / 192, t0 = h / peak
    peak = 432 * (192 + h) / 192
    rate = compute_rate("resnet50", "V100", "fp32", 64)
    assert rate.step_s == pytest.approx(h / peak + 64 / peak)
    assert rate.images_per_s == pytest.approx(peak * 64 / (64 + h))
    assert compute_rate("resnet50", "V100", "fp32", 192).images_per_s == pytest.approx(432)
    assert rate.backward_s == pytest.approx(0.6667 * 64 / peak)


def test_rates_for_gpus_and_models_without_published_numbers_are_derived():
    # H100 from the nearest published GPU (A100) by peak and memory ratios
    h100 = derived_rate("resnet50", "H100", "fp16")
    a100 = 2075.0
    factor = (989.4 / 312) ** 0.17 * (3350 / 1555) ** 0.83
    assert h100 is not None and h100.images_per_s == pytest.approx(a100 * factor)
    assert "derived from A100" in h100.source
    # a model published on no GPU: ResNet-50's achieved MACs/s over the model's MACs
    gpt2 = derived_rate("gpt2", "V100", "fp32")
    assert gpt2 is not None and gpt2.images_per_s == pytest.approx(432 * 4.09 / 126.98)
    assert compute_rate("bert-base", "T4", "fp16", 32).images_per_s > 0


def test_step_time_combines_compute_exposed_comm_and_overlap():
    state = two_dgx1v()
    p = placement(("node-a", (0,)), ("node-b", (0,)))
    rate = compute_rate("vgg16", "V100", "fp32", 32)
    nbytes = grad_bytes("vgg16", "fp32")
    assert nbytes == pytest.approx(138.36e6 * 4)
    comm = allreduce_time_s(state.by_name, p, nbytes, network_efficiency=1.0)
    for phi in (0.0, 0.5, 1.0):
        pred = predict_placement(state.by_name, p, "vgg16", 32, overlap=phi, network_efficiency=1.0, sync=(0.0, 0.0))
        # the part that can hide: all but what the order of gradient readiness leaves exposed
        step = rate.step_s + comm - phi * (comm - exposed_allreduce_s("vgg16", comm, rate.backward_s))
        assert pred.step_time_s == pytest.approx(step)
        assert pred.images_per_s == pytest.approx(2 * 32 / step)
        assert pred.scaling_efficiency == pytest.approx(rate.step_s / step)
        assert pred.bound == "communication"


def test_gradient_accumulation_allreduces_once_per_optimizer_step():
    """With A micro-batches per optimizer step (DDP's no_sync, Horovod's backward_passes_per_step,
    --gradient_accumulation_steps) a step computes A micro-batches and allreduces once, only
    the last micro-batch's backward to hide behind: the network's share shrinks A-fold."""
    state = two_dgx1v()
    p = placement(("node-a", (0,)), ("node-b", (0,)))
    rate = compute_rate("vgg16", "V100", "fp32", 32)
    plain = predict_placement(state.by_name, p, "vgg16", 32, overlap=0.5)
    for steps in (1, 4, 16):
        pred = predict_placement(state.by_name, p, "vgg16", 32, overlap=0.5, accumulation=steps)
        hidden = 0.5 * (pred.comm_s - exposed_allreduce_s("vgg16", pred.comm_s, rate.backward_s))
        sync = sync_time_s(p, 32 * steps, steps * rate.step_s)
        assert pred.comm_s == plain.comm_s and pred.compute_s == pytest.approx(steps * rate.step_s)
        assert pred.step_time_s == pytest.approx(steps * rate.step_s + pred.comm_s - hidden + sync)
        assert pred.images_per_s == pytest.approx(2 * 32 * steps / pred.step_time_s)
        assert pred.as_dict()["accumulation"] == steps
    assert predict_placement(state.by_name, p, "vgg16", 32, overlap=0.5, accumulation=1) == plain
    spread = [predict_placement(state.by_name, p, "vgg16", 32, accumulation=a).scaling_efficiency for a in (1, 4, 16)]
    assert spread == sorted(spread) and spread[-1] > 5 * spread[0]  # 13% of one node over TCP, 70% at 16
    with pytest.raises(UsageError, match="accumulation"):
        predict_placement(state.by_name, p, "vgg16", 32, accumulation=0)


def test_the_sync_term_grows_with_ranks_per_node_and_with_nodes():
    quad = placement(*(("node-a", (g,)) for g in range(4)))
    two_nodes = placement(("node-a", (0,)), ("node-b", (0,)))
    # 3 extra ranks on one host x 64 images x 20 us; 2 nodes: 0.01 x 0.5 s x sqrt(2 ln 2)
    assert sync_time_s(quad, 64, 0.5, 20.0, 0.01) == pytest.approx(3 * 64 * 20e-6)
    assert sync_time_s(two_nodes, 64, 0.5, 20.0, 0.01) == pytest.approx(0.01 * 0.5 * math.sqrt(2 * math.log(2)))
    assert sync_time_s(placement(("node-a", (0,))), 64, 0.5, 20.0, 0.01) == 0.0
    state = two_dgx1v()
    one = predict_placement(state.by_name, placement(("node-a", (0,))), "resnet50", 64)
    four = predict_placement(state.by_name, quad, "resnet50", 64)
    assert four.sync_s > 0 and 0.9 < four.scaling_efficiency < 0.99 and one.sync_s == 0


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
    assert "H100" in err.value.one_line() and "K80" in err.value.one_line()
    with pytest.raises(UsageError, match="unknown model 'lenet'") as err:
        predict_placement(state.by_name, p, "lenet", 64)
    assert "resnet50" in err.value.one_line()
    assert "derived" in predict_placement(state.by_name, p, "googlenet", 64).compute_source
    gpus = ("K80", "P100", "V100", "T4", "A10", "L4", "L40S", "A100", "A100-80GB", "H100", "H100-PCIe", "H200", "GH200")
    for gpu in gpus:
        assert gpu in gpu_types()
    for model in ("resnet18", "resnet101", "vgg19", "inception4", "mobilenetv2", "efficientnetb0", "bertbase",
                  "bertlarge", "gpt2", "gpt2medium", "transformerbig"):
        assert model in known_models()
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
    top, default = preds["topology"], preds["default"]
    assert top is not None and default is not None
    assert line == (f"predicted {top.images_per_s:.0f} images/s (compute-bound); default placement would give "
                    f"{default.images_per_s:.0f} ({top.images_per_s / default.images_per_s:.1f}x)")
    assert top.images_per_s > 4 * default.images_per_s
    assert comparison_line({"topology": None}, "topology") == "topology cannot place the job"


SHARED_TOPOLOGIES = Path(__file__).resolve().parents[2] / ".." / "shared" / "reference" / "topologies"


def shared_topology(name: str, gpu_model: str):
    from ringleader.topology.smi import parse_topo_text

    path = SHARED_TOPOLOGIES / name
    if not path.exists():
        pytest.skip(f"{path} is absent (the shared reference topologies are not checked out here)")
    return parse_topo_text(path.read_text(), gpu_model=gpu_model)


def test_nvswitch_nodes_give_each_gpu_its_links_not_a_sum_over_peers():
    from ringleader.model.comm import nvswitch_gbs

    assert nvswitch_gbs(preset("dgx-a100")) == pytest.approx(300.0)
    assert nvswitch_gbs(preset("dgx-h100")) == pytest.approx(450.0)
    assert nvswitch_gbs(preset("dgx2")) == pytest.approx(150.0)
    assert nvswitch_gbs(preset("dgx1v")) is None
    ns = NodeState(NodeSpec("a", preset("dgx-a100")))
    for gpus in ((0, 1), (0, 1, 2, 3), tuple(range(8))):
        hop = intra_node_hop(ns, gpus)
        assert (hop.kind, hop.gbs) == ("NVSwitch", pytest.approx(300.0))
    # a DGX-1V quad is still its NVLinks (4 x 25), within the V100's own 150 GB/s
    assert intra_node_hop(NodeState(NodeSpec("v", preset("dgx1v"))), (0, 1, 2, 3)).gbs == pytest.approx(100.0)


def test_fabric_and_nics_come_from_the_topology():
    from ringleader.model.comm import fabric_of, nics_near

    a100 = shared_topology("a100_sxm_8gpu_nv12_17nics.txt", "A100-80GB")
    assert fabric_of(a100) == "infiniband"
    assert nics_near(a100, (0,)) == 1  # one GPU uses one NIC, however many sit beside it
    assert nics_near(a100, tuple(range(8))) == 8
    assert fabric_of(preset("dgx1v")) == "tcp" and nics_near(preset("dgx1v"), (0, 1)) == 1
    dgx1 = shared_topology("v100_dgx1_8gpu_4ib_unsorted_nics_old_legend.txt", "V100")
    assert fabric_of(dgx1) == "infiniband" and nics_near(dgx1, tuple(range(8))) == 4


def test_more_nics_near_the_job_make_the_network_faster():
    a100 = shared_topology("a100_sxm_8gpu_nv12_17nics.txt", "A100-80GB")
    state = ClusterState.empty([NodeSpec(n, a100, 200.0) for n in ("x", "y")])
    one = placement(("x", (0,)), ("y", (0,)))
    eight = placement(*((n, (g,)) for n in ("x", "y") for g in range(8)))
    t1 = allreduce_time_s(state.by_name, one, 100 * MB, algorithm="ring")
    t8 = allreduce_time_s(state.by_name, eight, 100 * MB, algorithm="hierarchical")
    # 8 NICs x 200 Gb/s x 0.9 against 1 NIC: the 16-GPU allreduce is not 8x slower per byte
    assert t8 < t1
