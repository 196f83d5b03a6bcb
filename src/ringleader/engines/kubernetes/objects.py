"""Nodes and pods as the scheduler needs them, read from the API's JSON (plain dicts).

Pure: no client, no I/O. A node becomes a ``NodeInfo`` (its ``NodeSpec`` for ``place()`` plus
what Kubernetes adds: allocatable CPU/memory/pods, taints, cordon); a pod a ``PodInfo``.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from ringleader.engines.kubernetes import names
from ringleader.errors import TopologyError
from ringleader.jobs.codec import node_from_dict
from ringleader.jobs.hints import PRECISIONS, count_of
from ringleader.reference import reference
from ringleader.scheduler.types import DEFAULT_RISK, RISKS, START_RULES, Workload
from ringleader.topology import NodeSpec, NodeTopology
from ringleader.topology.cluster import SCHEDULE_LABEL, SCHEDULE_MODES
from ringleader.topology.node import EMPTY

_SUFFIX: dict[str, Decimal] = {
    "Ki": Decimal(2**10), "Mi": Decimal(2**20), "Gi": Decimal(2**30), "Ti": Decimal(2**40),
    "Pi": Decimal(2**50), "Ei": Decimal(2**60), "n": Decimal("1e-9"), "u": Decimal("1e-6"),
    "m": Decimal("1e-3"), "": Decimal(1), "k": Decimal(10**3), "M": Decimal(10**6), "G": Decimal(10**9),
    "T": Decimal(10**12), "P": Decimal(10**15), "E": Decimal(10**18),
}  # fmt: skip
_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([a-zA-Z]*)$")


def quantity(value: Any) -> Decimal:
    """A Kubernetes resource quantity ("500m", "4Gi", 2) as a number; ValueError if malformed."""
    if isinstance(value, int | float):
        return Decimal(str(value))
    return _quantity(str(value))


@functools.lru_cache(maxsize=4096)
def _quantity(value: str) -> Decimal:
    match = _QUANTITY.match(str(value).strip())
    if not match or match.group(2) not in _SUFFIX:
        raise ValueError(f"not a quantity: {value!r}")
    try:
        return Decimal(match.group(1)) * _SUFFIX[match.group(2)]
    except InvalidOperation:
        raise ValueError(f"not a quantity: {value!r}") from None


@dataclass(frozen=True)
class Taint:
    key: str
    value: str
    effect: str


@dataclass(frozen=True)
class NodeInfo:
    """One node: its placement spec and the Kubernetes facts the filters read."""

    spec: NodeSpec
    cpu: Decimal  # allocatable cores
    memory: Decimal  # allocatable bytes
    pods: int  # allocatable pod count
    taints: tuple[Taint, ...]
    labels: Mapping[str, str]
    ready: bool
    problem: str = ""  # why it serves no GPU job (bad label value, unreadable topology)
    gpu_uuids: tuple[str, ...] = ()  # the agent's, in index order; empty unless one per GPU

    @property
    def name(self) -> str:
        return self.spec.name


@dataclass(frozen=True)
class PodInfo:
    """One pod: who it belongs to, what it asks for, where it is."""

    namespace: str
    name: str
    uid: str
    gang: str  # PodGroup name, or the pod's own name for a gang of one
    grouped: bool  # names a PodGroup (its minMember says when the gang is complete)
    gpus: int
    cpu: Decimal
    memory: Decimal
    topology_aware: bool
    node: str | None  # spec.nodeName once bound
    scheduler: str
    phase: str
    gpu_ids: tuple[int, ...]  # from the annotation, once the scheduler chose them
    tolerations: tuple[Mapping[str, Any], ...]
    node_selector: Mapping[str, str]
    created: str
    role: str  # "launcher", "worker", or "" for pods outside an MPIJob
    rank: tuple[int, int, str] = (0, 0, "")  # where it stands in its gang's rank order (rank_order())
    deleting: bool = False
    # requiredDuringSchedulingIgnoredDuringExecution nodeSelectorTerms (any one must match)
    affinity: tuple[Mapping[str, Any], ...] = ()
    priority: int = 0  # spec.priority (from its PriorityClass): higher gangs are decided first
    deadline_s: float | None = None  # spec.activeDeadlineSeconds: kubelet stops the pod then
    started: str = ""  # status.startTime, once kubelet has started it
    gated: bool = False  # a DRA worker still held by ringleader's scheduling gate (docs/kubernetes.md, "dra")
    topology_required: str | None = None  # network level name (names.TOPOLOGY_REQUIRED_ANNOTATIONS)
    topology_preferred: str | None = None
    start_rule: str = "now"  # names.START_ANNOTATION; a value the scheduler does not know: "now"
    run_time_s: float | None = None  # names.RUN_TIME_ANNOTATION
    max_wait_s: float | None = None  # names.MAX_WAIT_ANNOTATION
    risk: str = DEFAULT_RISK  # names.RISK_ANNOTATION; a value the scheduler does not know: the default
    may_preempt: bool = False  # names.PREEMPT_ANNOTATION "true"
    preemptible: bool = True  # names.PREEMPTIBLE_ANNOTATION "false": never a victim
    queue: str | None = None  # names.QUEUE_ANNOTATION: its team queue (None: the default queue)
    grace_s: float = 30.0  # spec.terminationGracePeriodSeconds (the API's default 30)
    model: str | None = None  # names.MODEL_ANNOTATION
    # names.BATCH_ANNOTATION, PRECISION_ANNOTATION and ACCUMULATION_ANNOTATION (a hand-written
    # value that is none: the default's)
    workload: Workload | None = None
    calibration: str | None = None  # names.CALIBRATION_ANNOTATION, as written (the scheduler reads it)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def gang_key(self) -> str:
        return f"{self.namespace}/{self.gang}"

    @property
    def terminal(self) -> bool:
        return self.phase in ("Succeeded", "Failed")

    @property
    def holds_resources(self) -> bool:
        return self.node is not None and not self.terminal

    @property
    def ours(self) -> bool:
        """Scheduled by ringleader: named so, or a DRA worker held by its gate (kube-scheduler
        binds it once ringleader has pinned its gang), or one it pinned (ids written for its uid)."""
        return self.scheduler == names.SCHEDULER_NAME or self.gated or bool(self.gpu_ids)

    @property
    def pending(self) -> bool:
        """Waits for ringleader's decision: unbound, and scheduled by ringleader or still gated (a
        pinned DRA worker, ungated, waits for kube-scheduler, not for ringleader)."""
        waits = self.scheduler == names.SCHEDULER_NAME or self.gated
        return self.node is None and not self.terminal and not self.deleting and waits


def topology_annotation(topology: NodeTopology) -> str:
    """The node annotation the agent writes: compact JSON, a few hundred bytes for 8 GPUs (the
    limit for all of an object's annotations together is 256 KiB)."""
    body = {
        "links": [" ".join(str(link) for link in row) for row in topology.links],
        "gpu_model": topology.gpu_model,
        "numa": list(topology.numa),
        "measured_gbs": [list(r) for r in topology.measured_gbs] if topology.measured_gbs else None,
        "source": topology.source,
    }
    return json.dumps(body, separators=(",", ":"))


def parse_topology(text: str, node: str) -> NodeTopology:
    """The topology in a node annotation; nodes of one model share one parsed (and memoised)
    topology, so 5,000 alike nodes cost one parse and one fingerprint."""
    try:
        return _parse_topology(text)
    except (ValueError, KeyError, TypeError, AttributeError, TopologyError) as exc:
        why = exc.message if isinstance(exc, TopologyError) else str(exc)
        raise TopologyError(f"node {node}: annotation {names.TOPOLOGY_ANNOTATION} unreadable ({why})",
                            "restart the ringleader agent on that node") from None  # fmt: skip


@functools.lru_cache(maxsize=256)
def _parse_topology(text: str) -> NodeTopology:
    body = json.loads(text)
    data = {"name": "n", "network_gbps": 1.0, "topology": {**body, "links": [row.split() for row in body["links"]]}}
    return node_from_dict(data).topology


def schedule_mode(labels: Mapping[str, str]) -> tuple[str | None, str]:
    """(mode, problem): ringleader's label wins over ACK's; a value other than topology|default
    makes the node serve no GPU job, with the problem said."""
    for key in names.SCHEDULE_LABELS:
        value = labels.get(key)
        if value is not None:
            if value not in SCHEDULE_MODES:
                return None, f"label {key}={value} is not topology or default"
            return value, ""
    return None, ""


def node_info(obj: Mapping[str, Any]) -> NodeInfo:
    meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    name = meta.get("name", "")
    labels = dict(meta.get("labels") or {})
    annotations = meta.get("annotations") or {}
    mode, problem = schedule_mode(labels)
    topology = EMPTY
    if names.TOPOLOGY_ANNOTATION in annotations:
        try:
            topology = parse_topology(annotations[names.TOPOLOGY_ANNOTATION], name)
        except TopologyError as exc:
            problem = problem or exc.message
    alloc = status.get("allocatable") or {}
    advertised = alloc.get(names.GPU_RESOURCE)
    if topology.n_gpus and advertised is not None and int(quantity(advertised)) < topology.n_gpus:
        problem = problem or f"advertises {advertised} {names.GPU_RESOURCE} but its topology has {topology.n_gpus}"
    try:
        network = float(labels.get(names.NETWORK_LABEL) or reference()["network"]["default_gbps"])
    except ValueError:
        network = float(reference()["network"]["default_gbps"])
    # Only the mode label reaches the placement spec: other labels would split the scheduler's
    # groups of equivalent nodes for nothing (nodeSelector is matched here, not in place()).
    spec_labels = ((SCHEDULE_LABEL, mode),) if mode else ()
    taints = tuple(
        Taint(t.get("key", ""), t.get("value") or "", t.get("effect", ""))
        for t in spec.get("taints") or ()
        if t.get("effect") in ("NoSchedule", "NoExecute")
    )
    if spec.get("unschedulable"):
        taints = (*taints, Taint(names.UNSCHEDULABLE_TAINT, "", "NoSchedule"))
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or ())

    def amount(key: str, default: str) -> Decimal:
        try:
            return quantity(alloc.get(key, default))
        except ValueError:
            return Decimal(0)

    uuids = tuple(u.strip() for u in str(annotations.get(names.GPU_UUIDS_ANNOTATION, "")).split(",") if u.strip())
    return NodeInfo(
        spec=NodeSpec(name, topology if not problem else EMPTY, network, spec_labels),
        cpu=amount("cpu", "0"), memory=amount("memory", "0"), pods=int(amount("pods", "110")),
        taints=taints, labels=labels, ready=ready, problem=problem,
        gpu_uuids=uuids if len(uuids) == topology.n_gpus else (),
    )  # fmt: skip


