"""GPUs that DRA ResourceClaims hold, as the scheduler's cache counts them (DRA delivery).

kube-scheduler allocates the claims of pods ringleader does not place from the same
ResourceSlices as ringleader's gangs: every device some claim holds is taken, whoever allocated
it. A claim of a pod ringleader places (gated by it, or bound with ids it wrote) is counted
through that pod, as every pod of ringleader's is; any other claim's devices are counted here, on
the GPU ids of their node (device -> its ``uuid`` attribute in the node's ResourceSlice -> its
index in the agent's UUID list). Pure: objects in, ids out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ringleader.engines.kubernetes import names
from ringleader.engines.kubernetes.objects import NodeInfo

CLAIMS, SLICES = "resourceclaims", "resourceslices"  # their informers' kinds (client.DRA_KINDS)


def object_key(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace")
    return f"{namespace}/{meta.get('name', '')}" if namespace else str(meta.get("name", ""))


def owner_pod(claim: Mapping[str, Any]) -> str | None:
    """namespace/name of the pod a claim was made for (its controlling owner), if any."""
    meta = claim.get("metadata") or {}
    for ref in meta.get("ownerReferences") or ():
        if ref.get("kind") == "Pod" and ref.get("controller"):
            return f"{meta.get('namespace')}/{ref.get('name')}"
    return None


def device_index(slices: Sequence[Mapping[str, Any]]) -> dict[tuple[str, str], tuple[str, str]]:
    """(pool, device) -> (node, GPU uuid) of every GPU NVIDIA's DRA driver publishes."""
    index = {}
    for sl in slices:
        spec = sl.get("spec") or {}
        node = spec.get("nodeName")
        if spec.get("driver") != names.DRA_DRIVER or not node:
            continue
        pool = (spec.get("pool") or {}).get("name", node)
        for dev in spec.get("devices") or ():
            uuid = ((dev.get("attributes") or {}).get("uuid") or {}).get("string")
            if uuid:
                index[(pool, dev.get("name", ""))] = (node, uuid)
    return index


def claim_gpus(claim: Mapping[str, Any], index: Mapping[tuple[str, str], tuple[str, str]],
               nodes: Mapping[str, NodeInfo]) -> tuple[str, tuple[int, ...]] | None:  # fmt: skip
    """The node and GPU ids an allocated claim holds on one of ringleader's nodes; None when it
    holds none there (not allocated, other drivers' devices, a node without the agent's UUIDs)."""
    allocation = (claim.get("status") or {}).get("allocation") or {}
    held: dict[str, list[int]] = {}
    for result in (allocation.get("devices") or {}).get("results") or ():
        if result.get("driver") != names.DRA_DRIVER:
            continue
        found = index.get((str(result.get("pool")), str(result.get("device"))))
        info = nodes.get(found[0]) if found else None
        if found is None or info is None or found[1] not in info.gpu_uuids:
            continue
        held.setdefault(found[0], []).append(info.gpu_uuids.index(found[1]))
    if not held:
        return None
    node = next(iter(held))  # a claim's devices are on one node (its allocation's node selector)
    return node, tuple(sorted(held[node]))
