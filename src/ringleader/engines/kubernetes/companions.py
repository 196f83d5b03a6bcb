"""What runs beside a job's own containers when it asks as arena's submit does: TensorBoard
(--tensorboard: a Deployment and a NodePort Service, owned by the job so they go with it) and the
code sync (--sync-mode git|rsync: an init container of every pod that fetches the code into
WORKING_DIR/code, an emptyDir the job's container mounts there).

As arena's charts do (charts/mpijob, charts/pytorchjob): a --logdir on none of the job's volumes
is a directory of the node, mounted at --logdir in every pod, and TensorBoard runs on the node of
the pod that holds rank 0 and reads that one; a --logdir on a -d volume or a --data-dir is read
there; a URL (hdfs://, gs://) TensorBoard reads itself.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ringleader.engines.kubernetes import names
from ringleader.errors import UsageError
from ringleader.jobs.spec import TENSORBOARD_IMAGE, TRAINING_LOGDIR, JobSpec, KubeOptions

TENSORBOARD_PORT = 6006
DNS_LABEL_MAX = 63
TENSORBOARD_LABEL = f"{names.PREFIX}/tensorboard-of"  # not JOB_LABEL: its pod is none of the job's
CODE_VOLUME = "code-sync"
LOG_VOLUME = "training-logs"
# Where a job's --logdir lives on its nodes when no volume of the job holds it (arena's is
# /arena_logs/training<random>): one folder per namespace and job.
HOST_LOGS = "/var/log/ringleader-training"
# The code sync's images when --sync-image names none: git-sync v3 (the version arena's default
# mirrors; its GIT_SYNC_* variables) and arena's own rsync image.
SYNC_IMAGES = {"git": "registry.k8s.io/git-sync/git-sync:v3.3.5",
               "rsync": "registry.cn-zhangjiakou.aliyuncs.com/acs/rsync:v3.1.0-aliyun"}  # fmt: skip


def tensorboard_name(spec: JobSpec) -> str:
    return f"{spec.name}-tensorboard"


def check_tensorboard_name(spec: JobSpec) -> None:
    """Refuse, before anything is made, a job whose TensorBoard Service Kubernetes would refuse:
    a Service's name is a DNS-1035 label (a letter first, at most 63 characters)."""
    if spec.kube is None or not spec.kube.tensorboard:
        return
    name = tensorboard_name(spec)
    room = DNS_LABEL_MAX - (len(name) - len(spec.name))
    if len(name) > DNS_LABEL_MAX or not name[0].isalpha():
        raise UsageError(f"--tensorboard: its Service would be named {name!r}, which Kubernetes refuses (a letter "
                         f"first, at most {DNS_LABEL_MAX} characters)",
                         f"use a --name that starts with a letter, of at most {room} characters")  # fmt: skip


def code_folder(spec: JobSpec) -> str:
    """Where the code lands in the job's containers: WORKING_DIR/code (arena's), else /code."""
    return f"{spec.workdir.rstrip('/')}/code" if spec.workdir else "/code"


def _under(path: str, folder: str) -> bool:
    folder = folder.rstrip("/")
    return path == folder or path.startswith(folder + "/")


def _log_source(spec: JobSpec, namespace: str) -> tuple[dict[str, Any] | None, str, bool]:
    """The volume TensorBoard reads --logdir from (None: a URL, read as such), where it is mounted,
    and whether it is a folder of one node (TensorBoard then runs beside rank 0)."""
    kube = spec.kube or KubeOptions()
    logdir = kube.logdir or TRAINING_LOGDIR
    if not logdir.startswith("/"):
        return None, logdir, False
    for claim, target in spec.container.data:
        if _under(logdir, target):
            return {"name": LOG_VOLUME, "persistentVolumeClaim": {"claimName": claim, "readOnly": True}}, target, False
    for mount in kube.data_dirs:
        host, target = mount.split(":", 1)
        if _under(logdir, target):
            return {"name": LOG_VOLUME, "hostPath": {"path": host, "type": "Directory"}}, target, True
    own = f"{HOST_LOGS}/{namespace}/{spec.name}"
    return {"name": LOG_VOLUME, "hostPath": {"path": own, "type": "DirectoryOrCreate"}}, logdir, True