def _requests(containers: Sequence[Mapping[str, Any]], key: str) -> Decimal:
    total = Decimal(0)
    for c in containers:
        res = c.get("resources") or {}
        value = (res.get("requests") or {}).get(key, (res.get("limits") or {}).get(key))
        if value is not None:
            total += quantity(value)
    return total


def _required_terms(spec: Mapping[str, Any]) -> tuple[Mapping[str, Any], ...]:
    node_affinity = (spec.get("affinity") or {}).get("nodeAffinity") or {}
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    return tuple(required.get("nodeSelectorTerms") or ())


def pod_info(obj: Mapping[str, Any]) -> PodInfo:
    """A pod's scheduling facts. Init containers run before the others, so a pod needs the
    larger of their biggest request and the sum of its containers' (as kube-scheduler counts)."""
    meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    containers = spec.get("containers") or ()
    inits = spec.get("initContainers") or ()

    def need(key: str) -> Decimal:
        try:
            return max([_requests(containers, key), *(_requests([c], key) for c in inits)])
        except ValueError:
            return Decimal(0)

    uid = meta.get("uid", "")
    # Only ids the scheduler's own Binding wrote for this very pod (see names.GPU_IDS_UID_ANNOTATION).
    ours = bool(uid) and annotations.get(names.GPU_IDS_UID_ANNOTATION) == uid
    ids = annotations.get(names.GPU_IDS_ANNOTATION, "") if ours else ""
    try:
        gpu_ids = tuple(int(x) for x in ids.split(",") if x.strip())
    except ValueError:
        gpu_ids = ()
    name = meta.get("name", "")
    gpus = int(need(names.GPU_RESOURCE))
    # A DRA worker of ringleader's: its claim's count. Only a pod that has that claim and that
    # ringleader places (held by its gate) or pinned (ids written for its uid): any pod may carry
    # the annotation and a claim entry of that name (a busybox placed by nodeName would
    # otherwise hold a node's GPUs); another pod's claim holds the devices allocated to it
    # (claims.py), whoever allocated them.
    claims = {c.get("name") for c in spec.get("resourceClaims") or () if isinstance(c, Mapping)}
    gated = any(g.get("name") == names.GANG_GATE for g in spec.get("schedulingGates") or ())
    if (not gpus and names.DRA_GPUS_ANNOTATION in annotations and names.DRA_REQUEST in claims
            and (gated or gpu_ids)):
        try:
            gpus = max(0, int(annotations[names.DRA_GPUS_ANNOTATION]))
        except ValueError:
            gpus = 0
    return PodInfo(
        namespace=meta.get("namespace", "default"), name=name, uid=uid,
        gang=labels.get(names.PODGROUP_LABEL) or name, grouped=bool(labels.get(names.PODGROUP_LABEL)),
        gpus=gpus,
        cpu=need("cpu"), memory=need("memory"),
        topology_aware=str(labels.get(names.TOPOLOGY_LABEL, "")).lower() == "true",
        node=spec.get("nodeName") or None, scheduler=spec.get("schedulerName") or "default-scheduler",
        phase=status.get("phase") or "Pending", gpu_ids=gpu_ids,
        tolerations=tuple(spec.get("tolerations") or ()), node_selector=dict(spec.get("nodeSelector") or {}),
        created=meta.get("creationTimestamp") or "", role=labels.get(names.JOB_ROLE_LABEL, ""),
        rank=rank_order(name, labels, annotations),
        deleting=bool(meta.get("deletionTimestamp")),
        affinity=_required_terms(spec), priority=int(spec.get("priority") or 0),
        deadline_s=float(spec["activeDeadlineSeconds"]) if spec.get("activeDeadlineSeconds") else None,
        started=status.get("startTime") or "",
        gated=gated,
        topology_required=_level(annotations, names.TOPOLOGY_REQUIRED_ANNOTATIONS),
        topology_preferred=_level(annotations, names.TOPOLOGY_PREFERRED_ANNOTATIONS),
        start_rule=_known(annotations.get(names.START_ANNOTATION), START_RULES, "now"),
        run_time_s=_seconds(annotations.get(names.RUN_TIME_ANNOTATION)),
        max_wait_s=_seconds(annotations.get(names.MAX_WAIT_ANNOTATION)),
        risk=_known(annotations.get(names.RISK_ANNOTATION), RISKS, DEFAULT_RISK),
        may_preempt=annotations.get(names.PREEMPT_ANNOTATION) == "true",
        preemptible=annotations.get(names.PREEMPTIBLE_ANNOTATION) != "false",
        queue=annotations.get(names.QUEUE_ANNOTATION) or None,
        grace_s=float(spec.get("terminationGracePeriodSeconds", 30) or 0),
        model=annotations.get(names.MODEL_ANNOTATION) or None,
        workload=_workload(annotations),
        calibration=annotations.get(names.CALIBRATION_ANNOTATION) or None,
    )  # fmt: skip


