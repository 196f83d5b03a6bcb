"""Objects ringleader writes to a cluster, as plain dicts: a job's MPIJob and PodGroup, and the
install (`ringleader kube manifests`): namespace, RBAC of least privilege, the scheduler
Deployment and its config, the agent DaemonSet, the admission policies.

How the GPU choice reaches the container depends on the install's delivery (delivery.py): with
``env`` each worker's NVIDIA_VISIBLE_DEVICES comes from its own ``ringleader.io/gpu-devices``
annotation (the GPUs' UUIDs, else their ids) through the downward API. The scheduler's Binding
carries that annotation (the API server sets it with the node), and kubelet resolves env vars
only when it starts the container,
after the pod is bound, so the container sees exactly the GPUs ``place()`` chose; with ``dra``
the worker's ResourceClaim is allocated to them. Ranks the plan puts on one node share one
worker pod (``ranks_per_pod``), so NCCL can use NVLink between them.
docs/kubernetes.md compares this with a device plugin's Allocate, a runtime hook and DRA.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from typing import Any

import yaml

from ringleader import __version__
from ringleader.engines.kubernetes import companions, names
from ringleader.engines.kubernetes.delivery import (
    GPU_IDS_FIELD,
    SCHEDULER_ACCOUNT,
    TRUSTED_NAMESPACES,
    Delivery,
    agent_policy,
    env_policy,
    node_policy,
    podgroup_policy,
    scheduler_policy,
)
from ringleader.engines.kubernetes.objects import quantity
from ringleader.errors import UsageError
from ringleader.jobs.codec import spec_to_json
from ringleader.jobs.commandline import gets_torchrun_defaults
from ringleader.jobs.line import CommandLine, root_option
from ringleader.jobs.spec import JobSpec, KubeOptions, check_image_reference, looks_secret
from ringleader.topology.cluster import check_name

# The name the Containerfile at the repository's root tells users to build the image under (the
# project publishes none): this version's scheduler and agent.
DEFAULT_IMAGE = f"ghcr.io/ringleader/ringleader:{__version__}"
METRICS_PORT = 10259
# What the launcher pod asks for: mpirun and ssh only, no GPU.
LAUNCHER_REQUESTS = {"cpu": "500m", "memory": "512Mi"}
WORKER_SSHD = ["/usr/sbin/sshd", "-De"]  # mpi-operator v2 reaches workers over ssh


def _gpu_env(delivery: Delivery) -> list[dict[str, Any]]:
    index = {"name": "RINGLEADER_WORKER_INDEX", "valueFrom": {"fieldRef": {
        "fieldPath": f"metadata.annotations['{names.WORKER_INDEX_ANNOTATION}']"}}}  # fmt: skip
    if delivery.mode == "dra":  # the DRA driver's CDI spec sets the devices; no env is trusted
        return [index]
    return [{"name": "NVIDIA_VISIBLE_DEVICES", "valueFrom": {"fieldRef": {"fieldPath": GPU_IDS_FIELD}}}, index]


# The launcher and CPU-only workers see no GPU, even on a node whose default runtime is NVIDIA's,
# in an image that sets NVIDIA_VISIBLE_DEVICES=all.
NO_GPU = "void"
NO_GPU_ENV = {"name": "NVIDIA_VISIBLE_DEVICES", "value": NO_GPU}
# What a worker pod asks for when the user gives no --cpu/--memory: non-zero requests, so it is
# Burstable rather than BestEffort (evicted first under node pressure, and mpi-operator then fails
# the whole job), and the scheduler's room check counts it.
DEFAULT_WORKER_REQUESTS = {"cpu": "1", "memory": "2Gi"}


# -e variables whose name says they hold a secret (jobs.spec.looks_secret): their values go into a
# Secret the pods read them from (secretKeyRef), not into the MPIJob, which anyone who may read
# jobs reads in full.


def env_secret_name(spec: JobSpec) -> str:
    return f"{spec.name}-env"


# What a restarted gang's programs read (--max-restarts): the run's count, from the annotation
# the scheduler writes on each pod it binds, and the limit, as torchrun names them too.
RESTART_ENV = ("RINGLEADER_RESTARTS", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS")


def _env(spec: JobSpec) -> list[dict[str, Any]]:
    env = [
        {"name": k, "valueFrom": {"secretKeyRef": {"name": env_secret_name(spec), "key": k}}}
        if looks_secret(k) else {"name": k, "value": v}
        for k, v in sorted(spec.env.items())
    ]  # fmt: skip
    if spec.max_restarts:
        count = {"fieldRef": {"fieldPath": f"metadata.annotations['{names.RESTARTS_ANNOTATION}']"}}
        env += [{"name": RESTART_ENV[0], "valueFrom": count}, {"name": RESTART_ENV[1], "valueFrom": count},
                {"name": RESTART_ENV[2], "value": str(spec.max_restarts)}]  # fmt: skip
    return env


def env_secret(spec: JobSpec, namespace: str, owner_uid: str | None = None) -> dict[str, Any] | None:
    """The Secret holding the job's secret-looking -e values (None when it has none), owned by the
    MPIJob once it exists, so deleting the job deletes it."""
    secret = {k: v for k, v in spec.env.items() if looks_secret(k)}
    if not secret:
        return None
    meta: dict[str, Any] = {"name": env_secret_name(spec), "namespace": namespace,
                            "labels": {names.JOB_LABEL: spec.name}}  # fmt: skip
    if owner_uid:
        meta["ownerReferences"] = [owner_reference(spec, owner_uid)]
    return {"apiVersion": "v1", "kind": "Secret", "metadata": meta, "type": "Opaque", "stringData": secret}


def owner_reference(spec: JobSpec, uid: str) -> dict[str, Any]:
    """The job's object as the owner of what it needs beside it (deleted with it)."""
    if spec.kind == "pytorch":
        api_version, kind = f"{names.PYTORCHJOB_GROUP}/{names.PYTORCHJOB_VERSION}", "PyTorchJob"
    else:
        api_version, kind = f"{names.MPIJOB_GROUP}/{names.MPIJOB_VERSION}", "MPIJob"
    return {"apiVersion": api_version, "kind": kind, "name": spec.name, "uid": uid, "controller": True,
            "blockOwnerDeletion": True}  # fmt: skip


