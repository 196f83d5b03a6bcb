"""Network trees from the formats users already have, each reduced to edges for ``tree_from_edges``.

- Slurm ``topology.conf``: topology/tree (``SwitchName= Nodes= Switches=``, hostlists allowed)
  and topology/block (``BlockName= Nodes=`` plus ``BlockSizes=``: each larger size, in nodes, is
  a level of that many consecutive base blocks, as Slurm plans block aggregation);
- Slurm ``topology.yaml`` (25.05+): the ``cluster_default`` topology (or one named), tree or block;
- Kubernetes node labels with configurable level keys, nearest the node first (``label_keys()``
  holds Topograph's, Kueue's example, GKE's and AWS's); rack values that repeat under different
  blocks (Kueue's docs have them) are told apart by their parent;
- Volcano ``HyperNode`` objects (members by exactMatch, regexMatch or labelMatch), levels by tier;
- ``ibnetdiscover`` output: hosts by the first word of their CA description (the CA's own
  name when it has none), SHARP aggregation nodes ignored, the chips of one chassis (one system
  image GUID) one switch, hosts above the leaves (storage on a spine) left out with a warning, a
  host's rails joined into one leaf group (rail-optimized fabrics), switch levels by hops from
  the leaves, top levels that group nothing dropped.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from ringleader.errors import UsageError
from ringleader.inputs import load_yaml
from ringleader.reference import reference
from ringleader.topology.network import NetworkTree, expand_hostlist, tree_from_edges


@functools.cache
def label_keys() -> dict[str, tuple[str, ...]]:
    """Node label keys per level, nearest the node first, per convention (data/reference.toml,
    with sources). Read when first asked for, not at import: a process that never reads a
    network tree (the agent starting a job's ranks) does not parse the reference file."""
    known = reference()["network"]["label_keys"]
    return {name: tuple(keys) for name, keys in known.items() if not name.endswith("_source")}


_PAIR_RE = re.compile(r"(\S+?)=(\S+)")


def parse_slurm_topology_conf(text: str, origin: str = "topology.conf") -> NetworkTree:
    """A Slurm topology.conf (tree or block plugin); keys are case-insensitive, as Slurm's."""
    node_under: list[tuple[str, str]] = []
    switch_under: list[tuple[str, str]] = []
    blocks: list[tuple[str, list[str]]] = []
    sizes: list[int] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        where = f"{origin} line {number}"
        pairs = {k.lower(): v for k, v in _PAIR_RE.findall(line)}
        if not pairs or len(_PAIR_RE.findall(line)) != len(line.split()):
            raise UsageError(f"{where}: {line[:60]!r} is not Key=Value words", "write e.g. SwitchName=s0 Nodes=n[1-4]")
        if "switchname" in pairs:
            name = pairs["switchname"]
            node_under += [(n, name) for n in expand_hostlist(pairs.get("nodes", ""), where)]
            switch_under += [(s, name) for s in expand_hostlist(pairs.get("switches", ""), where)]
        elif "blockname" in pairs:
            blocks.append((pairs["blockname"], expand_hostlist(pairs.get("nodes", ""), where)))
        elif "blocksizes" in pairs:
            sizes = [_positive_int(v, where) for v in pairs["blocksizes"].split(",")]
        else:
            key = next(iter(pairs))
            raise UsageError(f"{where}: {key}= is not a tree or block topology line",
                             "give a topology/tree (SwitchName=) or topology/block (BlockName=) file")  # fmt: skip
    if blocks and (node_under or switch_under):
        raise UsageError(f"{origin}: both SwitchName= and BlockName= lines", "give one topology plugin's file")
    if blocks:
        return block_tree(blocks, sizes, origin)
    if not node_under:
        raise UsageError(f"{origin}: no switch lists Nodes=", "give the file Slurm's topology/tree plugin reads")
    return tree_from_edges(node_under, switch_under, origin, multi_homed="first")


def _positive_int(text: str, where: str) -> int:
    if not (text.strip().isascii() and text.strip().isdigit()) or len(text.strip()) > 9 or int(text) < 1:
        raise UsageError(f"{where}: block size {text!r} is not a positive number", "write e.g. BlockSizes=8,16,32")
    return int(text)


def block_tree(blocks: Sequence[tuple[str, Sequence[str]]], sizes: Sequence[int], origin: str) -> NetworkTree:
    """Base blocks, then one level per block size larger than a base block: that many nodes'
    worth of consecutive base blocks, aligned (``BlockSizes=8,16,32`` on 8-node blocks: blocks
    of 1, 2 and 4)."""
    base = max((len(nodes) for _, nodes in blocks), default=0)
    if base == 0:
        raise UsageError(f"{origin}: no block lists Nodes=", "give each BlockName= its Nodes=")
    node_under = [(n, name) for name, nodes in blocks for n in nodes]
    switch_under: list[tuple[str, str]] = []
    names, below, last_k = ["block"], [name for name, _ in blocks], 1
    for size in sorted(set(sizes)):
        k = math.ceil(size / base)
        if k <= last_k:
            continue
        if k % last_k:
            raise UsageError(f"{origin}: block size {size} is not a whole number of the smaller size's blocks",
                             "give BlockSizes that double (e.g. 8,16,32 for 8-node blocks)")  # fmt: skip
        group = k // last_k
        above = []
        for start in range(0, len(below), group):
            members = below[start : start + group]
            agg = f"{blocks[start * last_k][0]}..{blocks[min(len(blocks), (start + group) * last_k) - 1][0]}"
            above.append(agg)
            switch_under += [(m, agg) for m in members]
        names.append(f"block-{size}")
        below, last_k = above, k
    return tree_from_edges(node_under, switch_under, origin, names)


def parse_slurm_topology_yaml(doc: Any, origin: str = "topology.yaml", name: str | None = None) -> NetworkTree | None:
    """Slurm's topology.yaml (a list of topologies): the one named, or the ``cluster_default``
    one (the only one, when it is alone). None for a ``flat`` topology."""
    if not isinstance(doc, list) or not all(isinstance(t, Mapping) for t in doc):
        raise UsageError(f"{origin}: not a list of topologies", "give Slurm's topology.yaml (- topology: NAME ...)")
    chosen = [t for t in doc if (t.get("topology") == name if name else t.get("cluster_default") or len(doc) == 1)]
    if len(chosen) != 1:
        have = ", ".join(str(t.get("topology")) for t in doc)
        raise UsageError(f"{origin}: no single {'topology ' + repr(name) if name else 'cluster_default topology'}",
                         f"name one of: {have}")  # fmt: skip
    topo = chosen[0]
    where = f"{origin} topology {topo.get('topology')!r}"
    if topo.get("flat"):
        return None
    if isinstance(topo.get("tree"), Mapping):
        node_under: list[tuple[str, str]] = []
        switch_under: list[tuple[str, str]] = []
        for sw in _entries(topo["tree"].get("switches"), f"{where} tree.switches"):
            sname = str(sw.get("switch"))
            node_under += [(n, sname) for n in expand_hostlist(str(sw.get("nodes") or ""), where)]
            switch_under += [(c, sname) for c in expand_hostlist(str(sw.get("children") or ""), where)]
        return tree_from_edges(node_under, switch_under, where)
    if isinstance(topo.get("block"), Mapping):
        block = topo["block"]
        blocks = [(str(b.get("block")), expand_hostlist(str(b.get("nodes") or ""), where))
                  for b in _entries(block.get("blocks"), f"{where} block.blocks")]  # fmt: skip
        sizes = block.get("block_sizes") or []
        if not isinstance(sizes, list) or not all(isinstance(s, int) and not isinstance(s, bool) for s in sizes):
            raise UsageError(f"{where}: block_sizes is not a list of whole numbers", "write e.g. block_sizes: [4, 16]")
        return block_tree(blocks, sizes, where)
    raise UsageError(f"{where}: neither tree, block nor flat", "give a tree: or block: section")


def _entries(value: Any, where: str) -> list[Mapping[str, Any]]:
    """A list of mappings (switches, blocks) as Slurm's topology.yaml gives them; one line else."""
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, Mapping) for v in value):
        raise UsageError(f"{where} is not a list of entries", "give each as `- switch: NAME` / `- block: NAME`")
    return value


