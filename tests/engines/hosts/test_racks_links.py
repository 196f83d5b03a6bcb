"""What `cluster up` builds for a network tree, without root: one bridge per switch, each with
its parent and its uplink's shaped rate (the model's uplink: nodes' network / oversubscription),
and the tree carried into the cluster file it writes."""

from __future__ import annotations

from pathlib import Path

from ringleader.engines.embedded.hosts.netns import network_section, switch_links
from ringleader.topology import load_cluster_text

THREE_LEVELS = """nodes:
  - {name: n, matrix: [[X]], network_gbps: 100, count: 8}
network:
  levels:
    - {name: rack, oversubscription: 2}
    - {name: block, uplink_gbps: 100}
    - {name: spine}
  switches:
    - {name: r1, nodes: "n-[0-1]"}
    - {name: r2, nodes: "n-[2-3]"}
    - {name: r3, nodes: "n-[4-7]"}
    - {name: b1, switches: "r[1-2]"}
    - {name: b2, switches: r3}
    - {name: top, switches: "b[1-2]"}
"""


def test_each_switch_gets_its_parent_and_its_uplink_shaped_to_nodes_over_ratio() -> None:
    links = {link.switch: link for link in switch_links(load_cluster_text(THREE_LEVELS, Path(".")), 0.01)}
    assert list(links) == ["r1", "r2", "r3", "b1", "b2", "top"]  # nearest the nodes first
    assert (links["r1"].parent, links["r1"].mbit, links["r1"].nodes) == ("b1", 1000.0, ("n-0", "n-1"))
    assert links["r3"].mbit == 2000.0  # 4 x 100 Gb/s / 2 x 0.01
    # uplink_gbps 100 under 4 x 100 Gb/s of nodes: 4:1 for the level, so 100 Gb/s x 0.01 each
    assert links["b1"].mbit == links["b2"].mbit == 1000.0
    assert links["b1"].parent == "top" and links["top"].parent is None and links["top"].mbit is None


def test_a_cluster_without_tree_has_no_switches_and_keeps_its_section_out(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("nodes:\n  - {name: a, matrix: [[X]]}\n")
    assert switch_links(load_cluster_text(path.read_text(), tmp_path), 0.02) == []
    assert network_section(path) is None


def test_the_network_section_is_carried_with_its_file_made_absolute(tmp_path: Path) -> None:
    (tmp_path / "topology.conf").write_text("SwitchName=s0 Nodes=a\n")
    path = tmp_path / "c.yaml"
    path.write_text("nodes:\n  - {name: a, matrix: [[X]]}\nnetwork:\n  file: topology.conf\n")
    assert network_section(path) == {"file": str(tmp_path / "topology.conf")}
