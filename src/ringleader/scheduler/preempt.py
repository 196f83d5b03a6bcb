"""Gang preemption: the fewest, lowest-priority whole gangs whose GPUs give a waiting gang a good
placement.

A gang that cannot start on a placement as fast as its best may take GPUs from running gangs of
lower priority that may be preempted. Victims are whole gangs (a gang without one of its workers
is no gang), never a gang of its priority or above, never a non-preemptible one. The placement is
"good" when the model predicts it as fast as the gang's best (``types.as_good``): one NVLink
island or node for a gang that fits one, one rack for a gang that fits one. It is computed on the
cluster as it will be once the victims are gone, with the same ``place`` the queue uses, so the
gang is never preempted for a placement it would not take.

The search looks where freeing GPUs can help: for a gang that fits one node, each node holding a
possible victim; for a bigger gang, each switch of the network tree (lowest level first) and the
whole cluster. In each, possible victims are added lowest priority first (the most GPUs there
first among equals) until the gang fits well, then any victim it fits without is dropped again.
The best over all places has the fewest victims, then the lowest highest priority among them,
then the fewest GPUs taken back.

Pure: the caller says which running gangs may be preempted and at what priority.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from ringleader.scheduler.framework import place
from ringleader.scheduler.types import ClusterState, JobRequest, Placement, Preemption, RunningGang, as_good

# Places looked at per preemption (each costs a few ``place`` calls on a cluster without victims).
MAX_PLACES = 64


Estimate = Callable[[ClusterState, Placement], float]  # images/s of the gang on a placement


def plan_preemption(
    state: ClusterState,
    job: JobRequest,
    running: Mapping[str, RunningGang],
    ideal: float,
    estimate: Estimate,
    policy: str | None = None,
    spared: frozenset[tuple[str, int]] = frozenset(),
    prefer: Callable[[RunningGang], tuple[float, ...]] | None = None,
) -> Preemption | None:
    """The preemption that gives ``job`` a placement as fast as ``ideal`` images/s, or None.

    ``running``: the gangs that may be stopped for it, by name (those not named are never
    victims: the caller picks them, by priority); ``spared``: (node, GPU) pairs no victim may
    hold (reserved for gangs ahead); ``prefer``: which victims to take first in a place (the
    smallest key; default: the lowest priority)."""
    held = gpus_held(state)
    possible = [g for g in running.values() if g.preemptible and g.name in held
                and not spared & {(n, gpu) for n, gpus in held[g.name] for gpu in gpus}]  # fmt: skip
    if not possible or job.gpus_per_worker == 0:
        return None
    best: tuple[tuple[int, int, int, tuple[str, ...]], Preemption] | None = None
    for nodes in _places(state, job, possible, held)[:MAX_PLACES]:
        found = _in_place(state, job, possible, held, nodes, ideal, estimate, policy, prefer)
        if found is None:
            continue
        rank = (len(found.victims), max(v.priority for v in found.victims),
                sum(len(g) for v in found.victims for _, g in held[v.name]), found.names)  # fmt: skip
        if best is None or rank < best[0]:
            best = (rank, found)
    return best[1] if best else None


def gpus_held(state: ClusterState) -> dict[str, list[tuple[str, tuple[int, ...]]]]:
    """Each owner's GPUs, per node in cluster order."""
    out: dict[str, list[tuple[str, tuple[int, ...]]]] = {}
    for ns in state.nodes:
        by_owner: dict[str, list[int]] = {}
        for gpu, owner in ns.allocated:
            by_owner.setdefault(owner, []).append(gpu)
        for owner, gpus in by_owner.items():
            out.setdefault(owner, []).append((ns.name, tuple(gpus)))
    return out


def _places(state: ClusterState, job: JobRequest, possible: Sequence[RunningGang],
            held: Mapping[str, list[tuple[str, tuple[int, ...]]]]) -> list[frozenset[str]]:  # fmt: skip
    """Sets of nodes to free GPUs in: each node with a possible victim for a gang that fits one
    node; else each switch holding one, lowest level first, then the whole cluster."""
    victim_nodes = {node for g in possible for node, _ in held[g.name]}
    biggest = max(ns.spec.topology.n_gpus for ns in state.nodes)
    if job.total_gpus <= biggest:
        # nodes where the fewest possible victims hold GPUs first, then the most free GPUs
        victims_on: dict[str, int] = {}
        for g in possible:
            for node, _ in held[g.name]:
                victims_on[node] = victims_on.get(node, 0) + 1
        nodes = [ns for ns in state.nodes if ns.name in victim_nodes and ns.spec.topology.n_gpus >= job.total_gpus]
        nodes.sort(key=lambda ns: (victims_on[ns.name], -ns.n_free))
        return [frozenset({ns.name}) for ns in nodes]
    places: list[frozenset[str]] = []
    by_switch: dict[tuple[int, str], set[str]] = {}
    for ns in state.nodes:
        for level, switch in enumerate(ns.spec.switches):
            by_switch.setdefault((level, switch), set()).add(ns.name)
    for (_, _switch), names in sorted(by_switch.items(), key=lambda kv: kv[0][0]):
        if names & victim_nodes:
            places.append(frozenset(names))
    places.append(frozenset(ns.name for ns in state.nodes))
    return places


def _in_place(
    state: ClusterState,
    job: JobRequest,
    possible: Sequence[RunningGang],
    held: Mapping[str, list[tuple[str, tuple[int, ...]]]],
    nodes: frozenset[str],
    ideal: float,
    estimate: Estimate,
    policy: str | None,
    prefer: Callable[[RunningGang], tuple[float, ...]] | None = None,
) -> Preemption | None:
    """Victims with GPUs in ``nodes``, lowest priority (or ``prefer``'s smallest key) first,
    until the gang fits well; then those it fits without dropped again."""

    def gpus_here(g: RunningGang) -> int:
        return sum(len(gpus) for node, gpus in held[g.name] if node in nodes)

    def first(g: RunningGang) -> tuple[float, ...]:
        return prefer(g) if prefer is not None else (g.priority,)

    order = sorted((g for g in possible if gpus_here(g)), key=lambda g: (*first(g), -gpus_here(g), g.name))
    chosen: list[RunningGang] = []
    fit: tuple[Placement, float] | None = None
    for victim in order:
        chosen.append(victim)
        fit = _fits_well(state, job, chosen, ideal, estimate, policy)
        if fit is not None:
            break
    if fit is None:
        return None
    for victim in reversed(chosen[:-1]):  # the last one was needed: without it, it did not fit
        fewer = [g for g in chosen if g is not victim]
        smaller = _fits_well(state, job, fewer, ideal, estimate, policy)
        if smaller is not None:
            chosen, fit = fewer, smaller
    placement, rate = fit
    return Preemption(tuple(chosen), placement, rate, {g.name: tuple(held[g.name]) for g in chosen})


def _fits_well(state: ClusterState, job: JobRequest, victims: Sequence[RunningGang], ideal: float,
               estimate: Estimate, policy: str | None) -> tuple[Placement, float] | None:  # fmt: skip
    freed = state
    for victim in victims:
        freed = freed.without_job(victim.name)
    placement = place(freed, job, policy).placement
    if placement is None:
        return None
    rate = estimate(freed, placement)
    return (placement, rate) if as_good(rate, ideal) else None
