"""Declared clusters: nodes with a topology, labels and an inter-node network, from YAML.

A cluster file looks like::

    nodes:
      - name: node-a            # DNS-1123 label
        preset: dgx1v           # or matrix_file: topo.txt | matrix: "<topo -m text>"
        bandwidth_file: bw.txt  # optional measured GB/s matrix (or a whole p2pBandwidthLatencyTest output)
        bandwidth_matrix: unidirectional-p2p   # which matrix of that output (bidirectional-* are halved)
        nvlink_domain: nvl72-a  # optional: nodes sharing an NVLink fabric (GB200/GB300 NVL72 clique id)
        network_gbps: 25        # inter-node network (Gb/s)
        emulated: true          # GPU ids are virtual: no real GPU is handed to its workers
        labels: {gpu-schedule: topology}
        count: 4                # optional: node-a-0 .. node-a-3
      - name: server1
        address: 10.0.0.5       # an ssh host: its ranks run there, started by mpirun's ssh launcher
        user: train             # optional ssh user, port and identity file
        port: 22
        identity_file: ~/.ssh/id_ed25519
        # no preset/matrix: the topology is read from the host over ssh when the file is applied
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from ringleader.errors import RingleaderError, TopologyError, UsageError
from ringleader.inputs import line_at, load_yaml, read_bounded, validate
from ringleader.reference import reference
from ringleader.topology.bandwidth import read_bandwidth_text
from ringleader.topology.grammar import check_label
from ringleader.topology.network import Level, NetworkPlace, NetworkTree, expand_hostlist, tree_from_edges
from ringleader.topology.network_formats import load_network_text
from ringleader.topology.node import NodeTopology
from ringleader.topology.presets import preset
from ringleader.topology.smi import parse_topo_text

if TYPE_CHECKING:  # the schema (and pydantic) is imported when a cluster file is read
    from ringleader.topology.cluster_schema import NetworkSection, NodeEntry

NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
SCHEDULE_LABEL = "gpu-schedule"
SCHEDULE_MODES = ("topology", "default")
# The topology source of an ssh host declared without one: read over ssh at `cluster apply`.
DISCOVER = "discover over ssh"
_HOST_RE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9.:]*[A-Za-z0-9])?$")
_USER_RE = re.compile(r"^[a-z_][a-z0-9_.-]*$")


def check_name(name: str, what: str) -> str:
    """Kubernetes DNS-1123 label: what job and node names must be."""
    if not isinstance(name, str) or len(name) > 63 or not NAME_RE.fullmatch(name):
        raise UsageError(
            f"invalid {what} name {name!r}",
            "use at most 63 lowercase letters, digits and '-', starting and ending with a letter or digit",
        )
    return name


@dataclass(frozen=True)
class SshAddress:
    """How to reach a node over ssh (None fields: ssh's own defaults and ~/.ssh/config)."""

    host: str
    user: str | None = None
    port: int | None = None
    identity_file: str | None = None

    def __str__(self) -> str:
        text = f"{self.user}@{self.host}" if self.user else self.host
        return f"{text}:{self.port}" if self.port else text


@dataclass(frozen=True)
class NodeSpec:
    """One node of the cluster as the scheduler sees it."""

    name: str
    topology: NodeTopology
    network_gbps: float = field(default_factory=lambda: float(reference()["network"]["default_gbps"]))
    labels: tuple[tuple[str, str], ...] = ()
    emulated: bool = False
    address: SshAddress | None = None  # an ssh host; None: ranks run on this machine
    nvlink_domain: str = ""  # nodes with the same id share one NVLink fabric (NVL72 clique)
    network: NetworkPlace | None = None  # its switch per level of the cluster's network tree

    @property
    def switches(self) -> tuple[str, ...]:
        return self.network.switches if self.network is not None else ()

    @cached_property
    def schedule_mode(self) -> str | None:
        """'topology', 'default', or None (unlabelled: serves both kinds of job)."""
        return dict(self.labels).get(SCHEDULE_LABEL)

    @property
    def network_gbs(self) -> float:
        return self.network_gbps / 8.0

    def with_labels(self, labels: Mapping[str, str]) -> NodeSpec:
        return replace(self, labels=tuple(sorted(labels.items())))


def load_cluster_text(text: str, base_dir: Path, origin: str = "cluster file",
                      notes: list[str] | None = None) -> list[NodeSpec]:  # fmt: skip
    """The nodes a cluster file declares. The YAML is read strictly and bounded (no aliases,
    no key twice, bounded depth and numbers: ringleader.inputs) and checked against the schema
    of ``cluster_schema``; any refusal is one line naming ``origin``, the line and the key.
    ``notes`` gets what the file's network source said that was kept another way."""
    from ringleader.topology.cluster_schema import MAX_NODES, ClusterFile

    doc, lines = load_yaml(text, origin)
    if not isinstance(doc, dict) or not isinstance(doc.get("nodes"), list) or not doc["nodes"]:
        raise UsageError(f"{origin}: no `nodes:` list", "give a `nodes:` list with at least one node")

    def line_of(path: tuple[str | int, ...]) -> int | None:
        # A problem inside a node names the node's own line, as the node's other errors do.
        if len(path) >= 2 and path[0] == "nodes" and ("nodes", path[1]) in lines:
            return lines[("nodes", path[1])]
        return line_at(lines, path)

    fix = "fix the value (keys, types and ranges: docs/runtime.md, Input files)"
    cluster = validate(ClusterFile, doc, origin, fix, line_of)
    specs: list[NodeSpec] = []
    for index, entry in enumerate(cluster.nodes):
        where = f"{origin} line {lines.get(('nodes', index), '?')}"
        specs.extend(_node_specs(entry, base_dir, where, MAX_NODES - len(specs)))
    names = [s.name for s in specs]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise UsageError(f"{origin}: node name {dupes[0]!r} declared twice", "give every node its own name")
    if cluster.network is not None:
        where = f"{origin} line {lines.get(('network',), '?')}"
        tree = _network(cluster.network, base_dir, where)
        specs = with_network(specs, tree, where)
        if notes is not None:
            notes.extend(tree.warnings)
    return specs


def placed(specs: Iterable[NodeSpec], tree: NetworkTree | None) -> list[NodeSpec]:
    """The nodes with their places in ``tree``; a node it does not hold stays outside (no
    switch shared with any other node), as an unlabelled Kubernetes node does."""
    return [replace(s, network=tree.place_of(s.name) if tree is not None else None) for s in specs]


def _network(section: NetworkSection, base_dir: Path, where: str) -> NetworkTree:
    """The tree of a cluster file's ``network:`` section: its switches, or a file (the format
    told by its content), with the levels' names and oversubscription given there."""
    if (section.switches is None) == (section.file is None):
        raise UsageError(f"{where}: network needs exactly one of `switches` and `file`",
                         "list the switches, or give a Slurm topology.conf or topology.yaml, or ibnetdiscover output")
    if section.file is not None:
        path = Path(section.file) if Path(section.file).is_absolute() else base_dir / section.file
        tree = load_network_text(read_bounded(path, "network file"), str(path))
    else:
        def names(value: str | list[str] | None) -> list[str]:
            return expand_hostlist(value, where) if isinstance(value, str) else list(value or [])

        switches = section.switches or []
        node_under = [(n, sw.name) for sw in switches for n in names(sw.nodes)]
        switch_under = [(c, sw.name) for sw in switches for c in names(sw.switches)]
        tree = tree_from_edges(node_under, switch_under, where)
    if section.levels:
        tree = tree.with_levels([Level(lv.name, lv.oversubscription, lv.uplink_gbps) for lv in section.levels])
    return tree


def with_network(specs: list[NodeSpec], tree: NetworkTree, origin: str) -> list[NodeSpec]:
    """The nodes with their places in ``tree``, which must name exactly the cluster's nodes
    (refused in one line naming a node it lacks or one it has too many)."""
    tree.check_nodes((s.name for s in specs), origin)
    missing = next((s.name for s in specs if s.name not in tree.by_node), None)
    if missing is not None:
        raise UsageError(f"{origin}: node {missing!r} is under no switch of the network tree",
                         "list it under its leaf switch (or block)")  # fmt: skip
    tree = with_uplink_ratios(tree, {s.name: s.network_gbps for s in specs})
    return [replace(s, network=tree.place_of(s.name)) for s in specs]


def with_uplink_ratios(tree: NetworkTree, nic_gbps: Mapping[str, float]) -> NetworkTree:
    """Levels with an ``uplink_gbps`` take as oversubscription the most, over their switches, of
    the nodes' network Gb/s below a switch over its uplink (never less than the ratio given)."""
    levels = []
    for k, level in enumerate(tree.levels):
        if level.uplink_gbps:
            down = max(sum(nic_gbps.get(n, 0.0) for n in nodes) for nodes in tree.switches[k].values())
            level = replace(level, oversubscription=max(level.oversubscription, round(down / level.uplink_gbps, 3)))
        levels.append(level)
    return tree.with_levels(levels)


def load_cluster_file(path: str | Path, notes: list[str] | None = None) -> list[NodeSpec]:
    p = Path(path)
    return load_cluster_text(read_bounded(p, "cluster file"), p.parent, origin=str(p), notes=notes)


def _node_specs(entry: NodeEntry, base_dir: Path, where: str, room: int) -> list[NodeSpec]:
    """The node(s) of one schema-checked entry of ``nodes:``; ``where`` is "FILE line N"."""
    try:
        name = check_name(entry.name, "node")
        topology = _topology(entry, base_dir)
        network = float(entry.network_gbps or reference()["network"]["default_gbps"])
        labels = _labels(entry.labels or {})
        mode = labels.get(SCHEDULE_LABEL)
        if mode is not None and mode not in SCHEDULE_MODES:
            raise UsageError(f"label {SCHEDULE_LABEL}={mode!r} is not a mode", "use topology or default")
        if entry.count > room:
            from ringleader.topology.cluster_schema import MAX_NODES

            raise UsageError(f"count must be a whole number from 1 to {room}, got {entry.count!r}",
                             f"a cluster has at most {MAX_NODES} nodes")  # fmt: skip
    except RingleaderError as exc:
        raise type(exc)(f"{where}: {exc.message}", exc.fix) from None
    names = [name] if entry.count == 1 else [check_name(f"{name}-{i}", "node") for i in range(entry.count)]
    address = _address(entry, where)
    if address is not None and entry.count != 1:
        raise UsageError(f"{where}: `count` and `address` together", "declare each ssh host as its own node")
    return [NodeSpec(n, topology, network, tuple(sorted(labels.items())), entry.emulated, address,
                     entry.nvlink_domain) for n in names]  # fmt: skip


def _labels(raw: Mapping[str, str]) -> dict[str, str]:
    """The labels as `ringleader node label` takes them (one grammar: topology.grammar)."""
    for key, value in raw.items():
        check_label(key, value)
    return dict(raw)


def _address(entry: NodeEntry, where: str) -> SshAddress | None:
    """The node's ssh address, checked strictly: it ends up on ssh's and mpirun's command lines."""
    if entry.address is None:
        given = {"user": entry.user, "port": entry.port, "identity_file": entry.identity_file}
        extra = sorted(key for key, value in given.items() if value is not None)
        if extra:
            raise UsageError(f"{where}: {extra[0]!r} without `address`", "add the host's `address` or drop it")
        return None
    host, user, key = entry.address, entry.user, entry.identity_file
    if not _HOST_RE.match(host):
        raise UsageError(f"{where}: address {host!r} is not a host name or IP address", "write e.g. 10.0.0.5")
    if user is not None and not _USER_RE.match(user):
        raise UsageError(f"{where}: user {user!r} is not a user name", "write e.g. user: train")
    if entry.port is not None and not 0 < entry.port < 65536:
        raise UsageError(f"{where}: port {entry.port!r} is not a TCP port", "give a number from 1 to 65535")
    if key is not None and "\n" in key:
        raise UsageError(f"{where}: identity_file {key!r} is not a path", "give the private key's path")
    return SshAddress(host, user, entry.port, key)


def _topology(entry: NodeEntry, base_dir: Path) -> NodeTopology:
    sources = [k for k in ("preset", "matrix", "matrix_file") if getattr(entry, k) is not None]
    if not sources and entry.address is not None:
        return NodeTopology(links=(), source=DISCOVER)
    if len(sources) != 1:
        raise TopologyError(
            "a node needs exactly one of preset, matrix, matrix_file",
            "name a preset (see `ringleader topo --presets`) or give `nvidia-smi topo -m` text",
        )
    gpu_model = entry.gpu_model
    if not gpu_model.isprintable():  # it is shown in tables and sent to Slurm and Kubernetes as is
        raise UsageError(f"gpu_model {gpu_model!r} holds a control character",
                         "write the GPU's model name in plain text, e.g. A100-80GB")  # fmt: skip
    if entry.preset is not None:
        topo = preset(entry.preset)
    else:
        text = entry.matrix if entry.matrix is not None else _read(base_dir, str(entry.matrix_file))
        if isinstance(text, list):
            text = _rows_to_text(text)
        topo = parse_topo_text(text, gpu_model=gpu_model)
    measured, note = None, None
    if entry.bandwidth is not None or entry.bandwidth_file is not None:
        raw, choice = entry.bandwidth, entry.bandwidth_matrix
        if raw is None:
            measured, note = read_bandwidth_text(_read(base_dir, str(entry.bandwidth_file)), choice)
        elif isinstance(raw, list):
            measured = tuple(tuple(row) for row in raw)
        else:
            measured, note = read_bandwidth_text(raw, choice)
    if measured is None and not gpu_model:
        return topo
    return NodeTopology(
        links=topo.links, gpu_model=gpu_model or topo.gpu_model, numa=topo.numa,
        cpu_affinity=topo.cpu_affinity, measured_gbs=measured, nics=topo.nics,
        nic_links=topo.nic_links, numa_affinity=topo.numa_affinity, gpu_numa_id=topo.gpu_numa_id,
        source=topo.source, notes=(note,) if note else (),
    )  # fmt: skip


def _rows_to_text(rows: list[list[str]]) -> str:
    n = len(rows)
    header = "\t" + "\t".join(f"GPU{i}" for i in range(n))
    return header + "\n" + "\n".join(f"GPU{i}\t" + "\t".join(map(str, r)) for i, r in enumerate(rows))


def _read(base_dir: Path, name: str) -> str:
    path = Path(name)
    return read_bounded(path if path.is_absolute() else base_dir / path, "file")
