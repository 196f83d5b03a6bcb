"""The queues file ``simulate --queues`` reads: one entry per team queue, each checked as
`queue create` checks it (jobs/queues.py)."""

from __future__ import annotations

from functools import partial
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from ringleader.errors import UsageError
from ringleader.inputs import line_at, load_yaml, read_bounded, validate
from ringleader.jobs.queues import check_queue, parse_quota
from ringleader.scheduler.order import QueueOrder
from ringleader.scheduler.teams import ANY_TYPE, MAX_GPUS, TeamQueue


class QueueEntry(BaseModel):
    """One queue of a queues file: ``gpus`` is N (every GPU type) or {type: N}."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    gpus: Annotated[int, Field(ge=0, le=MAX_GPUS)] | dict[str, Annotated[int, Field(ge=0, le=MAX_GPUS)]]
    weight: Annotated[float, Field(gt=0, le=1e6, allow_inf_nan=False)] = 1.0
    cohort: str | None = None
    order: Literal["fifo", "las", "srtf"] | None = None  # how it orders its jobs (scheduler/order.py)


class QueuesFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    queues: Annotated[list[QueueEntry], Field(min_length=1, max_length=10_000)]


def load_queues(path: str) -> tuple[TeamQueue, ...]:
    """The team queues a YAML file declares (``simulate --queues``), each checked as `queue
    create` checks it; a refusal is one line naming the file, the line and the key::

        queues:
          - {name: vision, gpus: 8, cohort: lab}
          - {name: speech, gpus: {v100: 8}, weight: 2, order: srtf}
    """
    doc, lines = load_yaml(read_bounded(path, "queues file"), path)

    line_of = partial(line_at, lines)
    fix = "give `queues:` as a list of {name, gpus: N or {TYPE: N}, weight, cohort, order} (docs/queues.md)"
    parsed = validate(QueuesFile, doc, path, fix, line_of, strict=False)
    kept: list[TeamQueue] = []
    for index, entry in enumerate(parsed.queues):
        gpus = entry.gpus if isinstance(entry.gpus, dict) else {ANY_TYPE: entry.gpus}
        order = QueueOrder(entry.order) if entry.order is not None else None
        try:
            quota = parse_quota([f"{k}={n}" if k != ANY_TYPE else str(n) for k, n in gpus.items()])
            queue = check_queue(TeamQueue(entry.name, quota, entry.weight, entry.cohort, order=order), kept)
        except UsageError as exc:
            raise UsageError(f"{path} line {line_of(('queues', index))}: {exc.message}", exc.fix) from None
        if any(q.name == queue.name for q in kept):
            raise UsageError(f"{path}: queue {queue.name!r} declared twice", "give every queue its own name")
        kept.append(queue)
    return tuple(kept)
