"""Presets are the documented machines; cluster files fail with the line that is wrong."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ringleader.errors import TopologyError, UsageError
from ringleader.topology import MAX_GPUS_PER_NODE, PRESETS, load_cluster_text, preset


def test_hybrid_cube_mesh_has_two_fully_nvlinked_quads() -> None:
    topo = preset("dgx1v")
    for quad in ((0, 1, 2, 3), (4, 5, 6, 7)):
        assert all(topo.link(a, b).is_nvlink for a in quad for b in quad if a != b)
    assert str(topo.link(0, 5)) == "SYS"
    assert preset("gn6v") == topo


@pytest.mark.parametrize(
    ("name", "gpus", "link"), [("dgx2", 16, "NV6"), ("dgx-a100", 8, "NV12"), ("dgx-h100", 8, "NV18")]
)
def test_nvswitch_presets_link_every_pair(name: str, gpus: int, link: str) -> None:
    topo = preset(name)
    assert topo.n_gpus == gpus
    assert {str(topo.link(a, b)) for a in range(gpus) for b in range(gpus) if a != b} == {link}


def test_pcie_presets_order_links_by_distance() -> None:
    topo = preset("pcie-8gpu-2socket")
    assert [str(topo.link(0, j)) for j in (1, 2, 4)] == ["PIX", "NODE", "SYS"]
    bw = topo.bandwidth_gbs
    assert bw[0][1] > bw[0][2] > bw[0][4]


def test_unknown_preset_lists_the_known_ones() -> None:
    with pytest.raises(TopologyError) as err:
        preset("dgx-9000")
    assert all(name in err.value.fix for name in PRESETS)


def test_cluster_file_expands_count_and_keeps_labels(tmp_path: Path) -> None:
    specs = load_cluster_text(
        "nodes:\n  - name: v100\n    preset: dgx1v\n    count: 3\n    network_gbps: 100\n"
        "    labels: {gpu-schedule: topology}\n    emulated: true\n",
        tmp_path,
    )
    assert [s.name for s in specs] == ["v100-0", "v100-1", "v100-2"]
    assert specs[0].schedule_mode == "topology"
    assert specs[0].network_gbs == 12.5


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("nodes:\n  - name: a\n    preset: dgx1v\n  - name: B\n    preset: dgx1v\n", "line 4: invalid node name 'B'"),
        ("nodes:\n  - name: a\n    preset: nope\n", "line 2: unknown preset 'nope'"),
        ("nodes:\n  - name: a\n    preset: dgx1v\n    colour: red\n", "line 2: unknown key 'colour'"),
        ("nodes:\n  - name: a\n    preset: dgx1v\n    labels: {gpu-schedule: fast}\n", "is not a mode"),
        ("nodes:\n  - name: a\n", "exactly one of preset, matrix, matrix_file"),
        ("nodes: [\n", "not valid YAML"),
        ("nodes:\n  - name: a\n    preset: dgx1v\n  - name: a\n    preset: dgx1v\n", "declared twice"),
        ("nodes:\n  - name: a\n    matrix: [[X, NV1], [NV2, X]]\n", "not symmetric"),
    ],
)
def test_malformed_cluster_files(tmp_path: Path, text: str, expected: str) -> None:
    with pytest.raises(UsageError) as err:
        load_cluster_text(text, tmp_path)
    assert expected in err.value.one_line()


def test_a_node_over_the_gpu_limit_is_refused_in_one_line(tmp_path: Path) -> None:
    n = MAX_GPUS_PER_NODE + 1
    rows = [["X" if i == j else "NV18" for j in range(n)] for i in range(n)]
    text = "nodes:\n  - name: ok\n    preset: dgx1v\n  - name: huge\n    matrix: " + json.dumps(rows) + "\n"
    with pytest.raises(TopologyError) as err:
        load_cluster_text(text, tmp_path)
    line = err.value.one_line()
    assert line.startswith("cluster file line 4: ") and f"{n} GPUs, more than the {MAX_GPUS_PER_NODE}" in line


def test_nvlink_domain_and_bandwidth_matrix_keys(tmp_path: Path) -> None:
    bw = "Bidirectional P2P=Enabled Bandwidth Matrix (GB/s)\n   D\\D 0 1\n 0 900 80\n 1 80 900\n"
    (tmp_path / "bw.txt").write_text(bw)
    text = (
        "nodes:\n  - name: tray\n    matrix: [[X, NV18], [NV18, X]]\n    count: 2\n    nvlink_domain: nvl72-a\n"
        "    bandwidth_file: bw.txt\n    bandwidth_matrix: bidirectional-p2p\n"
    )
    specs = load_cluster_text(text, tmp_path)
    assert [s.nvlink_domain for s in specs] == ["nvl72-a", "nvl72-a"]
    assert specs[0].topology.bandwidth_gbs[0][1] == 40.0
    assert specs[0].topology.warnings == ()


def test_binary_matrix_file_is_named(tmp_path: Path) -> None:
    (tmp_path / "topo.txt").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")
    with pytest.raises(TopologyError) as err:
        load_cluster_text("nodes:\n  - name: a\n    matrix_file: topo.txt\n", tmp_path)
    assert "topo.txt" in err.value.one_line() and "binary data" in err.value.one_line()
