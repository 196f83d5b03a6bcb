"""The network tree above the nodes, from every input format users have: real files first."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from ibfabrics import Fabric, fat_tree
from refdata import network_reference
from ringleader.errors import UsageError
from ringleader.topology import load_cluster_text
from ringleader.topology.network import expand_hostlist, tree_from_edges
from ringleader.topology.network_formats import (
    label_keys,
    load_network_text,
    parse_ibnetdiscover,
    parse_slurm_topology_conf,
    parse_slurm_topology_yaml,
    tree_from_hypernodes,
    tree_from_node_labels,
)


def groups(tree, level: int) -> set[frozenset[str]]:  # type: ignore[no-untyped-def]
    return {frozenset(nodes) for nodes in tree.switches[level].values()}


def labelled_nodes(path: Path) -> list[tuple[str, dict[str, str]]]:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d and "name" in (d.get("metadata") or {})]
    return [(d["metadata"]["name"], d["metadata"]["labels"]) for d in docs if "labels" in d["metadata"]]


# -- Slurm ------------------------------------------------------------------------------------


def test_real_slurm_tree_with_cross_connected_spines_reads_as_six_leaves_under_one_spine() -> None:
    tree = parse_slurm_topology_conf(network_reference("slurm/psmn_x5_tree.topology.conf").read_text())
    assert tree.level_names == ("leaf", "spine")
    sizes = {leaf: len(nodes) for leaf, nodes in tree.switches[0].items()}
    assert sizes == {"S-0008f1050020369c": 5, "S-0008f105002036b4": 24, "S-0002c90200417670": 24,
                     "S-0008f10500200b50": 21, "S-0008f10500108bba": 6, "S-0002c902004827b0": 9}  # fmt: skip
    assert len(tree.switches[1]) == 1  # five spines, cabled to each other and to every leaf
    assert tree.by_node["sl390lin7"][0] == "S-0002c90200417670"  # from the hostlist sl390lin[1-5,7-11,...]
    assert "sl390lin6" not in tree.by_node


def test_real_ibnetdiscover_agrees_with_the_sites_topology_conf_and_counts_2_to_1_leaves() -> None:
    conf = parse_slurm_topology_conf(network_reference("slurm/psmn_x5_tree.topology.conf").read_text())
    fabric = parse_ibnetdiscover(network_reference("ibnetdiscover/psmn_x5_qdr_mixed.ibnetdiscover.txt").read_text())
    assert set(fabric.switches[0]) == set(conf.switches[0])
    assert {k: len(v) for k, v in fabric.switches[0].items()} == {k: len(v) for k, v in conf.switches[0].items()}
    # The one host the site's file names by GUID sits under the same leaf in both.
    assert fabric.by_node["H-78e7d1030024535c"][0] == conf.by_node["H-78e7d1030024535c"][0] == "S-0008f1050020369c"
    assert fabric.levels[0].oversubscription == 2.0  # 24 hosts over 12 uplinks


def test_real_rail_optimized_ndr_fabric_joins_each_hosts_rails_and_ignores_sharp_nodes() -> None:
    text = network_reference("ibnetdiscover/ndr_dgx_rail_optimized_2level.topograph_example.ibnetdiscover.txt")
    tree = parse_ibnetdiscover(text.read_text())
    assert tree.level_names == ("leaf", "spine")
    assert len(tree.switches[1]) == 1
    assert all("IBLEAF" in leaf for leaf in tree.switches[0])  # rail groups, never a spine
    assert not any("Aggregation" in n for n in tree.nodes)
    assert "a08-p1-dgx-04-c17" in tree.by_node
    assert tree.levels[0].oversubscription <= 1.25  # non-blocking by design, a few uplinks down


def test_a_fat_tree_written_from_the_format_reads_as_its_levels_and_ratios() -> None:
    tree = parse_ibnetdiscover(fat_tree().text())
    assert tree.level_names == ("leaf", "spine") and len(tree.nodes) == 96
    assert len(tree.switches[0]) == 4 and len(tree.switches[1]) == 1
    assert tree.levels[0].oversubscription == 3.0  # 24 host ports over 8 uplinks
    assert tree.warnings == ()


def test_storage_hosts_on_a_spine_make_no_leaf_and_leave_the_ratios_alone() -> None:
    """Storage hosts hang off a spine: the spine is no leaf, they are no compute nodes (left out
    of the tree, named in a warning), and the leaves are 3:1 as their 24 host ports over 8
    uplinks make them, not the spine's ports over nothing."""
    fabric = fat_tree()
    for i in range(8):
        fabric.cable(fabric.host(f"storage-{i}"), "spine-1")
    tree = parse_ibnetdiscover(fabric.text(), "fabric.txt")
    assert tree.level_names == ("leaf", "spine") and len(tree.switches[0]) == 4
    assert len(tree.nodes) == 96 and not any(n.startswith("storage") for n in tree.nodes)
    assert tree.levels[0].oversubscription == 3.0
    [warning] = tree.warnings
    assert warning.startswith("fabric.txt: 8 host(s) on switches above the leaves are left out as no compute "
                              "node (storage or service hosts): storage-0, storage-1, ")