# What mpi-operator names after the job: `<name>-worker-<index>` pods (their hostname too) and
# `<name>-launcher`, DNS labels of at most 63 characters, as label values are.
DNS_LABEL_MAX = 63
GPUS_ANNOTATION = f"{names.PREFIX}/gpus-per-worker"  # on an MPIJob written before names.SPEC_ANNOTATION
RANKS_PER_POD_ANNOTATION = f"{names.PREFIX}/ranks-per-pod"
DELIVERY_ANNOTATION = f"{names.PREFIX}/gpu-delivery"


def check_job_name_fits(spec: JobSpec, per_pod: int = 1) -> None:
    """Refuse a job whose objects would get names Kubernetes refuses (the MPIJob would be
    accepted, then never start a pod; its TensorBoard's Service would be refused after it)."""
    last = spec.workers // per_pod - 1
    longest = f"{spec.name}-worker-{last}"
    if len(longest) > DNS_LABEL_MAX:
        room = DNS_LABEL_MAX - len(f"-worker-{last}")
        raise UsageError(
            f"job name {spec.name!r} is too long for Kubernetes with {spec.workers} worker(s): its last worker "
            f"pod would be {longest!r}, {len(longest)} characters, over the {DNS_LABEL_MAX} of a pod's hostname",
            f"use a --name of at most {room} characters",
        )
    companions.check_tensorboard_name(spec)


def ranks_per_pod(spec: JobSpec, nodes: Sequence[str]) -> int:
    """How many ranks share one worker pod, from the nodes the plan gives each rank: the largest
    count that divides every node's share. Ranks in one pod share its hostname, /dev/shm, IPC
    and network namespace and see each other's GPUs, so NCCL uses P2P (NVLink) between them;
    ranks in separate pods of one node cannot (docs/kubernetes.md, "NVLink between workers")."""
    if spec.gpus_per_worker == 0 or len(nodes) != spec.workers:
        return 1
    counts = [nodes.count(n) for n in dict.fromkeys(nodes)]
    return math.gcd(*counts)


def calibration_annotation(calibration: dict[str, Any]) -> str:
    """A job's calibration as its workers carry it: compact JSON, refused at submit where it
    would not fit beside a pod's other annotations."""
    text = json.dumps(calibration, separators=(",", ":"), sort_keys=True)
    if len(text.encode()) > names.CALIBRATION_MAX_BYTES:
        raise UsageError(f"the calibration is {len(text.encode()) // 1024} KiB, more than a pod annotation may "
                         f"carry here ({names.CALIBRATION_MAX_BYTES // 1024} KiB)",
                         "calibrate from fewer runs (`ringleader calibrate`), or leave --calibration out")  # fmt: skip
    return text


def _pod_labels(spec: JobSpec) -> dict[str, str]:
    labels = {names.JOB_LABEL: spec.name, names.PODGROUP_LABEL: spec.name}
    if spec.topology_aware:
        labels[names.TOPOLOGY_LABEL] = "true"
    return labels


def _scaled(value: str, times: int, unit: str) -> str:
    """A per-rank quantity for a pod of ``times`` ranks (as given when ``times`` is 1)."""
    if times == 1:
        return value
    total = quantity(value) * times
    return f"{int(total * 1000)}m" if unit == "cpu" else str(int(total))


def tolerations(given: Sequence[str]) -> list[dict[str, str]]:
    out = []
    for text in given:
        if text == "all":
            out.append({"operator": "Exists"})
            continue
        key_value, _, effect = text.partition(":")
        key, eq, value = key_value.partition("=")
        tol = {"key": key, "operator": "Equal", "value": value} if eq else {"key": key, "operator": "Exists"}
        if effect:
            tol["effect"] = effect
        out.append(tol)
    return out


# The RDMA device plugin's resource (Mellanox's k8s-rdma-shared-dev-plugin, as arena's --rdma asks).
RDMA_RESOURCE = "rdma/hca"
PVC_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")


