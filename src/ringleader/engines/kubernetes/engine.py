"""The `kubernetes` engine: jobs are MPIJobs (kubeflow.org/v2beta1) placed by ringleader's
scheduler; `get`, `list`, `logs`, `delete` and `top` read them back into the same views the
embedded engine returns, so every command renders alike.

The cluster is the one kubectl uses (KUBECONFIG and its current context, or in-cluster), and
the namespace is kubectl's (the context's, else default). RINGLEADER_KUBE_SERVER points at an API
server URL directly (`kubectl proxy`), RINGLEADER_KUBE_CONTEXT and RINGLEADER_KUBE_NAMESPACE
override the context and namespace.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shlex
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from ringleader import settings
from ringleader.engines.base import ALL_NAMESPACES
from ringleader.engines.kubernetes import companions, manifests, names
from ringleader.engines.kubernetes.cache import Cache
from ringleader.engines.kubernetes.client import ApiError, JobsApi, current_namespace, load_client
from ringleader.engines.kubernetes.decide import held_reason
from ringleader.engines.kubernetes.delivery import Delivery, claim_template
from ringleader.engines.kubernetes.objects import replica_role, wall_time
from ringleader.errors import ConflictError, NotFoundError, UsageError
from ringleader.jobs import pending
from ringleader.jobs.codec import spec_from_json
from ringleader.jobs.logfiles import instance_name, wait_until_ended
from ringleader.jobs.prediction import view_prediction
from ringleader.jobs.queues import (
    QueueView,
    check_queue,
    check_queue_exists,
    check_queue_unused,
    queue_from_json,
    queue_to_dict,
    queue_views,
)
from ringleader.jobs.spec import JobSpec
from ringleader.jobs.states import JobStatus
from ringleader.jobs.submit import ClusterUnread, Submission, duplicate, submit_job
from ringleader.jobs.support import Support
from ringleader.jobs.views import (
    CORDONED,
    NOT_READY,
    READY,
    UNREACHABLE,
    EventView,
    GpuUsage,
    InstanceView,
    JobView,
    NodeHealth,
    SubmitResult,
)
from ringleader.scheduler import ClusterState, Decision, ReasonCode, Snapshot
from ringleader.scheduler.teams import TeamQueue, queue_of


def refuse_gpu_env(spec: JobSpec) -> None:
    """The GPUs a worker sees are the scheduler's to set (the install's admission policy refuses
    these variables on any pod but ringleader's templates): refused here, in one line, first."""
    taken = sorted(k for k in spec.env if k.startswith("NVIDIA_") or k == "CUDA_VISIBLE_DEVICES")
    if taken:
        raise UsageError(f"-e {taken[0]} is not allowed on the kubernetes engine: each worker's GPUs are the ones "
                         "ringleader's scheduler chose", f"drop -e {taken[0]}; ask for GPUs with --gpus")  # fmt: skip


NOW_GRACE_S = 1  # delete --now: kubectl delete --now's grace period


class EngineApi(JobsApi):
    """What only the engine writes or reads besides jobs: the install's ConfigMap, and objects
    created beside an MPIJob (Secret, ResourceClaimTemplate). A 403 says what a user needs."""

    def _json(self, call: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return super()._json(call, *args, **kwargs)
        except ApiError as exc:
            if exc.status != 403:
                raise
            raise ApiError(exc.message, 403, "ask for the edit role in that namespace (`kube manifests` aggregates "
                                             "ringleader's job rights into it), or use -n with yours") from None

    def queues_config(self) -> dict[str, Any] | None:
        """The team queues' ConfigMap (None: not installed); a 403 says who may read it."""
        try:
            return self.config_map(names.SYSTEM_NAMESPACE, names.QUEUES_CONFIG)
        except ApiError as exc:
            if exc.status != 403:
                raise
            raise ApiError(exc.message, 403, "`kube manifests` lets every authenticated user read the team queues: "
                                             "apply it") from None  # fmt: skip

    def write_queues_config(self, current: dict[str, Any] | None, data: dict[str, str]) -> None:
        """The team queues' ConfigMap with ``data``: created, or replaced as ``current`` was read
        (a 409 when another writer changed it since); a 403 says who may change queues."""
        meta: dict[str, Any] = {"name": names.QUEUES_CONFIG, "namespace": names.SYSTEM_NAMESPACE}
        if current is not None:
            meta["resourceVersion"] = (current.get("metadata") or {}).get("resourceVersion")
        body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}
        try:
            if current is None:
                self._json(self.core.create_namespaced_config_map, names.SYSTEM_NAMESPACE, body)
            else:
                self.replace_config_map(names.SYSTEM_NAMESPACE, names.QUEUES_CONFIG, body)
        except ApiError as exc:
            if exc.status != 403:
                raise
            raise ApiError(exc.message, 403, f"team queues are a cluster administrator's (ConfigMap "
                                             f"{names.SYSTEM_NAMESPACE}/{names.QUEUES_CONFIG}): ask one") from None

    def create(self, namespace: str, body: dict[str, Any]) -> None:
        made = {"Secret": self.create_secret, "Deployment": self.create_deployment, "Service": self.create_service}
        if body["kind"] in made:
            made[body["kind"]](namespace, body)
            return
        group, version = body["apiVersion"].split("/")  # resource.k8s.io/v1 ResourceClaimTemplate
        self._json(self.custom.create_namespaced_custom_object, group, version, namespace,
                   "resourceclaimtemplates", body)  # fmt: skip


