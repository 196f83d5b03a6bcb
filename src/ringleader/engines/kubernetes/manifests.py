"""Objects ringleader writes to a cluster, as plain dicts: a job's MPIJob and PodGroup, and the
install (`ringleader kube manifests`): namespace, RBAC of least privilege, the scheduler
Deployment and its config, the agent DaemonSet.

How the GPU choice reaches the container: each worker's NVIDIA_VISIBLE_DEVICES comes from its
own ``ringleader.io/gpu-ids`` annotation through the downward API. The scheduler's Binding
carries that annotation (the API server sets it with the node), and kubelet resolves env vars
only when it starts the container, after the pod is bound, so the container sees exactly the
GPUs ``place()`` chose.
docs/kubernetes.md compares this with a device plugin's Allocate, a runtime hook and DRA.
"""

from __future__ import annotations

import shlex
from typing import Any

import yaml

from ringleader.engines.kubernetes import names
from ringleader.errors import UsageError
from ringleader.jobs.commandline import CommandLine, read_line
from ringleader.jobs.spec import JobSpec

DEFAULT_IMAGE = "ghcr.io/ringleader/ringleader:0.1.0"
METRICS_PORT = 10259
# What the launcher pod asks for: mpirun and ssh only, no GPU.
LAUNCHER_REQUESTS = {"cpu": "500m", "memory": "512Mi"}
WORKER_SSHD = ["/usr/sbin/sshd", "-De"]  # mpi-operator v2 reaches workers over ssh


def _gpu_env() -> list[dict[str, Any]]:
    return [
        {"name": "NVIDIA_VISIBLE_DEVICES", "valueFrom": {"fieldRef": {
            "fieldPath": f"metadata.annotations['{names.GPU_IDS_ANNOTATION}']"}}},
        {"name": "RINGLEADER_WORKER_INDEX", "valueFrom": {"fieldRef": {
            "fieldPath": f"metadata.annotations['{names.WORKER_INDEX_ANNOTATION}']"}}},
    ]  # fmt: skip


# -e variables whose name says they hold a secret: their values go into a Secret the pods read
# them from (secretKeyRef), not into the MPIJob, which anyone who may read jobs reads in full.
SECRET_WORDS = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "KEY", "CREDENTIAL")


def looks_secret(name: str) -> bool:
    return any(word in name.upper() for word in SECRET_WORDS)


def env_secret_name(spec: JobSpec) -> str:
    return f"{spec.name}-env"


def _env(spec: JobSpec) -> list[dict[str, Any]]:
    return [
        {"name": k, "valueFrom": {"secretKeyRef": {"name": env_secret_name(spec), "key": k}}}
        if looks_secret(k) else {"name": k, "value": v}
        for k, v in sorted(spec.env.items())
    ]  # fmt: skip


def env_secret(spec: JobSpec, namespace: str, owner_uid: str | None = None) -> dict[str, Any] | None:
    """The Secret holding the job's secret-looking -e values (None when it has none), owned by the
    MPIJob once it exists, so deleting the job deletes it."""
    secret = {k: v for k, v in spec.env.items() if looks_secret(k)}
    if not secret:
        return None
    meta: dict[str, Any] = {"name": env_secret_name(spec), "namespace": namespace,
                            "labels": {names.JOB_LABEL: spec.name}}  # fmt: skip
    if owner_uid:
        meta["ownerReferences"] = [_owner(spec, owner_uid)]
    return {"apiVersion": "v1", "kind": "Secret", "metadata": meta, "type": "Opaque", "stringData": secret}


def _owner(spec: JobSpec, uid: str) -> dict[str, Any]:
    return {"apiVersion": f"{names.MPIJOB_GROUP}/{names.MPIJOB_VERSION}", "kind": "MPIJob", "name": spec.name,
            "uid": uid, "controller": True, "blockOwnerDeletion": True}  # fmt: skip


# What mpi-operator names after the job: `<name>-worker-<index>` pods (their hostname too) and
# `<name>-launcher`, DNS labels of at most 63 characters, as label values are.
DNS_LABEL_MAX = 63


def check_job_name_fits(spec: JobSpec) -> None:
    """Refuse a job whose objects would get names Kubernetes refuses (the MPIJob would be
    accepted, then never start a pod)."""
    longest = f"{spec.name}-worker-{spec.workers - 1}"
    if len(longest) > DNS_LABEL_MAX:
        room = DNS_LABEL_MAX - len(f"-worker-{spec.workers - 1}")
        raise UsageError(
            f"job name {spec.name!r} is too long for Kubernetes with {spec.workers} worker(s): its last worker "
            f"pod would be {longest!r}, {len(longest)} characters, over the {DNS_LABEL_MAX} of a pod's hostname",
            f"use a --name of at most {room} characters",
        )


def _pod_labels(spec: JobSpec) -> dict[str, str]:
    labels = {names.JOB_LABEL: spec.name, names.PODGROUP_LABEL: spec.name}
    if spec.topology_aware:
        labels[names.TOPOLOGY_LABEL] = "true"
    return labels


