"""The `nvidia-smi topo -m` parser on real outputs and on broken ones."""

from __future__ import annotations

import pytest

from refdata import REFERENCE_TOPOLOGIES, reference_file
from ringleader.errors import TopologyError
from ringleader.topology import PRESETS, Link, parse_topo_text, preset, render_topo_text

REAL_OUTPUTS = {
    # file: (GPUs, NIC names in column order, link GPU0-GPU1, NUMA of GPU0)
    "a100_sxm_8gpu_nv12_17nics.txt": (8, 17, "NV12", 0),
    "h100_sxm_8gpu_nv18_no_nics.txt": (8, 0, "NV18", 0),
    "hived_4x_k80_node.txt": (4, 0, "NODE", None),
    "nvlink_bridge_2gpu_nv2.txt": (2, 0, "NV2", None),
    "pcie_2x_gtx1080ti_desktop_phb.txt": (2, 0, "PHB", None),
    "pcie_4x_a10_sys_2nics.txt": (4, 2, "SYS", 0),
    "pcie_8x_rtx4090_all_sys_2nics_tabs.txt": (8, 2, "SYS", 0),
    "v100_dgx1_8gpu_4ib_unsorted_nics_old_legend.txt": (8, 4, "NV1", None),
    "v100_sxm2_8gpu_hybrid_cube_mesh_dlperf.txt": (8, 1, "NV1", None),
}


@pytest.mark.parametrize("name", sorted(REAL_OUTPUTS))
def test_parses_every_real_output(name: str) -> None:
    gpus, nics, link01, numa0 = REAL_OUTPUTS[name]
    topo = parse_topo_text(reference_file(name).read_text())
    assert topo.n_gpus == gpus
    assert len(topo.nics) == nics
    assert str(topo.link(0, 1)) == link01
    assert topo.numa[0] == numa0


def test_every_reference_file_is_covered() -> None:
    if not REFERENCE_TOPOLOGIES.exists():
        pytest.skip("reference material not present")
    assert {p.name for p in REFERENCE_TOPOLOGIES.glob("*.txt")} - {"README.md"} == set(REAL_OUTPUTS)


def test_nic_legend_maps_nic_columns_to_device_names() -> None:
    topo = parse_topo_text(reference_file("pcie_4x_a10_sys_2nics.txt").read_text())
    assert topo.nics == ("mlx5_0", "mlx5_1")


def test_unsorted_nic_columns_keep_their_order() -> None:
    topo = parse_topo_text(reference_file("v100_dgx1_8gpu_4ib_unsorted_nics_old_legend.txt").read_text())
    assert topo.nics == ("mlx5_2", "mlx5_0", "mlx5_3", "mlx5_1")
    assert str(topo.nic_links[0][1]) == "PIX"  # GPU0 sits beside mlx5_0


def test_numa_affinity_from_dual_socket_output() -> None:
    topo = parse_topo_text(reference_file("h100_sxm_8gpu_nv18_no_nics.txt").read_text())
    assert topo.numa == (0, 0, 0, 0, 1, 1, 1, 1)
    assert topo.cpu_affinity[4] == "52-103,156-207"


def test_dgx1v_preset_matches_the_published_matrix() -> None:
    published = parse_topo_text(reference_file("v100_sxm2_8gpu_hybrid_cube_mesh_dlperf.txt").read_text())
    assert published.links == preset("dgx1v").links


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_render_round_trips(name: str) -> None:
    topo = preset(name)
    again = parse_topo_text(render_topo_text(topo))
    assert again.links == topo.links
    assert again.numa == topo.numa


def test_soc_is_the_old_name_of_sys() -> None:
    assert Link.parse("SOC") == Link("SYS")


BROKEN = {
    "no header": ("GPU0 X\n", "no `nvidia-smi topo -m` header"),
    "short row": ("\tGPU0\tGPU1\nGPU0\tX\tNV1\nGPU1\tNV1\n", "line 3: row GPU1 has 1 link cells, expected 2"),
    "unknown kind": ("\tGPU0\tGPU1\nGPU0\tX\tNVX\nGPU1\tNVX\tX\n", "unknown link kind 'NVX'"),
    "asymmetric": ("\tGPU0\tGPU1\nGPU0\tX\tNV1\nGPU1\tNV2\tX\n", "not symmetric"),
    "missing row": ("\tGPU0\tGPU1\nGPU0\tX\tNV1\n", "no row for GPU1"),
    "gap in columns": ("\tGPU0\tGPU2\nGPU0\tX\tNV1\nGPU2\tNV1\tX\n", "columns must be GPU0"),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_broken_text_names_the_problem(case: str) -> None:
    text, expected = BROKEN[case]
    with pytest.raises(TopologyError) as err:
        parse_topo_text(text)
    assert expected in err.value.one_line()