def test_a_director_chassis_is_one_switch_and_a_spare_line_card_adds_no_level() -> None:
    """Leaves cabled to a 648-port director: its line and spine chips share one system image
    GUID and are one switch; a line card with nothing cabled to it is inside that switch, not a
    level of its own above the spine chips."""
    fabric = Fabric()
    chips = [fabric.switch(f"L{i}", chassis="core", description=f"MF0;core-1:MCS8500/L{i:02d}/U1") for i in range(5)]
    spines = [fabric.switch(f"S{i}", chassis="core", description=f"MF0;core-1:MCS8500/S{i:02d}/U1") for i in range(2)]
    for chip in chips:  # every line chip to every spine chip, the spare one (L4) too
        for spine in spines:
            fabric.cable(chip, spine, 9)
    for leaf in range(4):
        name = fabric.switch(f"leaf-{leaf}")
        for h in range(24):
            fabric.cable(fabric.host(f"cn{leaf:02d}{h:02d}"), name)
        fabric.cable(name, chips[leaf], 8)
    tree = parse_ibnetdiscover(fabric.text())
    assert tree.level_names == ("leaf", "spine"), tree.levels
    assert len(tree.switches[1]) == 1 and next(iter(tree.switches[1])) == "core-1"
    assert tree.levels[0].oversubscription == 3.0


def test_a_spare_switch_with_no_hosts_below_adds_no_level() -> None:
    fabric = fat_tree()
    spare = fabric.switch("leaf-spare")
    for spine in ("spine-0", "spine-1"):
        fabric.cable(spare, spine, 4)
    tree = parse_ibnetdiscover(fabric.text())
    assert tree.level_names == ("leaf", "spine") and tree.levels[0].oversubscription == 3.0


def test_slurm_block_file_aggregates_blocks_by_block_sizes() -> None:
    tree = parse_slurm_topology_conf(network_reference("slurm/topograph_nvl_racks.block.topology.conf").read_text())
    assert tree.level_names == ("block", "block-16", "block-32")
    assert [len(level) for level in tree.switches] == [12, 6, 3]
    assert tree.common_level(["srv1101", "srv1108"]) == 0
    assert tree.common_level(["srv1101", "srv1201"]) == 1
    assert tree.common_level(["srv1101", "srv2101"]) == 2
    assert tree.common_level(["srv1101", "srv3101"]) == 3  # no block of 32 holds both


def test_slurm_man_page_examples() -> None:
    text = network_reference("slurm/slurm_man_examples.topology.conf").read_text()
    tree_part, block_part, ring_part = (p.split("#" * 66, 1)[1] for p in text.split("#" * 66 + "\n# Slurm")[1:])
    tree = parse_slurm_topology_conf(tree_part)
    assert groups(tree, 0) == {frozenset(f"dev{i}" for i in range(a, a + 6)) for a in (0, 6, 12)}
    assert list(tree.switches[1]) == ["s3"]
    block = parse_slurm_topology_conf(block_part)
    assert block.level_names == ("block", "block-120") and len(block.switches[1]) == 1
    with pytest.raises(UsageError, match="ringname= is not a tree or block"):
        parse_slurm_topology_conf(ring_part)


def test_slurm_topology_yaml_default_named_and_flat() -> None:
    doc = yaml.safe_load(network_reference("slurm/slurm_man_example.topology.yaml").read_text())
    default = parse_slurm_topology_yaml(doc)
    assert default is not None and groups(default, 0) == {frozenset(f"node0{i}" for i in range(1, 5))}
    named = parse_slurm_topology_yaml(doc, name="topo2")
    assert named is not None and named.level_names == ("block", "block-16") and len(named.switches[0]) == 4
    assert parse_slurm_topology_yaml(doc, name="topo3") is None
    with pytest.raises(UsageError) as err:
        parse_slurm_topology_yaml(doc, name="nope")
    assert "no single topology 'nope'. To fix: name one of: topo1, topo2, topo3" in err.value.one_line()


# -- Kubernetes ------------------------------------------------------------------------------


