"""Moves of a job through its states inside one write transaction: the scheduling pass, placing,
pending, finishing. Whoever commits a placement wakes the folder's agent (see ``agent``), which
starts the job."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from dataclasses import replace

from ringleader.engines.embedded import store
from ringleader.jobs.codec import expected_end, placement_from_dict
from ringleader.jobs.failures import (
    Failure,
    cordon_reason,
    cordoned_text,
    requeued_reason,
    restart_number,
    restarting_text,
    resume_text,
)
from ringleader.jobs.moves import MOVING, held_for_move, may_move, movable, moved_decision
from ringleader.jobs.prediction import queue_estimator
from ringleader.jobs.queues import preempted_by, queue_config
from ringleader.jobs.spec import JobSpec
from ringleader.jobs.states import InstanceStatus, JobStatus, Launch
from ringleader.scheduler import (
    ClusterState,
    Code,
    Decision,
    Holding,
    Placement,
    Snapshot,
    Waiting,
    run_cycle,
)
from ringleader.scheduler.cycle import teams_of
from ringleader.scheduler.move import RESTART_WINDOW, Move, restart_cost
from ringleader.scheduler.order import NO_SERVICE, Service, running_service, service_of_runs
from ringleader.scheduler.policies.throughput import Estimator
from ringleader.scheduler.teams import Teams, queue_of, run_usage

# meta key: how jobs on ssh hosts launch here (extra MCA parameters, rank env, the head's
# address), written by `cluster up` for an emulated cluster; absent for real hosts.
HOSTS_SETTINGS = "hosts_settings"
# A running job whose ranks are being stopped: a delete's or a preemption's.
STOPPING = (Launch.STOPPING.value, Launch.PREEMPTING.value)


def schedule_pass(conn: sqlite3.Connection, now: float) -> list[str]:
    """Place every waiting job that fits now (priority, then FIFO; gangs all or nothing).

    Returns the names of the jobs placed; the caller wakes the agent after COMMIT."""
    return [d.job.name for d in schedule_pass_decisions(conn, now) if d.ok]


def schedule_pass_decisions(conn: sqlite3.Connection, now: float) -> list[Decision]:
    """The queue's cycle (``scheduler/cycle.py``) over the folder as it is at ``now``, acted on:
    every decision it made (placed or pending)."""
    specs, waiting = waiting_jobs(conn)
    running = [JobSpec.from_dict(json.loads(r["spec"])) for r in store.job_rows(conn, [JobStatus.RUNNING])]
    if not waiting and not any(may_move(s) for s in running):
        return []
    snapshot = queue_snapshot(conn, now, waiting, queue_estimator([*specs.values(), *running]))
    cycle = run_cycle(snapshot)
    decisions = cycle.decisions
    for decision in decisions:
        spec = specs[decision.job.name]
        if decision.placement is not None:
            place_job(conn, spec, decision, now, has_launcher(spec, decision, snapshot.state))
        else:
            pend_job(conn, spec.name, decision, now)
            if decision.preemption is not None:
                for victim in decision.preemption.names:
                    preempt_job(conn, victim, decision, now)
    for move in cycle.moves:
        move_job(conn, move, now)
    return decisions


def waiting_jobs(conn: sqlite3.Connection) -> tuple[dict[str, JobSpec], list[Waiting]]:
    """The jobs waiting in the folder's queue, by name, and as the cycle sees them."""
    rows = store.job_rows(conn, [JobStatus.QUEUING, JobStatus.PENDING])
    specs = {r["name"]: JobSpec.from_dict(json.loads(r["spec"])) for r in rows}
    waiting = [Waiting(specs[r["name"]].request(), int(r["seq"]), float(r["created_at"]), hold=specs[r["name"]].hold,
                       service=waiting_service(conn, r, specs[r["name"]])) for r in rows]  # fmt: skip
    return specs, waiting


def waiting_service(conn: sqlite3.Connection, row: sqlite3.Row, spec: JobSpec) -> Service:
    """What a queue's order reads of a waiting job (``scheduler/order.py``): the GPU-seconds of
    the runs it was requeued from, each from its ``Scheduled`` event to its ``Requeued`` one
    (a job never requeued ran none)."""
    if not int(row["restarts"] or 0):
        return NO_SERVICE
    runs, started = [], None
    for event in store.events(conn, spec.name):
        if event["kind"] == "Scheduled":
            started = float(event["at"])
        elif event["kind"] == "Requeued" and started is not None:
            runs.append((started, float(event["at"])))
            started = None
    return service_of_runs(spec.workers * spec.gpus_per_worker, runs)


