"""Node topologies: link kinds, `nvidia-smi topo -m` text, presets, NVML discovery, cluster files,
and the network tree above the nodes (network.py, its input formats in network_formats.py)."""

from ringleader.topology.bandwidth import MATRICES, parse_bandwidth_text
from ringleader.topology.cluster import NodeSpec, SshAddress, load_cluster_file, load_cluster_text
from ringleader.topology.links import Link
from ringleader.topology.network import Level, NetworkPlace, NetworkTree
from ringleader.topology.node import MAX_GPUS_PER_NODE, NodeTopology
from ringleader.topology.presets import PRESETS, preset
from ringleader.topology.smi import parse_topo_text, read_text_file, render_topo_text

__all__ = [
    "MATRICES",
    "MAX_GPUS_PER_NODE",
    "PRESETS",
    "Level",
    "Link",
    "NetworkPlace",
    "NetworkTree",
    "NodeSpec",
    "NodeTopology",
    "SshAddress",
    "load_cluster_file",
    "load_cluster_text",
    "parse_bandwidth_text",
    "parse_topo_text",
    "preset",
    "read_text_file",
    "render_topo_text",
]