def replica_role(labels: Mapping[str, str]) -> str:
    """What a training operator made the pod: mpi-operator's launcher or worker, the Training
    Operator's master or worker (its replica type); "" for a pod of neither."""
    return str(labels.get(names.REPLICA_TYPE_LABEL) or labels.get(names.JOB_ROLE_LABEL) or "").lower()


def rank_order(name: str, labels: Mapping[str, str], annotations: Mapping[str, str]) -> tuple[int, int, str]:
    """Where a pod stands in its gang's rank order, as its controller numbered it:
    - an Indexed Job's pod (a JobSet's, a TrainJob's): its Job's index among the JobSet's Jobs,
      then its completion index (torchrun's node rank is JOB_COMPLETION_INDEX);
    - a training operator's (PyTorchJob, MPIJob): the master first (RANK 0), then the workers by
      replica index;
    - any other: the number its name ends in (`x-worker-3`), else its name.
    Sorting by name instead would put `x-10` before `x-2`, and a Job's pods end in a random suffix."""

    def number(text: str | None) -> int | None:
        return int(text) if text is not None and text.isascii() and text.isdigit() else None

    completion = number(labels.get(names.COMPLETION_INDEX_KEY) or annotations.get(names.COMPLETION_INDEX_KEY))
    if completion is not None:
        return (number(labels.get(names.JOBSET_GLOBAL_INDEX_LABEL)) or 0, completion, name)
    replica = number(labels.get(names.REPLICA_INDEX_LABEL))
    kind = replica_role(labels)
    if replica is not None and kind:
        return (0 if kind == "master" else 1, replica, name)
    tail = number(name.rsplit("-", 1)[-1])
    return (0, 1 << 30 if tail is None else tail, name)