class KubernetesEngine:
    def __init__(self, api: EngineApi | None, namespace: str, connect: Any = None) -> None:
        self._api, self._connect = api, connect
        self.namespace = namespace
        self.notes: list[str] = []
        self._delivery: Delivery | None = None  # read once per command

    # The job's image is its pods' image; the cluster, its labels and finished jobs are the
    # API server's (kubectl), not ringleader's.
    supports = Support("kubernetes", submitter_context=False, image="the pods' image", kube_options=True,
                       container_options=("--data", "--shm-size", "--rdma", "--image-pull-policy", "--container-user"),
                       network_tree=True, time_limit=True, start_rules=True, preemption=True, calibration=True,
                       priority=False, queue_namespaces=True,
                       more_room="label more nodes for this kind of job")  # fmt: skip

    def use_namespace(self, namespace: str) -> None:
        """-n: this command's namespace instead of the context's (ALL_NAMESPACES: list -A)."""
        if namespace == ALL_NAMESPACES:
            self.namespace = namespace
            return
        if not re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", namespace):
            raise UsageError(f"-n {namespace!r} is not a namespace name", "give a DNS-1123 label (a-z, 0-9, -)")
        self.namespace = namespace

    @property
    def api(self) -> EngineApi:
        if self._api is None:
            self._api = EngineApi(self._connect())
        return self._api

    # -- the cluster ----------------------------------------------------------------------------------
    def nodes(self) -> ClusterState:
        """Nodes with their published topology, GPUs held by pods (any namespace)."""
        return self._cache().state

    def _cache(self) -> Cache:
        """Nodes and every namespace's pods as the scheduler's cache holds them."""
        cache = Cache()
        cache.replace("nodes", self.api.list("nodes")[0])
        cache.replace("pods", self.api.list("pods")[0])
        return cache

    def node_health(self, names: Sequence[str] | None = None) -> dict[str, NodeHealth]:
        """Each Node's Ready condition and cordon (spec.unschedulable); unhealthy GPUs as
        ringleader's agent on the node last published them. (``names`` as every engine calls
        it: the module of that name is not used here.)"""
        found = (node_health(n) for n in self.api.list("nodes")[0])
        return {h.node: h for h in found if names is None or h.node in names}

    def cordon_node(self, node: str, reason: str) -> None:
        """`kubectl cordon`, with the reason `top node` shows (an administrator's right)."""
        self._known_node(node)
        self.api.cordon_node(node, True, {names.CORDON_REASON_ANNOTATION: reason})

    def uncordon_node(self, node: str) -> None:
        """`kubectl uncordon`, and the failures blamed on the node forgotten."""
        if not self._known_node(node).get("spec", {}).get("unschedulable"):
            raise ConflictError(f"node {node!r} is not cordoned", "see `ringleader top node`")
        self.api.cordon_node(node, False, {names.CORDON_REASON_ANNOTATION: None, names.FAULTS_ANNOTATION: None})

    def _known_node(self, node: str) -> dict[str, Any]:
        try:
            return self.api.get_node(node)
        except ApiError as exc:
            if exc.status != 404:
                raise
            raise NotFoundError(f"node {node!r} not found", "see `ringleader top node`") from None

    # -- submit ---------------------------------------------------------------------------------------
    def delivery(self) -> Delivery:
        """How this cluster delivers GPUs, as `kube manifests` published it (the ConfigMap
        ringleader-cluster, readable by every authenticated user); env through the nvidia
        RuntimeClass, with a note, where it is missing or unreadable. Read once."""
        if self._delivery is None:
            self._delivery = self._read_delivery()
        return self._delivery

    def _read_delivery(self) -> Delivery:
        try:
            config = self.api.config_map(names.SYSTEM_NAMESPACE, names.CLUSTER_CONFIG)
        except ApiError as exc:
            if exc.status not in (403, 404):
                raise
            config = None
        if config is None:
            self.notes.append(f"note: no readable ConfigMap {names.SYSTEM_NAMESPACE}/{names.CLUSTER_CONFIG} "
                              f"(`ringleader kube manifests` installs it): GPU delivery env, runtime class "
                              f"{names.DEFAULT_RUNTIME_CLASS}")  # fmt: skip
            return Delivery()
        data = config.get("data") or {}
        return Delivery.parse(data.get("gpuDelivery"), data.get("runtimeClass"))

    def submit(self, spec: JobSpec, dry_run: bool = False) -> SubmitResult:
        """Create the MPIJob and its PodGroup; the plan shown is ``place()`` over the cluster as
        it is now (the scheduler decides for real when the pods exist). A dry run creates
        nothing; its -o yaml output is the manifests themselves."""
        return submit_job(self, spec, dry_run)

    # -- what submit_job asks of this engine ------------------------------------------------------
    def prepare(self, sub: Submission) -> Submission:
        """The pods' image runs the prepared line (Support declares what is refused); its queue
        must exist and be one this namespace may use (checked before anything is created, by
        whoever submits: every user may read the queues)."""
        refuse_gpu_env(sub.spec)
        if sub.spec.queue is not None:
            kept = self._queues()
            check_queue_exists(kept, sub.spec.queue)
            queue = next(q for q in kept if q.name == sub.spec.queue)
            if not queue.admits(self.namespace):
                raise UsageError(f"queue {queue.name} is for namespace(s) {', '.join(queue.namespaces)}, not "
                                 f"{self.namespace}", "submit to another queue (`ringleader queue list`), or ask "
                                 f"an administrator to add namespace {self.namespace} to it")  # fmt: skip
        return sub

    def exists(self, name: str) -> bool:
        return self.api.get_job(self.namespace, name) is not None

    def snapshot(self) -> ClusterState:
        """The cluster as it is now: best effort, since listing nodes and every namespace's pods
        needs cluster-wide rights a user with rights in one namespace lacks."""
        try:
            return self.nodes()
        except ApiError as exc:
            if exc.status != 403:
                raise
            self.notes.append("note: no placement preview: you may not list nodes and pods cluster-wide (403); "
                              "the scheduler decides once the pods exist")  # fmt: skip
            raise ClusterUnread("cluster not read (403), no preview") from None

    def check(self, decision: Decision, state: ClusterState) -> None:
        """Nothing more than ``prepare`` checked: the scheduler checks the nodes when it binds."""
        del decision, state

    # -- team queues (the ConfigMap names.QUEUES_CONFIG, which the scheduler watches) ------------------
    def _queues(self) -> list[TeamQueue]:
        return _kept_queues(self.api.queues_config())

    def create_queue(self, queue: TeamQueue, overwrite: bool = False) -> None:
        """Keep ``queue`` in the queues' ConfigMap (with ``overwrite``, replace the one of that
        name); the scheduler's next cycle applies it."""
        for _ in range(3):  # another writer changed it between the read and the write: read again
            config = self.api.queues_config()
            data = dict((config or {}).get("data") or {})
            check_queue(queue, _kept_queues(config), overwrite)
            data[queue.name] = json.dumps(queue_to_dict(queue))
            try:
                self.api.write_queues_config(config, data)
                return
            except ApiError as exc:
                if exc.status != 409:
                    raise
        raise ConflictError("the team queues kept changing while this command wrote them", "run it again")

    def delete_queue(self, name: str) -> None:
        """Forget a queue that no waiting or running job of any namespace is in."""
        config = self.api.queues_config()
        data = dict((config or {}).get("data") or {})
        if name not in data:
            raise NotFoundError(f"queue {name!r} not found", "see `ringleader queue list`")
        active = [f"{v.namespace}/{v.name}" for v in self._all_jobs() if v.spec.queue == name
                  and not v.status.is_terminal()]  # fmt: skip
        check_queue_unused(name, active, by_name=False)
        del data[name]
        self.api.write_queues_config(config, data)

    def queues(self) -> list[QueueView]:
        """Every queue with its quota, the GPUs its running gangs hold and borrow, its jobs (every
        namespace's) and its fair share as the scheduler weighs it now."""
        kept = self._queues()
        cache = self._cache()
        cache.queues = tuple(kept)
        cache.apply_usage("ADDED", self._kept_usage())
        now = time.time()
        teams = cache.team_queues(now) if kept else None
        counts: dict[str, list[int]] = {}
        for view in self._all_jobs():
            if not view.status.is_terminal():
                counts.setdefault(queue_of(view.spec), [0, 0])[view.status is not JobStatus.RUNNING] += 1
        return queue_views(kept, teams, counts, cache.queue_usage(now))

    def _kept_usage(self) -> dict[str, Any]:
        """The queues' fair-share usage as the scheduler keeps it (usage.py); none where the
        install predates it (absent, or not readable by everyone)."""
        try:
            return self.api.config_map(names.SYSTEM_NAMESPACE, names.QUEUE_USAGE_CONFIG) or {}
        except ApiError as exc:
            if exc.status != 403:
                raise
            return {}

    def _all_jobs(self) -> list[JobView]:
        mine = self.namespace
        try:
            self.namespace = ALL_NAMESPACES
            return self.list_jobs()
        finally:
            self.namespace = mine

    def describe(self, sub: Submission, decision: Decision) -> dict[str, Any]:
        """The objects the job is: an MPIJob or a PyTorchJob of ``per_pod`` ranks per worker pod
        (the ranks the plan puts on one node share a pod), its PodGroup and what its pods need
        beside them."""
        spec, per_pod = sub.spec, self._ranks_per_pod(sub.spec, decision)
        manifests.check_job_name_fits(spec, per_pod)
        if per_pod > 1:
            self.notes.append(f"note: {per_pod} ranks per worker pod ({spec.workers // per_pod} pod(s) of "
                              f"{per_pod * spec.gpus_per_worker} GPU(s)): ranks of one pod reach each other's GPUs "
                              "over NVLink")  # fmt: skip
        delivery = self.delivery()
        shown = [self._job(sub, delivery, per_pod), manifests.podgroup(spec, self.namespace, per_pod=per_pod),
                 *self._extras(spec, self.namespace, delivery, per_pod, None)]  # fmt: skip
        return {"manifests": manifests.dump_all(shown), "namespace": self.namespace, "gpu_delivery": delivery.mode,
                "ranks_per_pod": per_pod}  # fmt: skip

    def commit(self, sub: Submission, decision: Decision, notes: list[str], hint: str | None) -> Decision:
        """The job's MPIJob or PyTorchJob created, then what its pods need, owned by it; the
        scheduler places them."""
        del notes, hint  # the notes go to the user; the job's object keeps no events of its own
        spec, namespace, per_pod = sub.spec, self.namespace, self._ranks_per_pod(sub.spec, decision)
        delivery = self.delivery()
        try:
            job = self._job(sub, delivery, per_pod)
            created = self.api.create_job(namespace, job)
        except ApiError as exc:
            if exc.status == 409:
                raise duplicate(spec.name, self.supports) from None
            raise
        uid = (created.get("metadata") or {}).get("uid")
        # before any pod can start: the scheduler waits for the whole gang
        for obj in self._extras(spec, namespace, delivery, per_pod, uid):
            self.api.create(namespace, obj)
        try:
            self.api.create_podgroup(namespace, manifests.podgroup(spec, namespace, uid, per_pod))
        except ApiError as exc:
            if exc.status != 409:  # its operator running with gang scheduling on made it first
                raise
        self.notes.append(f"note: {job['kind']} {namespace}/{spec.name} created; `ringleader kube scheduler` places "
                          "its pods")  # fmt: skip
        return decision

    def started(self, name: str) -> JobView:
        return self.get(name)

    def queued_with(self, spec: JobSpec, state: ClusterState) -> Snapshot | None:
        """None: ringleader's scheduler in the cluster decides, on gangs and reservations this
        client does not see, so a dry run shows the plan on the free GPUs."""
        del spec, state
        return None

    @staticmethod
    def _ranks_per_pod(spec: JobSpec, decision: Decision) -> int:
        return manifests.ranks_per_pod(spec, [s.node for s in decision.placement.slots] if decision.placement else [])

    def _job(self, sub: Submission, delivery: Delivery, per_pod: int) -> dict[str, Any]:
        return manifests.training_job(sub.spec, self.namespace, line=sub.line, delivery=delivery, per_pod=per_pod,
                                      grace_s=sub.spec.stop_grace())  # fmt: skip

    @staticmethod
    def _extras(spec: JobSpec, namespace: str, delivery: Delivery, per_pod: int,
                uid: str | None) -> list[dict[str, Any]]:  # fmt: skip
        """The objects beside the job's object, owned by it once it exists: the Secret of
        secret-looking -e values, the ResourceClaimTemplate of a DRA cluster, TensorBoard's
        Deployment and Service."""
        out = []
        secret = manifests.env_secret(spec, namespace, uid)
        if secret is not None:
            out.append(secret)
        owner = manifests.owner_reference(spec, uid) if uid else None
        if delivery.mode == "dra" and spec.gpus_per_worker:
            out.append(claim_template(manifests.claim_template_name(spec), namespace,
                                      spec.gpus_per_worker * per_pod, spec.name, owner))  # fmt: skip
        # TensorBoard may run beside rank 0: on a node the job's tolerations let it onto
        tolerated = manifests.tolerations(spec.kube.tolerations) if spec.kube is not None else []
        return out + companions.tensorboard(spec, namespace, owner, tolerated)

    # -- reads ----------------------------------------------------------------------------------------
    def get(self, name: str) -> JobView:
        job = self.api.get_job(self.namespace, name)
        if job is None:
            raise NotFoundError(f"job {name!r} not found in namespace {self.namespace}", "see `ringleader list`")
        pods = self.api.pods(self.namespace, f"{names.JOB_LABEL}={name}")
        group = self.api.get_podgroup(self.namespace, name)
        pod_names = {p["metadata"]["name"] for p in pods}
        mine = [e for e in self.api.events(self.namespace)
                if (e.get("involvedObject") or {}).get("name") in pod_names | {name}]  # fmt: skip
        events = tuple(sorted(
            (EventView(wall_time(e.get("lastTimestamp") or e.get("eventTime")) or 0.0, e.get("reason", ""),
                       e.get("message", "")) for e in mine),
            key=lambda e: e.at,
        ))  # fmt: skip
        return self._with_endpoints([job_view(job, pods, group, events)])[0]

    def _with_endpoints(self, views: list[JobView]) -> list[JobView]:
        """The views with where their TensorBoard answers (--tensorboard), as arena's `get` shows
        it: two reads for all of them, none when no job asked for one."""
        if not any(v.spec.kube is not None and v.spec.kube.tensorboard for v in views):
            return views
        label = companions.TENSORBOARD_LABEL

        def job_of(obj: dict[str, Any]) -> tuple[str, str]:
            return obj["metadata"].get("namespace") or "", obj["metadata"]["labels"][label]

        services = {job_of(s): s for s in self.api.services(self.namespace, label)}
        pods: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for pod in self.api.pods(self.namespace, label):
            pods.setdefault(job_of(pod), []).append(pod)
        out = []
        for view in views:
            key = (view.namespace or "", view.name)
            address = companions.tensorboard_address(services.get(key), pods.get(key, []))
            out.append(dataclasses.replace(view, endpoints=(("TensorBoard", address),)) if address else view)
        return out

    def gpu_usage(self, name: str) -> dict[str, tuple[GpuUsage, ...] | None]:
        """Not read on Kubernetes yet: every instance n/a (the job's existence is still checked)."""
        return {inst.name: None for inst in self.get(name).instances}

    def list_jobs(self, statuses: Sequence[JobStatus] | None = None, with_instances: bool = False) -> list[JobView]:
        pods_by_job: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for p in self.api.pods(self.namespace, names.JOB_LABEL):
            key = (p["metadata"].get("namespace", ""), p["metadata"]["labels"][names.JOB_LABEL])
            pods_by_job.setdefault(key, []).append(p)
        groups = {(g["metadata"].get("namespace", ""), g["metadata"]["name"]): g
                  for g in self.api.list_podgroups(self.namespace)}  # fmt: skip
        views = []
        for j in self.api.list_jobs(self.namespace):
            key = (j["metadata"].get("namespace", ""), j["metadata"]["name"])
            views.append(job_view(j, pods_by_job.get(key, []), groups.get(key), (), with_instances))
        views.sort(key=lambda v: v.created_at)
        return self._with_endpoints([v for v in views if statuses is None or v.status in statuses])

    def _instance(self, name: str, instance: str | None) -> str:
        """As on every engine, plus `launcher`: mpi-operator's launcher is a batch Job, whose pod
        is `<job>-launcher-<suffix>`."""
        view = self.get(name)
        if instance == "launcher":
            found = [i for i in view.instances if i.role == "launcher"]
            if found:  # a retried launcher Job leaves earlier pods: the newest one
                return max(found, key=lambda i: (i.started_at or 0.0, i.name)).name
        return instance_name(view, instance)

    def logs(self, name: str, instance: str | None = None, tail: int | None = None, timestamps: bool = False) -> str:
        return self.api.pod_log(self.namespace, self._instance(name, instance), tail, timestamps)

    def follow(self, name: str, instance: str | None = None, tail: int | None = None,
               timestamps: bool = False) -> Iterator[str]:  # fmt: skip
        while not self.get(name).instances and not self.get(name).status.is_terminal():
            time.sleep(1.0)
        yield from self.api.follow_log(self.namespace, self._instance(name, instance), tail, timestamps)

    # -- waiting jobs (jobs/pending.py) --------------------------------------------------------------
    def hold(self, name: str) -> None:
        """Its PodGroup marked held (names.HOLD_ANNOTATION): the scheduler's cycle skips the gang."""
        self._mark_held(name, pending.hold)

    def release(self, name: str) -> None:
        self._mark_held(name, pending.release)

    def set_priority(self, name: str, priority: int) -> None:
        """Refused: a pod's priority is its PriorityClass's, fixed once the pods exist."""
        self.supports.require("priority", "--priority N")

    def _mark_held(self, name: str, change: Callable[[JobSpec, JobStatus], pending.PendingChange]) -> None:
        view = self.get(name)
        changed = change(view.spec, view.status)
        try:
            self.api.podgroup_annotate(self.namespace, name, {names.HOLD_ANNOTATION: "true" if changed.spec.hold
                                                              else None})  # fmt: skip
        except ApiError as exc:
            raise ApiError(f"job {name}: its PodGroup was not changed: {exc.message}", exc.status,
                           "ask for the right to patch podgroups in the namespace") from None  # fmt: skip

    def delete(self, names_: Sequence[str], now: bool = False) -> list[str]:
        """Delete the jobs' objects: their pods and PodGroups go with them (owner references), each pod
        stopped by its kubelet with SIGTERM, then SIGKILL after its terminationGracePeriodSeconds
        (RINGLEADER_GRACE_S at submit). ``now``: the pods are deleted too, with a grace of
        NOW_GRACE_S (kubectl delete --now's: a grace of 0 would be a forced deletion, which frees
        the pod's GPUs in the API before its containers have stopped)."""
        jobs = {n: self.api.get_job(self.namespace, n) for n in names_}
        missing = [n for n, job in jobs.items() if job is None]
        if missing:
            raise NotFoundError(f"job {missing[0]!r} not found in namespace {self.namespace}", "see `ringleader list`")
        for name, job in jobs.items():
            assert job is not None
            self.api.delete_job(self.namespace, job)  # first: its operator makes no new pods for it
            if now:
                for pod in self.api.pods(self.namespace, f"{names.JOB_LABEL}={name}"):
                    meta = pod.get("metadata") or {}
                    self.api.delete_pod(self.namespace, meta.get("name", ""), meta.get("uid", ""), NOW_GRACE_S)
        return list(names_)

    def wait(self, name: str, timeout: float | None = None) -> JobView:
        return wait_until_ended(lambda: self.get(name), timeout, 2.0)

    def prediction(self, job: JobView) -> dict[str, Any] | None:
        """The gang's placement is its pods' nodes and GPUs (job_view)."""
        return view_prediction(job, self.nodes)

    def close(self) -> None:
        if self._api is not None:
            self._api.api.close()


