"""The scheduler's cache: nodes, pods and PodGroups from list+watch, and the ``ClusterState``
snapshot ``place()`` reads, maintained incrementally.

A gang the scheduler has decided on is *assumed* at once (its GPUs, CPU and memory counted as
taken) before any API call, like kube-scheduler's assume cache, so the next decision never acts
on a snapshot from before it; the watch confirms it (the pod shows its node), a failed bind
forgets it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any

from ringleader.clock import SYSTEM_CLOCK, Clock
from ringleader.engines.kubernetes import names
from ringleader.engines.kubernetes.claims import CLAIMS, SLICES, claim_gpus, device_index, object_key, owner_pod
from ringleader.engines.kubernetes.objects import NodeInfo, PodInfo, node_info, pod_info, static_misfit, wall_time
from ringleader.engines.kubernetes.restarts import PodFailure, ended_runs, pod_failure
from ringleader.engines.kubernetes.usage import read_usage
from ringleader.errors import UsageError
from ringleader.jobs.codec import placement_from_dict, spec_from_json
from ringleader.jobs.queues import queue_from_json
from ringleader.jobs.spec import JobSpec
from ringleader.scheduler import ClusterState, NodeState, Placement, WorkerSlot
from ringleader.scheduler.teams import DEFAULT_QUEUE, GpuSpan, KeptUsage, TeamQueue, Teams, usage_at
from ringleader.topology.cluster import placed
from ringleader.topology.network import NetworkTree
from ringleader.topology.network_formats import label_keys, tree_from_hypernodes, tree_from_labels

log = logging.getLogger("ringleader.kube.cache")
HYPERNODES = "hypernodes"  # the informer kind of Volcano's HyperNodes


@dataclass(frozen=True)
class Holding:
    """What one pod takes on one node (or, ``pod`` False, the GPUs of a claim: claims.py)."""

    node: str
    gpus: tuple[int, ...]
    cpu: Decimal
    memory: Decimal
    pod: bool = True


@dataclass
class Usage:
    cpu: Decimal = Decimal(0)
    memory: Decimal = Decimal(0)
    pods: int = 0


@dataclass
class Gang:
    """Pods of one gang as the cache sees them now."""

    key: str  # namespace/name
    min_member: int
    pending: list[PodInfo] = field(default_factory=list)
    placed: int = 0  # members bound or assumed
    group_missing: bool = False  # pods name a PodGroup the cache has not seen
    nodes: list[str] = field(default_factory=list)  # where placed members are, for members made later
    spec: JobSpec | None = None  # the whole spec its PodGroup keeps (None: a gang submit did not make)
    queue: str | None = None  # its team queue: the spec's, else its members' (Cache.queue_named)
    refused: str | None = None  # why it may not use the queue it names (its namespace may not)
    # Members deleted on a node but not gone yet: their containers may still run there. A pod on
    # an unreachable node stays so until its kubelet says they stopped, or an administrator
    # force-deletes it or taints the node node.kubernetes.io/out-of-service (docs/kubernetes.md).
    stopping: int = 0
    held: bool = False  # its PodGroup is held (names.HOLD_ANNOTATION): the cycle skips it

    @property
    def ready(self) -> bool:
        """Enough members exist to start it whole (or it already runs and lost some), and none of
        its members deleted before (a restart's, a preemption's) may still be running: a new run
        never starts beside its old one."""
        return not self.group_missing and bool(self.pending) and self.stopping == 0 and (
            self.placed > 0 or len(self.pending) >= self.min_member
        )


def move_target(gang: str, text: str) -> Placement | None:
    """A PodGroup's move-target annotation read back (None: none, or not a placement's JSON)."""
    if not text:
        return None
    try:
        return placement_from_dict(gang, json.loads(text))
    except (ValueError, KeyError, TypeError):
        return None


def _uses_gpus(pod: PodInfo) -> bool:
    """A pod of ours holding GPUs on a node (one being deleted too: its containers may still run)."""
    return pod.holds_resources and pod.ours and pod.gpus > 0


class Cache:
    def __init__(self, level_keys: Sequence[str] | None = None, hypernodes: bool = False,
                 clock: Clock = SYSTEM_CLOCK) -> None:  # fmt: skip
        # The network tree above the nodes, from their labels (``level_keys``, nearest the node
        # first; None: the first known convention they carry), or with ``hypernodes`` from
        # Volcano's HyperNode objects. Rebuilt only when a node comes, goes or changes one of
        # those labels (any label, for HyperNodes, whose members may be chosen by label), or a
        # HyperNode changes.
        self.level_keys = tuple(level_keys) if level_keys else None
        self.hypernodes: dict[str, Mapping[str, Any]] | None = {} if hypernodes else None
        # Without level keys: every known convention's (Topograph's, Kueue's example, GKE's,
        # AWS's); the first one the nodes carry wins.
        self._network_keys = self.level_keys or tuple(dict.fromkeys(k for ks in label_keys().values() for k in ks))
        self.tree: NetworkTree | None = None
        self._tree_stale = True
        self.nodes: dict[str, NodeInfo] = {}
        self.pods: dict[str, PodInfo] = {}
        self.groups: dict[str, int] = {}  # namespace/name -> minMember
        self.specs: dict[str, JobSpec] = {}  # namespace/name -> the spec its PodGroup keeps
        self.held: set[str] = set()  # namespace/name of the PodGroups held by their users
        self.queues: tuple[TeamQueue, ...] = ()  # the team queues (names.QUEUES_CONFIG)
        # Fair-share usage: each queue's as kept in the cluster (names.QUEUE_USAGE_CONFIG, usage.py),
        # that ConfigMap as last seen (the leader replaces it at its resourceVersion), and the
        # GPU spans of pods that stopped holding GPUs since (their end on ``clock``), until the
        # kept usage covers them.
        self.clock = clock
        self.kept_usage: dict[str, KeptUsage] = {}
        self.usage_config: Mapping[str, Any] | None = None
        self.ended: list[GpuSpan] = []
        self.restarts: dict[str, int] = {}  # gang -> its restart count (its PodGroup's annotation)
        self.preemptions: dict[str, int] = {}  # gang -> how many of its restarts were preemptions
        self.runs: dict[str, list[tuple[float, float]]] = {}  # gang -> its ended runs (its PodGroup's annotation)
        self.moving: dict[str, Placement] = {}  # gang -> where it moves (its PodGroup's annotation)
        self.failures: list[PodFailure] = []  # members seen failing, for the scheduler's next cycle
        self.assumed: dict[str, Holding] = {}
        self._held: dict[str, Holding] = {}
        self._members: dict[tuple[str, str], set[str]] = {}  # (gang, node) -> pods holding there
        self._usage: dict[str, Usage] = {}
        # DRA: ResourceClaims and ResourceSlices (informed only with DRA delivery), and which
        # claims each pod owns, to count a claim again when its pod changes (claims.py).
        self.claims: dict[str, Mapping[str, Any]] = {}
        self.slices: dict[str, Mapping[str, Any]] = {}
        self._devices: dict[tuple[str, str], tuple[str, str]] = {}
        self._claims_of: dict[str, set[str]] = {}  # pod key -> its claims' keys
        self._state: ClusterState | None = None
        self._misfits: dict[Any, dict[int, str]] = {}  # pod signature -> node position -> why
        # Bumped whenever room may have appeared (a pod let go of a node, a node changed): a gang
        # that did not fit is decided again only after that.
        self.freed = 0

    # -- events -----------------------------------------------------------------------------------
    def replace(self, kind: str, objects: Iterable[Mapping[str, Any]]) -> None:
        """A relist: the whole set of ``kind`` ("nodes", "pods", "podgroups") as it is now."""
        if kind == "nodes":
            self.nodes = {}
            for obj in objects:
                info = node_info(obj)
                self.nodes[info.name] = info
            self._tree_stale = True
            # Claims and slices may be listed before the nodes (the informers list in parallel):
            # a claim's devices are found on a node by its GPUs' UUIDs, so only now.
            self._count_claims()
            self._node_set_changed()
        elif kind == "pods":
            fresh = {p.key: p for p in map(pod_info, objects)}
            for key in list(self.pods):
                if key not in fresh:
                    self.delete_pod(key)
            # Pods holding ids the scheduler bound them with first, the earliest created first (a
            # copy of a pod's ids on a later pod does not take them): a pod without ids, or with
            # clashing ones, is then counted on the ids left, not on ids a bound pod really uses.
            for pod in sorted(fresh.values(), key=lambda p: (not p.gpu_ids, p.created)):
                self._put_pod(pod)
        elif kind == HYPERNODES:
            self.hypernodes = {str((o.get("metadata") or {}).get("name")): o for o in objects}
            self._tree_stale = True
            self._node_set_changed()
        elif kind == "configmaps":
            found = {str((o.get("metadata") or {}).get("name")): o for o in objects}
            for name, apply in ((names.QUEUES_CONFIG, self.apply_queues), (names.QUEUE_USAGE_CONFIG, self.apply_usage)):
                apply("ADDED" if name in found else "DELETED", found.get(name, {}))
        elif kind == SLICES:
            self.slices = {object_key(o): o for o in objects}
            self._devices = device_index(list(self.slices.values()))
            self._count_claims()
        elif kind == CLAIMS:
            listed = {object_key(o): o for o in objects}
            for key in set(self.claims) - set(listed):
                self.apply_claim("DELETED", self.claims[key])
            for claim in listed.values():
                self.apply_claim("ADDED", claim)
        else:
            self.groups, self.specs, self.held = {}, {}, set()
            for obj in objects:
                self.apply_group("ADDED", obj)

    def apply(self, kind: str, event_type: str, obj: Mapping[str, Any]) -> None:
        if kind == "nodes":
            self.apply_node(event_type, obj)
        elif kind == "pods":
            self.apply_pod(event_type, obj)
        elif kind == "configmaps":
            name = (obj.get("metadata") or {}).get("name")
            if name == names.QUEUES_CONFIG:
                self.apply_queues(event_type, obj)
            elif name == names.QUEUE_USAGE_CONFIG:
                self.apply_usage(event_type, obj)
        elif kind == CLAIMS:
            self.apply_claim(event_type, obj)
        elif kind == SLICES:
            key = object_key(obj)
            if event_type == "DELETED":
                self.slices.pop(key, None)
            else:
                self.slices[key] = obj
            self._devices = device_index(list(self.slices.values()))
            self._count_claims()
        elif kind == HYPERNODES:
            name = str((obj.get("metadata") or {}).get("name"))
            hypernodes = self.hypernodes if self.hypernodes is not None else {}
            if event_type == "DELETED":
                hypernodes.pop(name, None)
            elif hypernodes.get(name, {}).get("spec") == obj.get("spec"):
                return  # a status or metadata change: the tree is the same
            else:
                hypernodes[name] = obj
            self.hypernodes = hypernodes
            self._tree_stale = True
            self._node_set_changed()
        else:
            self.apply_group(event_type, obj)

    def apply_pod(self, event_type: str, obj: Mapping[str, Any]) -> None:
        """A pod's event. One that ended leaves the cache as a deleted one does (the list never
        holds ended pods); one known running that arrives Failed failed now: its failure is kept
        for the restart (once: a later change of the ended pod finds it gone)."""
        pod = pod_info(obj)
        known = self.pods.get(pod.key)
        if known is not None and not known.terminal:
            failed = pod_failure(obj)
            if failed is not None:
                self.failures.append(failed)
        if event_type == "DELETED" or pod.terminal:
            self.delete_pod(pod.key)
        else:
            self._put_pod(pod)

    def apply_claim(self, event_type: str, obj: Mapping[str, Any]) -> None:
        key, owner = object_key(obj), owner_pod(obj)
        if event_type == "DELETED":
            self.claims.pop(key, None)
        else:
            self.claims[key] = obj
        if owner is not None and event_type == "DELETED":
            owned = self._claims_of.get(owner, set())
            owned.discard(key)
            if not owned:
                self._claims_of.pop(owner, None)
        elif owner is not None:
            self._claims_of.setdefault(owner, set()).add(key)
        self._count_claim(key)

    def _count_claim(self, key: str) -> None:
        """A claim's devices held, unless the claim is gone or belongs to a pod of ringleader's
        (that pod's holding counts them: its ids are the ones pinned in its claim)."""
        claim = self.claims.get(key)
        owner = self.pods.get(owner_pod(claim) or "") if claim is not None else None
        held = None
        if claim is not None and not (owner is not None and owner.ours):
            found = claim_gpus(claim, self._devices, self.nodes)
            held = Holding(found[0], found[1], Decimal(0), Decimal(0), pod=False) if found else None
        self._hold(f"claim:{key}", held)

    def _count_claims(self) -> None:
        for key in list(self.claims):
            self._count_claim(key)

    def apply_node(self, event_type: str, obj: Mapping[str, Any]) -> None:
        info = node_info(obj)
        old = self.nodes.get(info.name)
        if event_type == "DELETED":
            if old is not None:
                del self.nodes[info.name]
                self._tree_stale = True
                self._node_set_changed()
            return
        if old == info:
            return  # a heartbeat: nothing the scheduler reads changed
        self.nodes[info.name] = info
        if old is None or old.gpu_uuids != info.gpu_uuids:
            self._count_claims()  # claims' devices are found on a node by its GPUs' UUIDs
        if old is None or self._network_labels(old) != self._network_labels(info):
            self._tree_stale = True
            self._node_set_changed()
        elif old.spec != info.spec:
            self._node_set_changed()
        else:
            self._misfits.clear()
            self.freed += 1

    def apply_queues(self, event_type: str, obj: Mapping[str, Any]) -> None:
        """The team queues from their ConfigMap (names.QUEUES_CONFIG), one data key per queue; a
        queue kept unlike ringleader writes it is left out, said in the log."""
        kept = []
        data = {} if event_type == "DELETED" else (obj.get("data") or {})
        for name, text in sorted(data.items()):
            try:
                kept.append(queue_from_json(name, text))
            except UsageError as exc:
                log.warning("team queue left out: %s", exc.one_line())
        self.queues = tuple(kept)
        self.freed += 1  # a quota changed: gangs that waited may start, or wait for a new reason

    def apply_usage(self, event_type: str, obj: Mapping[str, Any]) -> None:
        """The queues' kept usage (names.QUEUE_USAGE_CONFIG): an entry not as the scheduler writes
        it is left out, said in the log. A queue's entry never goes back to an older ``as_of``
        (a watch event from before this replica's own write); deleted, every queue's usage
        starts again from the gangs that run. The spans it now covers are forgotten."""
        if event_type == "DELETED":
            self.kept_usage, self.usage_config = {}, None
            return
        read, problems = read_usage(obj.get("data") or {})
        for problem in problems:
            log.warning("fair-share usage left out (%s): %s; the scheduler writes it again", names.QUEUE_USAGE_CONFIG,
                        problem)  # fmt: skip
        before = self.kept_usage
        self.kept_usage = {q: max(k, before.get(q, k), key=lambda u: u.as_of) for q, k in read.items()}
        self.usage_config = obj
        kept = self.kept_usage
        self.ended = [s for s in self.ended if s.queue not in kept or s.end_s > kept[s.queue].as_of]

    def apply_group(self, event_type: str, obj: Mapping[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        key = f"{meta.get('namespace', 'default')}/{meta.get('name', '')}"
        if event_type == "DELETED":
            self.groups.pop(key, None)
            self.specs.pop(key, None)
            self.held.discard(key)
            self.restarts.pop(key, None)
            self.preemptions.pop(key, None)
            self.runs.pop(key, None)
            self.moving.pop(key, None)  # a mover deleted while it stopped: its target is free again
        else:
            self.groups[key] = max(1, int((obj.get("spec") or {}).get("minMember") or 1))
            notes = meta.get("annotations") or {}
            if (notes.get(names.HOLD_ANNOTATION) == "true") != (key in self.held):
                self.held.symmetric_difference_update({key})
                self.freed += 1  # a gang left the line or came back: the others may start, or wait
            spec = spec_from_json(str(notes.get(names.SPEC_ANNOTATION) or ""))
            if spec is not None and spec.name == meta.get("name"):
                self.specs[key] = spec
            else:
                self.specs.pop(key, None)
            for counts, annotation in ((self.restarts, names.RESTARTS_ANNOTATION),
                                       (self.preemptions, names.PREEMPTIONS_ANNOTATION)):  # fmt: skip
                count = str(notes.get(annotation) or "")
                if count.isdigit():  # never lower than this replica has written itself
                    counts[key] = max(counts.get(key, 0), int(count))
            runs = ended_runs(str(notes.get(names.RUNS_ANNOTATION) or ""))
            if len(runs) >= len(self.runs.get(key, ())):  # never fewer than this replica has written itself
                self.runs[key] = runs
            target = move_target(key, str(notes.get(names.MOVE_TARGET_ANNOTATION) or ""))
            if target is None:
                self.moving.pop(key, None)
            else:
                self.moving[key] = target

    def _network_labels(self, info: NodeInfo) -> tuple[Any, ...]:
        if self.hypernodes is not None:
            return tuple(sorted(info.labels.items()))
        return tuple(info.labels.get(k) for k in self._network_keys)

    def _network_tree(self) -> NetworkTree | None:
        """The tree the nodes' labels describe, rebuilt only when they changed; None (flat) when
        they describe none or an inconsistent one (said once in the log)."""
        if self._tree_stale:
            self._tree_stale = False
            try:
                nodes = [(n, i.labels) for n, i in self.nodes.items()]
                if self.hypernodes is None:
                    self.tree = tree_from_labels(nodes, self.level_keys)
                else:
                    self.tree = tree_from_hypernodes(list(self.hypernodes.values()), nodes) if self.hypernodes else None
            except UsageError as exc:
                self.tree = None
                log.warning("no network tree: %s; placing as if flat", exc.message)
        return self.tree

    def _node_set_changed(self) -> None:
        self._state = None
        self._misfits.clear()
        self.freed += 1
        # Pods seen bound before their node was (the informers list in parallel) hold no GPU
        # ids yet: they take theirs now, before anything is decided on that node.
        for key, held in list(self._held.items()):
            pod = self.pods.get(key)
            if pod is not None and len(held.gpus) < pod.gpus and held.node in self.nodes and key not in self.assumed:
                self._hold(key, self._holding_of(pod))

    def _put_pod(self, pod: PodInfo) -> None:
        known = self.pods.get(pod.key)
        if known is not None and not _uses_gpus(pod):
            self._ended(known)
        self.pods[pod.key] = pod
        if (known is None or known.ours != pod.ours) and pod.key in self._claims_of:
            for claim in self._claims_of[pod.key]:
                self._count_claim(claim)
        if pod.holds_resources:
            self.assumed.pop(pod.key, None)  # the watch confirms the bind (or someone else's)
            self._hold(pod.key, self._holding_of(pod))
        elif pod.terminal or pod.deleting:
            self.assumed.pop(pod.key, None)
            self._hold(pod.key, None)
        elif pod.key in self.assumed:
            self._hold(pod.key, self.assumed[pod.key])  # a stale event from before our bind
        else:
            self._hold(pod.key, None)

    def delete_pod(self, key: str) -> None:
        known = self.pods.get(key)
        if known is not None:
            self._ended(known)
        self.assumed.pop(key, None)
        self._hold(key, None)  # while the pod is still known: its gang names the snapshot entry
        self.pods.pop(key, None)
        for claim in self._claims_of.get(key, ()):  # held by the claim itself until it is gone
            self._count_claim(claim)

    def _ended(self, pod: PodInfo) -> None:
        """``pod`` stops holding GPUs now (it ended, or is gone): its span kept for fair share
        (``queue_usage``), in the queue its gang counts in now, until the kept usage covers it."""
        start = wall_time(pod.started)
        if _uses_gpus(pod) and start is not None:
            queue = self.gang_queues([pod])[pod.gang_key]
            self.ended.append(GpuSpan(queue, pod.gpus, start, max(self.clock.now(), start)))

    def _holding_of(self, pod: PodInfo) -> Holding:
        """What a bound pod holds. Its GPUs always count as many as it requests (kubelet admits
        against that count); their ids are the ones the scheduler bound it with, unless those
        are missing, malformed, or already held by another pod (an earlier binding keeps them):
        then the lowest free ids, so no GPU is ever given twice and the pod never drops out."""
        assert pod.node is not None
        gpus = pod.gpu_ids
        node = self.nodes.get(pod.node)
        if pod.gpus and node is not None:
            held = self._held.get(pod.key)
            mine = set(held.gpus) if held and held.node == pod.node else set()
            usable = set(self.state.node(pod.node).free_gpus) | mine
            if len(gpus) != pod.gpus or len(set(gpus)) != len(gpus) or not usable.issuperset(gpus):
                gpus = tuple(sorted(usable))[: pod.gpus]
        return Holding(pod.node, gpus, pod.cpu, pod.memory)

    # -- assume / forget ------------------------------------------------------------------------------
    def assume(self, pod: PodInfo, node: str, gpus: tuple[int, ...]) -> None:
        self.assume_gang([(pod, node, gpus)])

    def assume_gang(self, members: Iterable[tuple[PodInfo, str, tuple[int, ...]]]) -> None:
        """Count a decided gang as placed: one snapshot update for all of it."""
        changes = []
        for pod, node, gpus in members:
            holding = Holding(node, gpus, pod.cpu, pod.memory)
            self.assumed[pod.key] = holding
            changes.append((pod.key, holding))
        self._hold_many(changes)

    def doomed(self, key: str) -> None:
        """We deleted this pod (a gang's rollback): until the watch says so, it counts as going,
        not as a placed member that would let the rest of its gang start without it."""
        pod = self.pods.get(key)
        if pod is not None:
            self.pods[key] = replace(pod, deleting=True)
        # No longer a member in flight; what it holds stays held until the watch says it is gone.
        self.assumed.pop(key, None)

    def forget(self, key: str) -> None:
        """Undo ``assume`` (the bind failed); the pod is pending again if it still exists."""
        if self.assumed.pop(key, None) is not None:
            pod = self.pods.get(key)
            self._hold(key, self._holding_of(pod) if pod is not None and pod.holds_resources else None)

    def _hold(self, key: str, new: Holding | None) -> None:
        self._hold_many([(key, new)])

    def _hold_many(self, changes: Iterable[tuple[str, Holding | None]]) -> None:
        """Move pods' holdings. GPUs are recorded in the snapshot under the pod's gang, so a
        whole gang commits in one update; a pod leaving re-records its gang's rest on that node."""
        released: set[tuple[str, str]] = set()
        added: dict[str, list[WorkerSlot]] = {}
        for key, new in changes:
            old = self._held.get(key)
            if old == new:
                continue
            gang = self._gang_of(key)
            if old is not None:
                self.freed += 1
                usage = self._usage.setdefault(old.node, Usage())
                usage.cpu -= old.cpu
                usage.memory -= old.memory
                usage.pods -= old.pod
                del self._held[key]
                self._members.get((gang, old.node), set()).discard(key)
                if old.gpus:
                    released.add((gang, old.node))
            if new is not None:
                usage = self._usage.setdefault(new.node, Usage())
                usage.cpu += new.cpu
                usage.memory += new.memory
                usage.pods += new.pod
                self._held[key] = new
                self._members.setdefault((gang, new.node), set()).add(key)
                if new.gpus and (gang, new.node) not in released:
                    added.setdefault(gang, []).append(WorkerSlot(0, new.node, new.gpus))
        if self._state is None:
            return
        state = self._state
        for gang, node in released:
            if node not in state.positions:
                continue
            state = state.without_placement(Placement(gang, (WorkerSlot(0, node, ()),)))
            rest = [self._held[k].gpus for k in self._members.get((gang, node), ()) if self._held[k].gpus]
            if rest:
                added.setdefault(gang, []).extend(WorkerSlot(0, node, g) for g in rest)
        for gang, slots in added.items():
            state = self._commit(state, gang, [s for s in slots if s.node in state.positions])
        self._state = state

    def _gang_of(self, key: str) -> str:
        pod = self.pods.get(key)
        return pod.gang_key if pod is not None else key

    @staticmethod
    def _commit(state: ClusterState, gang: str, slots: list[WorkerSlot]) -> ClusterState:
        if not slots:
            return state
        try:
            return state.with_placement(Placement(gang, tuple(slots)))
        except (ValueError, IndexError):
            # ids outside the node's topology or given twice: commit the pods one by one, skipping those
            for slot in slots:
                try:
                    state = state.with_placement(Placement(gang, (slot,)))
                except (ValueError, IndexError):
                    continue
            return state

    # -- reads ----------------------------------------------------------------------------------------
    def gang_queues(self, pods: Iterable[PodInfo]) -> dict[str, str]:
        """Gang -> the team queue it counts in (``queue_named``): DEFAULT_QUEUE where it names
        none, or one its namespace may not use (never counted there)."""
        named = self.queue_named(pods)
        return {gang: queue if queue and self.refusal(gang, queue) is None else DEFAULT_QUEUE
                for gang, queue in named.items()}  # fmt: skip

    def refusal(self, gang: str, queue: str | None) -> str | None:
        """Why ``gang`` (namespace/name) may not use ``queue``; None: it may."""
        kept = next((q for q in self.queues if q.name == queue), None)
        namespace = gang.partition("/")[0]
        if kept is None or kept.admits(namespace):
            return None
        return (f"queue {queue} is for namespace(s) {', '.join(kept.namespaces)}, not {namespace}: submit to "
                f"another queue, or an administrator adds {namespace} to it (`ringleader queue create {queue} "
                f"--namespaces ...,{namespace} --overwrite`)")  # fmt: skip

    def queue_named(self, pods: Iterable[PodInfo]) -> dict[str, str | None]:
        """Gang -> the team queue it names: the one its PodGroup's spec names; for a gang submit
        did not make, the one its members name (a member naming none, as mpi-operator's launcher,
        never decides it, whichever pod was seen first). None: the default queue."""
        named: dict[str, str | None] = {}
        for pod in pods:
            spec = self.specs.get(pod.gang_key)
            if named.get(pod.gang_key) is None:
                named[pod.gang_key] = spec.queue if spec is not None else pod.queue
        return named

    def team_queues(self, now: float) -> Teams:
        """The team queues with the GPUs each running gang holds (a gang being deleted has given
        its quota back) and fair-share factors from ``queue_usage``."""
        holding = [p for p in self.pods.values()  # bound, or its Bindings on their way
                   if (p.holds_resources or p.key in self.assumed) and p.ours and not p.deleting]  # fmt: skip
        return Teams.of(self.queues, self.state, self.gang_queues(holding), self.queue_usage(now))

    def queue_usage(self, now: float) -> dict[str, float]:
        """Queue -> its decayed GPU-seconds at ``now`` (``usage_now``)."""
        return {queue: kept.gpu_s for queue, kept in self.usage_now(now).items()}

    def usage_now(self, now: float) -> dict[str, KeptUsage]:
        """Each queue's usage as of ``now``: as kept in the cluster (names.QUEUE_USAGE_CONFIG),
        with what its pods ran since: those still holding GPUs, and those that stopped and the
        kept usage does not cover yet (``teams.usage_at``). A queue deleted since is left out, as
        the embedded engine forgets it: made again, it starts with no usage."""
        known = {q.name for q in self.queues} | {DEFAULT_QUEUE}
        kept = {queue: usage for queue, usage in self.kept_usage.items() if queue in known}
        return usage_at(kept, [*self.ended, *self.gpu_spans(now)], now)

    def gpu_spans(self, now: float) -> list[GpuSpan]:
        """The GPUs each pod of ours holds, from its start (kubelet's startTime) to ``now``."""
        running = [p for p in self.pods.values() if _uses_gpus(p)]
        queues = self.gang_queues(running)
        return [GpuSpan(queues[p.gang_key], p.gpus, start, max(now, start))
                for p in running if (start := wall_time(p.started)) is not None]  # fmt: skip

    @property
    def state(self) -> ClusterState:
        """The placement snapshot: every node's topology and the GPUs pods hold or are assumed to."""
        if self._state is None:
            # Built in one pass (every node's allocations at once, then the group index), then
            # maintained by with/without_placement as pods come and go.
            allocated: dict[str, dict[int, str]] = {}
            for key, holding in self._held.items():
                info = self.nodes.get(holding.node)
                if info is None:
                    continue
                taken = allocated.setdefault(holding.node, {})
                for gpu in holding.gpus:  # ids outside the topology or given twice: not counted twice
                    if 0 <= gpu < info.spec.topology.n_gpus and gpu not in taken:
                        taken[gpu] = self._gang_of(key)
            tree = self._network_tree()
            specs = [info.spec for info in self.nodes.values()]
            specs = placed(specs, tree) if tree is not None else specs
            state = ClusterState(tuple(
                NodeState(spec, tuple(sorted(allocated.get(spec.name, {}).items()))) for spec in specs
            ))  # fmt: skip
            _ = state.index
            self._state = state
        return self._state

    def usage(self, node: str) -> Usage:
        return self._usage.get(node) or Usage()

    def room(self, node: NodeInfo, cpu: Decimal, memory: Decimal, pods: int = 1) -> str | None:
        """Why ``node`` lacks room for ``pods`` more pods of ``cpu``/``memory`` each (None if not)."""
        used = self.usage(node.name)
        if used.pods + pods > node.pods:
            return "too many pods"
        if cpu and used.cpu + cpu * pods > node.cpu:
            return "insufficient cpu"
        if memory and used.memory + memory * pods > node.memory:
            return "insufficient memory"
        return None

    def misfits(self, pod: PodInfo) -> Mapping[int, str]:
        """Node position -> why it can never host ``pod`` (cordon, taints, selector), memoised
        per kind of pod until a node changes: one scan of the nodes, not one per gang."""
        signature = (
            repr(sorted(map(repr, pod.tolerations))), tuple(sorted(pod.node_selector.items())), pod.gpus > 0,
            repr(pod.affinity),
        )  # fmt: skip
        found = self._misfits.get(signature)
        if found is None:
            positions = self.state.positions
            found = {}
            for info in self.nodes.values():
                why = static_misfit(info, pod)
                if why is not None:
                    found[positions[info.name]] = why
            self._misfits[signature] = found
        return found

    def gangs(self) -> list[Gang]:
        """Gangs with pending members, highest pod priority first, then oldest first; each with
        its spec and queue (``gang_queues``)."""
        by_key: dict[str, Gang] = {}
        members = [pod for pod in self.pods.values() if pod.ours and not pod.terminal]
        for pod in members:
            gang = by_key.get(pod.gang_key)
            if gang is None:
                gang = by_key[pod.gang_key] = Gang(pod.gang_key, self.groups.get(pod.gang_key, 1))
                gang.group_missing = pod.grouped and pod.gang_key not in self.groups
                gang.spec = self.specs.get(pod.gang_key)
            if pod.pending and pod.key not in self.assumed:
                gang.pending.append(pod)
            elif pod.deleting and pod.node is not None:
                gang.stopping += 1
            elif pod.key in self.assumed or (pod.node is not None and not pod.deleting):
                gang.placed += 1
                held = self.assumed.get(pod.key)
                gang.nodes.append(held.node if held is not None else str(pod.node))
        found = [g for g in by_key.values() if g.pending]
        waiting = {g.key for g in found}
        queues = self.queue_named(p for p in members if p.gang_key in waiting)
        for gang in found:
            gang.queue = queues[gang.key]
            gang.refused = self.refusal(gang.key, gang.queue)
            gang.held = gang.key in self.held
        found.sort(key=lambda g: (-max(p.priority for p in g.pending), min(p.created for p in g.pending)))
        return found
