"""Node, pod and PodGroup objects as the API server returns them, for the Kubernetes tests."""

from __future__ import annotations

from typing import Any

from ringleader.engines.kubernetes import names
from ringleader.engines.kubernetes.objects import topology_annotation
from ringleader.topology import preset


def node(name: str, mode: str | None = "topology", gpus_preset: str | None = "dgx1v", cpu: str = "64",
         memory: str = "512Gi", taints: list[dict[str, str]] | None = None, unschedulable: bool = False,
         labels: dict[str, str] | None = None) -> dict[str, Any]:  # fmt: skip
    all_labels = {"kubernetes.io/hostname": name, **(labels or {})}
    if mode:
        all_labels["ack.node.gpu.schedule"] = mode
    annotations = {names.TOPOLOGY_ANNOTATION: topology_annotation(preset(gpus_preset))} if gpus_preset else {}
    allocatable = {"cpu": cpu, "memory": memory, "pods": "110"}
    if gpus_preset:
        allocatable[names.GPU_RESOURCE] = str(preset(gpus_preset).n_gpus)
    spec: dict[str, Any] = {"taints": taints or []}
    if unschedulable:
        spec["unschedulable"] = True
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": all_labels, "annotations": annotations},
        "spec": spec,
        "status": {"allocatable": allocatable, "capacity": allocatable,
                   "conditions": [{"type": "Ready", "status": "True"}]},
    }  # fmt: skip


def pod(name: str, gang: str | None = None, gpus: int = 1, topology: bool = True, cpu: str = "1",
        memory: str = "1Gi", namespace: str = "default", **spec: Any) -> dict[str, Any]:  # fmt: skip
    labels = {names.TOPOLOGY_LABEL: "true"} if topology else {}
    if gang:
        labels[names.PODGROUP_LABEL] = gang
    limits = {"cpu": cpu, "memory": memory}
    if gpus:
        limits[names.GPU_RESOURCE] = str(gpus)
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels, "uid": f"uid-{name}"},
        "spec": {"schedulerName": names.SCHEDULER_NAME,
                 "containers": [{"name": "main", "image": "busybox", "resources": {"limits": limits}}], **spec},
        "status": {"phase": "Pending"},
    }  # fmt: skip


def podgroup(name: str, min_member: int, namespace: str = "default") -> dict[str, Any]:
    return {
        "apiVersion": f"{names.PODGROUP_GROUP}/{names.PODGROUP_VERSION}", "kind": "PodGroup",
        "metadata": {"name": name, "namespace": namespace}, "spec": {"minMember": min_member},
    }  # fmt: skip


def template_pods(job: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """An MPIJob's pod templates as the Pods mpi-operator makes of them (name x-<role>)."""
    return {role: {"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": f"x-{role.lower()}", "namespace": "team-a", **rep["template"]["metadata"]},
                   "spec": rep["template"]["spec"]}
            for role, rep in job["spec"]["mpiReplicaSpecs"].items()}  # fmt: skip