def _role(pod: Mapping[str, Any]) -> str:
    """What a pod of a training job is (objects.replica_role); a worker where it does not say."""
    return replica_role((pod.get("metadata") or {}).get("labels") or {}) or "worker"


CHIEFS = ("launcher", "master")  # the pod whose log is the job's (mpirun's; rank 0's)


def _status(job: dict[str, Any], pods: Sequence[dict[str, Any]]) -> JobStatus:
    conditions = {c.get("type"): c.get("status") for c in (job.get("status") or {}).get("conditions") or ()}
    if conditions.get("Failed") == "True":
        return JobStatus.FAILED
    if conditions.get("Succeeded") == "True":
        return JobStatus.SUCCEEDED
    chief_up = any(_role(p) in CHIEFS and (p.get("status") or {}).get("phase") == "Running" for p in pods)
    if conditions.get("Running") == "True" or chief_up:
        return JobStatus.RUNNING
    return JobStatus.PENDING if pods else JobStatus.QUEUING


def _shape(job: dict[str, Any]) -> tuple[str, dict[str, Any], int, int]:
    """The job's kind (`submit`'s), its GPU pods' template, their number and the ranks per pod."""
    spec = job.get("spec") or {}
    if job.get("kind") == "PyTorchJob":
        replicas = spec.get("pytorchReplicaSpecs") or {}
        master = replicas.get("Master") or {}
        pods = sum(int((r or {}).get("replicas") or 0) for r in replicas.values())
        per_pod = str(spec.get("nprocPerNode") or "1")
        return "pytorch", master.get("template") or {}, pods, int(per_pod) if per_pod.isdigit() else 1
    worker = (spec.get("mpiReplicaSpecs") or {}).get("Worker") or {}
    return "mpi", worker.get("template") or {}, int(worker.get("replicas") or 0), int(spec.get("slotsPerWorker") or 1)


