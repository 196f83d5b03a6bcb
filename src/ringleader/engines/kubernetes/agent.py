"""`ringleader kube agent`: one per node (DaemonSet). It finds the node's GPUs and the link
between every pair (NVML, else `nvidia-smi topo -m`) and publishes them where the scheduler
reads them:

- the annotation ``ringleader.io/topology`` on its Node (compact JSON, ~0.5 KiB for 8 GPUs,
  far under the 256 KiB all of an object's annotations may total; a node annotation rather
  than a ConfigMap because the scheduler already watches Nodes, so topology arrives with the
  node in the same list+watch, with no second object to keep in step or to garbage-collect);
- the extended resource ``ringleader.io/gpu`` in the Node's status capacity, so kubelet admits
  a pod bound to it only while the node has that many GPUs.

The GPU choice then reaches the container through the pod's own annotation (see manifests.py).
It re-publishes when what it finds changes (a GPU lost, a driver update) and otherwise only
looks again every ``interval`` seconds: an unchanged node costs no API write.
"""

from __future__ import annotations

import logging
import re
import shutil
import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass

from ringleader.engines.kubernetes import names
from ringleader.engines.kubernetes.client import Api, ApiError
from ringleader.engines.kubernetes.objects import topology_annotation
from ringleader.errors import TopologyError
from ringleader.topology import NodeTopology, parse_topo_text
from ringleader.topology.node import EMPTY
from ringleader.topology.nvml import discover, unhealthy_gpus

log = logging.getLogger("ringleader.kube.agent")


@dataclass(frozen=True)
class Found:
    topology: NodeTopology
    how: str  # "nvml", "nvidia-smi" or why none was found
    uuids: tuple[str, ...] = ()  # each GPU's UUID, in index order (empty when unknown)
    unhealthy: int | None = None  # GPUs NVML (else nvidia-smi) reports unhealthy; None: cannot tell


_SMI_UUID = re.compile(r"^GPU (\d+):.*\(UUID: (GPU-[0-9a-fA-F-]+)\)", re.MULTILINE)


def smi_uuids(text: str, n_gpus: int) -> tuple[str, ...]:
    """The UUIDs in `nvidia-smi -L` output, in index order; empty unless every GPU has one."""
    found = {int(i): u for i, u in _SMI_UUID.findall(text)}
    return tuple(found[i] for i in range(n_gpus)) if sorted(found) == list(range(n_gpus)) else ()


def find_topology() -> Found:
    """NVML first (exact NVLink counts); `nvidia-smi topo -m` when the Python binding is missing."""
    found = discover()
    if found.topology.n_gpus:
        uuids = found.gpu_uuids if len(found.gpu_uuids) == found.topology.n_gpus else ()
        return Found(found.topology, "nvml", uuids, unhealthy_gpus(found.topology.n_gpus))
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return Found(EMPTY, found.reason or "no NVML and no nvidia-smi")
    try:
        text = subprocess.run([smi, "topo", "-m"], capture_output=True, text=True, timeout=60, check=True).stdout
        topology = parse_topo_text(text, source="nvidia-smi topo -m")
        listing = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=60, check=False).stdout
        return Found(topology, "nvidia-smi", smi_uuids(listing, topology.n_gpus), unhealthy_gpus(topology.n_gpus))
    except (OSError, subprocess.SubprocessError, TopologyError) as exc:
        return Found(EMPTY, f"nvidia-smi topo -m failed: {exc}")


def publish(api: Api, node: str, topology: NodeTopology, uuids: tuple[str, ...] = (),
            unhealthy: int | None = None) -> bool:  # fmt: skip
    """Write the node's topology, GPU UUIDs, unhealthy GPU count and GPU count if they differ
    from what it carries now. Returns whether anything was written."""
    current = api.get_node(node)
    annotations = (current.get("metadata") or {}).get("annotations") or {}
    capacity = (current.get("status") or {}).get("capacity") or {}
    health = str(unhealthy) if topology.n_gpus and unhealthy is not None else None
    wanted = {names.TOPOLOGY_ANNOTATION: topology_annotation(topology) if topology.n_gpus else None,
              names.GPU_UUIDS_ANNOTATION: ",".join(uuids) if topology.n_gpus and uuids else None,
              names.GPUS_UNHEALTHY_ANNOTATION: health}  # fmt: skip
    changed = {k: v for k, v in wanted.items() if annotations.get(k) != v}
    wrote = False
    if changed:
        api.annotate_node(node, changed)
        wrote = True
    if str(capacity.get(names.GPU_RESOURCE, "0")) != str(topology.n_gpus):
        api.node_capacity(node, {names.GPU_RESOURCE: str(topology.n_gpus)})
        wrote = True
    return wrote


def run_agent(api: Api, node: str, interval: float = 60.0, find: Callable[[], Found] = find_topology,
              stop: threading.Event | None = None) -> None:  # fmt: skip
    """Publish now, then again whenever a look every ``interval`` s finds something new."""
    stop = stop or threading.Event()
    while not stop.is_set():
        found = find()
        try:
            if publish(api, node, found.topology, found.uuids, found.unhealthy):
                log.info("node %s: published %d GPU(s) (%s)", node, found.topology.n_gpus, found.how)
        except ApiError as exc:
            log.warning("node %s: could not publish: %s", node, exc.message)
        stop.wait(interval)