def _volumes(spec: JobSpec, namespace: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Volumes and mounts of every pod: -d PVC:DST, --data-dir HOST:DST, /dev/shm in memory
    (a container's own is 64 MiB: too small for NCCL's shared-memory transport between the ranks of
    one pod and for DataLoader workers), sized by --shm-size, and the code sync's and TensorBoard's
    (companions.job_volumes)."""
    kube = spec.kube or KubeOptions()
    volumes: list[dict[str, Any]] = []
    mounts: list[dict[str, Any]] = []
    for i, (claim, target) in enumerate(spec.container.data):
        if not PVC_NAME.fullmatch(claim):
            raise UsageError(f"--data {claim}:{target}: on Kubernetes the source is a PersistentVolumeClaim's "
                             "name",
                             "give -d PVC_NAME:/path, or --data-dir HOST_PATH:/path for a node's "
                             "directory")  # fmt: skip
        volumes.append({"name": f"data-{i}", "persistentVolumeClaim": {"claimName": claim}})
        mounts.append({"name": f"data-{i}", "mountPath": target})
    for i, mount in enumerate(kube.data_dirs):
        host, container = mount.split(":", 1)
        volumes.append({"name": f"data-dir-{i}", "hostPath": {"path": host, "type": "Directory"}})
        mounts.append({"name": f"data-dir-{i}", "mountPath": container})
    shm: dict[str, Any] = {"medium": "Memory"}
    if spec.container.shm_size:
        shm["sizeLimit"] = str(spec.container.shm_size)
    volumes.append({"name": "dshm", "emptyDir": shm})
    mounts.append({"name": "dshm", "mountPath": "/dev/shm"})
    theirs = companions.job_volumes(spec, namespace)
    return volumes + theirs[0], mounts + theirs[1]


def _container_setup(spec: JobSpec, container: dict[str, Any], mounts: list[dict[str, Any]]) -> dict[str, Any]:
    """What every container of the job shares: its working directory, mounts, pull policy and
    user (--working-dir, -d, --data-dir, --shm-size, --image-pull-policy, --container-user, --rdma)."""
    opts = spec.container
    if spec.workdir:
        container["workingDir"] = spec.workdir
    container["volumeMounts"] = mounts
    if opts.image_pull_policy:
        container["imagePullPolicy"] = opts.image_pull_policy
    security: dict[str, Any] = {}
    if opts.user:
        uid, _, gid = opts.user.partition(":")
        security["runAsUser"] = int(uid)
        if gid:
            security["runAsGroup"] = int(gid)
    if opts.rdma:  # verbs pin memory: unlimited memlock needs IPC_LOCK
        security["capabilities"] = {"add": ["IPC_LOCK"]}
    if security:
        container["securityContext"] = security
    if spec.max_restarts:  # the end of a failed container's log is in its status: the scheduler reads why
        container["terminationMessagePolicy"] = "FallbackToLogsOnError"
    return container


# A plain program runs once per worker under mpirun with torchrun's variables, as on every other
# engine: Open MPI's own rank variables renamed, MASTER_ADDR the first worker (rank 0 runs there:
# map-by slot over mpi-operator's hostfile, every pod the same number of slots, so a pod's index is
# the rank over that number: Open MPI's NODE_RANK is a rank within the node, not the node's); the
# restart count and limit the launcher passes (--max-restarts), else torchrun's 0; DeepSpeed's
# names for the node's index and sizes. Then torchrun's defaults where the job set none (not for
# a deepspeed line: its launcher sets none): NCCL's async error handling, and OMP_NUM_THREADS=1
# where a pod runs several ranks.
TORCH_ENV = (
    'export RANK="$OMPI_COMM_WORLD_RANK" WORLD_SIZE="$OMPI_COMM_WORLD_SIZE" '
    'LOCAL_RANK="$OMPI_COMM_WORLD_LOCAL_RANK" LOCAL_WORLD_SIZE="$OMPI_COMM_WORLD_LOCAL_SIZE" '
    'GROUP_RANK="$((OMPI_COMM_WORLD_RANK / OMPI_COMM_WORLD_LOCAL_SIZE))" '
    'NODE_RANK="$((OMPI_COMM_WORLD_RANK / OMPI_COMM_WORLD_LOCAL_SIZE))" '
    'ROLE_RANK="$OMPI_COMM_WORLD_RANK" ROLE_WORLD_SIZE="$OMPI_COMM_WORLD_SIZE" ROLE_NAME=default '
    'TORCHELASTIC_RESTART_COUNT="${TORCHELASTIC_RESTART_COUNT:-0}" '
    'TORCHELASTIC_MAX_RESTARTS="${TORCHELASTIC_MAX_RESTARTS:-0}" '
    'CROSS_RANK="$((OMPI_COMM_WORLD_RANK / OMPI_COMM_WORLD_LOCAL_SIZE))" CROSS_SIZE="$GROUP_WORLD_SIZE" '
    'LOCAL_SIZE="$OMPI_COMM_WORLD_LOCAL_SIZE"; '
)
TORCHRUN_DEFAULTS = (
    'export TORCH_NCCL_ASYNC_ERROR_HANDLING="${TORCH_NCCL_ASYNC_ERROR_HANDLING:-1}"; '
    'if [ -z "${OMP_NUM_THREADS+set}" ] && [ "$OMPI_COMM_WORLD_LOCAL_SIZE" -gt 1 ]; then '
    "export OMP_NUM_THREADS=1; fi; "
)
MASTER_PORT = 29500


def launcher_command(spec: JobSpec, namespace: str = "default", line: CommandLine | None = None,
                     per_pod: int = 1) -> list[str]:  # fmt: skip
    """What the launcher runs: the prepared mpirun line with -np from the gang and without the
    host options (mpi-operator's hostfile lists the workers, ``per_pod`` slots each); a plain
    program started once per rank through mpirun, torchrun's variables set. mpirun is told it
    may run as root (the image's user is not known here), as every engine's launcher does."""
    line = line or spec.command_line()
    # a restarted run's count reaches the ranks as the launcher's pod has it (--max-restarts)
    restarts = [w for name in RESTART_ENV for w in ("-x", name)] if spec.max_restarts else []
    if line.mpirun:
        as_root = root_option(line.kept_options, as_root=True)  # the image's user: unknown here
        return [line.argv[0], "-np", str(spec.workers), *as_root, *restarts, *line.kept, *line.program]
    master = f"{spec.name}-worker-0.{spec.name}.{namespace}.svc"
    return ["mpirun", "--allow-run-as-root", "-np", str(spec.workers), "-bind-to", "none", "-map-by", "slot",
            *restarts, "-x", f"MASTER_ADDR={master}", "-x", f"MASTER_PORT={MASTER_PORT}",
            # each worker pod is one torchrun group of per_pod local ranks
            "-x", f"GROUP_WORLD_SIZE={spec.workers // per_pod}", "-x", f"TORCHELASTIC_RUN_ID={spec.name}",
            "/bin/sh", "-c", rank_shell(spec), "rank", *line.program]  # fmt: skip


def rank_shell(spec: JobSpec) -> str:
    """What each rank's shell runs before the program: torchrun's variables, and its defaults
    unless the line's own launcher would set none (gets_torchrun_defaults)."""
    return TORCH_ENV + (TORCHRUN_DEFAULTS if gets_torchrun_defaults(spec) else "") + 'exec "$@"'


def claim_template_name(spec: JobSpec) -> str:
    return f"{spec.name}-{names.DRA_REQUEST}"


JOB_BACKOFF_LIMIT = 6  # a batch Job's backoffLimit when none is given (the launcher's)


def _worker_spec(spec: JobSpec, image: str, delivery: Delivery, per_pod: int, env: list[dict[str, Any]],
                 mounts: list[dict[str, Any]], container_name: str = "worker",
                 command: Sequence[str] = WORKER_SSHD) -> dict[str, Any]:  # fmt: skip
    """The worker pod: ``per_pod`` ranks' GPUs, CPU and memory, delivered as the install says."""
    kube = spec.kube or KubeOptions()
    requests = {"cpu": _scaled(kube.cpu or DEFAULT_WORKER_REQUESTS["cpu"], per_pod, "cpu"),
                "memory": _scaled(kube.memory or DEFAULT_WORKER_REQUESTS["memory"], per_pod, "memory")}  # fmt: skip
    resources: dict[str, Any] = {"requests": requests}
    gpus = spec.gpus_per_worker * per_pod
    pod: dict[str, Any] = {"schedulerName": names.SCHEDULER_NAME}
    if gpus and delivery.mode == "env":
        resources["limits"] = {names.GPU_RESOURCE: gpus}
        if delivery.runtime_class:
            pod["runtimeClassName"] = delivery.runtime_class
    elif gpus:  # dra: kube-scheduler binds once ringleader has pinned the whole gang
        resources["claims"] = [{"name": names.DRA_REQUEST}]
        pod = {"schedulerName": "default-scheduler", "schedulingGates": [{"name": names.GANG_GATE}],
               "resourceClaims": [{"name": names.DRA_REQUEST, "resourceClaimTemplateName": claim_template_name(spec)}]}
    if spec.container.rdma:
        resources.setdefault("limits", {})[RDMA_RESOURCE] = 1
    container: dict[str, Any] = {"name": container_name, "image": image, "command": list(command),
                                 "env": [*env, *(_gpu_env(delivery) if gpus else [NO_GPU_ENV])], "resources": resources}
    return {**pod, "containers": [_container_setup(spec, container, mounts)]}


def _common_pod(spec: JobSpec, volumes: list[dict[str, Any]], grace_s: float | None) -> dict[str, Any]:
    """What every pod of the job shares: volumes, grace, deadline, node choice, pull secrets, priority.
    ``grace_s`` (RINGLEADER_GRACE_S): terminationGracePeriodSeconds, the time between SIGTERM and
    SIGKILL when a pod is deleted or reaches the time limit (Kubernetes' 30 s if None);
    ``spec.time_limit_s``: activeDeadlineSeconds (kubelet stops the pod then)."""
    kube = spec.kube or KubeOptions()
    common: dict[str, Any] = {"volumes": volumes}
    if grace_s is not None:
        common["terminationGracePeriodSeconds"] = math.ceil(grace_s)
    deadline = _deadline(spec)
    if deadline is not None:
        common["activeDeadlineSeconds"] = deadline
    if kube.selector:
        common["nodeSelector"] = dict(kube.selector)
    if kube.tolerations:
        common["tolerations"] = tolerations(kube.tolerations)
    if kube.image_pull_secrets:
        common["imagePullSecrets"] = [{"name": n} for n in kube.image_pull_secrets]
    if kube.priority_class:
        common["priorityClassName"] = kube.priority_class
    sync = companions.init_containers(spec, [*_env(spec), NO_GPU_ENV])  # it needs no GPU, as the launcher
    if sync:
        common["initContainers"] = sync
    return common


def _deadline(spec: JobSpec) -> int | None:
    return max(1, math.ceil(spec.time_limit_s)) if spec.time_limit_s else None


def _worker_annotations(spec: JobSpec, delivery: Delivery, per_pod: int) -> dict[str, str]:
    """What the scheduler reads off a gang's GPU workers: its network level, start rule, run time,
    model and calibration, preemption, queue and restarts (beside the user's own annotations)."""
    kube = spec.kube or KubeOptions()
    notes = dict(kube.annotations)
    if delivery.mode == "dra" and spec.gpus_per_worker:
        notes[names.DRA_GPUS_ANNOTATION] = str(spec.gpus_per_worker * per_pod)
    # the network level the gang stays under or prefers
    for keys, level in ((names.TOPOLOGY_REQUIRED_ANNOTATIONS, spec.topology_required),
                        (names.TOPOLOGY_PREFERRED_ANNOTATIONS, spec.topology_preferred)):  # fmt: skip
        if level is not None:
            notes[keys[0]] = level
    # when it starts (scheduler/queue.py, start rules)
    if spec.start_rule() != "now":
        notes[names.START_ANNOTATION] = spec.start_rule()
    if spec.risk is not None:
        notes[names.RISK_ANNOTATION] = spec.risk
    for key, seconds in ((names.RUN_TIME_ANNOTATION, spec.run_time_s), (names.MAX_WAIT_ANNOTATION, spec.max_wait_s)):
        if seconds is not None:
            notes[key] = f"{seconds:g}"
    if spec.model is not None:
        work = spec.training_workload()
        notes[names.MODEL_ANNOTATION] = spec.model
        notes[names.BATCH_ANNOTATION] = str(work.batch_size)
        notes[names.PRECISION_ANNOTATION] = work.precision
        notes[names.ACCUMULATION_ANNOTATION] = str(work.accumulation)
    if spec.calibration is not None:
        notes[names.CALIBRATION_ANNOTATION] = calibration_annotation(spec.calibration)
    if spec.preempt:
        notes[names.PREEMPT_ANNOTATION] = "true"
    if not spec.preemptible:
        notes[names.PREEMPTIBLE_ANNOTATION] = "false"
    if spec.queue is not None:
        notes[names.QUEUE_ANNOTATION] = spec.queue
    if spec.max_restarts:
        notes[names.MAX_RESTARTS_ANNOTATION] = str(spec.max_restarts)
    return notes


def stored_spec(spec: JobSpec) -> str:
    """The whole spec as the job and its PodGroup keep it (names.SPEC_ANNOTATION): the codec's JSON,
    without the secret-looking -e values (the pods read them from the Secret), since anyone who
    may read jobs reads their annotations."""
    return spec_to_json(spec.shown())


def _job_meta(spec: JobSpec, namespace: str, delivery: Delivery, per_pod: int) -> dict[str, Any]:
    """The training job object's own metadata: what `get` reads back (the whole spec, the ranks per
    pod and the GPU delivery)."""
    kube = spec.kube or KubeOptions()
    annotations = {**dict(kube.annotations), names.SPEC_ANNOTATION: stored_spec(spec),
                   RANKS_PER_POD_ANNOTATION: str(per_pod), DELIVERY_ANNOTATION: delivery.mode}  # fmt: skip
    return {"name": spec.name, "namespace": namespace, "labels": {**dict(kube.labels), names.JOB_LABEL: spec.name},
            "annotations": annotations}  # fmt: skip


def _run_policy(spec: JobSpec, pods: int) -> dict[str, Any]:
    """The training operators' shared runPolicy: pods cleaned up once it ends, the gang's size for
    their own gang scheduling, retries and the time limit."""
    kube = spec.kube or KubeOptions()
    run_policy: dict[str, Any] = {"cleanPodPolicy": "Running", "schedulingPolicy": {"minAvailable": pods}}
    if kube.retry is not None:
        run_policy["backoffLimit"] = kube.retry
    elif spec.max_restarts:  # each restart deletes pods, which the job may count as failed
        run_policy["backoffLimit"] = max(JOB_BACKOFF_LIMIT, 2 * spec.max_restarts)
    deadline = _deadline(spec)
    if deadline is not None:
        run_policy["activeDeadlineSeconds"] = deadline
    return run_policy


def mpijob(spec: JobSpec, namespace: str, image: str | None = None, line: CommandLine | None = None,
           delivery: Delivery | None = None, per_pod: int = 1,
           grace_s: float | None = None) -> dict[str, Any]:  # fmt: skip
    """A kubeflow.org/v2beta1 MPIJob: ``workers / per_pod`` worker pods of ``per_pod`` ranks each
    (``slotsPerWorker``) and a launcher created once every worker is Ready; the workers are one
    gang (the PodGroup named like the job). ``line``: the spec's command as submit read it.
    ``grace_s`` and ``spec.time_limit_s``: see _common_pod (mpi-operator also fails the job at
    the limit)."""
    delivery = delivery or Delivery()
    kube = spec.kube or KubeOptions()
    image = image or spec.image or DEFAULT_IMAGE
    pods = spec.workers // per_pod
    volumes, mounts = _volumes(spec, namespace)
    env = _env(spec)
    worker = _worker_spec(spec, image, delivery, per_pod, env, mounts)
    launcher: dict[str, Any] = {
        "name": "launcher", "image": image, "command": launcher_command(spec, namespace, line, per_pod),
        "env": [*env, NO_GPU_ENV],
        "resources": {"requests": dict(LAUNCHER_REQUESTS)},
    }  # fmt: skip
    launcher = _container_setup(spec, launcher, mounts)
    # kube-scheduler places the DRA launcher (no GPU, no gate); in env mode ringleader puts it
    # next to the gang it belongs to.
    launcher_pod: dict[str, Any] = {"schedulerName": worker["schedulerName"], "containers": [launcher]}
    common = _common_pod(spec, volumes, grace_s)
    labels = {**dict(kube.labels), **_pod_labels(spec)}
    meta = {"labels": labels, **({"annotations": dict(kube.annotations)} if kube.annotations else {})}
    worker_notes = _worker_annotations(spec, delivery, per_pod)
    worker_meta = {**meta, "annotations": worker_notes} if worker_notes else meta
    launcher_meta = {**meta, "labels": {k: v for k, v in labels.items()
                                        if delivery.mode == "env" or k != names.PODGROUP_LABEL}}  # fmt: skip
    return {
        "apiVersion": f"{names.MPIJOB_GROUP}/{names.MPIJOB_VERSION}", "kind": "MPIJob",
        "metadata": _job_meta(spec, namespace, delivery, per_pod),
        "spec": {
            "slotsPerWorker": per_pod,
            "mpiImplementation": "OpenMPI",
            # the launcher starts mpirun only once every worker is Ready (its DNS name resolves):
            # the gang is the workers; the launcher is scheduled after them
            "launcherCreationPolicy": "WaitForWorkersReady",
            "runPolicy": _run_policy(spec, pods),
            "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "restartPolicy": "OnFailure", "template": {
                    "metadata": launcher_meta, "spec": {**launcher_pod, **common}}},
                "Worker": {"replicas": pods, "restartPolicy": "Never", "template": {
                    "metadata": worker_meta, "spec": {**worker, **common}}},
            },
        },
    }  # fmt: skip