def _spec(job: dict[str, Any]) -> JobSpec:
    """The job's spec as submit stored it (names.SPEC_ANNOTATION); for a job written before it,
    what its manifests still say."""
    meta = job.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    stored = spec_from_json(str(annotations.get(names.SPEC_ANNOTATION) or ""))
    if stored is not None and stored.name == meta.get("name"):
        return stored
    kind, template, pods, per_pod = _shape(job)
    container = ((template.get("spec") or {}).get("containers") or [{}])[0]
    limits = (container.get("resources") or {}).get("limits") or {}
    gpus = annotations.get(manifests.GPUS_ANNOTATION)  # else a job written before it: one rank per pod
    gpus_per_worker = int(gpus) if gpus is not None else int(limits.get(names.GPU_RESOURCE) or 0) // per_pod
    labels = (template.get("metadata") or {}).get("labels") or {}
    calibration = _calibration((template.get("metadata") or {}).get("annotations") or {})
    try:
        command = shlex.split(annotations.get("ringleader.io/command", "")) or ["?"]
    except ValueError:
        command = ["?"]
    return JobSpec(
        name=meta.get("name", ""), workers=pods * per_pod,
        gpus_per_worker=gpus_per_worker, command=command,
        topology_aware=labels.get(names.TOPOLOGY_LABEL) == "true", image=container.get("image"),
        model=annotations.get("ringleader.io/model"), queue=annotations.get(names.QUEUE_ANNOTATION) or None,
        kind=kind, calibration=calibration,
    )  # fmt: skip


