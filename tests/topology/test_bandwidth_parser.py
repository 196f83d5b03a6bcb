"""Measured bandwidth: whole p2pBandwidthLatencyTest outputs with a matrix choice, bare matrices,
bidirectional numbers halved, and warnings where a measurement contradicts its link kind."""

from __future__ import annotations

from pathlib import Path

import pytest

from refdata import reference_file
from ringleader.errors import TopologyError
from ringleader.topology import MATRICES, NodeTopology, load_cluster_text, parse_bandwidth_text, preset


def p2p_test_output(uni_p2p: list[list[float]], factor_bi: float = 1.8, p2p_off: float = 10.0) -> str:
    """Text laid out as CUDA's p2pBandwidthLatencyTest prints it (its printf formats: `   D\\D`,
    `%6d `, `%6.02f `), around one known unidirectional P2P matrix. The other matrices are
    derived so each is recognisable: P2P disabled = ``p2p_off`` GB/s, bidirectional = factor x."""
    n = len(uni_p2p)

    def table(title: str, values: list[list[float]], corner: str = "   D\\D") -> list[str]:
        out = [title, corner + "".join(f"{j:6d} " for j in range(n))]
        out += [f"{i:6d} " + "".join(f"{v:6.02f} " for v in row) for i, row in enumerate(values)]
        return out

    def off(v: float) -> list[list[float]]:
        return [[700.0 if i == j else v for j in range(n)] for i in range(n)]

    bi = [[v * factor_bi for v in row] for row in uni_p2p]
    lines = ["[P2P (Peer-to-Peer) GPU Bandwidth Latency Test]"]
    lines += [
        f"Device: {i}, Tesla V100-SXM2-32GB, pciBusID: {i + 10:x}, pciDeviceID: 0, pciDomainID:0" for i in range(n)
    ]
    lines += [f"Device={i} CAN Access Peer Device={j}" for i in range(n) for j in range(n) if i != j]
    lines += ["", "***NOTE: In case a device doesn't have P2P access to other one, "
        "it falls back to normal memcopy procedure.",
              "So you can see lesser Bandwidth (GB/s) and unstable Latency (us) in those cases.", "",
              "P2P Connectivity Matrix", "     D\\D" + "".join(f"{j:6d}" for j in range(n))]  # fmt: skip
    lines += [f"{i:6d}\t" + "".join(f"{1:6d}" for _ in range(n)) for i in range(n)]
    lines += table("Unidirectional P2P=Disabled Bandwidth Matrix (GB/s)", off(p2p_off))
    lines += table("Unidirectional P2P=Enabled Bandwidth (P2P Writes) Matrix (GB/s)", uni_p2p)
    lines += table("Bidirectional P2P=Disabled Bandwidth Matrix (GB/s)", off(p2p_off * factor_bi))
    lines += table("Bidirectional P2P=Enabled Bandwidth Matrix (GB/s)", bi)
    lines += [*table("P2P=Disabled Latency Matrix (us)", off(12.0), "   GPU"), ""]
    lines += table("", off(5.0), "   CPU")[1:]
    lines += table("P2P=Enabled Latency (P2P Writes) Matrix (us)", off(2.0), "   GPU")
    lines += [
        "",
        "NOTE: The CUDA Samples are not meant for performance measurements. "
        "Results may vary when GPU Boost is enabled.",
    ]
    return "\n".join(lines) + "\n"


def hcm_matrix() -> list[list[float]]:
    bw = preset("dgx1v").bandwidth_gbs
    return [[750.0 if i == j else bw[i][j] * 0.97 for j in range(8)] for i in range(8)]


def test_whole_p2p_output_defaults_to_unidirectional_p2p_enabled() -> None:
    uni = hcm_matrix()
    got = parse_bandwidth_text(p2p_test_output(uni))
    assert got[0][3] == pytest.approx(round(uni[0][3], 2)) and got[0][0] == 0.0


@pytest.mark.parametrize(
    ("choice", "expected_0_1"),
    [
        ("unidirectional-p2p", 24.25),
        ("unidirectional-no-p2p", 10.0),
        ("bidirectional-p2p", 24.25 * 1.8 / 2),  # halved: one direction
        ("bidirectional-no-p2p", 18.0 / 2),
    ],
)
def test_each_matrix_of_the_output_can_be_chosen(choice: str, expected_0_1: float) -> None:
    got = parse_bandwidth_text(p2p_test_output(hcm_matrix()), choice)
    assert got[0][1] == pytest.approx(expected_0_1, abs=0.01)
    assert set(MATRICES) >= {choice}


def test_a_bare_matrix_labelled_bidirectional_is_halved() -> None:
    text = "   D\\D     0      1\n     0 700.00  40.00\n     1  40.00 700.00\n"
    assert parse_bandwidth_text(text)[0][1] == 40.0
    assert parse_bandwidth_text(text, "bidirectional-p2p")[0][1] == 20.0


