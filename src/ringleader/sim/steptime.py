"""Step time of a job on a placement: the throughput model behind a small callable, memoised.

The simulator takes any ``StepTimeFn``; the default one calls ``ringleader.model.
predict_placement``. The model is pure, so its answer depends only on the model name, the batch
and the placement's *shape*: per node its topology, network and the GPU ids of each worker. Node
names do not matter, so a 1,000-node cluster of one machine type needs few distinct predictions.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ringleader.errors import UsageError
from ringleader.model import known_models, predict_placement
from ringleader.scheduler.types import NodeState, Placement
from ringleader.sim.trace import TraceJob


@dataclass(frozen=True)
class StepTime:
    """Seconds per training step of the whole gang and the images/s it trains at."""

    step_time_s: float
    images_per_s: float
    bound: str = ""
    # The images/s 8 in 10 runs like it were measured within, where the function knows (the
    # model's `Prediction.likely_range`); None: it states no range.
    likely: tuple[float, float] | None = None


StepTimeFn = Callable[[Mapping[str, NodeState], Placement, TraceJob], StepTime]
# On a cluster with a network tree the simulator passes, per switch the gang crosses, the gangs
# crossing it (sim/network.py), and ``nodes`` is the whole cluster; a function that prices the
# tree says so with ``tree_aware = True`` (the model's does), others are called as above.
Flows = Mapping[str, int]

ShapeKey = tuple[
    str, int, int, str, tuple[tuple[str, str, float, tuple[str, ...]], ...], tuple[tuple[int, tuple[int, ...]], ...]
]


def shape_key(nodes: Mapping[str, NodeState], placement: Placement, job: TraceJob) -> ShapeKey:
    """What a pure model's answer can depend on: model, batch, accumulation, precision, each used node's topology
    fingerprint, GPU model, network and NICs (which set the fabric and the NICs a job can use;
    nodes numbered by first use), and the workers in rank order with their node number and GPU
    ids. Node names are left out."""
    number = {name: i for i, name in enumerate(placement.nodes)}
    used = tuple(
        (spec.topology.fingerprint, spec.topology.gpu_model, spec.network_gbs, spec.topology.nics)
        for spec in (nodes[name].spec for name in placement.nodes)
    )
    slots = tuple((number[slot.node], slot.gpus) for slot in placement.slots)
    return (job.model, job.batch_size, job.accumulation, job.precision, used, slots)


class Memoised:
    """Wraps a StepTimeFn with a cache keyed by ``shape_key``; counts misses (shapes computed)."""

    def __init__(self, fn: StepTimeFn) -> None:
        self.fn = fn
        self.cache: dict[Hashable, StepTime] = {}
        self.misses = 0

    def __call__(
        self, nodes: Mapping[str, NodeState], placement: Placement, job: TraceJob, flows: Flows | None = None
    ) -> StepTime:
        key: Hashable = shape_key(nodes, placement, job)
        tree = flows is not None and getattr(self.fn, "tree_aware", False)
        if tree:  # where the gang sits and how loaded its uplinks are change the answer
            key = (key, tuple(nodes[n].spec.switches for n in placement.nodes), tuple(sorted((flows or {}).items())))
        found = self.cache.get(key)
        if found is not None:
            return found
        self.misses += 1
        if tree:
            found = self.cache[key] = self.fn(nodes, placement, job, uplink_flows=flows)  # type: ignore[call-arg]
        else:
            found = self.cache[key] = self.fn(nodes, placement, job)
        if not (found.step_time_s > 0 and found.images_per_s >= 0):
            raise ValueError(f"step-time function gave {found} for {job.name}")
        return found


def model_step_time(calibration: Any = None) -> StepTimeFn:
    """The default StepTimeFn: ``ringleader.model.predict_placement`` for each job, at its batch,
    accumulation and precision."""
    known = set(known_models())

    def step(
        nodes: Mapping[str, NodeState], placement: Placement, job: TraceJob, uplink_flows: Flows | None = None
    ) -> StepTime:
        if job.model not in known:
            raise UsageError(f"job {job.name}: unknown model {job.model!r}", f"use one of {', '.join(sorted(known))}")
        # With a tree the whole cluster goes in: an uplink's share counts the nodes under it.
        used = nodes if uplink_flows is not None else {name: nodes[name] for name in placement.nodes}
        pred = predict_placement(
            used, placement, model=job.model, batch_size=job.batch_size, precision=job.precision, gpu_type=None,
            calibration=calibration, uplink_flows=uplink_flows, accumulation=job.accumulation,
        )  # fmt: skip
        return StepTime(float(pred.step_time_s), float(pred.images_per_s), pred.bound, pred.likely_range)

    step.tree_aware = True  # type: ignore[attr-defined]
    return step


def check_models(jobs: Sequence[TraceJob]) -> None:
    """Fail before simulating if a job names a model the throughput model does not know."""
    known = set(known_models())
    for job in jobs:
        if job.model not in known:
            raise UsageError(f"job {job.name}: unknown model {job.model!r}", f"use one of {', '.join(sorted(known))}")


def linear_step_time(per_gpu_images_per_s: float = 100.0, network_penalty: float = 2.0) -> StepTimeFn:
    """A simple deterministic StepTimeFn for tests and examples: a micro-batch takes
    ``batch / per_gpu_images_per_s`` seconds, a step ``accumulation`` of them, and a step on
    several nodes ``network_penalty - 1`` micro-batches more (its one exchange over the network)."""

    def step(nodes: Mapping[str, NodeState], placement: Placement, job: TraceJob) -> StepTime:
        del nodes
        micro = job.batch_size / per_gpu_images_per_s
        spread = len(placement.nodes) > 1
        seconds = job.accumulation * micro + ((network_penalty - 1) * micro if spread else 0.0)
        gpus = sum(len(s.gpus) for s in placement.slots)
        images = job.batch_size * job.accumulation * gpus / seconds
        return StepTime(seconds, images, "network" if spread else "compute")

    return step