def test_kueue_racks_with_repeated_names_stay_apart_under_their_blocks() -> None:
    nodes = labelled_nodes(network_reference("kubernetes/kueue_tas_node_labels_and_job.yaml"))
    tree = tree_from_node_labels(nodes, label_keys()["kueue"])
    assert tree.level_names == ("topology-rack", "topology-block")
    assert tree.by_node["node-1"][0] != tree.by_node["node-3"][0]  # both "rack-1", different blocks
    assert tree.common_level(["node-1", "node-2"]) == 1
    assert tree.common_level(["node-1", "node-3"]) == 2


@pytest.mark.parametrize(
    ("name", "keys", "node", "path"),
    [
        ("topograph_node_labels.yaml", "topograph", "example-node-gen1", ("s1", "s2", "s3")),
        ("topograph_node_labels.yaml", "topograph-leaf", "example-node-gen2", ("s1", "s2", "s3")),
        ("topograph_node_labels.yaml", "topograph-tiers", "example-node-gen3", ("s1", "s2", "s3")),
        ("gke_topology_node_labels.yaml", "gke", "node-1", ("subblock-1", "block-1")),
        ("aws_eks_topology_node_labels.yaml", "aws", "p4d-node-ap-northeast-2b",
         ("nn-dcbcca51aebf4c95b", "nn-6ff5053c3a4d86db7", "nn-c79422f4e61deb9ca")),
    ],
)  # fmt: skip
def test_each_clouds_label_keys_read_nearest_level_first(name: str, keys: str, node: str, path: tuple[str]) -> None:
    nodes = [(n, labels) for n, labels in labelled_nodes(network_reference(f"kubernetes/{name}")) if n == node]
    tree = tree_from_node_labels(nodes, label_keys()[keys])
    assert tree.by_node[node] == path


def test_volcano_hypernodes_give_three_tiers() -> None:
    text = network_reference("kubernetes/volcano_hypernodes_tiers.yaml").read_text()
    docs = [d for d in yaml.safe_load_all(text) if d]
    tree = tree_from_hypernodes(docs, [(f"node-{i}", {}) for i in range(8)])
    assert tree.level_names == ("tier-1", "tier-2", "tier-3")
    assert tree.by_node["node-0"] == ("s0", "s4", "s6")
    assert tree.common_level(["node-0", "node-3"]) == 1 and tree.common_level(["node-0", "node-4"]) == 2


def test_hypernodes_select_by_regex_and_label() -> None:
    docs = [{"kind": "HyperNode", "metadata": {"name": "r1"}, "spec": {"tier": 1, "members": [
        {"type": "Node", "selector": {"regexMatch": {"pattern": "gpu-[0-1]"}}},
        {"type": "Node", "selector": {"labelMatch": {"matchLabels": {"rack": "one"}}}}]}}]  # fmt: skip
    tree = tree_from_hypernodes(docs, [("gpu-0", {}), ("gpu-1", {}), ("cpu-9", {"rack": "one"}), ("gpu-2", {})])
    assert set(tree.nodes) == {"gpu-0", "gpu-1", "cpu-9"}


# -- bad trees -------------------------------------------------------------------------------


def test_a_node_under_two_leaves_of_a_topology_conf_is_kept_under_the_first_with_a_warning() -> None:
    """Slurm's topology/tree runs with such a file, logging "Multiple leaf switches contain
    nodes: n3"; so does ringleader, naming the node and the leaf it keeps. The rest is a tree."""
    text = ("SwitchName=leaf1 Nodes=n[1-3]\nSwitchName=leaf2 Nodes=n[3-4],n[7-8]\nSwitchName=leaf3 Nodes=n8\n"
            "SwitchName=top Switches=leaf[1-2]\n")  # fmt: skip
    tree = parse_slurm_topology_conf(text, "t.conf")
    assert tree.by_node["n3"] == ("leaf1", "top") and tree.by_node["n4"] == ("leaf2", "top")
    assert tree.warnings == ("t.conf: nodes under several leaf switches, each kept under the first that lists it "
                             '(as Slurm warns "Multiple leaf switches contain nodes" and runs): n3 (leaf1, '
                             "also leaf2), n8 (leaf2, also leaf3)",)
    assert parse_slurm_topology_conf("SwitchName=leaf1 Nodes=n[1-2]\n").warnings == ()


def test_a_node_under_two_switches_of_a_cluster_file_is_refused_naming_it() -> None:
    """ringleader's own `switches:` list is no file Slurm reads: there a node under two leaves
    is a mistake, refused in one line."""
    with pytest.raises(UsageError, match=r"node 'n3' is under two switches \(leaf-a, leaf-b\)"):
        tree_from_edges([("n1", "leaf-a"), ("n3", "leaf-a"), ("n3", "leaf-b")], [], "cluster.yaml")