# The Training Operator's names: its default container, whose env it sets (MASTER_ADDR, RANK,
# PET_NNODES, PET_NPROC_PER_NODE, PET_NODE_RANK on every pod of a job with a Master replica).
PYTORCH_CONTAINER = "pytorch"


def pytorch_command(spec: JobSpec, line: CommandLine | None = None, per_pod: int = 1) -> list[str]:
    """What each PyTorchJob pod runs: the program under torchrun, one process per rank of the pod,
    this pod the operator's node rank of ``workers / per_pod`` nodes, rendezvous at the master
    (the operator's MASTER_ADDR and MASTER_PORT, expanded by kubelet): every rank gets the
    variables torchrun sets, as a plain program does on every other engine."""
    line = line or spec.command_line()
    return ["torchrun", f"--nnodes={spec.workers // per_pod}", f"--nproc-per-node={per_pod}",
            "--node-rank=$(RANK)", "--master-addr=$(MASTER_ADDR)", "--master-port=$(MASTER_PORT)",
            "--max-restarts=0", "--no-python", *line.program]  # fmt: skip


def pytorchjob(spec: JobSpec, namespace: str, image: str | None = None, line: CommandLine | None = None,
               delivery: Delivery | None = None, per_pod: int = 1,
               grace_s: float | None = None) -> dict[str, Any]:  # fmt: skip
    """A kubeflow.org/v1 PyTorchJob (Kubeflow's Training Operator): ``workers / per_pod`` pods of
    ``per_pod`` ranks each, the first the Master (RANK 0, the rendezvous), the rest Workers; every
    pod holds GPUs, so they are all the gang (the PodGroup named like the job). No launcher and no
    sshd: each pod starts the program under torchrun (pytorch_command). ``grace_s`` and
    ``spec.time_limit_s``: see _common_pod."""
    delivery = delivery or Delivery()
    kube = spec.kube or KubeOptions()
    image = image or spec.image or DEFAULT_IMAGE
    pods = spec.workers // per_pod
    volumes, mounts = _volumes(spec, namespace)
    pod = {**_worker_spec(spec, image, delivery, per_pod, _env(spec), mounts, PYTORCH_CONTAINER,
                          pytorch_command(spec, line, per_pod)),
           **_common_pod(spec, volumes, grace_s)}  # fmt: skip
    labels = {**dict(kube.labels), **_pod_labels(spec)}
    notes = _worker_annotations(spec, delivery, per_pod)
    template = {"metadata": {"labels": labels, **({"annotations": notes} if notes else {})}, "spec": pod}
    replicas = {"Master": {"replicas": 1, "restartPolicy": "Never", "template": template}}
    if pods > 1:
        replicas["Worker"] = {"replicas": pods - 1, "restartPolicy": "Never", "template": template}
    return {
        "apiVersion": f"{names.PYTORCHJOB_GROUP}/{names.PYTORCHJOB_VERSION}", "kind": "PyTorchJob",
        "metadata": _job_meta(spec, namespace, delivery, per_pod),
        "spec": {"nprocPerNode": str(per_pod), "runPolicy": _run_policy(spec, pods), "pytorchReplicaSpecs": replicas},
    }  # fmt: skip


