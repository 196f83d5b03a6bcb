"""Short builders for declarative scheduler scenarios: nodes + allocations + jobs."""

from __future__ import annotations

from ringleader.scheduler import ClusterState, JobRequest, NodeState, Placement, WorkerSlot
from ringleader.topology import NodeSpec, preset


def node(name: str, kind: str = "dgx1v", *, busy: tuple[int, ...] = (), mode: str | None = None,
         network_gbps: float = 25.0) -> NodeState:
    labels = (("gpu-schedule", mode),) if mode else ()
    spec = NodeSpec(name, preset(kind), network_gbps, labels, emulated=True)
    return NodeState(spec, tuple((g, "other") for g in sorted(busy)))


def cluster(*nodes: NodeState) -> ClusterState:
    return ClusterState(tuple(nodes))


def preset_cluster(*nodes: tuple[str, str, tuple[int, ...]]) -> ClusterState:
    """(name, preset, busy GPU ids) per node; each node's busy GPUs belong to a job of their own."""
    state = ClusterState.empty([NodeSpec(name, preset(kind)) for name, kind, _ in nodes])
    for name, _, busy in nodes:
        if busy:
            state = state.with_placement(Placement(f"busy-{name}", (WorkerSlot(0, name, busy),)))
    return state


def job(workers: int, gpus: int = 1, *, topo: bool = True, name: str = "j", priority: int = 0) -> JobRequest:
    return JobRequest(name, workers, gpus, topology_aware=topo, priority=priority)
