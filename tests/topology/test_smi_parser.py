"""The `nvidia-smi topo -m` parser on every real output, on terminal and Grace shapes, and on
broken text (each error names its line)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from refdata import REFERENCE_TOPOLOGIES, reference_file
from ringleader.errors import TopologyError
from ringleader.topology import (
    MAX_GPUS_PER_NODE,
    PRESETS,
    Link,
    parse_topo_text,
    preset,
    read_text_file,
    render_topo_text,
)

# Facts per real output, in our own words: GPUs, NICs, the one link kind every GPU pair shares
# (None: mixed, checked below), NUMA node per GPU.
REAL_OUTPUTS: dict[str, tuple[int, int, str | None, tuple[int | None, ...]]] = {
    "a100_sxm_8gpu_nv12_17nics.txt": (8, 17, "NV12", (0,) * 8),
    "h100_sxm_8gpu_nv18_no_nics.txt": (8, 0, "NV18", (0, 0, 0, 0, 1, 1, 1, 1)),
    "hived_4x_k80_node.txt": (4, 0, "NODE", (None,) * 4),
    "nvlink_bridge_2gpu_nv2.txt": (2, 0, "NV2", (None,) * 2),
    "pcie_2x_gtx1080ti_desktop_phb.txt": (2, 0, "PHB", (None,) * 2),
    "pcie_4x_a10_sys_2nics.txt": (4, 2, "SYS", (0,) * 4),
    "pcie_8x_rtx4090_all_sys_2nics_tabs.txt": (8, 2, "SYS", (0, 0, 0, 0, 1, 1, 1, 1)),
    "v100_dgx1_8gpu_4ib_unsorted_nics_old_legend.txt": (8, 4, None, (None,) * 8),
    "v100_sxm2_8gpu_hybrid_cube_mesh_dlperf.txt": (8, 1, None, (None,) * 8),
}


def printed_gpu_rows(text: str, n: int) -> list[list[str]]:
    """What the file shows, read the simplest way: the n cells after each GPU<i> label."""
    rows = []
    for i in range(n):
        line = next(ln for ln in text.splitlines() if ln.split()[:1] == [f"GPU{i}"] and "X" in ln.split())
        rows.append(line.split()[1 : 1 + n])
    return rows


@pytest.mark.parametrize("name", sorted(REAL_OUTPUTS))
def test_every_real_output_parses_to_the_matrix_it_shows(name: str) -> None:
    gpus, nics, uniform, numa = REAL_OUTPUTS[name]
    text = reference_file(name).read_text()
    topo = parse_topo_text(text)
    assert topo.n_gpus == gpus and len(topo.nics) == nics and topo.numa == numa
    assert [[str(link) for link in row] for row in topo.links] == [
        [cell.strip().replace("SOC", "SYS") for cell in row] for row in printed_gpu_rows(text, gpus)
    ]
    if uniform:
        assert {str(topo.link(a, b)) for a in range(gpus) for b in range(gpus) if a != b} == {uniform}


def test_every_reference_file_is_covered() -> None:
    if not REFERENCE_TOPOLOGIES.exists():
        pytest.skip("reference material not present")
    assert {p.name for p in REFERENCE_TOPOLOGIES.glob("*.txt")} == set(REAL_OUTPUTS)


def test_hybrid_cube_mesh_outputs_match_the_preset() -> None:
    for name in ("v100_sxm2_8gpu_hybrid_cube_mesh_dlperf.txt", "v100_dgx1_8gpu_4ib_unsorted_nics_old_legend.txt"):
        assert parse_topo_text(reference_file(name).read_text()).links == preset("dgx1v").links


def test_nic_columns_keep_their_names_order_and_links() -> None:
    a10 = parse_topo_text(reference_file("pcie_4x_a10_sys_2nics.txt").read_text())
    assert a10.nics == ("mlx5_0", "mlx5_1")
    dgx1 = parse_topo_text(reference_file("v100_dgx1_8gpu_4ib_unsorted_nics_old_legend.txt").read_text())
    assert dgx1.nics == ("mlx5_2", "mlx5_0", "mlx5_3", "mlx5_1")
    assert [str(link) for link in dgx1.nic_links[0]] == ["SYS", "PIX", "SYS", "PHB"]
    a100 = parse_topo_text(reference_file("a100_sxm_8gpu_nv12_17nics.txt").read_text())
    assert a100.nics[-1] == "mlx5_bond_0"
    # GPUs 2k and 2k+1 sit behind the PCIe switches of NICs 4k..4k+3.
    for gpu in range(8):
        assert [k for k, link in enumerate(a100.nic_links[gpu]) if str(link) == "PXB"] == [
            4 * (gpu // 2) + j for j in range(4)
        ]
    rtx = parse_topo_text(reference_file("pcie_8x_rtx4090_all_sys_2nics_tabs.txt").read_text())
    assert [str(link) for link in rtx.nic_links[6]] == ["PHB", "PHB"]


def test_cpu_affinity_and_gpu_numa_id_columns() -> None:
    h100 = parse_topo_text(reference_file("h100_sxm_8gpu_nv18_no_nics.txt").read_text())
    assert h100.cpu_affinity[4] == "52-103,156-207"
    rtx = parse_topo_text(reference_file("pcie_8x_rtx4090_all_sys_2nics_tabs.txt").read_text())
    assert rtx.gpu_numa_id == (None,) * 8 and rtx.numa_groups == (0, 0, 0, 0, 1, 1, 1, 1)


# A Grace Hopper superchip as `nvidia-smi topo -m` prints it (NUMA lists, GPU NUMA ID), in our words.
GH200 = """\
\tGPU0\tNIC0\tNIC1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID
GPU0\t X \tNODE\tNODE\t0-71\t0,5-11\t1
NIC0\tNODE\t X \tPIX
NIC1\tNODE\tPIX\t X

