"""Node, pod and PodGroup objects as the API server returns them, for the Kubernetes tests."""

from __future__ import annotations

import copy
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




# -- the pods other training controllers make, as they name and label them ------------------------------
# Stand-ins for Kubeflow's Training Operator (PyTorchJob), the JobSet controller with the Job
# controller beneath it, and Kubeflow Trainer v2 (TrainJob). Strict on what the scheduler reads:
# names, the labels the controllers add (their values as the controllers write them), and the
# pod template as written, with nothing filled in that the user did not write.


def controller_pod(name: str, namespace: str, template: dict[str, Any], labels: dict[str, str]) -> dict[str, Any]:
    meta = template.get("metadata") or {}
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}",
                     "labels": {**(meta.get("labels") or {}), **labels},
                     **({"annotations": dict(meta["annotations"])} if meta.get("annotations") else {})},
        "spec": copy.deepcopy(template["spec"]), "status": {"phase": "Pending"},
    }  # fmt: skip


def pytorchjob_pods(job: dict[str, Any], namespace: str = "default") -> list[dict[str, Any]]:
    """kubeflow.org/v1 PyTorchJob: `<job>-master-0`, `<job>-worker-<i>`; the replica type in
    lower case and the replica index as labels; the master's role label."""
    name = job["metadata"]["name"]
    pods = []
    for kind, replica in job["spec"]["pytorchReplicaSpecs"].items():
        for i in range(replica.get("replicas", 1)):
            labels = {"training.kubeflow.org/job-name": name,
                      "training.kubeflow.org/operator-name": "pytorchjob-controller",
                      "training.kubeflow.org/replica-type": kind.lower(),
                      "training.kubeflow.org/replica-index": str(i)}  # fmt: skip
            if kind == "Master":
                labels["training.kubeflow.org/job-role"] = "master"
            pods.append(controller_pod(f"{name}-{kind.lower()}-{i}", namespace, replica["template"], labels))
    return pods


def job_pod_suffix(position: int) -> str:
    """The Job controller's random 5-character pod name suffix, fixed here per pod: later pods
    get earlier-sorting suffixes, so neither name nor suffix order is rank order."""
    return "".join(chr(ord("z") - (position + k) % 26) for k in range(5))


def jobset_pods(jobset: dict[str, Any], namespace: str = "default") -> list[dict[str, Any]]:
    """jobset.x-k8s.io/v1alpha2: Job `<jobset>-<replicatedJob>-<jobIndex>` per replica, each an
    Indexed Job whose pods are `<job>-<completionIndex>-<random>`, labelled with the JobSet's
    indexes and the Job's completion index."""
    name = jobset["metadata"]["name"]
    pods = []
    global_index = 0
    for replicated in jobset["spec"]["replicatedJobs"]:
        job_spec = replicated["template"]["spec"]
        for job_index in range(replicated.get("replicas", 1)):
            for completion in range(job_spec.get("parallelism", 1)):
                labels = {"jobset.sigs.k8s.io/jobset-name": name,
                          "jobset.sigs.k8s.io/replicatedjob-name": replicated["name"],
                          "jobset.sigs.k8s.io/job-index": str(job_index),
                          "jobset.sigs.k8s.io/job-global-index": str(global_index),
                          "batch.kubernetes.io/job-completion-index": str(completion),
                          "job-name": f"{name}-{replicated['name']}-{job_index}"}  # fmt: skip
                pod_name = f"{name}-{replicated['name']}-{job_index}-{completion}-{job_pod_suffix(len(pods))}"
                pods.append(controller_pod(pod_name, namespace, job_spec["template"], labels))
            global_index += 1
    return pods


def trainjob_objects(runtime: dict[str, Any], trainjob: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """What Kubeflow Trainer v2 makes of a TrainJob and its runtime: a JobSet named like the
    TrainJob (numNodes pods of the `node` job, resourcesPerNode and the command on its `node`
    container, the PodGroup label on every pod) and, under a coscheduling policy, the PodGroup
    (one member per pod)."""
    name = trainjob["metadata"]["name"]
    trainer = trainjob["spec"]["trainer"]
    spec = copy.deepcopy(runtime["spec"]["template"]["spec"])
    members = 0
    for replicated in spec["replicatedJobs"]:
        job = replicated["template"]["spec"]
        pod_template = job["template"]
        pod_template.setdefault("metadata", {}).setdefault("labels", {})[names.PODGROUP_LABEL] = name
        if replicated["name"] == "node":
            nodes = trainer.get("numNodes", runtime["spec"]["mlPolicy"].get("numNodes", 1))
            job.update(parallelism=nodes, completions=nodes, completionMode="Indexed")
            container = next(c for c in pod_template["spec"]["containers"] if c["name"] == "node")
            container["resources"] = copy.deepcopy(trainer.get("resourcesPerNode", {}))
            container["command"] = list(trainer["command"])
        members += job.get("parallelism", 1) * replicated.get("replicas", 1)
    jobset = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": name}, "spec": spec}
    return jobset, podgroup(name, members)