def _known(value: str | None, known: tuple[str, ...], default: str) -> str:
    """A start rule or risk written on a pod; anything else (a hand-written pod's typo) is the
    default, which changes nothing."""
    return value if value in known else default


def _workload(annotations: Mapping[str, str]) -> Workload | None:
    """How the gang's model trains, as written on a pod; None where nothing is. A value that is
    no count or precision (a hand-written typo) leaves the default's."""
    counts = {key: n for key in (names.BATCH_ANNOTATION, names.ACCUMULATION_ANNOTATION)
              if (n := count_of(annotations.get(key, ""))) is not None}  # fmt: skip
    precision = annotations.get(names.PRECISION_ANNOTATION)
    if not counts and precision is None:
        return None
    default = Workload()
    return Workload(counts.get(names.BATCH_ANNOTATION, default.batch_size),
                    precision if precision in PRECISIONS else default.precision,
                    counts.get(names.ACCUMULATION_ANNOTATION, default.accumulation))  # fmt: skip


def _seconds(value: str | None) -> float | None:
    """A positive, finite number of seconds written on a pod, else None (not known)."""
    try:
        seconds = float(value) if value is not None else None
    except ValueError:
        return None
    return seconds if seconds is not None and 0 < seconds < math.inf else None


def _level(annotations: Mapping[str, str], keys: Sequence[str]) -> str | None:
    """A network level by name from the first of ``keys`` set: a node label key (Kueue's) names
    the level its last part names."""
    for key in keys:
        value = str(annotations.get(key) or "").strip()
        if value:
            return value.rsplit("/", 1)[-1]
    return None