def tree_from_node_labels(
    nodes: Sequence[tuple[str, Mapping[str, str]]], level_keys: Sequence[str], level_names: Sequence[str] | None = None,
    origin: str = "node labels",
) -> NetworkTree:  # fmt: skip
    """The tree the ``level_keys`` labels (nearest the node first) describe. A node with none of
    them is outside the tree; a node missing a level has a switch of its own there. A value is
    qualified by its parent's ("block-2/rack-1") when it repeats under different parents."""
    keys = list(level_keys)
    chains: dict[str, list[str]] = {}
    for name, labels in nodes:
        values = [labels.get(k, "") for k in keys]
        if any(values):
            chains[name] = [v or f"{name}:{key.rsplit('/', 1)[-1]}" for v, key in zip(values, keys, strict=True)]
    # Ids from the top down: a value keeps its own name when it has one parent only.
    ids: dict[str, list[str]] = {n: [""] * len(keys) for n in chains}
    for k in range(len(keys) - 1, -1, -1):
        parents: dict[str, set[str]] = {}
        for n, chain in chains.items():
            parents.setdefault(chain[k], set()).add(ids[n][k + 1] if k + 1 < len(keys) else "")
        for n, chain in chains.items():
            up = ids[n][k + 1] if k + 1 < len(keys) else ""
            ids[n][k] = chain[k] if len(parents[chain[k]]) == 1 else f"{up}/{chain[k]}"
    node_under = [(n, path[0]) for n, path in ids.items()]
    switch_under = sorted({(path[k], path[k + 1]) for path in ids.values() for k in range(len(keys) - 1)})
    names = list(level_names) if level_names else [k.rsplit("/", 1)[-1] for k in keys]
    return tree_from_edges(node_under, switch_under, origin, names)