def queue_snapshot(
    conn: sqlite3.Connection, now: float, waiting: Sequence[Waiting] = (), estimate: Estimator | None = None
) -> Snapshot:
    """The folder's queue as the cycle sees it: the cluster, the cordons, the running jobs (a job
    being stopped holds its GPUs until its grace is over, and has given its quota back) and the
    team queues with their usage: ended runs' plus the running ones' so far. A gang that may
    move, and one stopped for queue order, counts a restart as this folder's recent restarts took
    (``store.recent_restarts``)."""
    holding = []
    restart = restart_cost(store.recent_restarts(conn, RESTART_WINDOW))
    state = store.cluster_state(conn)
    queues = store.queues(conn)
    usage = store.queue_usage(conn, now) if queues else {}
    for row in store.job_rows(conn, [JobStatus.RUNNING]):
        spec = JobSpec.from_dict(json.loads(row["spec"]))
        stopping = row["launch"] in STOPPING
        started = None if row["started_at"] is None else float(row["started_at"])
        if stopping:
            end: float | None = now + float(row["stop_grace"] or 0.0)
        else:
            plan = json.loads(row["decision"]) if row["decision"] else None
            end = None if started is None else expected_end(plan, started, spec.time_limit_s, spec.stop_grace())
        gpus = spec.workers * spec.gpus_per_worker
        if queues and started is not None:
            usage[queue_of(spec)] = usage.get(queue_of(spec), 0.0) + run_usage(gpus, started, now, now)
        moving = store.get_meta(conn, MOVING + spec.name) if stopping else None
        if moving is not None:  # its new placement is held for it while it stops
            state = held_for_move(state, placement_from_dict(spec.name, json.loads(moving)))
        placement = placement_from_dict(spec.name, json.loads(row["placement"])) if row["placement"] else None
        restarts = int(row["restarts"] or 0)
        move = None if stopping else movable(spec.request(), placement, started, restarts, now, restart)
        run = running_service(gpus, waiting_service(conn, row, spec), started, now, end)
        holding.append(Holding(spec.name, spec.priority, None if stopping else queue_of(spec), end,
                               spec.stop_grace(), spec.preemptible and not stopping, *run, move=move))  # fmt: skip
    return Snapshot(state, waiting, now, holding, queues, usage, cordoned=store.cordons(conn),
                    estimate=estimate, config=queue_config(restart.seconds))  # fmt: skip


def move_job(conn: sqlite3.Connection, move: Move, now: float) -> None:
    """Stop ``move``'s gang as a preemption does (SIGTERM, its grace to write its checkpoint,
    SIGKILL) and start it on the move's target once it has stopped (``requeue_stopped``); the
    target is held for it meanwhile. Said in its events with the numbers weighed."""
    name = move.job.name
    row = store.job_row(conn, name)
    if row is None or row["status"] != JobStatus.RUNNING.value or row["launch"] in STOPPING:
        return
    grace = JobSpec.from_dict(json.loads(row["spec"])).stop_grace()
    store.update_job(conn, name, launch=Launch.PREEMPTING, stop_grace=grace)
    store.set_meta(conn, MOVING + name, json.dumps(move.target.as_dict()))
    how = "SIGKILL at once" if grace <= 0 else f"SIGTERM, then SIGKILL after {grace:g} s"
    store.add_event(conn, name, "Moved", f"{move.describe()}; {how}; then started there from its checkpoint", now)


def requeue_stopped(conn: sqlite3.Connection, name: str, now: float) -> list[str]:
    """A preempted or moved job whose ranks have stopped, requeued; a moved one started on the
    placement held for it (if it is still free and not cordoned; else it waits as any requeued
    job). Then the queue's pass; returns the jobs placed."""
    target = store.get_meta(conn, MOVING + name)
    requeue_job(conn, name, now, why="preempted" if target is None else "moved to a better placement")
    if target is None:
        return schedule_pass(conn, now)
    store.delete_meta(conn, MOVING + name)
    return [*start_moved(conn, name, placement_from_dict(name, json.loads(target)), now), *schedule_pass(conn, now)]


def start_moved(conn: sqlite3.Connection, name: str, target: Placement, now: float) -> list[str]:
    """Place requeued job ``name`` on ``target``, the placement its move was weighed on."""
    row = store.job_row(conn, name)
    if row is None:
        return []
    state = store.cluster_state(conn)
    spec = JobSpec.from_dict(json.loads(row["spec"]))
    decision = moved_decision(spec.request(), target, state, store.cordons(conn))
    if decision is None:
        return []
    place_job(conn, spec, decision, now, has_launcher(spec, decision, state))
    return [name]