def tolerates(tolerations: Sequence[Mapping[str, Any]], taint: Taint) -> bool:
    """The core/v1 toleration rules: empty key with Exists matches every taint; an empty effect
    matches every effect; Equal (the default operator) compares values."""
    for t in tolerations:
        effect = t.get("effect") or ""
        if effect and effect != taint.effect:
            continue
        key, op = t.get("key") or "", t.get("operator") or "Equal"
        if op == "Exists" and (not key or key == taint.key):
            return True
        if op == "Equal" and key == taint.key and (t.get("value") or "") == taint.value:
            return True
    return False


def _requirement(req: Mapping[str, Any], value: str | None) -> bool:
    """One nodeSelectorRequirement against a label value (None: the label is absent)."""
    op, values = req.get("operator"), [str(v) for v in req.get("values") or ()]
    if op == "In":
        return value is not None and value in values
    if op == "NotIn":
        return value is None or value not in values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op in ("Gt", "Lt") and value is not None and len(values) == 1:
        try:
            a, b = int(value), int(values[0])
        except ValueError:
            return False
        return a > b if op == "Gt" else a < b
    return False


def _term_matches(term: Mapping[str, Any], node: NodeInfo) -> bool:
    """A nodeSelectorTerm: all its expressions on labels and fields (only metadata.name
    exists). An empty term matches nothing, as in kube-scheduler."""
    exprs = term.get("matchExpressions") or ()
    fields = term.get("matchFields") or ()
    if not exprs and not fields:
        return False
    return all(_requirement(r, node.labels.get(r.get("key", ""))) for r in exprs) and all(
        _requirement(r, node.name if r.get("key") == "metadata.name" else None) for r in fields
    )


def static_misfit(node: NodeInfo, pod: PodInfo) -> str | None:
    """Why ``node`` can never host ``pod`` as it stands (cordon, taints, selector, readiness),
    whatever else runs there; None if it can. Worded to be counted: "N node(s) <reason>"."""
    if not node.ready:
        return "not Ready"
    for taint in node.taints:
        if not tolerates(pod.tolerations, taint):
            if taint.key == names.UNSCHEDULABLE_TAINT:
                return "cordoned"
            return f"had untolerated taint {taint.key}{'=' + taint.value if taint.value else ''}:{taint.effect}"
    for key, value in pod.node_selector.items():
        if node.labels.get(key) != value:
            return "didn't match the pod's nodeSelector"
    if pod.affinity and not any(_term_matches(term, node) for term in pod.affinity):
        return "didn't match the pod's node affinity"
    if pod.gpus and node.problem:
        return node.problem
    return None


def wall_time(stamp: str | None) -> float | None:
    """An API timestamp (RFC 3339) in seconds since the epoch; None if absent or malformed."""
    try:
        return datetime.fromisoformat(stamp).timestamp() if stamp else None
    except ValueError:
        return None
