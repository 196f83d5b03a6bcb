"""The cluster as Slurm sees it now, in the placement engine's terms.

GPUs in use come from `scontrol -d show node` (GresUsed with indices, whoever submitted the
job) and are attributed to jobs through `scontrol -d show job`; GPUs that ringleader's own
submitted-but-not-started jobs are waiting for count as taken too, so two gangs never wait for
the same GPU. Topologies come from ringleader's cluster file when one is given, else from
gres.conf ``Links=``, else every pair is taken as the slowest PCIe link. The network tree comes
from the cluster file's ``network:`` when it has one, else from Slurm's own topology.yaml or
topology.conf beside slurm.conf (topology.yaml first, as Slurm 25.05+ reads it).
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from ringleader import settings
from ringleader.engines.slurm import slurmcli
from ringleader.engines.slurm.gres import NO_NVLINK, topology_from_links, type_index
from ringleader.errors import UsageError
from ringleader.inputs import load_yaml, read_bounded
from ringleader.jobs.views import DRAINED, NOT_READY, READY, NodeHealth
from ringleader.model.tables import known_gpu_types, normalize_gpu_type
from ringleader.scheduler import ClusterState, NodeState
from ringleader.scheduler.types import UNUSABLE as MASKED
from ringleader.topology import NetworkTree, NodeSpec, NodeTopology, load_cluster_file
from ringleader.topology.links import SELF
from ringleader.topology.network_formats import load_network_text, parse_slurm_topology_yaml

# Node states whose GPUs cannot be handed out (a base state, or a flag after '+').
UNUSABLE = {"DOWN", "DRAIN", "DRAINED", "DRAINING", "FAIL", "FAILING", "FUTURE", "NOT_RESPONDING",
            "POWERED_DOWN", "POWERING_DOWN", "REBOOT_REQUESTED", "MAINTENANCE", "UNKNOWN", "INVAL"}  # fmt: skip
DOWN_STATES = {"DOWN", "FAIL", "NOT_RESPONDING", "POWERED_DOWN", "UNKNOWN", "INVAL"}
RUNNING_STATES = {"RUNNING", "COMPLETING", "SUSPENDED", "CONFIGURING", "STOPPED", "SIGNALING", "STAGE_OUT"}


@dataclass(frozen=True)
class SlurmNode:
    name: str
    address: str
    state: str
    partitions: tuple[str, ...]
    gpus: int
    typed: bool  # every GPU has its own ``g<index>`` type (exact ids can be requested)
    used: tuple[int, ...]
    reason: str = ""  # Slurm's Reason= for a down or drained node ("maintenance [root@2026-11-24T16:20:05]")
    gpu_model: str = ""  # from its features (`Features=a100`) or an untyped GRES type (`gpu:h100:8`)

    @property
    def flags(self) -> set[str]:
        """The base state and its flags ("IDLE+DRAIN" -> IDLE, DRAIN)."""
        return {s for s in re.split(r"[+*~#!%$@^-]", self.state.upper()) if s}

    @property
    def usable(self) -> bool:
        return not self.flags & UNUSABLE

    def health(self) -> NodeHealth:
        """Ready while Slurm hands out its GPUs; Drained for DRAIN (Slurm's Reason=), NotReady
        for any other unusable state. Slurm keeps no per-GPU health: unhealthy GPUs are n/a."""
        if self.usable and "*" not in self.state:  # "IDLE*": the node does not answer slurmctld
            return NodeHealth(self.name, READY, checked="Slurm keeps no GPU health")
        drained = self.flags & {"DRAIN", "DRAINED", "DRAINING"} and not self.flags & DOWN_STATES
        status = DRAINED if drained else NOT_READY
        why = f"{self.state}: {self.reason}" if self.reason else self.state
        why += " (not responding)" if "*" in self.state else ""
        return NodeHealth(self.name, status, why, checked="Slurm keeps no GPU health")


def drained(nodes: Iterable[SlurmNode]) -> dict[str, str]:
    """Node -> why, for every node drained in Slurm (`scontrol update NodeName=X State=DRAIN
    Reason=...`, by ringleader or anyone), with Slurm's Reason=: cordoned, as every engine's
    cordoned nodes are, so a job that would fit there says so rather than "0 free GPU(s)"."""
    return {n.name: f"drained in Slurm{f': {n.reason}' if n.reason else ''}" for n in nodes
            if n.health().status == DRAINED}  # fmt: skip


def read_nodes() -> list[SlurmNode]:
    return [node_from_record(rec) for rec in slurmcli.show("node")]


def node_from_record(rec: Mapping[str, str]) -> SlurmNode:
    """A node from its `scontrol -o -d show node` record."""
    items = [i for i in slurmcli.parse_gres(rec.get("Gres", "")) if i.name == "gpu"]
    used_items = [i for i in slurmcli.parse_gres(rec.get("GresUsed", "")) if i.name == "gpu"]
    typed = bool(items) and all(i.count == 1 and type_index(i.type) is not None for i in items)
    features = rec.get("AvailableFeatures", rec.get("Features", "")).split(",")
    return SlurmNode(
        name=rec["NodeName"], address=rec.get("NodeAddr", rec["NodeName"]), state=rec.get("State", "UNKNOWN"),
        partitions=tuple(p for p in rec.get("Partitions", "").split(",") if p), gpus=sum(i.count for i in items),
        typed=typed, used=tuple(sorted({g for i in used_items for g in i.indices})),
        reason=rec.get("Reason", "").strip(), gpu_model=named_gpu_model([*features, *(i.type or "" for i in items)]),
    )  # fmt: skip


def gpu_feature(gpu_model: str) -> str:
    """The node feature that names a GPU model for Slurm (`Features=a100`, which `sbatch
    --constraint=a100` and ``node_from_record`` read), "" for a model ringleader does not know."""
    return named_gpu_model([gpu_model]).lower()


def named_gpu_model(words: Iterable[str]) -> str:
    """The GPU model that node features or GRES types name ("a100" -> "A100"), the most specific
    where a family and its variant are both there ("a100,a100-80gb" -> "A100-80GB"); "" when none
    does, or when they name two models (no guess)."""
    known = set(known_gpu_types())
    named = {normalize_gpu_type(w) for w in words if w and w != "(null)"} & known
    specific = {m for m in named if not any(other.startswith(f"{m}-") for other in named)}
    return specific.pop() if len(specific) == 1 else ""


def job_gpus(records: Iterable[Mapping[str, str]]) -> dict[str, dict[str, list[int]]]:
    """Slurm job id -> node -> GPU indices held, for running jobs (from `show job -d`)."""
    out: dict[str, dict[str, list[int]]] = {}
    for rec in records:
        if rec.get("JobState") not in RUNNING_STATES:
            continue
        ident = rec.get("HetJobId") or rec["JobId"]
        for nodelist, gpus in slurmcli.job_node_gres(rec["_line"]):
            for node in slurmcli.hostnames(nodelist):
                out.setdefault(ident, {}).setdefault(node, []).extend(gpus)
    return out


# -- topologies -----------------------------------------------------------------------------------


def gres_conf_path() -> Path:
    return slurm_conf_dir() / "gres.conf"


def slurm_conf_dir() -> Path:
    return Path(os.environ.get("SLURM_CONF", "/etc/slurm/slurm.conf")).parent


def slurm_network(conf_dir: Path) -> NetworkTree | None:
    """Slurm's network tree from topology.yaml or topology.conf in ``conf_dir`` (None without
    either, or when the default topology is flat)."""
    yaml_path, conf_path = conf_dir / "topology.yaml", conf_dir / "topology.conf"
    if yaml_path.exists():
        doc = load_yaml(read_bounded(yaml_path, "Slurm topology file"), str(yaml_path))[0]
        return parse_slurm_topology_yaml(doc, str(yaml_path))
    if conf_path.exists():
        return load_network_text(read_bounded(conf_path, "Slurm topology file"), str(conf_path))
    return None


def links_from_gres_conf(path: Path) -> dict[str, list[tuple[int, list[int]]]]:
    """node -> [(gpu index, Links= row)] from gres.conf lines with ``NodeName=`` and ``Links=``."""
    try:
        text = path.read_text()
    except OSError:
        return {}
    out: dict[str, list[tuple[int, list[int]]]] = {}
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        fields = dict(w.split("=", 1) for w in line.split() if "=" in w)
        if fields.get("Name") != "gpu" or "Links" not in fields or "NodeName" not in fields:
            continue
        index = type_index(fields.get("Type"))
        if index is None:
            match = re.search(r"(\d+)$", fields.get("File", ""))
            if match is None:
                continue
            index = int(match.group(1))
        try:
            row = [int(v) for v in fields["Links"].split(",")]
        except ValueError:
            continue
        for node in slurmcli.hostnames(fields["NodeName"]):
            out.setdefault(node, []).append((index, row))
    return out


def declared_nodes(home: Path) -> dict[str, NodeSpec]:
    """ringleader's cluster file for this Slurm cluster: RINGLEADER_SLURM_CLUSTER, else
    ``<home>/slurm/cluster.yaml`` when present."""
    chosen = settings.text("RINGLEADER_SLURM_CLUSTER")
    path = chosen or str(home / "slurm" / "cluster.yaml")
    if not chosen and not Path(path).exists():
        return {}
    return {spec.name: spec for spec in load_cluster_file(path)}


def unknown_topology(n: int) -> NodeTopology:
    rows = tuple(tuple(SELF if i == j else NO_NVLINK for j in range(n)) for i in range(n))
    return NodeTopology(links=rows, source="unknown (no Links= and no cluster file)")


def node_spec(node: SlurmNode, declared: Mapping[str, NodeSpec],
              links: Mapping[str, list[tuple[int, list[int]]]]) -> NodeSpec:  # fmt: skip
    spec = declared.get(node.name)
    if spec is not None:
        if spec.topology.n_gpus != node.gpus:
            raise UsageError(
                f"the cluster file gives node {node.name} {spec.topology.n_gpus} GPUs but Slurm has {node.gpus}",
                "make the cluster file match slurm.conf's Gres= for that node",
            )
        return NodeSpec(spec.name, spec.topology, spec.network_gbps, spec.labels, emulated=False, network=spec.network)
    rows = dict(links.get(node.name, []))
    if node.gpus and sorted(rows) == list(range(node.gpus)):
        topo = topology_from_links([rows[i] for i in range(node.gpus)], node.gpu_model)
    else:
        topo = replace(unknown_topology(node.gpus), gpu_model=node.gpu_model)
    return NodeSpec(node.name, topo)


def cluster_state(
    nodes: Iterable[SlurmNode],
    specs: Mapping[str, NodeSpec],
    holders: Mapping[str, Mapping[str, list[int]]],
    reserved: Mapping[str, Mapping[str, list[int]]],
    cordoned: Collection[str] = (),
) -> ClusterState:
    """``holders``: owner -> node -> GPUs Slurm has handed out; ``reserved``: ringleader job ->
    node -> GPUs it waits for in Slurm's queue. Used GPUs with no known job are 'slurm'. The
    other GPUs of a node Slurm does not hand out are the node's state's ("node down"), or, on a
    node ringleader cordoned (drained in Slurm), unusable as every engine's cordoned GPUs are."""
    out = []
    for node in nodes:
        owner: dict[int, str] = {}
        for table in (reserved, holders):
            for job, per_node in table.items():
                for gpu in per_node.get(node.name, []):
                    owner.setdefault(gpu, job)
        for gpu in node.used:
            owner.setdefault(gpu, "slurm")
        if not node.usable:
            for gpu in range(node.gpus):
                owner.setdefault(gpu, MASKED if node.name in cordoned else f"node {node.state.lower()}")
        allocated = tuple(sorted((g, j) for g, j in owner.items() if g < node.gpus))
        out.append(NodeState(specs[node.name], allocated))
    return ClusterState(tuple(out))
