"""How the GPUs ringleader chose reach the worker's container, per install (docs/kubernetes.md,
"GPU delivery"): pure builders of the objects each path needs.

- ``env`` (Kubernetes 1.30+): NVIDIA_VISIBLE_DEVICES from the pod's own ``gpu-devices`` annotation,
  which only the scheduler's Binding writes, run by the NVIDIA runtime that ``runtimeClassName``
  names. A ValidatingAdmissionPolicy (CEL, no webhook server) keeps every other pod from setting
  those variables or using that runtime, and from writing the annotation itself.
- ``dra`` (Kubernetes 1.34+, resource.k8s.io/v1, NVIDIA's DRA driver): each worker's ResourceClaim
  (from the job's ResourceClaimTemplate) is allocated by ringleader to the exact devices of its
  decision, the pod pinned to the node and its scheduling gate removed once the whole gang is
  pinned; kube-scheduler binds and the driver prepares exactly those devices through CDI.

Both: the agent may change only its own Node (a second policy reads the node name that bound
service-account tokens carry since Kubernetes 1.30).
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ringleader.engines.kubernetes import names
from ringleader.errors import UsageError

_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
ADMISSION = "admissionregistration.k8s.io/v1"
RESOURCE = "resource.k8s.io/v1"
ENV_POLICY = "ringleader-gpu-env"
AGENT_POLICY = "ringleader-agent-own-node"
SCHEDULER_POLICY = "ringleader-scheduler-pins-only"
SCHEDULER_ACCOUNT = "ringleader-scheduler"
SCHEDULER_USER = f"system:serviceaccount:{names.SYSTEM_NAMESPACE}:{SCHEDULER_ACCOUNT}"
# Namespaces whose pods may set NVIDIA_* themselves: the control plane's, ringleader's own (the
# agent reads NVML with NVIDIA_VISIBLE_DEVICES=all) and NVIDIA's operators' (device plugin, DCGM).
TRUSTED_NAMESPACES = ("kube-system", names.SYSTEM_NAMESPACE, "gpu-operator", "nvidia-dra-driver-gpu")
# Bound service-account tokens name the node of their pod (KEP-4193: beta and on by default in
# Kubernetes 1.30, GA in 1.32); the API server puts it in the request's user extra.
NODE_NAME_EXTRA = "authentication.kubernetes.io/node-name"
GPU_ANNOTATIONS = (names.GPU_IDS_ANNOTATION, names.GPU_IDS_UID_ANNOTATION, names.GPU_DEVICES_ANNOTATION,
                   names.WORKER_INDEX_ANNOTATION)  # fmt: skip
# What the scheduler's Binding writes on a pod: its GPUs, its decision and the gang's restart count
# (RINGLEADER_RESTARTS): nobody else writes them, at create or later.
BINDING_ANNOTATIONS = (*GPU_ANNOTATIONS, names.DECISION_ANNOTATION, names.RESTARTS_ANNOTATION)
# What the scheduler keeps on a PodGroup (its counters, why the gang waits, a moved gang's hold), and the spec submit
# stored there (the gang's queue and preemption, read by the scheduler): the scheduler's own, and
# the spec as created.
PODGROUP_COUNTERS = (names.RESTARTS_ANNOTATION, names.PREEMPTIONS_ANNOTATION, names.PENDING_ANNOTATION,
                     names.PENDING_CODE_ANNOTATION, names.MOVE_TARGET_ANNOTATION)
PODGROUP_POLICY = "ringleader-podgroup-counters"
# What the scheduler may change on a Node (its cluster-wide `nodes: patch`): the failures blamed
# on it, and its cordon with the reason.
NODE_POLICY = "ringleader-scheduler-cordons-only"
SCHEDULER_NODE_ANNOTATIONS = (names.FAULTS_ANNOTATION, names.CORDON_REASON_ANNOTATION)
# A worker's NVIDIA_VISIBLE_DEVICES (downward API): its GPUs' UUIDs where the node's agent publishes
# them, else their indexes, as the Binding wrote them (an index can name another GPU after a
# reboot or an Xid; a UUID cannot).
GPU_IDS_FIELD = f"metadata.annotations['{names.GPU_DEVICES_ANNOTATION}']"


@dataclass(frozen=True)
class Delivery:
    """``mode`` env or dra; ``runtime_class``: the NVIDIA runtime's RuntimeClass on worker and
    agent pods (None: the node's default runtime, for toolkit installs that make it the default)."""

    mode: str = "env"
    runtime_class: str | None = names.DEFAULT_RUNTIME_CLASS

    def __post_init__(self) -> None:
        if self.mode not in names.DELIVERIES:
            raise UsageError(f"GPU delivery {self.mode!r} is not one of {', '.join(names.DELIVERIES)}",
                             "use env (NVIDIA runtime) or dra (resource.k8s.io/v1, Kubernetes 1.34+)")  # fmt: skip
        if self.runtime_class is not None and not _NAME.fullmatch(self.runtime_class):
            raise UsageError(f"runtime class {self.runtime_class!r} is not a valid name",
                             "give a RuntimeClass name (DNS-1123), or none for the node's default runtime")  # fmt: skip

    @staticmethod
    def parse(mode: str | None, runtime_class: str | None) -> Delivery:
        """From text (the cluster's ConfigMap, an option): runtime class 'none' or '' is None."""
        rc = names.DEFAULT_RUNTIME_CLASS if runtime_class is None else runtime_class.strip()
        return Delivery((mode or "env").strip(), None if rc in ("", "none") else rc)

    def as_data(self) -> dict[str, str]:
        """The install's ConfigMap data, which every submit reads."""
        return {"gpuDelivery": self.mode, "runtimeClass": self.runtime_class or "none"}


# -- env: the admission policy ------------------------------------------------------------------------------

_LISTS = ("containers", "initContainers", "ephemeralContainers")


def _each(body: str) -> str:
    """``body`` (over container ``c``) holds for the pod's every container list."""
    return " && ".join(f"(!has(object.spec.{lst}) || object.spec.{lst}.all(c, {body}))" for lst in _LISTS)


def _env_rules(runtime_class: str | None) -> list[dict[str, str]]:
    ids_field = GPU_IDS_FIELD
    gpu_var = "(e.name.startsWith('NVIDIA_') || e.name == 'CUDA_VISIBLE_DEVICES')"
    # ringleader's own worker and launcher: NVIDIA_VISIBLE_DEVICES from the Binding's annotation, or void
    ours = (f"e.name == 'NVIDIA_VISIBLE_DEVICES' && ((has(e.valueFrom) && has(e.valueFrom.fieldRef) && "
            f"e.valueFrom.fieldRef.fieldPath == \"{ids_field}\") || (has(e.value) && e.value == 'void'))")  # fmt: skip
    # "no GPU", which any pod may say: mpi-operator appends NVIDIA_VISIBLE_DEVICES and
    # NVIDIA_DRIVER_CAPABILITIES with empty values to every launcher that runs no rank
    none = ("(e.name == 'NVIDIA_VISIBLE_DEVICES' || e.name == 'NVIDIA_DRIVER_CAPABILITIES') && "
            "!has(e.valueFrom) && (!has(e.value) || e.value == '' || "
            "(e.name == 'NVIDIA_VISIBLE_DEVICES' && e.value == 'void'))")  # fmt: skip
    keys = _cel_list(BINDING_ANNOTATIONS)
    value = _annotation

    rules = [
        {"expression": f"variables.devicePluginPod || ({_each(f'!has(c.env) || c.env.all(e, !{gpu_var} || ({none}) || (variables.templated && {ours}))')})",  # noqa: E501
         "message": "NVIDIA_* and CUDA_VISIBLE_DEVICES are set only by ringleader's job templates on pods that may "
                    "run on ringleader's nodes (pods that request no nvidia.com/gpu)",
         "reason": "Forbidden"},
        {"expression": f"request.operation != 'CREATE' || !has(object.metadata.annotations) || "
                       f"!{keys}.exists(k, k in object.metadata.annotations)",
         "message": "ringleader's GPU, decision and restart annotations are written only by its scheduler's Binding",
         "reason": "Forbidden"},
        {"expression": f"request.operation != 'UPDATE' || request.userInfo.username == '{SCHEDULER_USER}' || "
                       f"{keys}.all(k, {value('object', 'k')} == {value('oldObject', 'k')})",
         "message": "ringleader's GPU, decision and restart annotations cannot be changed on a pod (but by its DRA "
                    "scheduler's pin)",
         "reason": "Forbidden"},
    ]  # fmt: skip
    if not runtime_class:
        # The nodes' default runtime is NVIDIA's: it reads the variables envFrom brings too (a
        # ConfigMap holding NVIDIA_VISIBLE_DEVICES=all), which no policy can look into. So each
        # envFrom must have a prefix that no NVIDIA_* or CUDA_VISIBLE_DEVICES can come out of.
        safe = " && ".join(f"!'{v}'.startsWith(f.prefix) && !f.prefix.startsWith('{v}')"
                           for v in ("NVIDIA_", "CUDA_VISIBLE_DEVICES"))  # fmt: skip
        rules.append({
            "expression": f"variables.devicePluginPod || "
                          f"({_each(f'!has(c.envFrom) || c.envFrom.all(f, has(f.prefix) && {safe})')})",
            "message": "envFrom without a prefix (or one that makes NVIDIA_* or CUDA_VISIBLE_DEVICES) is refused "
                       "where the nodes' default runtime is NVIDIA's: give each envFrom a prefix such as APP_",
            "reason": "Forbidden"})  # fmt: skip
    if runtime_class:
        rules.append({
            "expression": f"!has(object.spec.runtimeClassName) || object.spec.runtimeClassName != '{runtime_class}' "
                          "|| variables.templated || variables.devicePluginPod",
            "message": f"runtimeClassName {runtime_class} (the NVIDIA runtime) is for ringleader's job templates and "
                       "pods that request nvidia.com/gpu",
            "reason": "Forbidden"})  # fmt: skip
    return rules


def env_policy(runtime_class: str | None, trusted: Sequence[str] = TRUSTED_NAMESPACES,
               templates: bool = True) -> list[dict[str, Any]]:  # fmt: skip
    """The ValidatingAdmissionPolicy and its binding that make the env path safe: outside the
    trusted namespaces, a pod that may land on ringleader's nodes (it requests no
    nvidia.com/gpu, so a device-plugin node is not where it is going) may set NVIDIA_* or
    CUDA_VISIBLE_DEVICES, or use the NVIDIA RuntimeClass, only in the shape of ringleader's
    templates: schedulerName ringleader, every container setting NVIDIA_VISIBLE_DEVICES (which
    overrides an image's ENV) from the gpu-ids annotation or to void, no envFrom; and nobody
    writes that annotation but the Binding (it is not an update of the pod, so no policy on pods
    sees it). ``templates`` False (DRA delivery: the DRA driver gives workers their GPUs, no
    template sets NVIDIA_*): no pod outside them but a device-plugin pod may, while the agent's
    NVIDIA RuntimeClass exists."""
    templated = ("has(object.spec.schedulerName) && object.spec.schedulerName == '" + names.SCHEDULER_NAME + "' && "
                 + _each("has(c.env) && c.env.exists(e, e.name == 'NVIDIA_VISIBLE_DEVICES') && "
                         "!has(c.envFrom)")) if templates else "false"  # fmt: skip
    # A pod that asks the device plugin for GPUs (a count above 0: `nvidia.com/gpu: 0` asks for none
    # and would land anywhere, by nodeName too).
    plugin = ("object.spec.containers.exists(c, has(c.resources) && has(c.resources.limits) && "
              "'nvidia.com/gpu' in c.resources.limits && "
              "!string(c.resources.limits['nvidia.com/gpu']).matches('^[+]?0*([.]0*)?$'))")  # fmt: skip
    policy = _policy(ENV_POLICY, ["CREATE", "UPDATE"], ["pods", "pods/ephemeralcontainers"], {
        "variables": [{"name": "templated", "expression": templated},
                      {"name": "devicePluginPod", "expression": plugin}],
        "validations": _env_rules(runtime_class),
    })  # fmt: skip
    return [policy, _binding(ENV_POLICY, {"namespaceSelector": {"matchExpressions": [
        {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": sorted(set(trusted))}]}})]  # fmt: skip


def agent_policy(agent_account: str) -> list[dict[str, Any]]:
    """The agent's ClusterRole may patch every Node; this policy narrows it to the Node its pod
    runs on (the node name in its bound token), and to its annotations and the status:
    labels, taints and the rest of the spec stay as they are."""
    user = f"system:serviceaccount:{names.SYSTEM_NAMESPACE}:{agent_account}"
    ours = "[" + ", ".join(f"'{a}'" for a in names.AGENT_ANNOTATIONS) + "]"
    same_labels = _unchanged("metadata.labels")
    kept, added = _other_annotations_kept(f"k in {ours}")
    policy = _policy(AGENT_POLICY, ["UPDATE"], ["nodes", "nodes/status"], {
        "matchConditions": [{"name": "is-the-agent", "expression": f"request.userInfo.username == '{user}'"}],
        "validations": [
            {"expression": f"has(request.userInfo.extra) && '{NODE_NAME_EXTRA}' in request.userInfo.extra && "
                           f"request.userInfo.extra['{NODE_NAME_EXTRA}'].exists(n, n == object.metadata.name)",
             "message": "the ringleader agent may change only the node its pod runs on", "reason": "Forbidden"},
            # the API server passes no subResource key for a request to the node itself
            {"expression": f"(has(request.subResource) && request.subResource == 'status') || "
                           f"({same_labels} && {kept} && {added} && object.spec == oldObject.spec)",
             "message": f"the ringleader agent may change only the annotations "
                        f"{', '.join(names.AGENT_ANNOTATIONS)} of its node",
             "reason": "Forbidden"},
        ],
    })  # fmt: skip
    return [policy, _binding(AGENT_POLICY, {})]


def scheduler_policy() -> list[dict[str, Any]]:
    """With DRA the scheduler's ClusterRole may patch every pod (RBAC cannot say "the gated
    workers of ringleader's gangs"); this policy narrows its updates of pods to what pinning
    writes: ringleader.io/ annotations, node affinity (which the API server allows on a gated
    pod only) and the removal of scheduling gates. Images, labels, other annotations,
    tolerations and deadlines stay as they are, and no gate is added."""
    def images(kind: str) -> str:
        return (f"has(object.spec.{kind}) == has(oldObject.spec.{kind}) && (!has(object.spec.{kind}) || "
                f"object.spec.{kind}.map(c, c.image) == oldObject.spec.{kind}.map(c, c.image))")

    kept, added = _other_annotations_kept(f"k.startsWith('{names.PREFIX}/')")
    gates = ("!has(object.spec.schedulingGates) || (has(oldObject.spec.schedulingGates) && "
             "object.spec.schedulingGates.all(g, oldObject.spec.schedulingGates.exists(o, o.name == g.name)))")
    parts = [_unchanged("metadata.labels"), kept, added, images("containers"), images("initContainers"),
             _unchanged("spec.tolerations"), _unchanged("spec.activeDeadlineSeconds"), gates]
    same = " && ".join(f"({part})" for part in parts)  # each whole: `||` binds looser than `&&`
    policy = _policy(SCHEDULER_POLICY, ["UPDATE"], ["pods"], {
        "matchConditions": [{"name": "is-the-scheduler",
                             "expression": f"request.userInfo.username == '{SCHEDULER_USER}'"}],
        "validations": [{"expression": same, "reason": "Forbidden",
                         "message": f"ringleader's scheduler may change on a pod only its {names.PREFIX}/ annotations, "
                                    "its node affinity and its scheduling gates (removed)"}],
    })  # fmt: skip
    return [policy, _binding(SCHEDULER_POLICY, {})]


def podgroup_policy() -> list[dict[str, Any]]:
    """Users create and delete their PodGroups (the user role's `edit` rights); this policy keeps
    what the scheduler reads off them true: nobody but the scheduler writes its counters (a
    restart count reset would restart a gang past --max-restarts; a pending reason lies to `get`),
    and the spec submit stored (the gang's queue, read by the scheduler) stays as created."""
    counters, spec = _cel_list(PODGROUP_COUNTERS), f"'{names.SPEC_ANNOTATION}'"
    same = f"{counters}.all(k, {_annotation('object', 'k')} == {_annotation('oldObject', 'k')})"
    policy = _policy(PODGROUP_POLICY, ["CREATE", "UPDATE"], [names.PODGROUP_PLURAL], {
        "matchConditions": [{"name": "not-the-scheduler",
                             "expression": f"request.userInfo.username != '{SCHEDULER_USER}'"}],
        "validations": [
            {"expression": f"request.operation != 'CREATE' || !has(object.metadata.annotations) || "
                           f"!{counters}.exists(k, k in object.metadata.annotations)",
             "message": f"{', '.join(PODGROUP_COUNTERS)} are written only by ringleader's scheduler",
             "reason": "Forbidden"},
            {"expression": f"request.operation != 'UPDATE' || ({same} && "
                           f"{_annotation('object', spec)} == {_annotation('oldObject', spec)})",
             "message": f"{', '.join(PODGROUP_COUNTERS)} are ringleader's scheduler's and {names.SPEC_ANNOTATION} "
                        "is the job as submitted: neither changes on a PodGroup",
             "reason": "Forbidden"},
        ],
    }, group=names.PODGROUP_GROUP)  # fmt: skip
    return [policy, _binding(PODGROUP_POLICY, {})]


def node_policy() -> list[dict[str, Any]]:
    """The scheduler's ClusterRole may patch every Node (RBAC cannot say "only to cordon it");
    this policy narrows its updates to what blaming and cordoning write: its annotations
    SCHEDULER_NODE_ANNOTATIONS and spec.unschedulable. Labels, taints, the agent's annotations
    and the status stay as they are."""
    kept, added = _other_annotations_kept(f"k in {_cel_list(SCHEDULER_NODE_ANNOTATIONS)}")
    parts = [_unchanged("metadata.labels"), kept, added, _unchanged("spec.taints"), _unchanged("spec.podCIDR"),
             _unchanged("spec.podCIDRs"), _unchanged("spec.providerID")]
    policy = _policy(NODE_POLICY, ["UPDATE"], ["nodes", "nodes/status"], {
        "matchConditions": [{"name": "is-the-scheduler",
                             "expression": f"request.userInfo.username == '{SCHEDULER_USER}'"}],
        "validations": [
            {"expression": "!has(request.subResource) || request.subResource == ''",
             "message": "ringleader's scheduler does not change a node's status", "reason": "Forbidden"},
            {"expression": " && ".join(f"({part})" for part in parts), "reason": "Forbidden",
             "message": f"ringleader's scheduler may change on a node only {', '.join(SCHEDULER_NODE_ANNOTATIONS)} "
                        "and whether it is cordoned"},
        ],
    })  # fmt: skip
    return [policy, _binding(NODE_POLICY, {})]


def _cel_list(keys: Sequence[str]) -> str:
    return "[" + ", ".join(f"'{k}'" for k in keys) + "]"


def _annotation(obj: str, key: str) -> str:
    """CEL: the annotation ``key`` (a CEL string) of ``obj``, '' where absent."""
    return (f"(has({obj}.metadata.annotations) && {key} in {obj}.metadata.annotations ? "
            f"{obj}.metadata.annotations[{key}] : '')")


def _unchanged(field: str) -> str:
    """CEL: ``field`` of the object is as it was (absent on both, or equal)."""
    return (f"has(object.{field}) == has(oldObject.{field}) && "
            f"(!has(object.{field}) || object.{field} == oldObject.{field})")


def _other_annotations_kept(is_ours: str) -> tuple[str, str]:
    """CEL over annotation key ``k``: every annotation but those ``is_ours`` says are the
    updater's own kept as it was, and none added."""
    kept = (f"(!has(oldObject.metadata.annotations) || oldObject.metadata.annotations.all(k, {is_ours} || "
            "(has(object.metadata.annotations) && k in object.metadata.annotations && "
            "object.metadata.annotations[k] == oldObject.metadata.annotations[k])))")  # fmt: skip
    added = (f"(!has(object.metadata.annotations) || object.metadata.annotations.all(k, {is_ours} || "
             "(has(oldObject.metadata.annotations) && k in oldObject.metadata.annotations)))")  # fmt: skip
    return kept, added


def _policy(name: str, operations: list[str], resources: list[str], rules: dict[str, Any],
            group: str = "") -> dict[str, Any]:  # fmt: skip
    """A ValidatingAdmissionPolicy over ``resources`` of API ``group`` (core) that fails closed."""
    match = {"resourceRules": [{"apiGroups": [group], "apiVersions": ["*" if group else "v1"],
                                "operations": operations, "resources": resources}]}  # fmt: skip
    return {"apiVersion": ADMISSION, "kind": "ValidatingAdmissionPolicy", "metadata": {"name": name},
            "spec": {"failurePolicy": "Fail", "matchConstraints": match, **rules}}  # fmt: skip


def _binding(policy: str, match: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = {"policyName": policy, "validationActions": ["Deny"]}
    if match:
        spec["matchResources"] = match
    return {"apiVersion": ADMISSION, "kind": "ValidatingAdmissionPolicyBinding", "metadata": {"name": policy},
            "spec": spec}  # fmt: skip


# -- dra: claims, allocation, pinning -------------------------------------------------------------------


def claim_template(name: str, namespace: str, gpus: int, job: str, owner: Mapping[str, Any] | None = None
                   ) -> dict[str, Any]:  # fmt: skip
    """The job's ResourceClaimTemplate: each worker pod gets its own claim for ``gpus`` devices of
    NVIDIA's DeviceClass. ringleader, not kube-scheduler, allocates it (``claim_allocation``): the
    pod is gated until then."""
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": {names.JOB_LABEL: job}}
    if owner:
        meta["ownerReferences"] = [dict(owner)]
    return {
        "apiVersion": RESOURCE, "kind": "ResourceClaimTemplate", "metadata": meta,
        "spec": {"spec": {"devices": {"requests": [{"name": names.DRA_REQUEST, "exactly": {
            "deviceClassName": names.DRA_DEVICE_CLASS, "allocationMode": "ExactCount", "count": gpus}}]}}},
    }  # fmt: skip


@dataclass(frozen=True)
class Device:
    pool: str
    name: str  # the driver's device name (gpu-<minor> for NVIDIA's driver)
    uuid: str


def node_devices(slices: Sequence[Mapping[str, Any]], node: str) -> list[Device]:
    """The NVIDIA GPUs the DRA driver publishes for ``node`` (its ResourceSlices), each with its
    pool, its device name and its ``uuid`` attribute; MIG devices and other drivers' left out."""
    found = []
    for sl in slices:
        spec = sl.get("spec") or {}
        if spec.get("driver") != names.DRA_DRIVER or spec.get("nodeName") != node:
            continue
        pool = (spec.get("pool") or {}).get("name", node)
        for dev in spec.get("devices") or ():
            attrs = dev.get("attributes") or {}
            kind = (attrs.get("type") or {}).get("string")
            uuid = (attrs.get("uuid") or {}).get("string")
            if uuid and kind in (None, "gpu"):
                found.append(Device(pool, dev.get("name", ""), uuid))
    return found


def claim_allocation(node: str, devices: Sequence[Device]) -> dict[str, Any]:
    """The ``status`` of a worker's claim once ringleader allocated it: exactly these devices on
    ``node``, and when (``allocationTimestamp``). kube-scheduler takes an allocated claim as it is
    (it checks the node selector, reserves it for the pod and counts its devices as in use); on
    1.36 its PreBind adds the timestamp where it is missing, which the API server refuses as a
    change of an immutable allocation, so it is written here."""
    return {"allocation": {
        "allocationTimestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "devices": {"results": [{"request": names.DRA_REQUEST, "driver": names.DRA_DRIVER, "pool": d.pool,
                                 "device": d.name} for d in devices]},
        "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": [node]}]}]},
    }}  # fmt: skip


def pin_patch(node: str, annotations: Mapping[str, str]) -> dict[str, Any]:
    """A strategic-merge patch of a gated worker: required node affinity to its node (allowed on
    a pod with scheduling gates, which had none) and the decision's annotations."""
    return {"metadata": {"annotations": dict(annotations)}, "spec": {"affinity": {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": [node]}]}]}}}}}  # fmt: skip


def ungate_patch() -> dict[str, Any]:
    """Removes ringleader's gate and only it (other gates, e.g. a queue's, stay)."""
    return {"spec": {"schedulingGates": [{"$patch": "delete", "name": names.GANG_GATE}]}}
