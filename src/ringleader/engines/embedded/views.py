"""The embedded engine's rows as the shared read models (``ringleader.jobs.views``)."""

from __future__ import annotations

import json
import sqlite3

from ringleader.engines.embedded import store
from ringleader.jobs.spec import JobSpec
from ringleader.jobs.states import JobStatus
from ringleader.jobs.views import EventView, InstanceView, JobView, reservation_line

# Wall-clock times the rows may hold: from the epoch to the year 5138. Beyond, a row was damaged
# (every reader would fail to show it: no clock reads 1e308).
LATEST_TIME = 1e11


def when(value: object) -> float | None:
    """A recorded time, or None; ValueError (a damaged state, one line) for what no clock gave."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= LATEST_TIME:
        raise ValueError(f"a recorded time of {value!r}")
    return float(value)


def job_view(
    conn: sqlite3.Connection, row: sqlite3.Row, with_events: bool = True, with_instances: bool = True
) -> JobView:
    rows = store.instances(conn, row["name"]) if with_instances else []
    instances = tuple(
        InstanceView(
            name=i["name"], role=i["role"], status=i["status"], exit_code=i["exit_code"], node=i["node"],
            gpus=tuple(json.loads(i["gpus"])), gpu_requested=i["gpu_requested"], is_chief=bool(i["is_chief"]),
            pid=i["pid"], started_at=when(i["started_at"]), ended_at=when(i["ended_at"]),
        )
        for i in rows
    )
    recorded = store.events(conn, row["name"]) if with_events else []
    events = tuple(EventView(when(e["at"]) or 0.0, e["kind"], e["message"]) for e in recorded)
    decision = json.loads(row["decision"]) if row["decision"] else None
    reason, code = row["reason"], None
    if row["status"] == JobStatus.PENDING.value and decision:
        code = decision.get("reason_code")
        if decision.get("reservation"):
            reason = "; ".join(filter(None, [reservation_line(row["name"], decision["reservation"]), reason]))
    spec = JobSpec.from_dict(json.loads(row["spec"]))
    return JobView(
        name=row["name"], status=JobStatus(row["status"]), priority=row["priority"], trainer=spec.trainer,
        created_at=when(row["created_at"]) or 0.0, started_at=when(row["started_at"]), ended_at=when(row["ended_at"]),
        spec=spec, reason=reason, placement=decision,
        instances=instances, events=events, has_instances=with_instances, restarts=int(row["restarts"] or 0),
        reason_code=code,
    )  # fmt: skip