# A plain program runs once per worker under mpirun with torchrun's variables, as on every other
# engine: Open MPI's own rank variables renamed, MASTER_ADDR the first worker (rank 0 runs there:
# map-by slot over mpi-operator's hostfile).
TORCH_ENV = (
    'export RANK="$OMPI_COMM_WORLD_RANK" WORLD_SIZE="$OMPI_COMM_WORLD_SIZE" '
    'LOCAL_RANK="$OMPI_COMM_WORLD_LOCAL_RANK" LOCAL_WORLD_SIZE="$OMPI_COMM_WORLD_LOCAL_SIZE" '
    'GROUP_RANK="$OMPI_COMM_WORLD_NODE_RANK" ROLE_RANK="$OMPI_COMM_WORLD_RANK" '
    'ROLE_WORLD_SIZE="$OMPI_COMM_WORLD_SIZE" ROLE_NAME=default TORCHELASTIC_RESTART_COUNT=0 '
    'TORCHELASTIC_MAX_RESTARTS=0; exec "$@"'
)
MASTER_PORT = 29500


def launcher_command(spec: JobSpec, namespace: str = "default", line: CommandLine | None = None) -> list[str]:
    """What the launcher runs: the prepared mpirun line with -np from the gang and without the
    host options (mpi-operator's hostfile lists the workers the scheduler bound); a plain
    program started once per worker through mpirun, torchrun's variables set."""
    line = line or read_line(spec.command)
    if line.mpirun:
        return [line.argv[0], "-np", str(spec.workers), *line.kept, *line.program]
    master = f"{spec.name}-worker-0.{spec.name}.{namespace}.svc"
    return ["mpirun", "--allow-run-as-root", "-np", str(spec.workers), "-bind-to", "none", "-map-by", "slot",
            "-x", f"MASTER_ADDR={master}", "-x", f"MASTER_PORT={MASTER_PORT}",
            # each worker pod is its own host: as many torchrun groups as workers
            "-x", f"GROUP_WORLD_SIZE={spec.workers}", "-x", f"TORCHELASTIC_RUN_ID={spec.name}",
            "/bin/sh", "-c", TORCH_ENV, "rank", *line.program]  # fmt: skip


def mpijob(spec: JobSpec, namespace: str, image: str | None = None, line: CommandLine | None = None) -> dict[str, Any]:
    """A kubeflow.org/v2beta1 MPIJob: one launcher and ``workers`` workers, every pod scheduled
    by ringleader as one gang (the PodGroup named like the job: workers + launcher). ``line``:
    the spec's command as submit read it (read again when not given)."""
    image = image or spec.image or DEFAULT_IMAGE
    pod_meta = {"labels": _pod_labels(spec)}
    worker_resources: dict[str, Any] = {}
    if spec.gpus_per_worker:
        worker_resources = {"limits": {names.GPU_RESOURCE: spec.gpus_per_worker}}
    launcher = {
        "name": "launcher", "image": image, "command": launcher_command(spec, namespace, line),
        # No GPU for the launcher even on a node whose default runtime is nvidia and an image
        # that sets NVIDIA_VISIBLE_DEVICES=all.
        "env": [*_env(spec), {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}],
        "resources": {"requests": dict(LAUNCHER_REQUESTS)},
    }  # fmt: skip
    worker: dict[str, Any] = {"name": "worker", "image": image, "command": list(WORKER_SSHD),
                              "env": [*_env(spec), *_gpu_env()]}  # fmt: skip
    if worker_resources:
        worker["resources"] = worker_resources
    if spec.workdir and spec.workdir.startswith("/"):
        launcher["workingDir"] = spec.workdir
    annotations = {"ringleader.io/command": shlex.join(spec.command)}
    if spec.model:
        annotations["ringleader.io/model"] = spec.model
    return {
        "apiVersion": f"{names.MPIJOB_GROUP}/{names.MPIJOB_VERSION}", "kind": "MPIJob",
        "metadata": {"name": spec.name, "namespace": namespace, "labels": {names.JOB_LABEL: spec.name},
                     "annotations": annotations},
        "spec": {
            "slotsPerWorker": max(1, spec.gpus_per_worker),
            "mpiImplementation": "OpenMPI",
            "runPolicy": {
                "cleanPodPolicy": "Running",
                "schedulingPolicy": {"minAvailable": spec.workers + 1},
            },
            "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "restartPolicy": "OnFailure", "template": {
                    "metadata": pod_meta, "spec": {"schedulerName": names.SCHEDULER_NAME, "containers": [launcher]}}},
                "Worker": {"replicas": spec.workers, "restartPolicy": "Never", "template": {
                    "metadata": pod_meta, "spec": {"schedulerName": names.SCHEDULER_NAME, "containers": [worker]}}},
            },
        },
    }  # fmt: skip


def podgroup(spec: JobSpec, namespace: str, owner_uid: str | None = None) -> dict[str, Any]:
    """The gang: every worker and the launcher start together or not at all. Owned by the MPIJob
    once it exists, so deleting the job deletes its group."""
    meta: dict[str, Any] = {"name": spec.name, "namespace": namespace, "labels": {names.JOB_LABEL: spec.name}}
    if owner_uid:
        meta["ownerReferences"] = [_owner(spec, owner_uid)]
    return {
        "apiVersion": f"{names.PODGROUP_GROUP}/{names.PODGROUP_VERSION}", "kind": "PodGroup",
        "metadata": meta, "spec": {"minMember": spec.workers + 1},
    }  # fmt: skip