def team_queues(conn: sqlite3.Connection, state: ClusterState, now: float) -> Teams | None:
    """The team queues with the GPUs their running gangs hold in ``state`` and their fair-share
    factors (see ``queue_snapshot``); None while no queue was created."""
    return teams_of(replace(queue_snapshot(conn, now), state=state))


def account_usage(conn: sqlite3.Connection, row: sqlite3.Row, now: float) -> None:
    """Add a run that ends at ``now`` to its queue's usage (fair share counts it from then on);
    nothing while no queue was created (a folder without queues writes no more than before)."""
    if row["started_at"] is None or not store.queues(conn):
        return
    spec = JobSpec.from_dict(json.loads(row["spec"]))
    gpu_s = run_usage(spec.workers * spec.gpus_per_worker, float(row["started_at"]), now, now)
    store.add_usage(conn, queue_of(spec), gpu_s, now)


def preempt_job(conn: sqlite3.Connection, name: str, by: Decision, now: float) -> None:
    """Ask the agent to stop ``name`` (SIGTERM, its grace, SIGKILL) and requeue it, for ``by``'s
    gang; said in its events with who preempted it and why."""
    row = store.job_row(conn, name)
    if row is None or row["status"] != JobStatus.RUNNING.value or row["launch"] in STOPPING:
        return
    grace = JobSpec.from_dict(json.loads(row["spec"])).stop_grace()
    store.update_job(conn, name, launch=Launch.PREEMPTING, stop_grace=grace)
    assert by.preemption is not None
    how = "SIGKILL at once" if grace <= 0 else f"SIGTERM, then SIGKILL after {grace:g} s"
    store.add_event(conn, name, "Preempted", f"{preempted_by(by.job, by.preemption)}: {how}; then requeued", now)


def waits_over(conn: sqlite3.Connection, now: float) -> bool:
    """Whether a job that chose to wait for better GPUs has reached its --max-wait: then the
    queue decides again (it starts on what is free), although no job ended."""
    for row in store.job_rows(conn, [JobStatus.PENDING]):
        plan = json.loads(row["decision"]) if row["decision"] else None
        if not plan or not plan.get("when"):
            continue
        spec = JobSpec.from_dict(json.loads(row["spec"]))
        if spec.max_wait_s is not None and float(row["created_at"]) + spec.max_wait_s <= now:
            return True
    return False


def has_launcher(spec: JobSpec, decision: Decision, state: ClusterState) -> bool:
    """An mpirun line has its launcher; so has every job with ranks on ssh hosts (mpirun starts
    them there)."""
    placement = decision.placement
    remote = placement is not None and any(state.node(n).spec.address is not None for n in placement.nodes)
    return spec.command_line().mpirun or remote


def place_job(conn: sqlite3.Connection, spec: JobSpec, decision: Decision, now: float, launcher: bool) -> None:
    placement = decision.placement
    assert placement is not None
    store.allocate(conn, placement)
    store.update_job(
        conn, spec.name, status=JobStatus.RUNNING, started_at=now, reason=None, launch=Launch.PLACED,
        decision=json.dumps(decision.as_dict()), placement=json.dumps(placement.as_dict()),
    )  # fmt: skip
    pending = InstanceStatus.PENDING.value
    if launcher:
        store.insert_instance(
            conn, spec.name, f"{spec.name}-launcher", 0, "launcher", status=pending,
            node=placement.slots[0].node, gpus="[]", gpu_requested=0, is_chief=1,
        )  # fmt: skip
    for slot in placement.slots:
        store.insert_instance(
            conn, spec.name, f"{spec.name}-worker-{slot.index}", slot.index, "worker", status=pending,
            node=slot.node, gpus=json.dumps(list(slot.gpus)), gpu_requested=spec.gpus_per_worker,
            is_chief=int(slot.index == 0 and not launcher),
        )  # fmt: skip
    store.add_event(conn, spec.name, "Scheduled", decision.summary(), now)