def label_keys_in(nodes: Sequence[tuple[str, Mapping[str, str]]]) -> tuple[str, ...] | None:
    """The level keys of the first of ``label_keys()``' conventions any node carries (None: none)."""
    for keys in label_keys().values():
        if any(keys[0] in labels or keys[-1] in labels for _, labels in nodes):
            return keys
    return None


def tree_from_labels(
    nodes: Sequence[tuple[str, Mapping[str, str]]], level_keys: Sequence[str] | None = None
) -> NetworkTree | None:
    """What a Kubernetes scheduler calls with its nodes' names and labels: the tree of
    ``level_keys`` (nearest the node first), or of the first known convention the nodes carry;
    None when no node carries one."""
    keys = tuple(level_keys) if level_keys else label_keys_in(nodes)
    return tree_from_node_labels(nodes, keys) if keys else None


def tree_from_hypernodes(
    hypernodes: Sequence[Mapping[str, Any]], nodes: Sequence[tuple[str, Mapping[str, str]]],
    origin: str = "HyperNodes",
) -> NetworkTree:  # fmt: skip
    """Volcano HyperNodes: Node members by exactMatch/regexMatch/labelMatch, HyperNode members by
    exactMatch; levels named by tier ("tier-1" nearest the nodes)."""
    node_under: list[tuple[str, str]] = []
    switch_under: list[tuple[str, str]] = []
    tiers: set[int] = set()
    for obj in hypernodes:
        if obj.get("kind", "HyperNode") != "HyperNode":
            continue
        name = str((obj.get("metadata") or {}).get("name"))
        spec = obj.get("spec") or {}
        tiers.add(int(spec.get("tier", 0)))
        for member in spec.get("members") or []:
            selector = member.get("selector") or {}
            if member.get("type") == "HyperNode":
                switch_under.append((str((selector.get("exactMatch") or {}).get("name")), name))
            else:
                node_under += [(n, name) for n in _selected(selector, nodes, f"{origin} {name}")]
    return tree_from_edges(node_under, switch_under, origin, [f"tier-{t}" for t in sorted(tiers)])


def _selected(selector: Mapping[str, Any], nodes: Sequence[tuple[str, Mapping[str, str]]], where: str) -> list[str]:
    if "exactMatch" in selector:
        return [str(selector["exactMatch"].get("name"))]
    if "regexMatch" in selector:
        pattern = re.compile(str(selector["regexMatch"].get("pattern")))
        return [n for n, _ in nodes if pattern.fullmatch(n)]
    if "labelMatch" in selector:
        want = (selector["labelMatch"].get("matchLabels") or {}).items()
        return [n for n, labels in nodes if all(labels.get(k) == v for k, v in want)]
    raise UsageError(f"{where}: a member without exactMatch, regexMatch or labelMatch", "give one selector")


_HEADER_RE = re.compile(r'^(Switch|Ca)\s+\d+\s+"([^"]+)"\s*#\s*"([^"]*)"')
_PORT_RE = re.compile(r'^\[\d+\].*?"([SH]-[0-9a-fA-F]+)"\[\d+\]')
_AGGREGATION = "Aggregation Node"


