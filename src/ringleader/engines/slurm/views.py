"""A Slurm job's state in ringleader's read models: Slurm's job state (all components) joined
with each rank's own state file (exit code, start and end), and pending reasons from both."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ringleader.engines.slurm import slurmcli
from ringleader.engines.slurm.state import RUNNING_STATES
from ringleader.jobs.spec import JobSpec
from ringleader.jobs.states import InstanceStatus, JobStatus
from ringleader.jobs.views import EventView, InstanceView, JobView
from ringleader.runtime.plan import read_state

NOT_YET = "Slurm has not scheduled it yet"
WAITING = {"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD", "SPECIAL_EXIT"}
# srun (pmix, a heterogeneous step) can stay after every task has exited, 0 or not; once every
# rank has an exit code and the last ended this long ago, the job is over, whatever Slurm still
# says, and the engine cancels the rest.
STEP_LINGER_S = 10.0


def launch_plan(root: Path, name: str) -> dict[str, Any] | None:
    try:
        return dict(json.loads((root / "run" / name / "plan.json").read_text()))
    except (OSError, ValueError):
        return None


def rank_states(plan: dict[str, Any] | None) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(plan entry, its state file or {}) per rank."""
    return [(e, read_state(Path(e["state"])) or {}) for e in (plan or {}).get("ranks", [])]


def failed_rank(plan: dict[str, Any] | None) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """(plan entry, state) of the rank that failed first: the root cause; None if none failed."""
    failed = [(st.get("ended_at") or 0.0, e, st) for e, st in rank_states(plan) if st.get("exit_code") not in (None, 0)]
    if not failed:
        return None
    _, entry, st = min(failed, key=lambda f: f[0])
    return entry, st


def first_failure(plan: dict[str, Any] | None) -> str | None:
    failed = failed_rank(plan)
    if failed is None:
        return None
    entry, st = failed
    why = st.get("error") or (f"killed by {st['signal']}" if st.get("signal") else f"exit code {st['exit_code']}")
    return f"{entry['instance']} on {entry['node']} failed ({why})"


def slurm_status(
    components: Sequence[dict[str, str]], root: Path, record: dict[str, Any]
) -> tuple[JobStatus, str | None, float | None, float | None]:
    """(status, reason, started_at, ended_at) of a submitted job."""
    plan = launch_plan(root, record["name"])
    ranks = rank_states(plan)
    if not components:  # Slurm no longer knows it (MinJobAge passed, or a controller restart)
        codes = [st.get("exit_code") for _, st in ranks]
        ended = max((st.get("ended_at") or 0.0 for _, st in ranks), default=0.0) or None
        if ranks and all(c == 0 for c in codes):
            return JobStatus.SUCCEEDED, None, record.get("started_at"), ended
        why = first_failure(plan) or f"Slurm job {record['slurm_id']} ended and its ranks left no exit codes"
        return JobStatus.FAILED, why, record.get("started_at"), ended
    states = [c.get("JobState", "UNKNOWN") for c in components]
    started = slurmcli.slurm_time(components[0].get("StartTime"))
    if any(s in WAITING for s in states):
        slurm_reason = next((c.get("Reason", "") for c in components if c.get("JobState") in WAITING), "")
        if slurm_reason in ("", "None"):
            return JobStatus.PENDING, NOT_YET, None, None
        chosen = ((record.get("plan") or {}).get("chosen") or {}).get("describe", "")
        return JobStatus.PENDING, f"Slurm: {slurm_reason}; waiting for exactly {chosen}", None, None
    if any(s in RUNNING_STATES for s in states):
        ends = [st.get("ended_at") or 0.0 for _, st in ranks if st.get("exit_code") is not None]
        if ranks and len(ends) == len(ranks) and time.time() - max(ends) > STEP_LINGER_S:
            failure = first_failure(plan)
            stayed = f"{failure}; Slurm's step stayed after every rank had ended" if failure else None
            return JobStatus.FAILED if failure else JobStatus.SUCCEEDED, stayed, started, max(ends)
        return JobStatus.RUNNING, None, started, None
    ended = max((slurmcli.slurm_time(c.get("EndTime")) or 0.0 for c in components), default=0.0) or None
    failure = first_failure(plan)
    if all(s == "COMPLETED" for s in states) and failure is None:
        return JobStatus.SUCCEEDED, None, started, ended
    bad = next((c for c in components if c.get("JobState") != "COMPLETED"), components[0])
    slurm_why = f"Slurm: {bad.get('JobState')} (exit code {bad.get('ExitCode', '?')}, reason {bad.get('Reason')})"
    if "TIMEOUT" in states:  # Slurm stopped it at its --time: what the ranks did then is a consequence
        limit = (record.get("spec") or {}).get("time_limit_s")
        which = f"its time limit of {limit:g} s" if limit else "the partition's time limit"
        return JobStatus.FAILED, f"TIMEOUT: reached {which}; {slurm_why}", started, ended
    if failure:
        return JobStatus.FAILED, f"{failure}; {slurm_why}", started, ended
    # No rank said why (they never started, or were killed): the batch step's output may.
    last = batch_output_tail(root, record)
    return JobStatus.FAILED, f"{slurm_why}; batch output: {last}" if last else slurm_why, started, ended