def pend_job(conn: sqlite3.Connection, name: str, decision: Decision, now: float) -> None:
    # The reservation is stored with the decision and told from it when read ("expected start in
    # ~14 min" counted from then), so the reason and its events stay the same while time passes.
    held = decision.reservation.describe() if decision.reservation else None
    reason = "; ".join(r for r in decision.reasons if r != held) or ("" if held else decision.code.value)
    if decision.code is Code.UNRESOLVABLE:  # the cluster shrank under it (cluster apply)
        reason = f"can never run on the cluster as declared now: {reason}; delete it, or apply a cluster with room"
    if decision.node_reasons:
        reason += " (" + "; ".join(f"{n}: {r}" for n, r in decision.node_reasons.items()) + ")"
    store.update_job(conn, name, status=JobStatus.PENDING, reason=reason or None,
                     decision=json.dumps(decision.as_dict()))  # fmt: skip
    # One event per distinct reason, so a pass that changes nothing writes nothing.
    if reason and store.last_event(conn, name, "Pending") != reason:
        store.add_event(conn, name, "Pending", reason, now)
    gpus = f"reserved {decision.reservation.gpus()}" if decision.reservation else None
    if gpus and store.last_event(conn, name, "Reserved") != gpus:
        store.add_event(conn, name, "Reserved", gpus, now)


def requeue_job(conn: sqlite3.Connection, name: str, now: float, why: str = "preempted") -> None:
    """A preempted (or failed, restarted) job whose ranks have stopped: its GPUs freed, its
    instances gone (the next run has its own), and back in the queue in its old place with its
    restart count raised."""
    row = store.job_row(conn, name)
    assert row is not None
    restarts = int(row["restarts"] or 0) + 1
    account_usage(conn, row, now)
    freed = store.free(conn, name)
    store.delete_instances(conn, name)
    store.update_job(conn, name, status=JobStatus.QUEUING, launch=None, stop_grace=None, started_at=None,
                     supervisor_pid=None, supervisor_start=None, placement=None, restarts=restarts,
                     reason=requeued_reason(why, restarts))  # fmt: skip
    store.add_event(conn, name, "Requeued", f"its ranks stopped and {freed} GPU(s) freed; back in the queue, "
                    f"{resume_text(restarts)}", now)  # fmt: skip


def failed_runs(conn: sqlite3.Connection, name: str) -> int:
    """How often ``name`` failed and was restarted (its preemptions not counted)."""
    return sum(1 for e in store.events(conn, name) if e["kind"] == "Restarting")


def restart_job(conn: sqlite3.Connection, name: str, failure: Failure, root_cause: str, now: float) -> None:
    """A failed gang with restarts left (``restart_number``), its processes stopped: the fault
    blamed on its node (``blame_node``), then requeued as a preemption is, so that the queue
    places it again."""
    row = store.job_row(conn, name)
    assert row is not None
    spec = JobSpec.from_dict(json.loads(row["spec"]))
    restart = restart_number(failed_runs(conn, name), spec.max_restarts)
    assert restart is not None
    store.add_event(conn, name, "Restarting", restarting_text(f"{root_cause}; {failure.why}", restart,
                                                              spec.max_restarts), now)  # fmt: skip
    blame_node(conn, name, failure, now)
    requeue_job(conn, name, now, why=f"failed ({failure.why})")


def blame_node(conn: sqlite3.Connection, name: str, failure: Failure, now: float) -> None:
    """A node or network fault is recorded against the node, which is cordoned as
    ``cordon_reason`` says (said in the job's events)."""
    if not failure.node_fault or failure.node is None:
        return
    faults = store.add_fault(conn, failure.node, name, failure.why, now)
    cordons = store.cordons(conn)
    reason = cordon_reason(faults, failure, f"job {name}", failure.node in cordons, cordons.values())
    if reason is not None:
        store.cordon(conn, failure.node, reason, now)
        store.add_event(conn, name, "NodeCordoned", cordoned_text(failure.node, reason), now)


def finish_job(
    conn: sqlite3.Connection, name: str, status: JobStatus, reason: str, now: float, ended_at: float | None = None
) -> None:
    """Terminal status, end time (``ended_at`` when known to be earlier than ``now``, e.g. from
    the rank state files of a job whose supervisor was lost), GPUs freed, open instances closed."""
    row = store.job_row(conn, name)
    if row is not None and row["status"] == JobStatus.RUNNING.value:
        account_usage(conn, row, now if ended_at is None else ended_at)
    store.update_job(conn, name, status=status, ended_at=now if ended_at is None else ended_at, reason=reason or None)
    freed = store.free(conn, name)
    for inst in store.instances(conn, name):
        if not InstanceStatus(inst["status"]).is_terminal():
            store.update_instance(conn, name, inst["name"], status=InstanceStatus.STOPPED.value, ended_at=now)
    kind = "Succeeded" if status is JobStatus.SUCCEEDED else "Failed"
    store.add_event(conn, name, kind, f"{reason}; {freed} GPU(s) freed" if reason else f"{freed} GPU(s) freed", now)