def parse_ibnetdiscover(text: str, origin: str = "ibnetdiscover output") -> NetworkTree:
    """An InfiniBand fabric as ``ibnetdiscover`` prints it (module doc)."""
    described: dict[str, str] = {}
    kinds: dict[str, str] = {}
    image: dict[str, str] = {}  # node -> its system image GUID (shared by the chips of one chassis)
    links: dict[str, set[str]] = {}
    cables: dict[str, list[str]] = {}  # switch -> the peer of each of its cabled ports
    current, sysimg = None, None
    for line in text.splitlines():
        if line.startswith("sysimgguid="):
            sysimg = line.split("=", 1)[1].strip()
            continue
        header = _HEADER_RE.match(line)
        if header:
            kind, current, desc = header.groups()
            kinds[current], described[current], image[current] = kind, desc.strip(), sysimg or current
            links.setdefault(current, set())
            sysimg = None
            continue
        port = _PORT_RE.match(line) if current else None
        if port and current:
            links[current].add(port.group(1))
            links.setdefault(port.group(1), set()).add(current)
            if kinds[current] == "Switch":
                cables.setdefault(current, []).append(port.group(1))
    if not any(k == "Switch" for k in kinds.values()):
        raise UsageError(f"{origin}: no Switch found", "give the output of `ibnetdiscover` (not -p or -l)")
    kinds, described, links, cables = _chassis_joined(kinds, described, image, links, cables)
    switches = [s for s, k in kinds.items() if k == "Switch"]
    host_of = {ca: _host_name(ca, desc) for ca, desc in described.items()
               if kinds[ca] == "Ca" and _AGGREGATION not in desc}  # fmt: skip
    names = _switch_names(switches, described)
    leaves = _leaves(switches, links, host_of, names)
    # Hosts cabled only above the leaves (storage, service nodes on a spine) are no compute nodes.
    above = sorted(host for ca, host in host_of.items() if not any(s in leaves for s in links.get(ca, ())))
    host_of = {ca: host for ca, host in host_of.items() if host not in set(above)}
    warnings = ((f"{origin}: {len(above)} host(s) on switches above the leaves are left out as no compute node "
                 f"(storage or service hosts): {', '.join(above)}",) if above else ())  # fmt: skip
    # A host's CAs on several leaves (one per rail) make those leaves one group.
    leaves_of: dict[str, list[str]] = {}
    for ca, host in host_of.items():
        leaves_of.setdefault(host, []).extend(s for s in sorted(links.get(ca, ())) if s in leaves)
    hops = _hops_from_hosts(switches, links, {s for ls in leaves_of.values() for s in ls})
    group = {s: s for s in switches}

    def find(s: str) -> str:
        while group[s] != s:
            s = group[s]
        return s

    for leaves_of_host in leaves_of.values():
        for other in leaves_of_host[1:]:
            a, b = find(leaves_of_host[0]), find(other)
            if a != b:
                group[max(a, b, key=lambda s: names[s])] = min(a, b, key=lambda s: names[s])
    members: dict[str, int] = {}
    for s in switches:
        members[find(s)] = members.get(find(s), 0) + 1

    def logical(s: str) -> str:
        root = find(s)
        return names[root] if members[root] == 1 else f"{names[root]}+{members[root] - 1}"

    node_under = [(host, logical(ls[0])) for host, ls in leaves_of.items() if ls]
    switch_under = sorted({(logical(a), logical(b)) for a in switches for b in links[a]
                           if kinds.get(b) == "Switch" and hops.get(b, -1) == hops.get(a, -2) + 1
                           and logical(a) != logical(b)})  # fmt: skip
    tree = tree_from_edges(node_under, switch_under, origin)
    ratios = _oversubscription(switches, cables, hops, set(host_of), len(tree.levels))
    tree = tree.with_levels([replace(level, oversubscription=r) for level, r in zip(tree.levels, ratios, strict=True)])
    return replace(tree.without_idle_top_levels(), warnings=warnings)


def _chassis_joined(
    kinds: dict[str, str], described: dict[str, str], image: Mapping[str, str], links: dict[str, set[str]],
    cables: dict[str, list[str]],
) -> tuple[dict[str, str], dict[str, str], dict[str, set[str]], dict[str, list[str]]]:
    """The chips of one chassis (a director's line and spine chips: one system image GUID) made
    one switch, named by the chassis name their descriptions share ("MF0;core-1:MCS8500/L05/U1":
    core-1); the cables inside it dropped."""
    chips: dict[str, list[str]] = {}
    for node, kind in kinds.items():
        if kind == "Switch":
            chips.setdefault(image[node], []).append(node)
    unit = {node: node for node in kinds}
    for group in chips.values():
        if len(group) < 2:
            continue
        first = min(group)
        for chip in group:
            unit[chip] = first
        named = {m.group(1) for c in group if (m := re.search(r";([^:;]+):", described[c]))}
        described[first] = named.pop() if len(named) == 1 else f"{first}+{len(group) - 1}"
    if all(unit[n] == n for n in unit):
        return kinds, described, links, cables
    joined_links: dict[str, set[str]] = {}
    for node, peers in links.items():
        here = unit.get(node, node)
        joined_links.setdefault(here, set()).update(unit.get(p, p) for p in peers if unit.get(p, p) != here)
    joined_cables: dict[str, list[str]] = {}
    for switch, ports in cables.items():
        here = unit[switch]
        joined_cables.setdefault(here, []).extend(unit.get(p, p) for p in ports if unit.get(p, p) != here)
    kept = {n: k for n, k in kinds.items() if unit[n] == n}
    return kept, {n: d for n, d in described.items() if n in kept}, joined_links, joined_cables