def job_volumes(spec: JobSpec, namespace: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The volumes and mounts every pod of the job gets for them: the code's emptyDir at
    WORKING_DIR/code, and the node's folder at --logdir when no volume of the job holds it."""
    kube = spec.kube or KubeOptions()
    volumes: list[dict[str, Any]] = []
    mounts: list[dict[str, Any]] = []
    if kube.sync_mode:
        volumes.append({"name": CODE_VOLUME, "emptyDir": {}})
        mounts.append({"name": CODE_VOLUME, "mountPath": code_folder(spec)})
    if kube.tensorboard:
        volume, _, _ = _log_source(spec, namespace)
        if volume is not None and _own_folder(volume):  # else the job's own volume holds --logdir
            volumes.append(volume)
            mounts.append({"name": LOG_VOLUME, "mountPath": kube.logdir or TRAINING_LOGDIR})
    return volumes, mounts


def _own_folder(volume: Mapping[str, Any]) -> bool:
    return str((volume.get("hostPath") or {}).get("path", "")).startswith(HOST_LOGS + "/")


def init_containers(spec: JobSpec, env: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The code sync, run to completion in every pod before the job's container starts: git-sync
    clones --sync-source once into /code/PROJECT (the repository's name), or rsync copies it into
    /code; /code is the emptyDir the job's container sees at WORKING_DIR/code. It gets the job's -e
    variables, as arena's does: GIT_SYNC_BRANCH, GIT_SYNC_REV and the like choose what is cloned."""
    kube = spec.kube or KubeOptions()
    if not kube.sync_mode or not kube.sync_source:
        return []
    container: dict[str, Any] = {"name": "init-code", "image": kube.sync_image or SYNC_IMAGES[kube.sync_mode],
                                 "env": [dict(e) for e in env],
                                 "volumeMounts": [{"name": CODE_VOLUME, "mountPath": "/code"}]}  # fmt: skip
    if kube.sync_mode == "git":
        project = kube.sync_source.strip("/").rsplit("/", 1)[-1].split(".git")[0]
        container["env"] += [{"name": "GIT_SYNC_REPO", "value": kube.sync_source},
                             {"name": "GIT_SYNC_DEST", "value": project},
                             {"name": "GIT_SYNC_ROOT", "value": "/code"},
                             {"name": "GIT_SYNC_ONE_TIME", "value": "true"}]  # fmt: skip
    else:
        container["command"] = ["rsync", "-avP", kube.sync_source, "/code"]
    if spec.container.image_pull_policy:
        container["imagePullPolicy"] = spec.container.image_pull_policy
    return [container]


def _rank0_affinity(spec: JobSpec) -> dict[str, Any]:
    """TensorBoard on the node of the pod that holds rank 0 (a worker's summaries are on its node)."""
    role = ({names.REPLICA_TYPE_LABEL: "master"} if spec.kind == "pytorch"
            else {names.JOB_ROLE_LABEL: "worker"})  # fmt: skip
    selector = {names.JOB_LABEL: spec.name, names.REPLICA_INDEX_LABEL: "0", **role}
    return {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": selector}, "topologyKey": "kubernetes.io/hostname"}]}}  # fmt: skip


def tensorboard(spec: JobSpec, namespace: str, owner: Mapping[str, Any] | None,
                tolerations: Sequence[Mapping[str, str]] = ()) -> list[dict[str, Any]]:  # fmt: skip
    """TensorBoard's Deployment and its NodePort Service (none without --tensorboard), owned by
    the job's object once it exists: deleting the job deletes them. ``tolerations``: the job's
    (--toleration), so that it may run on rank 0's node."""
    kube = spec.kube or KubeOptions()
    if not kube.tensorboard:
        return []
    name, labels = tensorboard_name(spec), {TENSORBOARD_LABEL: spec.name}
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": dict(labels)}
    if owner is not None:
        meta["ownerReferences"] = [dict(owner)]
    volume, mounted_at, on_rank0_node = _log_source(spec, namespace)
    logdir = kube.logdir or TRAINING_LOGDIR
    container: dict[str, Any] = {
        "name": "tensorboard", "image": kube.tensorboard_image or TENSORBOARD_IMAGE,
        "command": ["tensorboard", "--logdir", logdir, "--host", "0.0.0.0", "--port", str(TENSORBOARD_PORT)],
        "ports": [{"containerPort": TENSORBOARD_PORT, "name": "tensorboard"}],
        "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}},
    }  # fmt: skip
    pod: dict[str, Any] = {"containers": [container]}
    if volume is not None:
        container["volumeMounts"] = [{"name": LOG_VOLUME, "mountPath": mounted_at, "readOnly": True}]
        pod["volumes"] = [volume]
    if on_rank0_node:
        pod["affinity"] = _rank0_affinity(spec)
    if tolerations:
        pod["tolerations"] = [dict(t) for t in tolerations]
    if kube.image_pull_secrets:
        pod["imagePullSecrets"] = [{"name": n} for n in kube.image_pull_secrets]
    if kube.priority_class:
        pod["priorityClassName"] = kube.priority_class
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta, "spec": {
        "replicas": 1, "selector": {"matchLabels": labels},
        "template": {"metadata": {"labels": labels}, "spec": pod}}}  # fmt: skip
    service = {"apiVersion": "v1", "kind": "Service", "metadata": meta, "spec": {
        "type": "NodePort", "selector": labels,
        "ports": [{"name": "tensorboard", "port": TENSORBOARD_PORT, "targetPort": TENSORBOARD_PORT}]}}  # fmt: skip
    return [deployment, service]


def tensorboard_address(service: Mapping[str, Any] | None, pods: Sequence[Mapping[str, Any]]) -> str | None:
    """Where TensorBoard answers, as arena's `get` shows it: http://NODE:NODE_PORT, NODE the address
    of the node its pod runs on (any node's address serves a NodePort); the port on any node while
    its pod has none yet; None without a Service."""
    if service is None:
        return None
    ports = (service.get("spec") or {}).get("ports") or []
    node_port = ports[0].get("nodePort") if ports else None
    if node_port is None:
        return None
    host = next((p["status"]["hostIP"] for p in pods if (p.get("status") or {}).get("hostIP")), None)
    if host is None:
        return f"port {node_port} of any node (TensorBoard's pod is not placed yet)"
    return f"http://{host}:{node_port}"