NIC Legend:

  NIC0: mlx5_0
  NIC1: mlx5_1
"""


def test_grace_hopper_keeps_numa_lists_and_the_gpu_numa_id() -> None:
    topo = parse_topo_text(GH200)
    assert topo.numa_affinity == ((0, 5, 6, 7, 8, 9, 10, 11),)
    assert topo.numa == (0,) and topo.gpu_numa_id == (1,)
    again = parse_topo_text(render_topo_text(topo))
    assert (again.numa_affinity, again.gpu_numa_id, again.nics) == (topo.numa_affinity, (1,), ("mlx5_0", "mlx5_1"))


def test_ansi_codes_of_a_terminal_are_ignored() -> None:
    text = reference_file("h100_sxm_8gpu_nv18_no_nics.txt").read_text()
    underlined = re.sub(r"(GPU\d|CPU Affinity|NUMA Affinity)", "\x1b[4m\\1\x1b[0m", text)
    assert "\x1b[4mGPU0\x1b[0m" in underlined
    assert parse_topo_text(underlined) == parse_topo_text(text)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_render_round_trips(name: str) -> None:
    topo = preset(name)
    again = parse_topo_text(render_topo_text(topo))
    assert again.links == topo.links
    assert again.numa == topo.numa


def test_soc_is_the_old_name_of_sys() -> None:
    assert Link.parse("SOC") == Link("SYS")


H = "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\n"
CUT = "row GPU1 has 1 affinity cell(s)"
BROKEN = {
    "no header": ("GPU0 X\n", "no `nvidia-smi topo -m` header"),
    "short row": ("\tGPU0\tGPU1\nGPU0\tX\tNV1\nGPU1\tNV1\n", "line 3: row GPU1 has 1 link cells, expected 2"),
    "unknown kind": ("\tGPU0\tGPU1\nGPU0\tX\tNVX\nGPU1\tNVX\tX\n", "line 2: GPU0 column GPU1: unknown link kind 'NVX'"),
    "asymmetric": ("\tGPU0\tGPU1\nGPU0\tX\tNV1\nGPU1\tNV2\tX\n", "not symmetric"),
    "missing row": ("\tGPU0\tGPU1\nGPU0\tX\tNV1\n", "no row for GPU1"),
    "gap in columns": ("\tGPU0\tGPU2\nGPU0\tX\tNV1\nGPU2\tNV1\tX\n", "columns must be GPU0"),
    "cut in the NUMA cell": (
        H + "GPU0\tX\tNV1\t0-11\t0\nGPU1\tNV1\tX\t0-11\n",
        f"line 3: {CUT}",
    ),
    "cut in the CPU cell": (H + "GPU0\tX\tNV1\t0-11\t0\nGPU1\tNV1\tX\t0-\n", f"line 3: {CUT}"),
    "cut NUMA list": (
        H + "GPU0\tX\tNV1\t0-11\t0,5-\nGPU1\tNV1\tX\t0-11\t0\n",
        "line 2: row GPU0: NUMA affinity '0,5-'",
    ),
    "cut CPU list": (H + "GPU0\tX\tNV1\t0-11,\t0\nGPU1\tNV1\tX\t0-11\t0\n", "line 2: row GPU0: CPU affinity '0-11,'"),
    "extra cell": (H + "GPU0\tX\tNV1\t0-11\t0\t7\nGPU1\tNV1\tX\t0-11\t0\n", "line 2: row GPU0 has 3 affinity cell(s)"),
    "duplicate row": (H + "GPU0\tX\tNV1\t0\t0\nGPU0\tX\tNV1\t0\t0\n", "line 3: row GPU0 appears twice"),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_broken_text_names_the_problem_and_its_line(case: str) -> None:
    text, expected = BROKEN[case]
    with pytest.raises(TopologyError) as err:
        parse_topo_text(text)
    assert expected in err.value.one_line()
    assert "\n" not in err.value.one_line()


def test_more_gpus_than_a_node_may_have_is_one_line() -> None:
    n = MAX_GPUS_PER_NODE + 1
    text = (
        "\t"
        + "\t".join(f"GPU{i}" for i in range(n))
        + "\n"
        + "\n".join(f"GPU{i}\t" + "\t".join("X" if i == j else "NV1" for j in range(n)) for i in range(n))
    )
    with pytest.raises(TopologyError, match=f"{n} GPUs, more than the {MAX_GPUS_PER_NODE}"):
        parse_topo_text(text)


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"\x7fELF\x02\x01\x01\x00\x00", "line 1: binary data"),
        (b"\tGPU0\nGPU0\tX\n\xff\xfe junk", "line 3: not UTF-8 text (byte 0xff"),
    ],
)
def test_binary_or_non_utf8_file_is_named_in_one_line(tmp_path: Path, data: bytes, expected: str) -> None:
    path = tmp_path / "topo.txt"
    path.write_bytes(data)
    with pytest.raises(TopologyError) as err:
        read_text_file(path)
    line = err.value.one_line()
    assert str(path) in line and expected in line and "\n" not in line