def batch_output_tail(root: Path, record: dict[str, Any]) -> str | None:
    """The last line the batch step (srun) wrote to Slurm's output file."""
    path = root / "logs" / record["name"] / "batch.log"
    try:
        lines = [ln.strip() for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return None
    return lines[-1][:300] if lines else None


def _instance(entry: dict[str, Any], st: dict[str, Any], job: JobStatus) -> InstanceView:
    code = st.get("exit_code")
    if code == 0:
        status = InstanceStatus.SUCCEEDED
    elif code is not None:
        status = InstanceStatus.STOPPED if st.get("signal") and job.is_terminal() else InstanceStatus.FAILED
    elif job.is_terminal():
        status = InstanceStatus.STOPPED
    elif st:
        status = InstanceStatus.RUNNING
    else:
        status = InstanceStatus.PENDING
    return InstanceView(
        name=entry["instance"], role="worker", status=status.value, exit_code=code, node=entry["node"],
        gpus=tuple(entry["gpus"]), gpu_requested=len(entry["gpus"]), is_chief=entry["rank"] == 0,
        pid=st.get("pid"), started_at=st.get("started_at"), ended_at=st.get("ended_at"),
    )  # fmt: skip


def job_view(record: dict[str, Any], root: Path, with_instances: bool = True) -> JobView:
    status = JobStatus(record["status"])
    instances: tuple[InstanceView, ...] = ()
    if with_instances and record.get("slurm_id"):
        instances = tuple(_instance(e, st, status) for e, st in rank_states(launch_plan(root, record["name"])))
    events = tuple(EventView(at, kind, message) for at, kind, message in record.get("events", []))
    spec = JobSpec.from_dict(record["spec"])
    code = reason_code(record) if status is JobStatus.PENDING else None
    return JobView(
        name=record["name"], status=status, priority=int(record.get("priority", 0)), trainer=spec.trainer,
        created_at=record["created_at"], started_at=record.get("started_at"), ended_at=record.get("ended_at"),
        spec=spec, reason=record.get("reason"), placement=record.get("plan"),
        instances=instances, events=events, has_instances=with_instances, restarts=int(record.get("restarts", 0)),
        reason_code=code,
    )  # fmt: skip


def reason_code(record: dict[str, Any]) -> str | None:
    """Why a pending job waits in one word: ringleader's queue's (its plan's), or, once handed to
    Slurm for its exact GPUs, Slurm's own REASON as squeue shows it ("Resources", "Priority")."""
    if not record.get("slurm_id"):
        return (record.get("plan") or {}).get("reason_code")
    said = str(record.get("reason") or "")
    return said.removeprefix("Slurm: ").split(";")[0] if said.startswith("Slurm: ") else None