def test_a_cycle_through_a_leaf_is_refused_naming_the_switch() -> None:
    text = "SwitchName=leaf Nodes=n1 Switches=top\nSwitchName=top Switches=leaf\n"
    with pytest.raises(UsageError, match="switch 'leaf' is its own ancestor") as err:
        parse_slurm_topology_conf(text)
    assert "\n" not in err.value.one_line()


def test_bad_lines_and_hostlists_are_refused_in_one_line() -> None:
    for text, message in [
        ("SwitchName=s Nodes=n[3-1]\n", "reversed"),
        ("SwitchName=s Nodes=n[1-2\n", "unbalanced"),
        ("SwitchName=s Nodes=n[a-b]\n", "not a number"),
        ("SwitchName s\n", "not Key=Value"),
        ("SwitchName=s0 Nodes=a\nBlockName=b Nodes=c\n", "both SwitchName"),
        ("BlockName=b Nodes=n[1-8]\nBlockSizes=16,24\n", "not a whole number"),
        ("SwitchName=s Nodes=n Switches=s\n", "lists itself"),
    ]:
        with pytest.raises(UsageError, match=message):
            parse_slurm_topology_conf(text)
    with pytest.raises(UsageError, match=r"not a Slurm topology\.conf"):
        load_network_text("hello", "x")


# -- the cluster file ------------------------------------------------------------------------

CLUSTER = """
nodes:
  - {name: node, preset: dgx-a100, count: 4}
network:
  levels:
    - {name: rack, oversubscription: 4, uplink_gbps: 800}
    - {name: spine}
  switches:
    - {name: rack-1, nodes: "node-[0-1]"}
    - {name: rack-2, nodes: [node-2, node-3]}
    - {name: spine, switches: "rack-[1-2]"}
"""


def test_cluster_file_declares_racks_under_an_oversubscribed_spine(tmp_path: Path) -> None:
    specs = load_cluster_text(CLUSTER, tmp_path)
    place = specs[2].network
    assert place is not None and place.switches == ("rack-2", "spine")
    assert [lv.name for lv in place.levels] == ["rack", "spine"] and place.levels[0].oversubscription == 4
    # 2 nodes x 25 Gb/s under a rack with 10 Gb/s of uplink: 5:1, more than the 4:1 given
    slow = load_cluster_text(CLUSTER.replace("uplink_gbps: 800", "uplink_gbps: 10"), tmp_path)
    assert slow[0].network is not None and slow[0].network.levels[0].oversubscription == 5


def test_cluster_file_reads_a_slurm_file_beside_it(tmp_path: Path) -> None:
    (tmp_path / "topology.conf").write_text("SwitchName=a Nodes=node-[0-1]\nSwitchName=b Nodes=node-[2-3]\n"
                                            "SwitchName=top Switches=a,b\n")  # fmt: skip
    text = "nodes:\n  - {name: node, preset: dgx-a100, count: 4}\nnetwork: {file: topology.conf}\n"
    assert load_cluster_text(text, tmp_path)[3].switches == ("b", "top")


@pytest.mark.parametrize(
    ("network", "message"),
    [
        ("{switches: [{name: a, nodes: 'node-[0-4]'}]}", "names node 'node-4', which the cluster does not have"),
        ("{switches: [{name: a, nodes: 'node-[0-2]'}]}", "node 'node-3' is under no switch"),
        ("{switches: [{name: a, nodes: 'node-[0-3]'}], levels: [{name: a}, {name: b}]}", "has 1 level"),
        ("{levels: [{name: a}]}", "exactly one of `switches` and `file`"),
        ("{file: missing.conf}", "cannot read network file"),
    ],
)
def test_cluster_file_network_mistakes_name_the_node_or_key(tmp_path: Path, network: str, message: str) -> None:
    text = f"nodes:\n  - {{name: node, preset: dgx-a100, count: 4}}\nnetwork: {network}\n"
    with pytest.raises(UsageError, match=message):
        load_cluster_text(text, tmp_path, origin="c.yaml")


# -- invariants ------------------------------------------------------------------------------


@st.composite
def trees(draw: st.DrawFn) -> tuple[list[list[list[str]]], int]:
    """Spines of leaves of nodes: [spine][leaf] -> node names."""
    counter = iter(range(10_000))
    spines = draw(st.integers(1, 3))
    return [[[f"n{next(counter)}" for _ in range(draw(st.integers(1, 4)))]
             for _ in range(draw(st.integers(1, 3)))] for _ in range(spines)], spines  # fmt: skip


