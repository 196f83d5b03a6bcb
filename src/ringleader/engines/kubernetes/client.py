"""The few API calls ringleader makes, through the official ``kubernetes`` client (imported only
here, only when used), with JSON dicts in and out.

Responses are read raw (``_preload_content=False``) and parsed with ``json``: the scheduler
needs a handful of fields, not the client's model objects (whose Binding response cannot even be
deserialised), and a watch is read line by line so a 410 Gone is seen as itself.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from ringleader.engines.base import ALL_NAMESPACES
from ringleader.engines.kubernetes import names
from ringleader.errors import DependencyError, RingleaderError, UsageError

log = logging.getLogger("ringleader.kube.client")

# What the scheduler watches: "configmaps" are those in ringleader's namespace, where it reads the
# team queues (names.QUEUES_CONFIG) and their kept usage (names.QUEUE_USAGE_CONFIG); with
# DRA delivery also every ResourceClaim and ResourceSlice (the devices kube-scheduler allocates).
KINDS = ("nodes", "pods", "podgroups", "configmaps")
DRA_KINDS = ("resourceclaims", "resourceslices")
# Pods that ended hold nothing: lists skip them on the server (status.phase is one of the fields
# the API server selects pods by). Watches do not: a pod that ends while watched would leave the
# selection, which the API server reports as DELETED carrying the pod's PREVIOUS state (phase
# Running), and the failure a restart needs to see would never be seen. Unselected, the watch
# shows the pod turning Failed, with its exit code and reason.
ACTIVE_PODS = "status.phase!=Succeeded,status.phase!=Failed"
PAGE = 500  # objects per list page (limit/continue): no single response of all pods at 100k
# Seconds to connect, and to wait for a byte of a response. A watch waits its own timeoutSeconds
# plus WATCH_GRACE: past that the connection is taken as dead (half-open), not waited on forever.
REQUEST_TIMEOUT = (10.0, 60.0)
WATCH_GRACE = 30.0
# API priority and fairness answers 429 to a request it did not run, so any verb is sent again
# (the client itself retries only reads): after its Retry-After, at most this many times.
THROTTLE_RETRIES = 5
MAX_RETRY_AFTER_S = 10.0


class Gone(Exception):
    """The watch's resourceVersion is too old (HTTP 410): relist."""


class ApiError(RingleaderError):
    """The API server refused or failed a request (``status`` is its HTTP code, 0 if none came)."""

    def __init__(self, message: str, status: int = 0, fix: str = "") -> None:
        super().__init__(message, fix)
        self.status = status


def retry_after(headers: Mapping[str, str] | None) -> float:
    """Seconds a 429's Retry-After asks for (1 when absent or unreadable), at most MAX_RETRY_AFTER_S."""
    try:
        asked = float((headers or {}).get("Retry-After", 1))
    except ValueError:
        asked = 1.0
    return min(max(asked, 0.0), MAX_RETRY_AFTER_S)


def load_client(context: str | None = None, host: str | None = None) -> Any:
    """An ``ApiClient``: for ``host`` (tests, a proxy), else in-cluster when running in a pod,
    else the kubeconfig kubectl uses (KUBECONFIG, ~/.kube/config) and its current context."""
    try:
        from kubernetes import client, config
    except ImportError:
        raise DependencyError(
            "the kubernetes client is not installed", "pip install 'ringleader[kube]'"
        ) from None
    if host is not None:
        configuration = client.Configuration()
        configuration.host = host
        return client.ApiClient(configuration)
    try:
        config.load_incluster_config()
        return client.ApiClient()
    except config.ConfigException:
        pass
    try:
        return config.new_client_from_config(context=context)
    except (config.ConfigException, OSError, TypeError) as exc:
        raise UsageError(
            f"no Kubernetes cluster configured ({exc})",
            "point KUBECONFIG at a kubeconfig file (or run `kubectl config use-context NAME`)",
        ) from None


def current_namespace(context: str | None = None) -> str:
    """The namespace kubectl would use: in a pod its own, else the context's, else default."""
    try:
        with open("/var/run/secrets/kubernetes.io/serviceaccount/namespace") as fh:
            return fh.read().strip() or "default"
    except OSError:
        pass
    try:
        from kubernetes import config

        _, active = config.list_kube_config_contexts()
        if context:
            contexts, _ = config.list_kube_config_contexts()
            active = next((c for c in contexts if c["name"] == context), active)
        return str((active or {}).get("context", {}).get("namespace") or "default")
    except Exception:  # no kubeconfig at all: kubectl's default
        return "default"