def test_koordinator_matrix_loads_and_its_slower_direction_counts(tmp_path: Path) -> None:
    (tmp_path / "bw.txt").write_text(reference_file("bandwidth/koordinator_8gpu_v100_bandwidth.txt").read_text())
    (spec,) = load_cluster_text("nodes:\n  - name: k\n    preset: dgx1v\n    bandwidth_file: bw.txt\n", tmp_path)
    assert spec.topology.bandwidth_gbs[1][4] == pytest.approx(4.64)
    assert spec.topology.bandwidth_gbs[0][3] == pytest.approx(96.25)
    # That matrix is not a DGX-1V's: GPU0-GPU6 crosses sockets on a DGX-1V but ran at NVLink speed.
    assert any(w.startswith("GPU0-GPU6 is SYS but measured 96.4") for w in spec.topology.warnings)


def test_arena_sample_cut_short_is_rejected_with_its_line() -> None:
    text = reference_file("bandwidth/arena_4gpu_nvlink_linktype_and_bandwidth.txt").read_text()
    with pytest.raises(TopologyError) as err:
        parse_bandwidth_text(text)
    line_no = next(i for i, ln in enumerate(text.splitlines(), 1) if ln.split()[:1] == ["GPU3"] and "744.76" in ln)
    assert f"line {line_no}: row GPU3 has 3 value(s), expected 4" in err.value.one_line()


def test_nvlink_pair_measured_at_pcie_speed_is_warned() -> None:
    links = preset("dgx1v").links
    measured = tuple(tuple(0.0 if i == j else 40.0 for j in range(8)) for i in range(8))
    slow = [list(r) for r in measured]
    slow[0][3] = slow[3][0] = 11.0  # an NV2 pair at 11 GB/s: P2P off or a link down
    topo = NodeTopology(links=links, measured_gbs=tuple(tuple(r) for r in slow))
    assert topo.warnings == ("GPU0-GPU3 is NV2 but measured 11 GB/s, below PCIe (16)",)


@pytest.mark.parametrize(
    ("text", "choice", "expected"),
    [
        ("hello\n", None, "no bandwidth matrix found"),
        ("   D\\D 0 1\n 0 1 2\n", "sideways", "unknown bandwidth matrix 'sideways'"),
        ("   D\\D 0 1\n 0 700 0\n 1 5 700\n", None, "line 2: row 0 value '0' for GPU 1 is not > 0"),
        ("   D\\D 0 1\n 0 700 N/A\n 1 5 700\n", None, "line 2: row 0 has no value for GPU 1"),
        ("   D\\D 0 1 2\n 0 700 5 5\n 1 5 700 5\n", None, "2 row(s) for 3 columns"),
    ],
)
def test_broken_bandwidth_text_is_one_line(text: str, choice: str | None, expected: str) -> None:
    with pytest.raises(TopologyError) as err:
        parse_bandwidth_text(text, choice)
    assert expected in err.value.one_line() and "\n" not in err.value.one_line()


def test_a_choice_absent_from_the_output_lists_what_is_there() -> None:
    text = "Unidirectional P2P=Enabled Bandwidth Matrix (GB/s)\n   D\\D 0 1\n 0 700 40\n 1 40 700\n"
    with pytest.raises(
        TopologyError, match=r"no bidirectional-p2p matrix in the text \(found: 'Unidirectional P2P=Enabled"
    ):
        parse_bandwidth_text(text, "bidirectional-p2p")


def test_an_output_with_only_bidirectional_matrices_is_halved_with_a_note(tmp_path: Path) -> None:
    """Some saved outputs keep only the bidirectional tables: used, halved, and said so (they
    were refused, the fix naming the option); an explicit choice silences the note."""
    full = p2p_test_output(hcm_matrix())
    tables = full.split("Unidirectional P2P=Disabled")[0] + "Bidirectional P2P=Disabled" + full.split(
        "Bidirectional P2P=Disabled", 1)[1]  # fmt: skip
    assert "Unidirectional" not in tables
    (tmp_path / "bw.txt").write_text(tables)
    (spec,) = load_cluster_text("nodes:\n  - name: k\n    preset: dgx1v\n    bandwidth_file: bw.txt\n", tmp_path)
    assert spec.topology.bandwidth_gbs[0][1] == pytest.approx(24.25 * 1.8 / 2, abs=0.01)
    assert spec.topology.warnings[0].startswith("no unidirectional matrix: 'Bidirectional P2P=Enabled Bandwidth")
    assert "halved" in spec.topology.warnings[0]
    (spec,) = load_cluster_text("nodes:\n  - name: k\n    preset: dgx1v\n    bandwidth_file: bw.txt\n"
                                "    bandwidth_matrix: bidirectional-p2p\n", tmp_path)  # fmt: skip
    assert spec.topology.warnings == () and spec.topology.bandwidth_gbs[0][1] == pytest.approx(21.83, abs=0.01)
    from ringleader.jobs.codec import topology_from_dict, topology_to_dict

    stored = topology_from_dict(topology_to_dict(load_cluster_text(
        "nodes:\n  - name: k\n    preset: dgx1v\n    bandwidth_file: bw.txt\n", tmp_path)[0].topology))  # fmt: skip
    assert stored.notes and stored.warnings[0].startswith("no unidirectional matrix")  # kept in the state
