"""JSON forms of job specs and nodes, as stored in SQLite, on Kubernetes objects and printed by -o
json, and a stored decision's placement and reservation read back (a decision gives its own JSON
form, ``Decision.as_dict``)."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from ringleader.jobs.spec import JobSpec
from ringleader.scheduler import Placement, Reservation, WorkerSlot
from ringleader.topology import Link, NodeSpec, NodeTopology, SshAddress


def spec_to_json(spec: JobSpec) -> str:
    """The whole job spec as one compact JSON text (what an engine keeps where a record is text)."""
    return json.dumps(spec.to_dict(), separators=(",", ":"), sort_keys=True)


def spec_from_json(text: str) -> JobSpec | None:
    """The job spec ``spec_to_json`` wrote; None where the text is not one (a hand-edited object's)."""
    try:
        data = json.loads(text)
        return JobSpec.from_dict(data) if isinstance(data, dict) else None
    except (ValueError, TypeError, KeyError):
        return None


def topology_to_dict(topo: NodeTopology) -> dict[str, Any]:
    return {
        "links": [[str(link) for link in row] for row in topo.links],
        "gpu_model": topo.gpu_model,
        "numa": list(topo.numa),
        "cpu_affinity": list(topo.cpu_affinity),
        "measured_gbs": [list(r) for r in topo.measured_gbs] if topo.measured_gbs else None,
        "nics": list(topo.nics),
        "nic_links": [[str(link) for link in row] for row in topo.nic_links],
        "numa_affinity": [list(nodes) for nodes in topo.numa_affinity],
        "gpu_numa_id": list(topo.gpu_numa_id),
        "source": topo.source,
        "notes": list(topo.notes),
    }


def topology_from_dict(t: dict[str, Any]) -> NodeTopology:
    measured = t.get("measured_gbs")
    return NodeTopology(
        links=tuple(tuple(Link.parse(c) for c in row) for row in t["links"]),
        gpu_model=t.get("gpu_model", ""),
        numa=tuple(t.get("numa") or ()),
        cpu_affinity=tuple(t.get("cpu_affinity") or ()),
        measured_gbs=tuple(tuple(float(v) for v in r) for r in measured) if measured else None,
        nics=tuple(t.get("nics") or ()),
        nic_links=tuple(tuple(Link.parse(c) for c in row) for row in t.get("nic_links") or ()),
        numa_affinity=tuple(tuple(int(v) for v in nodes) for nodes in t.get("numa_affinity") or ()),
        gpu_numa_id=tuple(t.get("gpu_numa_id") or ()),
        source=t.get("source", ""),
        notes=tuple(str(n) for n in t.get("notes") or ()),
    )


def labels_from_dict(labels: dict[str, Any] | None) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((str(k), str(v)) for k, v in (labels or {}).items()))


def address_to_dict(address: SshAddress | None) -> dict[str, Any] | None:
    return dataclasses.asdict(address) if address else None


def address_from_dict(data: dict[str, Any] | None) -> SshAddress | None:
    return SshAddress(**data) if data else None


def node_to_dict(spec: NodeSpec) -> dict[str, Any]:
    return {
        "name": spec.name,
        "network_gbps": spec.network_gbps,
        "labels": dict(spec.labels),
        "emulated": spec.emulated,
        "address": address_to_dict(spec.address),
        "nvlink_domain": spec.nvlink_domain,
        "topology": topology_to_dict(spec.topology),
    }


def node_from_dict(data: dict[str, Any]) -> NodeSpec:
    topo = topology_from_dict(data["topology"])
    labels = labels_from_dict(data.get("labels"))
    address = address_from_dict(data.get("address"))
    return NodeSpec(data["name"], topo, float(data["network_gbps"]), labels, bool(data.get("emulated")), address,
                    str(data.get("nvlink_domain") or ""))


def placement_from_dict(job: str, data: dict[str, Any]) -> Placement:
    slots = tuple(WorkerSlot(int(w["index"]), str(w["node"]), tuple(w["gpus"])) for w in data["workers"])
    return Placement(job, slots)


def expected_end(plan: dict[str, Any] | None, started_at: float, time_limit_s: float | None,
                 stop_s: float = 0.0) -> float | None:  # fmt: skip
    """When a running job is expected to have freed its GPUs: at the end of the run its start
    decision (``plan``, ``Decision.as_dict``) predicted, or at its time limit plus ``stop_s``
    (the stop's grace), whichever comes first; None when neither is known."""
    ends = [started_at + time_limit_s + stop_s] if time_limit_s is not None else []
    run = (plan or {}).get("predicted_run_s")
    if run is not None:
        ends.append(started_at + float(run))
    return min(ends) if ends else None


def reservation_from_dict(job: str, data: dict[str, Any] | None, now: float) -> Reservation | None:
    """The stored reservation with ``starts_in_s`` counted from ``now`` (read time, not pass time)."""
    if not data:
        return None
    start = data.get("start_s")
    start_s = None if start is None else float(start)
    end_s = None if data.get("end_s") is None else float(data["end_s"])
    return Reservation(placement_from_dict(job, data), start_s, None if start_s is None else start_s - now, end_s)
