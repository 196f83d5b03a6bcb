"""Node topologies: link kinds, `nvidia-smi topo -m` text, presets, NVML discovery, cluster files."""

from ringleader.topology.cluster import NodeSpec, SshAddress, load_cluster_file, load_cluster_text
from ringleader.topology.links import Link
from ringleader.topology.node import NodeTopology
from ringleader.topology.presets import PRESETS, preset
from ringleader.topology.smi import parse_bandwidth_text, parse_topo_text, render_topo_text

__all__ = [
    "PRESETS",
    "Link",
    "NodeSpec",
    "NodeTopology",
    "SshAddress",
    "load_cluster_file",
    "load_cluster_text",
    "parse_bandwidth_text",
    "parse_topo_text",
    "preset",
    "render_topo_text",
]
