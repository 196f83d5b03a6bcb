"""The trace CSV's schema: one row's columns, their types and ranges.

CSV cells are text, so the row is checked in pydantic's lax mode (``"4"`` is the integer 4;
``"1.5"``, ``"nan"``, ``"inf"`` and a 400-digit number are refused). The bounds are far beyond a
real trace but keep every value finite and small enough for the simulator's arithmetic.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

MAX_ARRIVAL_S = 1e9  # about 31 years
MAX_WORKERS = 1_000_000
MAX_GPUS_PER_WORKER = 1024
MAX_BATCH = 1 << 20
MAX_ITERATIONS = 10**9
PRIORITY_RANGE = 2**31  # what `submit --priority` takes


class TraceRow(BaseModel):
    """One line of a trace, by column name (``name`` is checked as a job name by trace.py)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    arrival_s: Annotated[float, Field(ge=0, le=MAX_ARRIVAL_S, allow_inf_nan=False)]
    workers: Annotated[int, Field(ge=1, le=MAX_WORKERS)]
    gpus: Annotated[int, Field(ge=1, le=MAX_GPUS_PER_WORKER)]
    model: Annotated[str, StringConstraints(min_length=1, max_length=64)]
    batch_size: Annotated[int, Field(ge=1, le=MAX_BATCH)]
    iterations: Annotated[int, Field(ge=1, le=MAX_ITERATIONS)]
    priority: Annotated[int, Field(ge=-PRIORITY_RANGE, lt=PRIORITY_RANGE)] = 0
    time_limit_s: Annotated[float, Field(ge=1, le=MAX_ARRIVAL_S, allow_inf_nan=False)] | None = None
    queue: str | None = None  # checked as a queue name by trace.py
    precision: str | None = None  # checked as the model's precision by trace.py
    accumulation_steps: Annotated[int, Field(ge=1, le=MAX_BATCH)] = 1
