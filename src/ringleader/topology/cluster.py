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

import functools
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any

from ringleader.errors import RingleaderError, TopologyError, UsageError
from ringleader.reference import reference
from ringleader.topology.bandwidth import parse_bandwidth_text
from ringleader.topology.node import NodeTopology
from ringleader.topology.presets import preset
from ringleader.topology.smi import decode_text, parse_topo_text

NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
SCHEDULE_LABEL = "gpu-schedule"
SCHEDULE_MODES = ("topology", "default")
# Bounds checked before anything is built: a cluster file or matrix file is read up to
# MAX_FILE_BYTES, and a cluster has at most MAX_NODES nodes (`count` included).
MAX_FILE_BYTES = 16 << 20
MAX_NODES = 10_000
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

    @cached_property
    def schedule_mode(self) -> str | None:
        """'topology', 'default', or None (unlabelled: serves both kinds of job)."""
        return dict(self.labels).get(SCHEDULE_LABEL)

    @property
    def network_gbs(self) -> float:
        return self.network_gbps / 8.0

    def with_labels(self, labels: Mapping[str, str]) -> NodeSpec:
        return replace(self, labels=tuple(sorted(labels.items())))


@functools.cache
def _line_loader() -> type:
    """A YAML loader that remembers the line of every mapping so errors can say where (yaml is
    imported here: commands that read no cluster file do not pay for it)."""
    import yaml

    class LineLoader(yaml.SafeLoader):
        def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
            mapping = super().construct_mapping(node, deep=deep)
            mapping["__line__"] = node.start_mark.line + 1
            return mapping

    return LineLoader


_NODE_KEYS = {
    "name", "preset", "matrix", "matrix_file", "bandwidth", "bandwidth_file", "network_gbps",
    "labels", "emulated", "count", "gpu_model", "address", "user", "port", "identity_file",
    "bandwidth_matrix", "nvlink_domain",
}  # fmt: skip


def load_cluster_text(text: str, base_dir: Path, origin: str = "cluster file") -> list[NodeSpec]:
    try:
        import yaml

        doc = yaml.load(text, Loader=_line_loader())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", exc)
        raise UsageError(f"{origin}{where}: not valid YAML ({problem})", "fix the YAML syntax") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("nodes"), list) or not doc["nodes"]:
        raise UsageError(f"{origin}: no `nodes:` list", "give a `nodes:` list with at least one node")
    specs: list[NodeSpec] = []
    for item in doc["nodes"]:
        if not isinstance(item, dict):
            raise UsageError(f"{origin}: each entry of `nodes:` must be a mapping", "write `- name: ...`")
        specs.extend(_node_specs(item, base_dir, origin, MAX_NODES - len(specs)))
    names = [s.name for s in specs]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise UsageError(f"{origin}: node name {dupes[0]!r} declared twice", "give every node its own name")
    return specs


def load_cluster_file(path: str | Path) -> list[NodeSpec]:
    p = Path(path)
    return load_cluster_text(read_bounded(p, "cluster file"), p.parent, origin=str(p))


def read_bounded(path: Path, what: str, limit: int = MAX_FILE_BYTES) -> str:
    """A text file's content, refused in one line when it is bigger than ``limit`` (checked while
    reading: /dev/zero or a FIFO has no size) or not UTF-8."""
    try:
        with open(path, "rb") as fh:
            data = fh.read(limit + 1)
    except OSError as exc:
        raise UsageError(f"cannot read {what} {str(path)!r}: {exc.strerror}", "check the path") from None
    if len(data) > limit:
        raise UsageError(f"{what} {str(path)!r} is too big (over {limit >> 20} MiB)", "give the real file")
    fix = "give the text the tool printed, saved as UTF-8" if what == "file" else "give a YAML text file saved as UTF-8"
    return decode_text(data, f"{what} {str(path)!r}", fix)


def _node_specs(item: dict[str, Any], base_dir: Path, origin: str, room: int) -> list[NodeSpec]:
    line = item.get("__line__", "?")
    where = f"{origin} line {line}"
    unknown = sorted(set(item) - _NODE_KEYS - {"__line__"})
    if unknown:
        raise UsageError(f"{where}: unknown key {unknown[0]!r}", f"use only {', '.join(sorted(_NODE_KEYS))}")
    try:
        name = check_name(str(item.get("name", "")), "node")
        topology = _topology(item, base_dir)
        network = item.get("network_gbps", reference()["network"]["default_gbps"])
        if isinstance(network, bool) or not isinstance(network, int | float) or not 0 < network < math.inf:
            raise UsageError(f"network_gbps must be a number > 0, got {network!r}", "give the link speed in Gb/s")
        network = float(network)
        labels = _labels(item.get("labels"))
        mode = labels.get(SCHEDULE_LABEL)
        if mode is not None and mode not in SCHEDULE_MODES:
            raise UsageError(f"label {SCHEDULE_LABEL}={mode!r} is not a mode", "use topology or default")
        count = item.get("count", 1)
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= room:
            raise UsageError(
                f"count must be a whole number from 1 to {room}, got {count!r}",
                f"a cluster has at most {MAX_NODES} nodes",
            )
        if not isinstance(item.get("emulated", False), bool):
            raise UsageError(f"emulated must be true or false, got {item['emulated']!r}", "write emulated: true")
    except RingleaderError as exc:
        raise type(exc)(f"{where}: {exc.message}", exc.fix) from None
    except (TypeError, ValueError) as exc:
        raise UsageError(f"{where}: {exc}", "check the value types of this node") from None
    emulated = bool(item.get("emulated", False))
    domain = str(item.get("nvlink_domain") or "")
    names = [name] if count == 1 else [check_name(f"{name}-{i}", "node") for i in range(count)]
    address = _address(item, where)
    if address is not None and count != 1:
        raise UsageError(f"{where}: `count` and `address` together", "declare each ssh host as its own node")
    return [NodeSpec(n, topology, network, tuple(sorted(labels.items())), emulated, address, domain)
            for n in names]