def training_job(spec: JobSpec, namespace: str, image: str | None = None, line: CommandLine | None = None,
                 delivery: Delivery | None = None, per_pod: int = 1,
                 grace_s: float | None = None) -> dict[str, Any]:  # fmt: skip
    """The job's object, by its kind: an MPIJob (`submit mpi`) or a PyTorchJob (`submit pytorch`)."""
    build = pytorchjob if spec.kind == "pytorch" else mpijob
    return build(spec, namespace, image, line, delivery, per_pod, grace_s)


def podgroup(spec: JobSpec, namespace: str, owner_uid: str | None = None, per_pod: int = 1) -> dict[str, Any]:
    """The gang: every worker pod starts together or not at all (the launcher comes after them).
    Owned by the MPIJob once it exists, so deleting the job deletes its group. It keeps the whole
    spec too: the scheduler reads the gang's queue and preemption there, not off one of its pods."""
    meta: dict[str, Any] = {"name": spec.name, "namespace": namespace, "labels": {names.JOB_LABEL: spec.name},
                            "annotations": {names.SPEC_ANNOTATION: stored_spec(spec)}}  # fmt: skip
    if spec.hold:  # submitted held: its user releases it (the annotation, not the spec, says whether it is held)
        meta["annotations"][names.HOLD_ANNOTATION] = "true"
    if owner_uid:
        meta["ownerReferences"] = [owner_reference(spec, owner_uid)]
    return {
        "apiVersion": f"{names.PODGROUP_GROUP}/{names.PODGROUP_VERSION}", "kind": "PodGroup",
        "metadata": meta, "spec": {"minMember": spec.workers // per_pod},
    }  # fmt: skip


# -- install ----------------------------------------------------------------------------------------------


def _role_rules_scheduler(delivery: Delivery) -> list[dict[str, Any]]:
    """What the scheduler calls, nothing more (tests/kube checks each request it makes against
    these): it reads nodes, pods and PodGroups, binds pods (the GPU ids travel on the Binding,
    so it patches no pod, only a waiting pod's status: PodScheduled=False), deletes the members
    of a gang whose bind failed half-way (their controller makes them again), writes events and
    its PodGroups' status and reason. With DRA it allocates the workers' claims (their status),
    pins and ungates the workers (a pod patch), and reads the DRA driver's ResourceSlices."""
    dra = [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["patch"]},
        {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims", "resourceslices"],
         "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims/status"], "verbs": ["update", "patch"]},
        # 1.36 (DRAResourceClaimGranularStatusAuthorization): writing status.allocation needs this too
        {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims/binding"], "verbs": ["update"]},
    ] if delivery.mode == "dra" else []  # fmt: skip
    return [*dra,
        # patch: the faults blamed on a node, and its cordon once blamed twice (--max-restarts)
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch", "patch"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "delete"]},
        {"apiGroups": [""], "resources": ["pods/binding"], "verbs": ["create"]},
        {"apiGroups": [""], "resources": ["pods/status"], "verbs": ["patch"]},  # PodScheduled=False
        {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]},
        {"apiGroups": [names.PODGROUP_GROUP], "resources": ["podgroups"], "verbs": ["get", "list", "watch", "patch"]},
        {"apiGroups": [names.PODGROUP_GROUP], "resources": ["podgroups/status"], "verbs": ["patch"]},
        # Volcano's HyperNodes, read when the config says networkHyperNodes: true
        {"apiGroups": [names.HYPERNODE_GROUP], "resources": [names.HYPERNODE_PLURAL],
         "verbs": ["get", "list", "watch"]},
    ]