@dataclass
class Api:
    """The calls, as JSON. ``api`` is a kubernetes ``ApiClient``."""

    api: Any
    timeout: tuple[float, float] = REQUEST_TIMEOUT
    watch_grace: float = WATCH_GRACE

    def __post_init__(self) -> None:
        import urllib3
        from kubernetes import client

        # Connection failures are OSErrors or, after the client's retries, urllib3's own.
        self._down: tuple[type[BaseException], ...] = (OSError, urllib3.exceptions.HTTPError)
        self.core = client.CoreV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)
        self.coordination = client.CoordinationV1Api(self.api)
        self._exc = client.ApiException

    def _json(self, call: Any, *args: Any, **kwargs: Any) -> Any:
        for retry in range(THROTTLE_RETRIES + 1):
            try:
                resp = call(*args, _preload_content=False, _request_timeout=self.timeout, **kwargs)
                break
            except self._exc as exc:
                if exc.status != 429 or retry == THROTTLE_RETRIES:
                    raise _api_error(exc) from None
                wait = retry_after(exc.headers)
                log.info("API server throttled a request (429): again in %.1f s", wait)
                time.sleep(wait)
            except self._down as exc:  # connection refused, DNS, TLS
                raise ApiError(f"cannot reach the API server: {exc}", 0,
                               "check the kubeconfig and the network") from None  # fmt: skip
        try:
            data = resp.data
        finally:
            resp.release_conn()  # back to the pool for the next request, not left to the GC
        return json.loads(data) if data else {}

    def _found(self, call: Any, *args: Any) -> dict[str, Any] | None:
        """A read of one object: None when the server says 404 (gone, or never there)."""
        try:
            found: dict[str, Any] = self._json(call, *args)
            return found
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    # -- list + watch ---------------------------------------------------------------------------------
    def _lister(self, kind: str) -> tuple[Any, tuple[Any, ...]]:
        if kind == "nodes":
            return self.core.list_node, ()
        if kind == "pods":
            return self.core.list_pod_for_all_namespaces, ()
        if kind == "configmaps":
            return self.core.list_namespaced_config_map, (names.SYSTEM_NAMESPACE,)
        if kind in DRA_KINDS:
            return self.custom.list_cluster_custom_object, (names.DRA_GROUP, names.DRA_VERSION, kind)
        if kind == names.HYPERNODE_PLURAL:
            return self.custom.list_cluster_custom_object, (names.HYPERNODE_GROUP, names.HYPERNODE_VERSION, kind)
        group = (names.PODGROUP_GROUP, names.PODGROUP_VERSION, names.PODGROUP_PLURAL)
        return self.custom.list_cluster_custom_object, group

    @staticmethod
    def _selection(kind: str, watching: bool = False) -> dict[str, str]:
        return {"field_selector": ACTIVE_PODS} if kind == "pods" and not watching else {}

    def list(self, kind: str, page: int = PAGE) -> tuple[list[dict[str, Any]], str]:
        """Every ``kind`` object (pods: those not finished) and the version to watch from, read
        in pages of ``page``. The pages are one snapshot; when the server has compacted it away
        mid-list (410 on a continue token) the list starts over, as client-go's reflector does."""
        call, args = self._lister(kind)
        for _ in range(3):
            items: list[dict[str, Any]] = []
            token = ""
            try:
                while True:
                    more = {"_continue": token} if token else {}
                    body = self._json(call, *args, limit=page, **self._selection(kind), **more)
                    items.extend(body.get("items") or [])
                    meta = body.get("metadata") or {}
                    token = str(meta.get("continue") or "")
                    if not token:
                        return items, str(meta.get("resourceVersion") or "")
            except ApiError as exc:
                if exc.status != 410 or not token:
                    raise
                log.info("list %s: continue token expired after %d object(s), listing again", kind, len(items))
        raise ApiError(f"list {kind}: the snapshot expired three times while paging", 410)

    def watch(self, kind: str, resource_version: str, timeout: int) -> Iterator[tuple[str, dict[str, Any]]]:
        """Events after ``resource_version`` until the server ends the watch (``timeout``
        seconds); raises Gone when that version is too old."""
        from kubernetes.watch.watch import iter_resp_lines

        call, args = self._lister(kind)
        try:
            resp = call(*args, watch=True, resource_version=resource_version, timeout_seconds=timeout,
                        allow_watch_bookmarks=True, _preload_content=False, **self._selection(kind, watching=True),
                        _request_timeout=(self.timeout[0], timeout + self.watch_grace))  # fmt: skip
        except self._exc as exc:
            if exc.status == 410:
                raise Gone() from None
            raise _api_error(exc) from None
        except self._down as exc:
            raise ApiError(f"cannot reach the API server: {exc}") from None
        try:
            for line in iter_resp_lines(resp):
                if not line:
                    continue
                event = json.loads(line)
                obj = event.get("object") or {}
                if event.get("type") == "ERROR":
                    if obj.get("code") == 410:
                        raise Gone()
                    raise ApiError(f"watch {kind}: {obj.get('message', obj)}", int(obj.get("code") or 0))
                yield str(event.get("type")), obj
        except self._down as exc:  # no byte for timeout + grace: a dead connection, not a quiet one
            raise ApiError(f"watch {kind}: connection lost or silent ({exc})") from None
        finally:
            resp.release_conn()

    # -- pods -----------------------------------------------------------------------------------------
    def bind(self, namespace: str, name: str, uid: str, node: str, annotations: Mapping[str, str]) -> None:
        """Bind the pod (if it is still the one of ``uid``) to ``node``: ONE write. The API server
        copies the Binding's annotations onto the pod in the same update that sets its node (and
        PodScheduled=True), so no annotated-but-unbound pod is ever seen: kubernetes/kubernetes
        pkg/registry/core/pod/storage/storage.go, BindingREST.setPodHostAndAnnotations ("for k, v
        := range annotations { pod.Annotations[k] = v }" inside the GuaranteedUpdate that sets
        pod.Spec.NodeName; it refuses a pod with a deletionTimestamp)."""
        meta: dict[str, Any] = {"name": name, "namespace": namespace, "uid": uid}
        if annotations:
            meta["annotations"] = dict(annotations)
        body = {
            "apiVersion": "v1", "kind": "Binding", "metadata": meta,
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }  # fmt: skip
        self._json(self.core.create_namespaced_pod_binding, name, namespace, body)

    def delete_pod(self, namespace: str, name: str, uid: str, grace_s: int | None = None) -> None:
        """Delete the pod if it is still the one of ``uid``, with its own grace period, or ``grace_s``."""
        body: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": uid}}
        if grace_s is not None:
            body["gracePeriodSeconds"] = grace_s
        try:
            self._json(self.core.delete_namespaced_pod, name, namespace, body=body)
        except ApiError as exc:
            if exc.status != 404:  # already gone is what we wanted
                raise

    def pod_unschedulable(self, namespace: str, name: str, message: str, now: str) -> None:
        """``PodScheduled=False`` with reason Unschedulable on the pod's status, as kube-scheduler
        writes it (cluster autoscalers read it); a strategic merge patch, so the conditions list
        is merged by type and other conditions stay."""
        condition = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                     "message": message, "lastTransitionTime": now}  # fmt: skip
        self._json(self.core.patch_namespaced_pod_status, name, namespace, {"status": {"conditions": [condition]}})

    def pod_disruption_target(self, namespace: str, name: str, message: str, now: str) -> None:
        """``DisruptionTarget=True`` with reason PreemptionByScheduler, as kube-scheduler writes it
        on a victim before deleting it (Jobs' podFailurePolicy and controllers read it)."""
        condition = {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler",
                     "message": message, "lastTransitionTime": now}  # fmt: skip
        self._json(self.core.patch_namespaced_pod_status, name, namespace, {"status": {"conditions": [condition]}})

    def create_event(self, namespace: str, event: Mapping[str, Any]) -> None:
        self._json(self.core.create_namespaced_event, namespace, dict(event))

    # -- nodes (the agent) ---------------------------------------------------------------------------------
    def get_node(self, name: str) -> dict[str, Any]:
        body: dict[str, Any] = self._json(self.core.read_node, name)
        return body

    def annotate_node(self, name: str, annotations: Mapping[str, str | None]) -> None:
        self._json(self.core.patch_node, name, {"metadata": {"annotations": dict(annotations)}})

    def cordon_node(self, name: str, cordoned: bool, annotations: Mapping[str, str | None]) -> None:
        """`kubectl cordon` (``cordoned``) or `uncordon`, with ringleader's annotations (a None
        value removes one), in one patch."""
        self._json(self.core.patch_node, name, {"spec": {"unschedulable": cordoned},
                                                "metadata": {"annotations": dict(annotations)}})  # fmt: skip

    def node_capacity(self, name: str, resources: Mapping[str, str]) -> None:
        """Advertise node-level extended resources (kubelet copies capacity to allocatable)."""
        self._json(self.core.patch_node_status, name, {"status": {"capacity": dict(resources)}})

    # -- podgroups ------------------------------------------------------------------------------------
    def podgroup_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> None:
        group = (names.PODGROUP_GROUP, names.PODGROUP_VERSION, namespace, names.PODGROUP_PLURAL, name)
        self._json(self.custom.patch_namespaced_custom_object_status, *group, {"status": dict(status)})

    def podgroup_annotate(self, namespace: str, name: str, annotations: Mapping[str, str | None]) -> None:
        group = (names.PODGROUP_GROUP, names.PODGROUP_VERSION, namespace, names.PODGROUP_PLURAL, name)
        self._json(self.custom.patch_namespaced_custom_object, *group, {"metadata": {"annotations": dict(annotations)}})

    # -- configmaps -----------------------------------------------------------------------------------
    def config_map(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._found(self.core.read_namespaced_config_map, name, namespace)

    def replace_config_map(self, namespace: str, name: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """Replace it as ``body`` says; 409 when its resourceVersion is not the object's now."""
        written: dict[str, Any] = self._json(self.core.replace_namespaced_config_map, name, namespace, dict(body))
        return written

    # -- leases ---------------------------------------------------------------------------------------
    def read_lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._found(self.coordination.read_namespaced_lease, name, namespace)

    def create_lease(self, namespace: str, lease: Mapping[str, Any]) -> dict[str, Any]:
        body: dict[str, Any] = self._json(self.coordination.create_namespaced_lease, namespace, dict(lease))
        return body

    def replace_lease(self, namespace: str, name: str, lease: Mapping[str, Any]) -> dict[str, Any]:
        body: dict[str, Any] = self._json(self.coordination.replace_namespaced_lease, name, namespace, dict(lease))
        return body


class JobsApi(Api):
    """What the engine (submit/get/list/logs/delete) adds: training jobs (MPIJobs, PyTorchJobs), a
    job's pods, events, logs."""

    def __post_init__(self) -> None:
        super().__post_init__()
        from kubernetes import client

        self.apps = client.AppsV1Api(self.api)  # TensorBoard's Deployment (--tensorboard)
        # A command prints one line when the cluster is down, not urllib3's retry warnings.
        logging.getLogger("urllib3.connectionpool").setLevel(logging.ERROR)

    @staticmethod
    def _jobs(kind: str, namespace: str) -> tuple[str, str, str, str]:
        group, version, plural = names.TRAINING_JOBS[kind]
        return (group, version, namespace, plural)

    def create_job(self, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """Create a training job (an MPIJob or a PyTorchJob, by its kind); a cluster without that
        kind's CRD is told in one line."""
        kind = str(body["kind"])
        try:
            created: dict[str, Any] = self._json(self.custom.create_namespaced_custom_object,
                                                 *self._jobs(kind, namespace), dict(body))  # fmt: skip
        except ApiError as exc:
            if exc.status == 404:
                group, version, _ = names.TRAINING_JOBS[kind]
                raise ApiError(f"this cluster has no {kind} resource ({group}/{version})", 404,
                               f"install {names.OPERATORS[kind]} (its CRD and controller)") from None  # fmt: skip
            raise
        return created

    def get_job(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The training job of that name, whatever its kind (None: there is none)."""
        for kind in names.TRAINING_JOBS:
            found = self._found(self.custom.get_namespaced_custom_object, *self._jobs(kind, namespace), name)
            if found is not None:
                return found
        return None

    def list_jobs(self, namespace: str) -> list[dict[str, Any]]:
        """The namespace's training jobs of every kind; every namespace's where ``namespace`` is
        ALL_NAMESPACES. A kind whose CRD the cluster lacks has none."""
        out: list[dict[str, Any]] = []
        for kind in names.TRAINING_JOBS:
            try:
                if namespace == ALL_NAMESPACES:
                    group, version, _, plural = self._jobs(kind, "")
                    body = self._json(self.custom.list_cluster_custom_object, group, version, plural)
                else:
                    body = self._json(self.custom.list_namespaced_custom_object, *self._jobs(kind, namespace))
            except ApiError as exc:
                if exc.status != 404:
                    raise
                continue
            out += [{"kind": kind, **item} for item in body.get("items") or []]
        return out

    def delete_job(self, namespace: str, job: Mapping[str, Any]) -> None:
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Foreground"}
        name = (job.get("metadata") or {}).get("name", "")
        self._json(self.custom.delete_namespaced_custom_object, *self._jobs(str(job["kind"]), namespace), name,
                   body=body)  # fmt: skip

    def create_secret(self, namespace: str, body: Mapping[str, Any]) -> None:
        self._json(self.core.create_namespaced_secret, namespace, dict(body))

    def create_deployment(self, namespace: str, body: Mapping[str, Any]) -> None:
        self._json(self.apps.create_namespaced_deployment, namespace, dict(body))

    def create_service(self, namespace: str, body: Mapping[str, Any]) -> None:
        self._json(self.core.create_namespaced_service, namespace, dict(body))

    def services(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        if namespace == ALL_NAMESPACES:
            body = self._json(self.core.list_service_for_all_namespaces, label_selector=selector)
        else:
            body = self._json(self.core.list_namespaced_service, namespace, label_selector=selector)
        return list(body.get("items") or [])

    def create_podgroup(self, namespace: str, body: Mapping[str, Any]) -> None:
        group = (names.PODGROUP_GROUP, names.PODGROUP_VERSION, namespace, names.PODGROUP_PLURAL)
        self._json(self.custom.create_namespaced_custom_object, *group, dict(body))

    def get_podgroup(self, namespace: str, name: str) -> dict[str, Any] | None:
        group = (names.PODGROUP_GROUP, names.PODGROUP_VERSION, namespace, names.PODGROUP_PLURAL)
        return self._found(self.custom.get_namespaced_custom_object, *group, name)

    def list_podgroups(self, namespace: str) -> list[dict[str, Any]]:
        """The namespace's PodGroups (every namespace's for ALL_NAMESPACES); none where the user may
        not list them or the cluster has no PodGroup resource (a list then shows no reasons)."""
        group, version, plural = names.PODGROUP_GROUP, names.PODGROUP_VERSION, names.PODGROUP_PLURAL
        try:
            if namespace == ALL_NAMESPACES:
                body = self._json(self.custom.list_cluster_custom_object, group, version, plural)
            else:
                body = self._json(self.custom.list_namespaced_custom_object, group, version, namespace, plural)
        except ApiError as exc:
            if exc.status not in (403, 404):
                raise
            return []
        return list(body.get("items") or [])

    def pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        if namespace == ALL_NAMESPACES:
            body = self._json(self.core.list_pod_for_all_namespaces, label_selector=selector)
        else:
            body = self._json(self.core.list_namespaced_pod, namespace, label_selector=selector)
        return list(body.get("items") or [])

    def events(self, namespace: str) -> list[dict[str, Any]]:
        body = self._json(self.core.list_namespaced_event, namespace)
        return list(body.get("items") or [])

    def pod_log(self, namespace: str, name: str, tail: int | None, timestamps: bool) -> str:
        try:
            resp: Any = self.core.read_namespaced_pod_log(
                name, namespace, tail_lines=tail, timestamps=timestamps, _preload_content=False
            )
        except self._exc as exc:
            raise _api_error(exc) from None
        except self._down as exc:
            raise ApiError(f"cannot reach the API server: {exc}") from None
        return bytes(resp.data).decode(errors="replace")

    def follow_log(self, namespace: str, name: str, tail: int | None, timestamps: bool) -> Iterator[str]:
        """The pod's log, then new lines until its container ends (the API closes the stream)."""
        from kubernetes.watch.watch import iter_resp_lines

        try:
            resp: Any = self.core.read_namespaced_pod_log(name, namespace, tail_lines=tail, timestamps=timestamps,
                                                          follow=True, _preload_content=False)  # fmt: skip
        except self._exc as exc:
            raise _api_error(exc) from None
        except self._down as exc:
            raise ApiError(f"cannot reach the API server: {exc}") from None
        try:
            for line in iter_resp_lines(resp):
                yield line + "\n"
        finally:
            resp.release_conn()


def _api_error(exc: Any) -> ApiError:
    status = int(getattr(exc, "status", 0) or 0)
    message = getattr(exc, "reason", "") or str(exc)
    with contextlib.suppress(TypeError, ValueError, AttributeError):
        message = json.loads(exc.body).get("message") or message
    fix = "check the scheduler's RBAC (`ringleader kube manifests`)" if status == 403 else ""
    return ApiError(f"API server: {status} {message}", status, fix)