def _labels(raw: Any) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise UsageError(f"labels must be a mapping, got {raw!r}", "write labels: {gpu-schedule: topology}")
    labels = {}
    for key, value in raw.items():
        if key == "__line__":
            continue
        if not isinstance(key, str) or not isinstance(value, str | int | float | bool):
            raise UsageError(f"label {key!r}: {value!r} is not a key and a plain value", "write key: value")
        labels[key] = str(value)
    return labels


def _address(item: dict[str, Any], where: str) -> SshAddress | None:
    """The node's ssh address, checked strictly: it ends up on ssh's and mpirun's command lines."""
    if "address" not in item:
        extra = sorted({"user", "port", "identity_file"} & set(item))
        if extra:
            raise UsageError(f"{where}: {extra[0]!r} without `address`", "add the host's `address` or drop it")
        return None
    host, user, port, key = item["address"], item.get("user"), item.get("port"), item.get("identity_file")
    if not isinstance(host, str) or not _HOST_RE.match(host) or len(host) > 253:
        raise UsageError(f"{where}: address {host!r} is not a host name or IP address", "write e.g. 10.0.0.5")
    if user is not None and (not isinstance(user, str) or not _USER_RE.match(user)):
        raise UsageError(f"{where}: user {user!r} is not a user name", "write e.g. user: train")
    if port is not None and (isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536):
        raise UsageError(f"{where}: port {port!r} is not a TCP port", "give a number from 1 to 65535")
    if key is not None and (not isinstance(key, str) or not key or "\n" in key):
        raise UsageError(f"{where}: identity_file {key!r} is not a path", "give the private key's path")
    return SshAddress(host, user, port, key)


def _topology(item: dict[str, Any], base_dir: Path) -> NodeTopology:
    sources = [k for k in ("preset", "matrix", "matrix_file") if k in item]
    if not sources and "address" in item:
        return NodeTopology(links=(), source=DISCOVER)
    if len(sources) != 1:
        raise TopologyError(
            "a node needs exactly one of preset, matrix, matrix_file",
            "name a preset (see `ringleader topo --presets`) or give `nvidia-smi topo -m` text",
        )
    gpu_model = str(item.get("gpu_model", ""))
    if "preset" in item:
        topo = preset(str(item["preset"]))
    else:
        text = item["matrix"] if "matrix" in item else _read(base_dir, item["matrix_file"])
        if isinstance(text, list):
            text = _rows_to_text(text)
        topo = parse_topo_text(str(text), gpu_model=gpu_model)
    measured = None
    if "bandwidth" in item or "bandwidth_file" in item:
        raw = item.get("bandwidth")
        choice = item.get("bandwidth_matrix")
        choice = None if choice is None else str(choice)
        if raw is None:
            measured = parse_bandwidth_text(_read(base_dir, item["bandwidth_file"]), choice)
        elif isinstance(raw, list):
            measured = tuple(tuple(float(v) for v in row) for row in raw)
        else:
            measured = parse_bandwidth_text(str(raw), choice)
    if measured is None and not gpu_model:
        return topo
    return NodeTopology(
        links=topo.links, gpu_model=gpu_model or topo.gpu_model, numa=topo.numa,
        cpu_affinity=topo.cpu_affinity, measured_gbs=measured, nics=topo.nics,
        nic_links=topo.nic_links, numa_affinity=topo.numa_affinity, gpu_numa_id=topo.gpu_numa_id,
        source=topo.source,
    )  # fmt: skip


def _rows_to_text(rows: list[Any]) -> str:
    n = len(rows)
    header = "\t" + "\t".join(f"GPU{i}" for i in range(n))
    return header + "\n" + "\n".join(f"GPU{i}\t" + "\t".join(map(str, r)) for i, r in enumerate(rows))


def _read(base_dir: Path, name: Any) -> str:
    path = Path(str(name))
    return read_bounded(path if path.is_absolute() else base_dir / path, "file")