# -- install ----------------------------------------------------------------------------------------------


def _role_rules_scheduler() -> list[dict[str, Any]]:
    """What the scheduler calls, nothing more (tests/kube checks each request it makes against
    these): it reads nodes, pods and PodGroups, binds pods (the GPU ids travel on the Binding,
    so it patches no pod), deletes the members of a gang whose bind failed half-way (their
    controller makes them again), writes events and its PodGroups' status and reason."""
    return [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "delete"]},
        {"apiGroups": [""], "resources": ["pods/binding"], "verbs": ["create"]},
        {"apiGroups": [""], "resources": ["pods/status"], "verbs": ["patch"]},  # PodScheduled=False
        {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]},
        {"apiGroups": [names.PODGROUP_GROUP], "resources": ["podgroups"], "verbs": ["get", "list", "watch", "patch"]},
        {"apiGroups": [names.PODGROUP_GROUP], "resources": ["podgroups/status"], "verbs": ["patch"]},
    ]


def install(image: str = DEFAULT_IMAGE, replicas: int = 2, lease_seconds: int = 15) -> list[dict[str, Any]]:
    ns = names.SYSTEM_NAMESPACE
    sched, agent = "ringleader-scheduler", "ringleader-agent"
    config = {"leaseSeconds": lease_seconds, "metricsPort": METRICS_PORT, "namespace": ns, "bindThreads": 8}
    labels_s, labels_a = {"app.kubernetes.io/name": sched}, {"app.kubernetes.io/name": agent}
    in_ns = {"name": sched, "namespace": ns}
    probe = {"httpGet": {"path": "/healthz", "port": METRICS_PORT}, "periodSeconds": 10}
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": sched, "namespace": ns}},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": agent, "namespace": ns}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": sched},
         "rules": _role_rules_scheduler()},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": sched},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": sched},
         "subjects": [{"kind": "ServiceAccount", "name": sched, "namespace": ns}]},
        # The Lease: only in ringleader's namespace, and get/update only on its own name.
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": sched, "namespace": ns},
         "rules": [
             {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
             {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "update"],
              "resourceNames": [names.LEASE_NAME]},
         ]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": dict(in_ns),
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": sched},
         "subjects": [{"kind": "ServiceAccount", "name": sched, "namespace": ns}]},
        # The agent writes its own node's topology annotation and GPU capacity: nothing else.
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": agent},
         "rules": [
             {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]},
             {"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["patch"]},
         ]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": agent},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": agent},
         "subjects": [{"kind": "ServiceAccount", "name": agent, "namespace": ns}]},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": sched, "namespace": ns},
         "data": {"scheduler.yaml": yaml.safe_dump(config, sort_keys=True)}},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {**in_ns, "labels": labels_s},
         "spec": {"replicas": replicas, "selector": {"matchLabels": labels_s}, "template": {
             "metadata": {"labels": labels_s},
             "spec": {"serviceAccountName": sched, "containers": [{
                 "name": "scheduler", "image": image,
                 "command": ["ringleader", "kube", "scheduler", "--config", "/etc/ringleader/scheduler.yaml"],
                 "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                 "ports": [{"name": "metrics", "containerPort": METRICS_PORT}],
                 "livenessProbe": probe, "readinessProbe": probe,
                 "resources": {"requests": {"cpu": "500m", "memory": "512Mi"}, "limits": {"memory": "2Gi"}},
                 "volumeMounts": [{"name": "config", "mountPath": "/etc/ringleader", "readOnly": True}],
                 "securityContext": {"runAsNonRoot": True, "runAsUser": 65532, "allowPrivilegeEscalation": False,
                                     "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}},
             }], "volumes": [{"name": "config", "configMap": {"name": sched}}]}}}},
        {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": agent, "namespace": ns, "labels": labels_a},
         "spec": {"selector": {"matchLabels": labels_a}, "template": {
             "metadata": {"labels": labels_a},
             "spec": {"serviceAccountName": agent, "tolerations": [{"operator": "Exists"}],
                      "priorityClassName": "system-node-critical", "containers": [{
                 "name": "agent", "image": image, "command": ["ringleader", "kube", "agent"],
                 # NVML only: the nvidia runtime mounts the driver's utility libraries, and the
                 # agent reads topology, it never computes on a GPU.
                 "env": [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                         {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
                         {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "utility"}],
                 "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}},
                 "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True},
             }]}}}},
    ]  # fmt: skip


class _PlainDumper(yaml.SafeDumper):
    """No anchors and aliases: every object spelled out, as kubectl prints them."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def dump_all(objects: list[dict[str, Any]]) -> str:
    """Multi-document YAML for `kubectl apply -f -`."""
    return yaml.dump_all(objects, Dumper=_PlainDumper, sort_keys=False)