def render_conf(spines: list[list[list[str]]]) -> str:
    lines, leaf = [], 0
    for s, leaves in enumerate(spines):
        names = []
        for nodes in leaves:
            lines.append(f"SwitchName=leaf{leaf} Nodes={','.join(nodes)}")
            names.append(f"leaf{leaf}")
            leaf += 1
        lines.append(f"SwitchName=spine{s} Switches={','.join(names)}")
    if len(spines) > 1:
        lines.append("SwitchName=core Switches=" + ",".join(f"spine{s}" for s in range(len(spines))))
    return "\n".join(lines) + "\n"


@settings(max_examples=100, deadline=None)
@given(trees(), st.randoms(use_true_random=False))
def test_a_rendered_tree_parses_back_to_the_same_groups_in_any_line_order(drawn, rnd) -> None:  # type: ignore[no-untyped-def]
    spines, _ = drawn
    lines = render_conf(spines).splitlines()
    rnd.shuffle(lines)
    tree = parse_slurm_topology_conf("\n".join(lines))
    assert groups(tree, 0) == {frozenset(nodes) for leaves in spines for nodes in leaves}
    assert groups(tree, 1) == {frozenset(n for nodes in leaves for n in nodes) for leaves in spines}
    every = [n for leaves in spines for nodes in leaves for n in nodes]
    assert sorted(tree.nodes) == sorted(every)
    # A node's switches nest: sharing a level's switch means sharing every higher one.
    for a in every[:5]:
        for b in every:
            k = tree.common_level([a, b])
            assert all(tree.by_node[a][j] == tree.by_node[b][j] for j in range(max(k, 0), len(tree.levels)))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 300), min_size=1, max_size=20, unique=True), st.sampled_from(["n", "rack-a-", ""]),
       st.integers(0, 3))  # fmt: skip
def test_hostlist_ranges_expand_to_exactly_their_names(numbers: list[int], prefix: str, pad: int) -> None:
    numbers.sort()
    runs: list[list[int]] = []
    for v in numbers:
        if runs and v == runs[-1][-1] + 1:
            runs[-1].append(v)
        else:
            runs.append([v])

    def fmt(v: int) -> str:
        return str(v).zfill(pad)

    body = ",".join(f"{fmt(r[0])}-{fmt(r[-1])}" if len(r) > 1 else fmt(r[0]) for r in runs)
    expanded = expand_hostlist(f"{prefix}[{body}],other", "t")
    assert expanded == [f"{prefix}{fmt(v)}" for v in numbers] + ["other"]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 9), st.integers(0, 3)), min_size=1, max_size=30))
def test_edges_give_a_tree_or_a_one_line_refusal_naming_a_node(edges: list[tuple[int, int]]) -> None:
    node_under = [(f"n{n}", f"leaf{leaf}") for n, leaf in edges]
    clash = {n for n, leaf in edges if any(m == n and other != leaf for m, other in edges)}
    try:
        tree = tree_from_edges(node_under, [], "t")
    except UsageError as exc:
        assert clash and any(f"'n{n}'" in exc.message for n in clash)
        return
    assert not clash
    assert {n: p[0] for n, p in tree.paths} == dict(node_under)


def test_a_kubernetes_scheduler_gets_the_tree_from_its_nodes_labels() -> None:
    """The call the Kubernetes scheduler makes: node names and labels in, NodeSpecs placed out;
    the convention is found from the labels, and an unlabelled node stays outside the tree."""
    from ringleader.topology import NodeSpec, preset
    from ringleader.topology.cluster import placed
    from ringleader.topology.network_formats import tree_from_labels

    nodes = [*labelled_nodes(network_reference("kubernetes/kueue_tas_node_labels_and_job.yaml")), ("plain", {})]
    tree = tree_from_labels(nodes)
    assert tree is not None and tree.level_names == ("topology-rack", "topology-block")
    specs = placed([NodeSpec(name, preset("dgx-a100")) for name, _ in nodes], tree)
    assert specs[1].switches == ("rack-2", "block-1") and specs[-1].network is None
    assert tree_from_labels([("plain", {})]) is None


def test_every_label_convention_carries_its_source() -> None:
    from ringleader.reference import reference

    keys = reference()["network"]["label_keys"]
    assert set(label_keys()) == {"topograph", "topograph-leaf", "topograph-tiers", "kueue", "gke", "aws"}
    assert all(keys[f"{name}_source"] for name in label_keys())