def _calibration(notes: Mapping[str, Any]) -> dict[str, Any] | None:
    """The calibration a gang's workers carry (names.CALIBRATION_ANNOTATION), as submit wrote it;
    None without one or where it is not a JSON object (a hand-written pod's)."""
    try:
        doc = json.loads(notes.get(names.CALIBRATION_ANNOTATION) or "null")
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None


def _exit_code(pod: dict[str, Any]) -> tuple[int | None, float | None]:
    for status in (pod.get("status") or {}).get("containerStatuses") or ():
        done = (status.get("state") or {}).get("terminated")
        if done:
            return int(done.get("exitCode", 0)), wall_time(done.get("finishedAt"))
    return None, None


def job_view(job: dict[str, Any], pods: Sequence[dict[str, Any]], group: dict[str, Any] | None,
             events: tuple[EventView, ...], with_instances: bool = True) -> JobView:  # fmt: skip
    """One MPIJob or PyTorchJob and its pods as the JobView every engine returns."""
    meta = job.get("metadata") or {}
    spec = _spec(job)
    per_pod = _shape(job)[3]
    instances: list[InstanceView] = []
    workers: list[dict[str, Any]] = []
    summary: str | None = None
    for pod in sorted(pods, key=lambda p: p["metadata"]["name"]):
        pmeta, pspec = pod["metadata"], pod.get("spec") or {}
        notes = pmeta.get("annotations") or {}
        role = _role(pod)
        ranks = role != "launcher"  # a PyTorchJob's master runs ranks too
        gpus = tuple(int(g) for g in notes.get(names.GPU_IDS_ANNOTATION, "").split(",") if g.strip().isdigit())
        code, ended = _exit_code(pod)
        instances.append(InstanceView(
            name=pmeta["name"], role=role, status=(pod.get("status") or {}).get("phase", "Pending"), exit_code=code,
            node=pspec.get("nodeName"), gpus=gpus,
            gpu_requested=spec.gpus_per_worker * per_pod if ranks else 0,
            is_chief=role in CHIEFS, pid=None, started_at=wall_time((pod.get("status") or {}).get("startTime")),
            ended_at=ended,
        ))  # fmt: skip
        if ranks and pspec.get("nodeName"):
            index = int(notes.get(names.WORKER_INDEX_ANNOTATION) or len(workers))
            workers.append({"index": index, "node": pspec["nodeName"], "gpus": list(gpus)})
            summary = summary or notes.get(names.DECISION_ANNOTATION)
    placement = None
    if workers and len(workers) * per_pod == spec.workers:
        workers.sort(key=lambda w: w["index"])
        nodes = list(dict.fromkeys(w["node"] for w in workers))
        describe = " + ".join(
            f"{n}[{per_pod * sum(1 for w in workers if w['node'] == n)}w: GPU "
            f"{','.join(str(g) for w in workers if w['node'] == n for g in w['gpus']) or '-'}]"
            for n in nodes
        )
        bottleneck = (summary or "").partition(", bottleneck ")[2] or "N/A"
        placement = {"summary": summary, "chosen": {"nodes": nodes, "workers": workers, "describe": describe,
                                                    "bottleneck": bottleneck}}  # fmt: skip
    status = (job.get("status") or {})
    group_notes = ((group or {}).get("metadata") or {}).get("annotations") or {}
    reason = group_notes.get(names.PENDING_ANNOTATION) or None
    why_code = group_notes.get(names.PENDING_CODE_ANNOTATION) or None
    spec = replace(spec, hold=group_notes.get(names.HOLD_ANNOTATION) == "true")
    restarts = str(group_notes.get(names.RESTARTS_ANNOTATION) or "0")
    state = _status(job, pods)
    held = spec.hold and state in pending.WAITING  # known before the scheduler's next cycle says so
    if held:
        reason, why_code = held_reason(spec.name, str(meta.get("namespace"))), ReasonCode.HELD.value
    elif state is JobStatus.QUEUING:
        kind = str(job.get("kind") or "MPIJob")
        reason = f"no pods yet: {names.OPERATORS.get(kind, 'its operator')} creates them from the {kind}"
    elif state is JobStatus.PENDING and reason is None and not workers:
        reason = "pods wait for `ringleader kube scheduler` (is it running?)"
    # the priority its pods run at: their PriorityClass's value, which the scheduler orders by
    priority = max((int((p.get("spec") or {}).get("priority") or 0) for p in pods), default=spec.priority)
    return JobView(
        name=meta.get("name", ""), namespace=meta.get("namespace"), status=state, priority=priority,
        trainer=spec.trainer,
        created_at=wall_time(meta.get("creationTimestamp")) or 0.0, started_at=wall_time(status.get("startTime")),
        ended_at=wall_time(status.get("completionTime")), spec=spec, reason=reason, placement=placement,
        instances=tuple(instances) if with_instances else (), events=events, has_instances=with_instances,
        restarts=int(restarts) if restarts.isdigit() else 0,
        reason_code=why_code if state is JobStatus.PENDING or held else None,
    )  # fmt: skip