USER_ROLE = "ringleader-jobs"


def _role_rules_user(delivery: Delivery) -> list[dict[str, Any]]:
    """What `submit`, `get`, `list`, `logs` and `delete` need beyond the `edit` role's own rights
    (pods, pods/log, secrets, events): MPIJobs, PyTorchJobs, their PodGroups and, with DRA, claim
    templates."""
    every = ["get", "list", "watch", "create", "update", "patch", "delete"]
    rules = [{"apiGroups": [names.MPIJOB_GROUP], "resources": [names.MPIJOB_PLURAL], "verbs": every},
             {"apiGroups": [names.PYTORCHJOB_GROUP], "resources": [names.PYTORCHJOB_PLURAL], "verbs": every},
             {"apiGroups": [names.PODGROUP_GROUP], "resources": [names.PODGROUP_PLURAL], "verbs": every}]
    if delivery.mode == "dra":
        rules.append({"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaimtemplates"], "verbs": every})
    return rules


def install(image: str = DEFAULT_IMAGE, replicas: int = 2, lease_seconds: int = 15, delivery: Delivery | None = None,
            trusted: Sequence[str] = TRUSTED_NAMESPACES) -> list[dict[str, Any]]:  # fmt: skip
    """Everything `kube manifests` prints. ``delivery``: how this cluster's GPUs reach workers
    (published in the ConfigMap ringleader-cluster, which every authenticated user may read, so
    each submit templates its jobs alike); ``trusted``: namespaces whose pods may set NVIDIA_*."""
    check_image_reference(image)
    for namespace in trusted:
        check_name(namespace, "namespace")
    delivery = delivery or Delivery()
    ns = names.SYSTEM_NAMESPACE
    sched, agent = SCHEDULER_ACCOUNT, "ringleader-agent"
    config = {"leaseSeconds": lease_seconds, "metricsPort": METRICS_PORT, "namespace": ns, "bindThreads": 8,
              "gpuDelivery": delivery.mode}  # with dra, the scheduler counts every claim's devices
    labels_s, labels_a = {"app.kubernetes.io/name": sched}, {"app.kubernetes.io/name": agent}
    in_ns = {"name": sched, "namespace": ns}
    probe = {"httpGet": {"path": "/healthz", "port": METRICS_PORT}, "periodSeconds": 10}
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": sched, "namespace": ns}},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": agent, "namespace": ns}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": sched},
         "rules": _role_rules_scheduler(delivery)},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": sched},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": sched},
         "subjects": [{"kind": "ServiceAccount", "name": sched, "namespace": ns}]},
        # The Lease: only in ringleader's namespace, and get/update only on its own name.
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": sched, "namespace": ns},
         "rules": [
             {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
             {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "update"],
              "resourceNames": [names.LEASE_NAME]},
             # the team queues (names.QUEUES_CONFIG) and their usage, watched: only ringleader's
             # own ConfigMaps are here
             {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list", "watch"]},
             # each queue's fair-share usage (names.QUEUE_USAGE_CONFIG), which it keeps: read again
             # after a conflict, and replaced, that one only (the install makes it: no create)
             {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "update"],
              "resourceNames": [names.QUEUE_USAGE_CONFIG]},
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
        # Whoever has `edit` (or `admin`) in a namespace may run ringleader's jobs there: RBAC
        # aggregates these rules into those roles.
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": USER_ROLE, "labels": {"rbac.authorization.k8s.io/aggregate-to-edit": "true",
                                                    "rbac.authorization.k8s.io/aggregate-to-admin": "true"}},
         "rules": _role_rules_user(delivery)},
        # How this cluster delivers GPUs: every submit reads it, whoever submits.
        *_config_everyone_reads(names.CLUSTER_CONFIG, delivery.as_data()),
        # The team queues: every submit and `queue list` reads them; a cluster administrator
        # changes them (`ringleader queue create`, as Kueue's ClusterQueues are an admin's).
        *_config_everyone_reads(names.QUEUES_CONFIG, {}),
        # Each queue's fair-share usage, which the scheduler keeps: `queue list` reads it.
        *_config_everyone_reads(names.QUEUE_USAGE_CONFIG, {}),
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
                      **({"runtimeClassName": delivery.runtime_class} if delivery.runtime_class else {}),
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
        *env_policy(delivery.runtime_class, trusted, templates=delivery.mode == "env"),
        *agent_policy(agent),
        # in env installs too (the scheduler patches no pod there, so it never applies): both
        # installs name the same objects, and `kubectl apply` of one over the other leaves nothing
        *scheduler_policy(),
        *podgroup_policy(),
        *node_policy(),
    ]  # fmt: skip


def _config_everyone_reads(name: str, data: dict[str, str]) -> list[dict[str, Any]]:
    """A ConfigMap in ringleader's namespace, with the Role and RoleBinding that let every
    authenticated user read it (and nothing else there)."""
    meta = {"name": name, "namespace": names.SYSTEM_NAMESPACE}
    return [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": dict(meta), "data": data},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": dict(meta),
         "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"], "resourceNames": [name]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": dict(meta),
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
         "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:authenticated"}]},
    ]  # fmt: skip


class _PlainDumper(yaml.SafeDumper):
    """No anchors and aliases: every object spelled out, as kubectl prints them. Strings kubectl
    would read as something else are quoted: PyYAML already quotes yes/no/on/off/true/false,
    YAML 1.1 (sigs.k8s.io/yaml) also reads y, Y, n and N as booleans."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


_PlainDumper.add_implicit_resolver("tag:yaml.org,2002:bool", re.compile(r"^(?:y|Y|n|N)$"), list("yYnN"))


def dump_all(objects: list[dict[str, Any]]) -> str:
    """Multi-document YAML for `kubectl apply -f -`."""
    return yaml.dump_all(objects, Dumper=_PlainDumper, sort_keys=False)
