"""The queues file's schema (``simulate --queues``): one entry per team queue."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from ringleader.scheduler.teams import MAX_GPUS


class QueueEntry(BaseModel):
    """One queue of a queues file: ``gpus`` is N (every GPU type) or {type: N}."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    gpus: Annotated[int, Field(ge=0, le=MAX_GPUS)] | dict[str, Annotated[int, Field(ge=0, le=MAX_GPUS)]]
    weight: Annotated[float, Field(gt=0, le=1e6, allow_inf_nan=False)] = 1.0
    cohort: str | None = None


class QueuesFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    queues: Annotated[list[QueueEntry], Field(min_length=1, max_length=10_000)]
