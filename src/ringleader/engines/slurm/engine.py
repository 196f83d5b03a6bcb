"""The Slurm engine: ringleader places, Slurm runs exactly the chosen nodes and GPUs.

    from ringleader.engines.slurm import SlurmEngine
    engine = SlurmEngine(Path("~/.ringleader").expanduser())
    engine.submit(JobSpec("vgg", workers=4, gpus_per_worker=2, command=[...], topology_aware=True))

Every decision is ``place()`` on a snapshot read from Slurm at that moment (`scontrol -d show
node` and `show job`), so jobs submitted with plain sbatch are respected. A gang that fits is
submitted as one heterogeneous job pinned to its nodes and GPU ids (``launch.py``); one that
does not fit waits in ringleader's queue (``<home>/slurm/jobs``) and a small watcher process
submits it when it fits, in priority then FIFO order, under the team queues' quotas. The team
queues are Slurm's own accounts and QOS in slurmdbd (``accounts.py``): the quota a QOS's
GrpTRES, the weight an account's fair-share shares, the usage sshare's. A failed gang with
restarts left goes back to that queue; a node blamed for two failures is drained in Slurm, with
the reason.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from ringleader import settings
from ringleader.clock import SYSTEM_CLOCK, Clock
from ringleader.engines.slurm import slurmcli, state
from ringleader.engines.slurm.accounts import SlurmQueues
from ringleader.engines.slurm.launch import sbatch_argv, write_launch
from ringleader.engines.slurm.records import Records, add_event, private_dir
from ringleader.engines.slurm.teams import TeamFiles
from ringleader.engines.slurm.views import NOT_YET, failed_rank, job_view, launch_plan, slurm_status
from ringleader.errors import ConflictError, NotFoundError, RingleaderError, UsageError
from ringleader.jobs import pending
from ringleader.jobs.codec import expected_end, placement_from_dict
from ringleader.jobs.failures import (
    LOG_TAIL_BYTES,
    Failure,
    classify,
    cordon_reason,
    cordoned_text,
    requeued_reason,
    restart_number,
    restarting_text,
    resume_text,
    without_cordoned,
)
from ringleader.jobs.logfiles import (
    first_rank_line,
    follow_log,
    instance_name,
    previous_log,
    read_log,
    wait_until_ended,
)
from ringleader.jobs.moves import MOVING, held_for_move, may_move, movable, moved_decision
from ringleader.jobs.prediction import queue_estimator, view_prediction
from ringleader.jobs.queues import (
    QueueView,
    check_queue,
    check_queue_exists,
    preempted_by,
    queue_config,
    queue_views,
)
from ringleader.jobs.spec import JobSpec
from ringleader.jobs.states import JobStatus
from ringleader.jobs.submit import Submission, duplicate, submit_job
from ringleader.jobs.support import Support
from ringleader.jobs.views import CORDONED, GpuUsage, JobView, NodeHealth, SubmitResult
from ringleader.scheduler import ClusterState, Decision, Holding, Snapshot, Waiting, run_cycle
from ringleader.scheduler.cycle import teams_of
from ringleader.scheduler.move import RESTART_WINDOW, Move, restart_cost
from ringleader.scheduler.order import running_service, service_of_runs
from ringleader.scheduler.policies.throughput import Estimator
from ringleader.scheduler.teams import TeamQueue, queue_of

DELETE_WAIT_S = 60.0
# How long a preempted Slurm job takes to free its GPUs, as the queue plans it: Slurm's KillWait
# (slurm.conf; its default 30 s) between the SIGTERM of the cancel and the SIGKILL.
PREEMPT_DELAY_S = 30.0
KILL_STEPS_WAIT_S = 10.0  # a SIGKILLed step ends at once; beyond this the cancel goes anyway
FIRST_LOOK_S = 3.0
# Slurm's Reason= of the nodes ringleader drains: `node uncordon` resumes only those.
DRAIN_MARK = "ringleader: "


class SlurmEngine(pending.SpecChanges):
    def __init__(self, home: Path, readonly: bool = False, clock: Clock = SYSTEM_CLOCK) -> None:
        self.home = home.absolute()
        self.clock = clock  # the queue's times: submits, expected ends, requeues, blames
        self.root = self.home / "slurm"
        self.records = Records(self.root)
        self.teams = TeamFiles(self.root)
        self.slurm_queues = SlurmQueues()
        self.readonly = readonly
        self.partition = settings.text("RINGLEADER_SLURM_PARTITION")
        self.notes: list[str] = []
        self._slurm_nodes: dict[str, state.SlurmNode] = {}  # as the last snapshot() read them
        self._cordoned: dict[str, str] = {}  # node -> why, as the last _snapshot() read them (_cordons)

    supports = Support("slurm", time_limit=True, network_tree=True, start_rules=True, preemption=True,
                       calibration=True, previous_logs=True,
                       more_room="add nodes to the Slurm partition")  # fmt: skip

    def close(self) -> None:
        pass

    # -- the cluster ----------------------------------------------------------------------------
    def _snapshot(self) -> tuple[ClusterState, dict[str, state.SlurmNode], list[dict[str, str]]]:
        known = self.records.all()  # read before Slurm's job list, so every submitted one is in it
        nodes = [n for n in state.read_nodes() if not self.partition or self.partition in n.partitions]
        jobs = slurmcli.show("job")
        declared = state.declared_nodes(self.home)
        links = state.links_from_gres_conf(state.gres_conf_path())
        specs = {n.name: state.node_spec(n, declared, links) for n in nodes}
        if not any(s.network for s in specs.values()):  # no network: in the cluster file: Slurm's own
            tree = state.slurm_network(state.slurm_conf_dir())
            if tree is not None:
                specs = {name: replace(s, network=tree.place_of(name)) for name, s in specs.items()}
                self.notes += [f"note: {w}" for w in tree.warnings if f"note: {w}" not in self.notes]
        # Records brought up to date first: a stale PENDING one would hold GPUs it no longer waits for.
        records = [self._refresh(r, jobs) for r in known]
        names = {r["slurm_id"]: r["name"] for r in records if r.get("slurm_id")}
        holders = {names.get(k, f"slurm-{k}"): v for k, v in state.job_gpus(jobs).items()}
        reserved: dict[str, dict[str, list[int]]] = {}
        for record in records:
            if record.get("slurm_id") and record["status"] == JobStatus.PENDING.value:
                chosen = (record.get("plan") or {}).get("chosen") or {}
                for w in chosen.get("workers", []):
                    reserved.setdefault(record["name"], {}).setdefault(w["node"], []).extend(w["gpus"])
        self._cordoned = self._cordons(nodes)
        snapshot = without_cordoned(state.cluster_state(nodes, specs, holders, reserved, self._cordoned),
                                    self._cordoned)  # fmt: skip
        for record in records:  # a gang stopping to move, or stopped and not yet started there
            if record.get("moving_to"):
                snapshot = held_for_move(snapshot, placement_from_dict(record["name"], record["moving_to"]))
        return snapshot, {n.name: n for n in nodes}, jobs

    def _cordons(self, nodes: Sequence[state.SlurmNode]) -> dict[str, str]:
        """Node -> why it is cordoned: drained in Slurm (by hand or by ringleader), with
        ringleader's own reason where it cordoned the node itself."""
        return {**state.drained(nodes), **self.teams.cordons()}

    def nodes(self) -> ClusterState:
        return self._snapshot()[0]

    def node_health(self, names: Sequence[str] | None = None) -> dict[str, NodeHealth]:
        """Each node's State from `scontrol show node` (with its Reason=); GPU health n/a."""
        nodes = [n for n in state.read_nodes() if not self.partition or self.partition in n.partitions]
        health = {n.name: n.health() for n in nodes if names is None or n.name in names}
        for name, why in self.teams.cordons().items():
            if name in health:  # what ringleader decided beats what Slurm says (it drained it too, where it may)
                health[name] = replace(health[name], status=CORDONED, reason=why)
        return health

    # -- submit and the queue -------------------------------------------------------------------
    def submit(self, spec: JobSpec, dry_run: bool = False) -> SubmitResult:
        return submit_job(self, spec, dry_run)

    # -- what submit_job asks of this engine ------------------------------------------------------
    def prepare(self, sub: Submission) -> Submission:
        return sub  # Slurm runs the prepared line as it is (what it refuses, Support declares)

    def exists(self, name: str) -> bool:
        return self.records.load(name) is not None

    def snapshot(self) -> ClusterState:
        snapshot, self._slurm_nodes, _ = self._snapshot()
        return snapshot

    def queued_with(self, spec: JobSpec, state: ClusterState) -> Snapshot | None:
        """ringleader's queue on Slurm (``_queue_snapshot``) on ``state``, with ``spec`` waiting last."""
        now = self.clock.now()
        specs, waiting = _waiting(self._queued())
        waiting.append(Waiting(spec.request(), len(waiting), now))
        return self._queue_snapshot(state, self.records.all(), now, waiting,
                                    queue_estimator([*specs.values(), spec]))  # fmt: skip

    def check(self, decision: Decision, state: ClusterState) -> None:
        """The job's queue exists and its user is in the queue's account (else sbatch would refuse
        it); Slurm can be asked for exact GPU ids only on nodes with one GRES type per GPU; a
        node whose GPU links nobody declared places as if every pair were SYS (a note)."""
        check_queue_exists(self.slurm_queues.queues(), decision.job.queue)
        if decision.job.queue is not None:
            self.slurm_queues.check_member(decision.job.queue)
        if decision.ok and decision.job.gpus_per_worker:
            _require_typed(decision, self._slurm_nodes)
        blind = [ns.name for ns in state.nodes if ns.spec.topology.source.startswith("unknown")]
        if blind and decision.job.topology_aware:
            how = "add Links= to gres.conf with `ringleader slurm gres-conf`, or a cluster file"
            self.notes.append(f"note: no GPU links known for {', '.join(blind)}: every pair taken as SYS ({how})")

    def describe(self, sub: Submission, decision: Decision) -> dict[str, Any]:
        return {}  # the batch script is written when the job starts

    def commit(self, sub: Submission, decision: Decision, notes: list[str], hint: str | None) -> Decision:
        """Recorded in ringleader's queue, then the queue's pass: sbatch when it fits."""
        del decision  # the pass decides, over the cluster as it is then
        spec = sub.spec
        private_dir(self.home)
        with self.records.locked():
            if self.exists(spec.name):
                raise duplicate(spec.name, self.supports)
            check_queue_exists(self.slurm_queues.queues(), spec.queue)
            record: dict[str, Any] = {
                "name": spec.name, "spec": spec.to_dict(), "created_at": self.clock.now(), "priority": spec.priority,
                "status": JobStatus.PENDING.value, "reason": None, "plan": None,
                "slurm_id": None, "started_at": None, "ended_at": None, "events": [],
            }  # fmt: skip
            add_event(record, "Submitted", spec.describe())  # the same words as every engine's
            for note in sub.notes:
                add_event(record, "Command", note.removeprefix("note: "))
            self.records.save(record)
            mine = self._schedule_locked()[spec.name]
            refused = self.records.load(spec.name) or {}
            if refused.get("status") == JobStatus.FAILED.value and not refused.get("slurm_id"):
                self.records.remove(spec.name)  # sbatch refused it: nothing stays behind
                shutil.rmtree(self.root / "run" / spec.name, ignore_errors=True)
                shutil.rmtree(self.root / "logs" / spec.name, ignore_errors=True)
                raise slurmcli.SlurmError(refused["reason"], "see Slurm's message; fix the cluster or the request")
        if not mine.ok or may_move(spec):  # the watcher's passes start it, or move it once better GPUs free
            self._start_watcher()
        return mine

    def started(self, name: str) -> JobView:
        return self._first_look(name)

    def _first_look(self, name: str) -> JobView:
        """The job once Slurm has considered it (a moment after sbatch), so submit reports
        RUNNING or Slurm's own reason rather than "not looked at yet"."""
        deadline = time.monotonic() + FIRST_LOOK_S
        view = self.get(name)
        while view.status is JobStatus.PENDING and view.reason == NOT_YET and time.monotonic() < deadline:
            time.sleep(0.2)
            view = self.get(name)
        return view

    def schedule(self) -> tuple[int, int]:
        """One pass over ringleader's queue; how many jobs then wait in it, and how many running
        ones may still move to a better placement (``jobs/moves.py``)."""
        if self._watched() == (0, 0):  # nothing to decide: no lock taken, nothing created (reads stay reads)
            return 0, 0
        with self.records.locked():
            self._schedule_locked()
        return self._watched()

    def _queued(self) -> list[dict[str, Any]]:
        return _queued_of(self.records.all())

    def _watched(self) -> tuple[int, int]:
        """How many jobs wait in ringleader's queue, and how many running ones the watcher keeps
        looking at: those that may still move, and those run again after a requeue whose
        program has not yet written (what their restart took is measured from its first line)."""
        records = self.records.all()
        return len(_queued_of(records)), len(_movers_of(records)) + len(_resuming_of(records))

    def _schedule_locked(self) -> dict[str, Decision]:
        """The queue's cycle (``scheduler/cycle.py``) over Slurm as it is now, acted on: sbatch
        for the gangs it starts, the reason for those that wait, scancel for their victims."""
        if self._watched() == (0, 0):  # nothing waits and nothing may move: Slurm is not asked
            return {}
        snapshot, nodes, jobs = self._snapshot()
        for record in _resuming_of(self.records.all()):
            self._look_for_resume(record)
            self.records.save(record)
        snapshot = self._start_moved(snapshot, nodes)
        queued = self._queued()  # less the movers it started
        specs, waiting = _waiting(queued)
        records = self.records.all()
        outside = outside_accounts(jobs, records)
        cycle = run_cycle(self._queue_snapshot(snapshot, records, self.clock.now(), waiting,
                                               queue_estimator(specs.values()), outside))  # fmt: skip
        out = {}
        for decision in cycle.decisions:
            record = next(r for r in queued if r["name"] == decision.job.name)
            record["plan"] = decision.as_dict()
            if decision.ok:
                try:
                    self._launch(record, specs[record["name"]], decision, snapshot, nodes)
                except slurmcli.SlurmError as exc:  # never retried blindly: the job fails with Slurm's words
                    record.update(status=JobStatus.FAILED.value, reason=exc.message, ended_at=self.clock.now())
                    add_event(record, "Failed", exc.message)
            else:
                reason = "; ".join(decision.reasons)
                if record.get("reason") != reason:
                    add_event(record, "Pending", reason)
                record["reason"] = reason
                if decision.preemption is not None:
                    for victim in decision.preemption.names:
                        self._preempt(victim, decision)
            self.records.save(record)
            out[decision.job.name] = decision
        for move in cycle.moves:
            self._move(move)
        return out

    def _start_moved(self, snapshot: ClusterState, nodes: dict[str, state.SlurmNode]) -> ClusterState:
        """Each gang that stopped to move, back in the queue: sbatch on the placement its move
        chose, held for it while it stopped, if that is still free; else it waits as any
        requeued job. The cluster after those starts."""
        for record in self._queued():
            if not record.get("moving_to"):
                continue
            spec = JobSpec.from_dict(record["spec"])
            target = placement_from_dict(spec.name, record.pop("moving_to"))
            snapshot = snapshot.without_job(f"{MOVING}{spec.name}")
            decision = moved_decision(spec.request(), target, snapshot, self._cordoned)
            if decision is not None:
                record["plan"] = decision.as_dict()
                self._launch(record, spec, decision, snapshot, nodes)
                snapshot = snapshot.with_placement(target)
            self.records.save(record)
        return snapshot

    def _queue_snapshot(self, state: ClusterState, records: list[dict[str, Any]], now: float,
                        waiting: Sequence[Waiting] = (), estimate: Estimator | None = None,
                        outside: Mapping[str, str] | None = None) -> Snapshot:  # fmt: skip
        """ringleader's queue on Slurm as the cycle sees it: the gangs that hold GPUs in Slurm
        (running, or submitted and waiting for their exact GPUs), a preempted one within Slurm's
        KillWait and its quota given back, jobs submitted without ringleader in their account's
        queue (``outside``: holder -> account); the team queues with Slurm's usage."""
        holding = []
        restart = restart_cost(self.records.recent_restarts(RESTART_WINDOW))
        for record in records:
            status = JobStatus(record["status"])
            if not record.get("slurm_id") or status.is_terminal():
                continue
            spec = JobSpec.from_dict(record["spec"])
            preempted = _stopping(record)
            end = started = move = None
            if status is JobStatus.RUNNING and record.get("started_at"):
                plan, started = record.get("plan"), float(record["started_at"])
                end = now + PREEMPT_DELAY_S if preempted else expected_end(plan, started, spec.time_limit_s)
                chosen = (plan or {}).get("chosen")
                if not preempted and chosen:
                    placement = placement_from_dict(spec.name, chosen)
                    move = movable(spec.request(), placement, started, int(record.get("restarts", 0)), now, restart)
            preemptible = status is JobStatus.RUNNING and spec.preemptible and not preempted
            gpus = spec.workers * spec.gpus_per_worker
            run = running_service(gpus, service_of_runs(gpus, record.get("runs", [])), started, now, end)
            holding.append(Holding(spec.name, spec.priority, None if preempted else queue_of(spec), end,
                                   PREEMPT_DELAY_S, preemptible, *run, move=move))  # fmt: skip
        queues = self.slurm_queues.queues()
        names = {q.name for q in queues}
        holding += [Holding(name, queue=account) for name, account in (outside or {}).items() if account in names]
        usage = self.slurm_queues.usage([q.name for q in queues])
        return Snapshot(state, waiting, now, holding, queues, usage, estimate=estimate,
                        cordoned=self._cordoned, config=queue_config(restart.seconds))  # fmt: skip

    def _preempt(self, name: str, by: Decision) -> None:
        """scancel the victim's Slurm job (Slurm stops it as for a delete: SIGTERM, KillWait,
        SIGKILL); once Slurm reports it ended it goes back to ringleader's queue (``_refresh``)."""
        record = self.records.load(name)
        if record is None or not record.get("slurm_id") or _stopping(record):
            return
        assert by.preemption is not None
        slurmcli.run(["scancel", record["slurm_id"]], check=False)
        record["preempted_by"] = by.job.name
        add_event(record, "Preempted", f"{preempted_by(by.job, by.preemption)}: Slurm job {record['slurm_id']} "
                                       "cancelled (SIGTERM, then SIGKILL after KillWait); then requeued")  # fmt: skip
        self.records.save(record)

    def _move(self, move: Move) -> None:
        """scancel the mover's Slurm job as a preemption does (SIGTERM, KillWait, SIGKILL), the
        move's target held for it; once Slurm reports it ended it is requeued (``_refresh``)
        and the next pass starts it there (``_start_moved``). Said with the numbers weighed."""
        record = self.records.load(move.job.name)
        if record is None or not record.get("slurm_id") or _stopping(record):
            return
        slurmcli.run(["scancel", record["slurm_id"]], check=False)
        record["moving_to"] = move.target.as_dict()
        add_event(record, "Moved", f"{move.describe()}; Slurm job {record['slurm_id']} cancelled (SIGTERM, then "
                                   "SIGKILL after KillWait); then started there from its checkpoint")  # fmt: skip
        self.records.save(record)

    def _requeue(self, record: dict[str, Any], why: str = "preempted", ended: float | None = None) -> None:
        """A preempted (or failed, restarted) job whose Slurm job has ended: back in ringleader's
        queue, its restart count raised (its next run gets RINGLEADER_RESTARTS), the run it ends
        kept for its queue's fair share; its logs are kept, its run folder not."""
        restarts = int(record.get("restarts", 0)) + 1
        if record.get("started_at"):
            end = ended or record.get("ended_at") or self.clock.now()
            record.setdefault("runs", []).append([record["started_at"], max(end, record["started_at"])])
        shutil.rmtree(self.root / "run" / record["name"], ignore_errors=True)
        ended_text = f"Slurm job {record['slurm_id']} ended"
        add_event(record, "Requeued", f"{ended_text}; back in the queue, {resume_text(restarts)}")
        record.update(status=JobStatus.PENDING.value, slurm_id=None, started_at=None, ended_at=None,
                      restarts=restarts, preempted_by=None, reason=requeued_reason(why, restarts))  # fmt: skip

    # -- team queues: slurmdbd's accounts and QOS (accounts.py) ------------------------------------
    def create_queue(self, queue: TeamQueue, overwrite: bool = False) -> None:
        """Make ``queue`` an account and QOS in slurmdbd (with ``overwrite``, change the one of
        that name) and run the queue's pass: a new quota may start or stop what waits."""
        check_queue(queue, ())
        with self.records.locked():
            self.slurm_queues.put(queue, overwrite)
            self._schedule_locked()
        if self._queued():
            self._start_watcher()

    def delete_queue(self, name: str) -> None:
        """Remove a queue's account and QOS from slurmdbd once no job of ringleader's waits or
        runs in it (Slurm itself refuses while a job of the account is in its queue)."""
        with self.records.locked():
            active = [r["name"] for r in self.records.all()
                      if not JobStatus(r["status"]).is_terminal() and r["spec"].get("queue") == name]  # fmt: skip
            if active:
                raise ConflictError(f"queue {name!r} has {len(active)} waiting or running job(s), {active[0]} first",
                                    f"delete them first (`ringleader delete {' '.join(active[:3])}`)")  # fmt: skip
            self.slurm_queues.delete(name)

    def queues(self) -> list[QueueView]:
        """Every queue with its quota, what its gangs hold (any job of its account), its jobs
        and its fair share from Slurm's usage (the default queue, of jobs without --queue, last)."""
        snapshot, _, jobs = self._snapshot()  # records brought up to date
        now, records = self.clock.now(), self.records.all()
        queue_snapshot = self._queue_snapshot(snapshot, records, now, outside=outside_accounts(jobs, records))
        teams = teams_of(queue_snapshot)
        counts: dict[str, list[int]] = {}
        for record in records:
            if not JobStatus(record["status"]).is_terminal():
                queue = queue_of(JobSpec.from_dict(record["spec"]))
                counts.setdefault(queue, [0, 0])[record["status"] != JobStatus.RUNNING.value] += 1
        return queue_views(queue_snapshot.queues, teams, counts, queue_snapshot.usage)

    # -- restarts and cordons (jobs/failures.py) ---------------------------------------------------
    def _failure(self, record: dict[str, Any], components: list[dict[str, str]]) -> Failure:
        """How the job's run failed: a node Slurm lost under it (NODE_FAIL: the job's node Slurm
        now has down, as a health check or a lost slurmd leaves it), else its first failed rank's
        exit, node and the end of its log."""
        plan = launch_plan(self.root, record["name"]) or {}
        job_nodes = sorted({r["node"] for r in plan.get("ranks", [])})
        if any(c.get("JobState") == "NODE_FAIL" for c in components):
            down = {n.name: n for n in state.read_nodes() if n.name in job_nodes and not n.usable}
            node = next(iter(down), job_nodes[0] if job_nodes else None)
            said = f"{down[node].state}: {down[node].reason}" if node in down else "lost"
            return Failure(True, f"Slurm: NODE_FAIL, node {node} {said}", node)
        failed = failed_rank(plan)
        if failed is None:
            return Failure(False, "no rank said why")
        entry, st = failed
        try:
            tail = read_log(self.root / "logs" / record["name"] / f"{entry['instance']}.log", tail=200)
        except (OSError, RingleaderError):
            tail = ""
        return classify(st.get("exit_code"), st.get("error") or "", entry["node"], False, tail[-LOG_TAIL_BYTES:],
                        job_nodes)  # fmt: skip

    def _restart(self, record: dict[str, Any], components: list[dict[str, str]], reason: str | None,
                 ended: float | None) -> bool:  # fmt: skip
        """A run that failed: its fault blamed on its node (drained once blamed twice) and, with
        restarts left and not stopped at its time limit, the gang cancelled whole (SIGTERM,
        KillWait, SIGKILL) and requeued; True when it was."""
        spec = JobSpec.from_dict(record["spec"])
        failure = self._failure(record, components)
        self._blame(record, failure)
        restart = restart_number(int(record.get("failed_runs", 0)), spec.max_restarts,
                                 at_time_limit=(reason or "").startswith("TIMEOUT"))  # fmt: skip
        if restart is None:
            return False
        if any(c.get("JobState") in state.RUNNING_STATES for c in components):
            slurmcli.run(["scancel", record["slurm_id"]], check=False)
        record["failed_runs"] = restart
        add_event(record, "Restarting", restarting_text(f"{reason or 'it failed'}; {failure.why}", restart,
                                                        spec.max_restarts))  # fmt: skip
        self._requeue(record, why=f"failed ({failure.why})", ended=ended)
        return True

    def _blame(self, record: dict[str, Any], failure: Failure) -> None:
        """A node or network fault counted against its node; the node is cordoned (drained in
        Slurm with the reason, where ringleader may) as ``cordon_reason`` says."""
        if not failure.node_fault or failure.node is None:
            return
        with self.teams.locked():
            faults = self.teams.blame(failure.node, record["name"], int(record.get("restarts", 0)), failure.why,
                                      self.clock.now())  # fmt: skip
            cordons, job = self.teams.cordons(), f"job {record['name']}"
            reason = cordon_reason(faults, failure, job, failure.node in cordons, cordons.values())
            if reason is None:
                return
            drained = self._cordon(failure.node, reason)
        add_event(record, "NodeCordoned", cordoned_text(failure.node, reason, drained))

    def _cordon(self, node: str, reason: str) -> str:
        """Kept out of ringleader's placements, and drained in Slurm where ringleader may (so
        plain sbatch jobs stay off it too); says which."""
        self.teams.cordon(node, reason)
        done = slurmcli.run(["scontrol", "update", f"nodename={node}", "state=drain",
                             f"reason={DRAIN_MARK}{reason}"[:200]], check=False)  # fmt: skip
        if done.returncode == 0:
            return "drained in Slurm"
        return f"not drained in Slurm ({(done.stderr or done.stdout).strip()[:120]}): only ringleader keeps off it"

    def cordon_node(self, node: str, reason: str) -> None:
        """Place no new job on ``node`` (what runs there runs on), drained in Slurm where ringleader may."""
        self._known_node(node)
        with self.teams.locked():
            self._cordon(node, reason)

    def uncordon_node(self, node: str) -> None:
        """End ringleader's cordon (and its drain in Slurm), forget the faults blamed on ``node``,
        and run the queue's pass. A node an administrator drained stays so."""
        slurm_node = self._known_node(node)
        with self.teams.locked():
            if not self.teams.uncordon(node):
                raise ConflictError(f"node {node!r} is not cordoned by ringleader", "see `ringleader top node`")
        if slurm_node.reason.startswith(DRAIN_MARK):
            slurmcli.run(["scontrol", "update", f"nodename={node}", "state=resume"], check=False)
        self.schedule()

    def _known_node(self, node: str) -> state.SlurmNode:
        found = {n.name: n for n in state.read_nodes()}
        if node not in found:
            raise NotFoundError(f"node {node!r} not found", "see `ringleader top node`")
        return found[node]

    def _launch(self, record: dict[str, Any], spec: JobSpec, decision: Decision, snapshot: ClusterState,
                nodes: dict[str, state.SlurmNode]) -> None:  # fmt: skip
        assert decision.placement is not None
        specs = {ns.name: ns.spec for ns in snapshot.nodes}
        addresses = {name: n.address for name, n in nodes.items()}
        script, plan = write_launch(self.root, spec, decision.placement, specs, addresses,
                                    int(record.get("restarts", 0)))  # fmt: skip
        done = slurmcli.run(sbatch_argv(spec, plan, script, self.root, self.partition))
        record["slurm_id"] = done.stdout.strip().split(";")[0]
        record["reason"] = None
        add_event(record, "Placed", decision.summary())
        add_event(record, "SlurmSubmitted", f"Slurm job {record['slurm_id']}: "
                                            f"{len(plan['components'])} component(s), exact GPU ids")  # fmt: skip

    def _start_watcher(self) -> None:
        private_dir(self.root)
        env = {k: v for k, v in os.environ.items() if k.startswith(("SLURM_", "RINGLEADER_"))}
        env["PATH"] = os.environ.get("PATH", os.defpath)
        if os.environ.get("PYTHONPATH"):
            env["PYTHONPATH"] = os.environ["PYTHONPATH"]
        fd = os.open(self.root / "watcher.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        with os.fdopen(fd, "ab") as log:
            subprocess.Popen([sys.executable, "-m", "ringleader.engines.slurm.watch", str(self.home)], env=env,
                             stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)  # fmt: skip

    # -- reading --------------------------------------------------------------------------------
    def _record(self, name: str) -> dict[str, Any]:
        record = self.records.load(name)
        if record is None:
            raise NotFoundError(f"job {name!r} not found", "see `ringleader list --engine slurm`")
        return record

    def _refresh(self, record: dict[str, Any], jobs: list[dict[str, str]] | None = None) -> dict[str, Any]:
        """The record updated from Slurm (and the rank state files); saved when it changed. A
        change is made under the records' lock, to the record as it is then: a command that read
        it earlier never writes its old view over a newer one (a requeued job launched again)."""
        if not record.get("slurm_id") or JobStatus(record["status"]).is_terminal():
            return record
        ident = record["slurm_id"]
        components = [j for j in jobs or [] if (j.get("HetJobId") or j.get("JobId")) == ident]
        if not components:  # not in the list (or none given): ask for it by id before concluding
            components = slurmcli.show("job", ident)
        seen = slurm_status(components, self.root, record)
        status, reason, started, ended = seen
        if (status.value, reason, started or record.get("started_at"), ended) == (
                record["status"], record.get("reason"), record.get("started_at"), record.get("ended_at")):  # fmt: skip
            return record
        if self.readonly:  # shown as Slurm has it; what follows from it is left to a command that may write
            self._advance(record, components, *seen)
            return record
        with self.records.locked():
            current = self.records.load(record["name"])
            if current is None or current.get("slurm_id") != ident or current["status"] != record["status"]:
                return current or record  # another command moved it on meanwhile: its record stands
            self._advance(current, components, *seen)
            self.records.save(current)
            return current

    def _advance(self, record: dict[str, Any], components: list[dict[str, str]], status: JobStatus,
                 reason: str | None, started: float | None, ended: float | None) -> None:  # fmt: skip
        """``record`` moved to what Slurm says of its job: requeued after a preemption or a failure
        with restarts left, else its status, times and events."""
        ident = record["slurm_id"]
        if not self.readonly:  # the run's last look, while its plan names its ranks' logs
            self._look_for_resume(record)
        # Cancelled for a preemption or a move: requeued; one that succeeded before the cancel came is done.
        if _stopping(record) and status is JobStatus.FAILED:
            if not self.readonly:
                self._requeue(record, why="moved to a better placement" if record.get("moving_to") else "preempted",
                              ended=ended)  # fmt: skip
            return
        # A failed run: restarted while it has restarts left (the next pass places it again).
        if status is JobStatus.FAILED and not self.readonly and self._restart(record, components, reason, ended):
            return
        if status is not JobStatus(record["status"]):
            add_event(record, status.value.capitalize(), reason or f"Slurm job {ident}")
        if status.is_terminal() and any(c.get("JobState") in state.RUNNING_STATES for c in components):
            # Every rank ended, but Slurm's step (srun) stayed: its nodes are freed for the queue.
            if not self.readonly:
                slurmcli.run(["scancel", ident], check=False)
            add_event(record, "Cancelled", f"every rank had ended; Slurm job {ident} was still running and was "
                                           "cancelled to free its nodes")  # fmt: skip
        record.update(status=status.value, reason=reason, started_at=started or record.get("started_at"),
                      ended_at=ended)  # fmt: skip

    def _look_for_resume(self, record: dict[str, Any]) -> None:
        """A run after a requeue: from Slurm's start of it to its program's first line in a rank's
        log (the line's stamp) is what its restart took on this cluster, as the embedded engine
        measures it; recorded once per run (``Records.add_restart``), the recent ones price the
        next move and stop for queue order. Each look reads only what was appended since the
        last (the offsets kept in the record); a run whose program wrote nothing tells nothing."""
        started = record.get("started_at")
        if not record.get("restarts") or started is None:
            return
        resume = record.get("resume") or {}
        if resume.get("since") != started:  # a new run: looked for from its start
            resume = {"since": started, "read": {}, "at": None}
        if resume["at"] is None:
            ranks = (launch_plan(self.root, record["name"]) or {}).get("ranks", [])
            logs = {entry["instance"]: Path(entry["log"]) for entry in ranks}
            resume["at"] = first_rank_line(logs, resume["read"], float(started))
            if resume["at"] is not None:
                self.records.add_restart(record["name"], float(started), resume["at"])
        record["resume"] = resume

    # -- waiting jobs (jobs/pending.py) ------------------------------------------------------------
    def change_waiting(self, name: str, change: pending.Change) -> None:
        """A job in ringleader's queue changed as ``change`` says, then the queue's pass; one
        already handed to Slurm for its exact GPUs is Slurm's to hold (scontrol)."""
        with self.records.locked():
            record = self.records.load(name)
            if record is None:
                raise NotFoundError(f"job {name!r} not found", "see `ringleader list`")
            if record.get("slurm_id") and record["status"] == JobStatus.PENDING.value:
                ident = record["slurm_id"]
                raise ConflictError(f"job {name!r} was handed to Slurm as job {ident}, which waits for the GPUs "
                                    "it was placed on", f"hold it there: `scontrol hold {ident}`")  # fmt: skip
            changed = change(JobSpec.from_dict(record["spec"]), JobStatus(record["status"]))
            record.update(spec=changed.spec.to_dict(), priority=changed.spec.priority)
            add_event(record, changed.kind, changed.message)
            self.records.save(record)
            self._schedule_locked()
        if self._queued():
            self._start_watcher()

    def get(self, name: str) -> JobView:
        if not self.readonly:
            self.schedule()
        return job_view(self._refresh(self._record(name)), self.root)

    def gpu_usage(self, name: str) -> dict[str, tuple[GpuUsage, ...] | None]:
        """Not read on Slurm yet: every instance n/a (the job's existence is still checked)."""
        return {inst.name: None for inst in self.get(name).instances}

    def list_jobs(self, statuses: Sequence[JobStatus] | None = None, with_instances: bool = False) -> list[JobView]:
        if not self.readonly:
            self.schedule()
        records = self.records.all()  # before Slurm's job list: every submitted one is in it
        jobs = slurmcli.show("job") if any(r.get("slurm_id") for r in records) else []
        views = [job_view(self._refresh(r, jobs), self.root, with_instances) for r in records]
        return [v for v in views if statuses is None or v.status in statuses]

    def wait(self, name: str, timeout: float | None = None) -> JobView:
        return wait_until_ended(lambda: self.get(name), timeout, 0.3)

    def prediction(self, job: JobView) -> dict[str, Any] | None:
        return view_prediction(job, self.nodes)

    # -- logs -----------------------------------------------------------------------------------
    def _log_file(self, name: str, instance: str | None) -> Path:
        return self.root / "logs" / name / f"{instance_name(self.get(name), instance)}.log"

    def logs(self, name: str, instance: str | None = None, tail: int | None = None, timestamps: bool = False) -> str:
        return read_log(self._log_file(name, instance), tail, timestamps)

    def previous_logs(self, name: str, instance: str | None = None, tail: int | None = None,
                      timestamps: bool = False) -> str:  # fmt: skip
        """What an instance wrote in the job's previous run (``logfiles.previous_log``)."""
        return previous_log(self.root / "logs" / name, self.get(name), instance, tail, timestamps)

    def follow(self, name: str, instance: str | None = None, tail: int | None = None,
               timestamps: bool = False) -> Iterator[str]:  # fmt: skip
        return follow_log(lambda: self.get(name), lambda: self._log_file(name, instance), tail, timestamps, 0.5)

    # -- removal --------------------------------------------------------------------------------
    def delete(self, names: Sequence[str], now: bool = False) -> list[str]:
        """scancel each job (every component), wait until Slurm has freed its GPUs, forget it.

        Slurm stops it as training programs expect: SIGTERM to every process of the job, then
        SIGKILL after its KillWait (slurm.conf, default 30 s). ``now``: SIGKILL at once."""
        missing = [n for n in names if self.records.load(n) is None]
        if missing:
            raise NotFoundError(f"job {missing[0]!r} not found", "see `ringleader list --engine slurm`")
        with self.records.locked():
            records = [self._record(n) for n in names]
            for record in records:
                if record.get("slurm_id"):
                    if now:  # SIGKILL to the steps' processes, and only then the cancel
                        self._kill_steps(record["slurm_id"])
                    slurmcli.run(["scancel", record["slurm_id"]], check=False)
            for record in records:
                if record.get("slurm_id"):
                    self._wait_gone(record["slurm_id"])
                self.records.remove(record["name"])
                for sub in ("run", "logs"):
                    shutil.rmtree(self.root / sub / record["name"], ignore_errors=True)
        if not self.readonly:
            self.schedule()
        return list(names)

    def _kill_steps(self, ident: str) -> None:
        """SIGKILL every step's tasks, then wait (KILL_STEPS_WAIT_S at most) until no step is
        left, so the cancel that follows has no process left to send its SIGTERM to. Each step
        is named: `scancel --signal=KILL JOB` is a cancel of the job, which slurmd carries out
        as SIGTERM, KillWait, SIGKILL (seen with Slurm 22.05), so every rank's checkpoint
        handler ran; a step's signal goes to its tasks as it is."""
        steps = self._running_steps(ident)
        if steps:
            slurmcli.run(["scancel", "--signal=KILL", *steps], check=False)
        deadline = time.monotonic() + KILL_STEPS_WAIT_S
        while steps and time.monotonic() < deadline:
            time.sleep(0.1)
            steps = self._running_steps(ident)

    @staticmethod
    def _running_steps(ident: str) -> list[str]:
        """The job's srun steps still running (not its batch or extern step); [] once it is gone."""
        done = slurmcli.run(["squeue", "-h", "--steps", "-j", ident, "-o", "%i"], check=False)
        steps = done.stdout.split() if done.returncode == 0 else []
        return [s for s in steps if s.rpartition(".")[2].isdigit()]

    def _wait_gone(self, ident: str) -> None:
        deadline = time.monotonic() + DELETE_WAIT_S
        while time.monotonic() < deadline:
            live = [j for j in slurmcli.show("job", ident) if j.get("JobState") in state.RUNNING_STATES]
            if not live:
                return
            time.sleep(0.3)
        self.notes.append(f"note: Slurm job {ident} was cancelled but still holds its nodes after "
                          f"{DELETE_WAIT_S:.0f} s; Slurm frees them when its processes end")  # fmt: skip


def open_slurm(home: Path, readonly: bool = False) -> SlurmEngine:
    """The `slurm` engine (see ``ringleader.engines``)."""
    return SlurmEngine(home, readonly)


def outside_accounts(jobs: list[dict[str, str]], records: list[dict[str, Any]]) -> dict[str, str]:
    """Jobs that hold GPUs and were not submitted by ringleader, as the snapshot names them
    (``slurm-<id>``) -> their Slurm account: they count against that account's queue."""
    ours = {r["slurm_id"] for r in records if r.get("slurm_id")}
    return {f"slurm-{ident}": account for ident, account in
            ((j.get("HetJobId") or j.get("JobId", ""), j.get("Account", "")) for j in jobs
             if j.get("JobState") in state.RUNNING_STATES)
            if ident not in ours and account}  # fmt: skip


def _require_typed(decision: Decision, nodes: dict[str, state.SlurmNode]) -> None:
    assert decision.placement is not None
    for node in decision.placement.nodes:
        if not nodes[node].typed:
            raise UsageError(
                f"node {node} declares its GPUs without one GRES type per GPU, so Slurm cannot be asked "
                "for exact GPU ids there",
                "declare them with `ringleader slurm gres-conf` (gres.conf and the node's Gres=) and reconfigure",
            )


def _queued_of(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records of jobs waiting in ringleader's queue (not yet given to Slurm)."""
    return [r for r in records if r["status"] == JobStatus.PENDING.value and not r.get("slurm_id")]


def _movers_of(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records of running jobs that may still move to a better placement (``jobs/moves.py``:
    never one requeued before)."""
    return [r for r in records if r["status"] == JobStatus.RUNNING.value and not r.get("restarts")
            and may_move(JobSpec.from_dict(r["spec"]))]  # fmt: skip


def _resuming_of(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records of jobs handed to Slurm again after a requeue whose program has not yet
    written its first line in this run (``_look_for_resume``)."""
    live = (JobStatus.PENDING.value, JobStatus.RUNNING.value)
    return [r for r in records if r.get("restarts") and r.get("slurm_id") and r["status"] in live
            and not _stopping(r) and not _resumed(r)]  # fmt: skip


def _resumed(record: dict[str, Any]) -> bool:
    """Whether this run's program was seen writing its first line (``_look_for_resume``)."""
    resume = record.get("resume") or {}
    return resume.get("since") == record.get("started_at") and resume.get("at") is not None


def _stopping(record: dict[str, Any]) -> bool:
    """Whether ringleader cancelled the job's Slurm job, for a preemption or a move, and waits
    for it to end (it is then requeued)."""
    return bool(record.get("preempted_by") or record.get("moving_to"))


def _waiting(queued: list[dict[str, Any]]) -> tuple[dict[str, JobSpec], list[Waiting]]:
    """ringleader's queued job records by name, and as the queue's cycle sees them: in submit
    order, each with the GPU service of the runs it was requeued from."""
    specs = {r["name"]: JobSpec.from_dict(r["spec"]) for r in queued}
    waiting = [Waiting(specs[r["name"]].request(), i, r.get("created_at"), hold=specs[r["name"]].hold,
                       service=service_of_runs(specs[r["name"]].request().total_gpus, r.get("runs", [])))
               for i, r in enumerate(queued)]  # fmt: skip
    return specs, waiting