def node_health(node: dict[str, Any]) -> NodeHealth:
    """A Node as kubectl shows it: its Ready condition (True: Ready; False: NotReady; Unknown:
    Unreachable, the kubelet stopped posting status), Cordoned when Ready but unschedulable, with
    the condition's reason and message; unhealthy GPUs from the agent's annotation."""
    name = node["metadata"]["name"]
    conditions = (node.get("status") or {}).get("conditions") or ()
    ready: dict[str, Any] = next((c for c in conditions if c.get("type") == "Ready"), {})
    why = ": ".join(str(ready[k]) for k in ("reason", "message") if ready.get(k))
    annotation = ((node.get("metadata") or {}).get("annotations") or {}).get(names.GPUS_UNHEALTHY_ANNOTATION)
    unhealthy = int(annotation) if annotation is not None and annotation.isdigit() else None
    checked = "ringleader agent (NVML)" if unhealthy is not None else "no health published by ringleader's agent"
    if ready.get("status") == "True":
        if (node.get("spec") or {}).get("unschedulable"):
            said = ((node.get("metadata") or {}).get("annotations") or {}).get(names.CORDON_REASON_ANNOTATION)
            return NodeHealth(name, CORDONED, str(said or "spec.unschedulable (kubectl cordon)"), unhealthy, checked)
        return NodeHealth(name, READY, "", unhealthy, checked)
    status = UNREACHABLE if ready.get("status") == "Unknown" else NOT_READY
    return NodeHealth(name, status, why or "no Ready condition", unhealthy, checked)


def open_kubernetes(home: Path, readonly: bool = False) -> KubernetesEngine:
    """The engine factory (see ``ringleader.engines``); nothing connects until a call needs it."""
    del home, readonly
    context = settings.text("RINGLEADER_KUBE_CONTEXT")
    server = settings.text("RINGLEADER_KUBE_SERVER")
    namespace = settings.text("RINGLEADER_KUBE_NAMESPACE") or current_namespace(context)
    return KubernetesEngine(None, namespace, connect=lambda: load_client(context=context, host=server))


def _kept_queues(config: dict[str, Any] | None) -> list[TeamQueue]:
    """The team queues in their ConfigMap (None: not installed), by name."""
    return [queue_from_json(name, text) for name, text in sorted(((config or {}).get("data") or {}).items())]
