"""Short builders for declarative scheduler scenarios: nodes + allocations + jobs."""

from __future__ import annotations

from ringleader.scheduler import ClusterState, JobRequest, NodeState
from ringleader.topology import NodeSpec, preset


def node(name: str, kind: str = "dgx1v", *, busy: tuple[int, ...] = (), mode: str | None = None,
         network_gbps: float = 25.0) -> NodeState:
    labels = (("gpu-schedule", mode),) if mode else ()
    spec = NodeSpec(name, preset(kind), network_gbps, labels, emulated=True)
    return NodeState(spec, tuple((g, "other") for g in sorted(busy)))


def cluster(*nodes: NodeState) -> ClusterState:
    return ClusterState(tuple(nodes))


def job(workers: int, gpus: int = 1, *, topo: bool = True, name: str = "j", priority: int = 0) -> JobRequest:
    return JobRequest(name, workers, gpus, topology_aware=topo, priority=priority)