def _leaves(switches: Sequence[str], links: Mapping[str, set[str]], host_of: Mapping[str, str],
            names: Mapping[str, str]) -> set[str]:  # fmt: skip
    """The switches compute hosts hang off. A switch with hosts cabled to another such switch
    is no leaf where it is the one cabled to more of them (a spine carrying storage hosts is
    cabled to every leaf; each leaf to that one spine): dropped until no two leaves are cabled."""
    hosts_on = {s: sum(1 for ca in host_of if s in links.get(ca, ())) for s in switches}
    leaves = {s for s in switches if hosts_on[s]}
    while True:
        linked = {s: sum(1 for t in links[s] if t in leaves) for s in leaves}
        cabled = [s for s in leaves if linked[s]]
        if not cabled:
            return leaves
        leaves.remove(max(cabled, key=lambda s: (linked[s], -hosts_on[s], names[s])))


def _oversubscription(
    switches: Sequence[str], cables: Mapping[str, list[str]], hops: Mapping[str, int], hosts: set[str], levels: int
) -> list[float]:
    """Per level, the most over its switches (the worst one sets the risk) of cabled ports down
    (hosts, lower switches) to ports up (higher switches); 1.0 where a level has no uplinks."""
    out = []
    for k in range(levels):
        ratios = []
        for s in switches:
            if hops.get(s) != k:
                continue
            peers = cables.get(s, [])
            down = sum(1 for p in peers if p in hosts or hops.get(p, k) == k - 1)
            up = sum(1 for p in peers if hops.get(p, -1) == k + 1)
            if down and up:
                ratios.append(down / up)
        out.append(round(max(ratios), 2) if ratios else 1.0)
    return out


def _host_name(ca: str, desc: str) -> str:
    """The first word of a CA's description, unless it is an adapter's model or "localhost"."""
    first = desc.split()[0] if desc.split() else ""
    if not first or re.fullmatch(r"MT\d+", first) or first in ("localhost", "Mellanox"):
        return ca
    return first


def _switch_names(switches: Sequence[str], described: Mapping[str, str]) -> dict[str, str]:
    """A switch's description when it is unique and names it (MQM9701 "...IBLEAF-04-04..."),
    else its GUID name (generic descriptions like "Voltaire 4036 - 36 QDR ports switch")."""
    count: dict[str, int] = {}
    for s in switches:
        count[described[s]] = count.get(described[s], 0) + 1
    return {s: described[s] if count[described[s]] == 1 and " " not in described[s] else s for s in switches}


def _hops_from_hosts(switches: Sequence[str], links: Mapping[str, set[str]], leaves: set[str]) -> dict[str, int]:
    hops = {s: 0 for s in leaves}
    known = set(switches)
    frontier = sorted(leaves)
    while frontier:
        nxt = []
        for s in frontier:
            for t in sorted(links[s]):
                if t in hops or t not in known:
                    continue
                hops[t] = hops[s] + 1
                nxt.append(t)
        frontier = nxt
    return hops


def load_network_text(text: str, origin: str) -> NetworkTree:
    """A network file in any of the formats above that come as files, told by its content."""
    if re.search(r"^\s*(SwitchName|BlockName)=", text, re.IGNORECASE | re.MULTILINE):
        return parse_slurm_topology_conf(text, origin)
    if re.search(r"^(Switch|Ca)\s+\d+\s+\"", text, re.MULTILINE):
        return parse_ibnetdiscover(text, origin)
    if re.search(r"^-\s+topology:", text, re.MULTILINE):
        tree = parse_slurm_topology_yaml(load_yaml(text, origin)[0], origin)
        if tree is None:
            raise UsageError(f"{origin}: the default topology is flat", "give a tree or block topology")
        return tree
    raise UsageError(f"{origin}: not a Slurm topology.conf, topology.yaml or ibnetdiscover output",
                     "give one of those files as written by Slurm's admin or `ibnetdiscover`")
