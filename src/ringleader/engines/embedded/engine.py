"""The Python API of the local runtime; the CLI only parses and renders around it.

    from ringleader.engines.embedded.engine import JobSpec, Runtime
    rt = Runtime.open()                       # ~/.ringleader, or RINGLEADER_HOME, or a path
    rt.apply_cluster("examples/seeds-cluster.yaml")
    rt.submit(JobSpec("vgg", workers=4, gpus_per_worker=1, command=["python", "train.py"],
                      topology_aware=True))
    rt.wait("vgg")
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import shutil
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from ringleader import settings
from ringleader.clock import SYSTEM_CLOCK, Clock
from ringleader.engines.embedded import agentctl, store
from ringleader.engines.embedded.faults import crash_point
from ringleader.engines.embedded.hosts import netns
from ringleader.engines.embedded.lifecycle import (
    HOSTS_SETTINGS,
    queue_snapshot,
    schedule_pass,
    schedule_pass_decisions,
    team_queues,
    waiting_jobs,
)
from ringleader.engines.embedded.liveness import lease_seconds
from ringleader.engines.embedded.nodes import (
    LOCAL,
    check_declared,
    discover_hosts,
    label_node,
    local_node,
    merge_declared,
    node_gpu_usage,
    node_health,
    shrinking,
)
from ringleader.engines.embedded.programs import check_script, mpi_program, mpi_unseen
from ringleader.engines.embedded.views import job_view
from ringleader.errors import (
    ConflictError,
    DependencyError,
    NotFoundError,
    StateError,
    UsageError,
)
from ringleader.jobs import pending
from ringleader.jobs.commandline import prepare
from ringleader.jobs.failures import without_cordoned
from ringleader.jobs.line import CommandLine
from ringleader.jobs.logfiles import follow_log, instance_name, previous_log, read_log, wait_until_ended
from ringleader.jobs.prediction import queue_estimator, view_prediction
from ringleader.jobs.queues import QueueView, check_queue, check_queue_exists, check_queue_unused, queue_views
from ringleader.jobs.spec import JobSpec
from ringleader.jobs.states import JobStatus, Launch
from ringleader.jobs.submit import Submission, duplicate, refuse_unresolvable, submit_job
from ringleader.jobs.support import Support
from ringleader.jobs.views import CORDONED, GpuUsage, JobView, NodeHealth, SubmitResult
from ringleader.runtime.containers import job_label, spec_in_image
from ringleader.runtime.plan import log_path
from ringleader.runtime.procs import grace_seconds
from ringleader.scheduler import ClusterState, Code, Decision, Snapshot, Waiting
from ringleader.scheduler.teams import TeamQueue, queue_of
from ringleader.statefolder import remove_job_folders
from ringleader.topology import load_cluster_file

__all__ = ["JobSpec", "JobView", "Runtime", "SubmitResult", "open_embedded"]


class Runtime(pending.SpecChanges):
    """The local runtime over ``<home>/state.db``. Reads never create the database."""

    def __init__(self, home: Path, db: store.Store, clock: Clock = SYSTEM_CLOCK) -> None:
        self.home = home
        self.db = db
        self.clock = clock  # where its times come from: what it records, and how long it waits
        self.notes: list[str] = []  # one-line notes for the user (e.g. "no GPUs found")

    supports = Support("embedded", image="podman or docker on this host", cluster_file=True, node_labels=True,
                       prune=True, emulated_cluster=True, time_limit=True, network_tree=True,
                       start_rules=True, preemption=True, calibration=True, previous_logs=True,
                       container_options=("--data", "--shm-size", "--rdma", "--image-pull-policy", "--container-user"),
                       more_room="declare bigger nodes (`ringleader cluster apply`)")  # fmt: skip

    @classmethod
    def open(cls, home: str | Path | None = None, readonly: bool = False, clock: Clock = SYSTEM_CLOCK) -> Runtime:
        """Open the state, and start the folder's agent if jobs run and none serves them (it was
        killed or stopped); ``readonly`` (shell completion) has no side effect at all: no agent
        started, no GPU discovery. ``clock``: where its times come from."""
        # Absolute: the agent and ranks start in their own working directories.
        path = (Path(home) if home is not None else store.default_home()).absolute()
        db, _ = store.Store.open(path, create=False)
        rt = cls(path, db, clock)
        if readonly:
            return rt
        if db.read_only:  # a read-only file system: show what is there, change nothing
            return rt
        rt._init_cluster()
        if not db.ephemeral:
            rt._reclaim_orphan_allocations()
            rt._wake()
        return rt

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> Runtime:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _running(self) -> bool:
        with self.db.read() as conn:
            return bool(store.job_rows(conn, [JobStatus.RUNNING]))

    def _wake(self, needed: Callable[[], bool] | None = None) -> str | None:
        """The folder's agent told that something was committed; started if none runs and
        ``needed`` (by default: a job runs) says there is work."""
        if self.db.ephemeral or self.db.read_only:
            return None
        return agentctl.wake(self.home, self._running if needed is None else needed)

    # -- state file -----------------------------------------------------------------------------
    def _init_cluster(self) -> None:
        """The embedded default cluster: this machine as node `local` (its GPUs from NVML)."""
        with self.db.read() as conn:
            done = store.get_meta(conn, "cluster") is not None
        if done:
            return
        spec, note = local_node()
        with self.db.write() as conn:
            if store.get_meta(conn, "cluster") is None:
                store.replace_nodes(conn, [spec])
                store.set_meta(conn, "cluster", "local")
                store.set_meta(conn, "local_note", note)
        if note and not self.db.ephemeral:  # once: when the database is created
            self.notes.append(f"note: node {LOCAL}: {note}")

    def _reclaim_orphan_allocations(self) -> None:
        """GPUs held by a job that no longer exists are freed, and given to the queue: nothing
        else would ever free them (read first: commands do not queue for the lock for this)."""
        with self.db.read() as conn:
            if not store.orphan_allocations(conn):
                return
        with self.db.write() as conn:
            freed = store.orphan_allocations(conn)
            store.free_orphans(conn)
            if freed:
                schedule_pass(conn, self.clock.now())
        self._wake()
        held: dict[str, list[str]] = {}
        for row in freed:
            held.setdefault(str(row["job"]), []).append(f"{row['node']}:{row['gpu']}")
        self.notes += [f"note: freed GPU(s) {' '.join(gpus)} held by job {job!r}, which does not exist"
                       for job, gpus in held.items()]  # fmt: skip

    def _writable(self) -> store.Store:
        """Create the database on first write (reads before that use an in-memory copy)."""
        if self.db.ephemeral:
            self.db.close()
            self.db, _ = store.Store.open(self.home, create=True)
            self.notes.clear()
            self._init_cluster()
        return self.db

    # -- cluster --------------------------------------------------------------------------------
    def apply_cluster(self, path: str | Path) -> ClusterState:
        """Replace the declared cluster; refused if a node holding running jobs' GPUs would
        disappear or shrink."""
        said: list[str] = []
        declared = load_cluster_file(path, said)
        check_declared(declared)  # bad input must not even create the database
        declared = discover_hosts(declared)
        db = self._writable()
        with db.write() as conn:
            now = self.clock.now()  # taken under the lock: the wait for it may be long
            nodes = merge_declared(store.get_nodes(conn), declared)
            problem = shrinking(store.cluster_state(conn), nodes)
            if problem:
                raise ConflictError(problem, "wait for or delete the jobs on that node, then apply again")
            store.replace_nodes(conn, nodes)
            store.set_meta(conn, "cluster", str(Path(path).resolve()))
            decisions = schedule_pass_decisions(conn, now)
        self._wake()
        self.notes += [f"note: {warning}" for warning in said]
        self._note_never_runs(decisions)
        return self.nodes()

    def _note_never_runs(self, decisions: Sequence[Decision]) -> None:
        """A note for each waiting job the cluster as declared now can never run."""
        self.notes += [f"note: waiting job {d.job.name} can never run on this cluster now: {'; '.join(d.reasons)}"
                       for d in decisions if d.code is Code.UNRESOLVABLE]  # fmt: skip

    def cluster_up(self, path: str | Path, scale: float) -> tuple[Path, ClusterState]:
        """Emulate the declared cluster on this box (root): a network namespace with sshd and a
        shaped link per node, a bridge per switch of its network tree with shaped uplinks (see
        engines.embedded.hosts.netns), then apply it with their ssh addresses and the tree."""
        declared = load_cluster_file(path)  # every node but `local` becomes an emulated ssh host
        created = netns.up(self.home, declared, scale, netns.network_section(Path(path)))
        try:
            state = self.apply_cluster(created)
            with self.db.write() as conn:
                store.set_meta(conn, HOSTS_SETTINGS, json.dumps(netns.settings(self.home)))
        except BaseException:
            netns.down(self.home)
            raise
        return created, state

    def cluster_down(self) -> list[str]:
        """Remove the emulated cluster: every namespace, bridge, process, key and hosts entry
        `cluster up` made (also after a crash), and its nodes from the declared cluster (which
        falls back to this machine alone when nothing else is left), so that no job is placed
        on a host that is gone. Nodes that running jobs hold stay until those jobs end."""
        removed = netns.down(self.home)
        if not self.db.ephemeral:
            with self.db.write() as conn:
                store.delete_meta(conn, HOSTS_SETTINGS)
                nodes = store.get_nodes(conn)
                kept = [n for n in nodes if not (n.emulated and n.address is not None)]
                if len(kept) < len(nodes) and shrinking(store.cluster_state(conn), kept) is None:
                    if not kept:
                        kept = [local_node()[0]]
                        store.set_meta(conn, "cluster", "local")
                    store.replace_nodes(conn, kept)
                    self._note_never_runs(schedule_pass_decisions(conn, self.clock.now()))
        return removed

    def label_node(self, node: str, key: str, value: str | None, overwrite: bool = False) -> None:
        """Set (or with value None remove) a node label; changing a value needs ``overwrite``."""
        label_node([ns.spec for ns in self.nodes().nodes], node, key, value, overwrite)  # check first
        db = self._writable()
        with db.write() as conn:
            nodes = label_node(store.get_nodes(conn), node, key, value, overwrite)
            store.replace_nodes(conn, nodes)
            schedule_pass(conn, self.clock.now())
        self._wake()

    def nodes(self) -> ClusterState:
        with self.db.read() as conn:
            return store.cluster_state(conn)

    def node_health(self, names: Sequence[str] | None = None) -> dict[str, NodeHealth]:
        """This machine, emulated nodes and ssh hosts now (see engines.embedded.nodes.node_health)."""
        specs = [ns.spec for ns in self.nodes().nodes if names is None or ns.name in names]
        health = node_health(specs, self.home)
        with self.db.read() as conn:
            cordoned = store.cordons(conn)
        for name, why in cordoned.items():
            if name in health:  # what ringleader decided beats what the node says of itself
                health[name] = dataclasses.replace(health[name], status=CORDONED, reason=why)
        return health

    def cordon_node(self, node: str, reason: str) -> None:
        """Place no new job on ``node`` (what runs there runs on), with the reason `top node` shows."""
        self._known_node(node)
        with self._writable().write() as conn:
            store.cordon(conn, node, reason, self.clock.now())

    def uncordon_node(self, node: str) -> None:
        """End a cordon, forget the faults blamed on ``node``, and run the queue's pass."""
        self._known_node(node)
        with self._writable().write() as conn:
            if not store.uncordon(conn, node):
                raise ConflictError(f"node {node!r} is not cordoned", "see `ringleader top node`")
            schedule_pass(conn, self.clock.now())
        self._wake()

    def _known_node(self, node: str) -> None:
        if node not in self.nodes().by_name:
            raise NotFoundError(f"node {node!r} not found", "see `ringleader top node`")

    def local_note(self) -> str:
        with self.db.read() as conn:
            return store.get_meta(conn, "local_note") or ""

    # -- jobs -----------------------------------------------------------------------------------
    def submit(self, spec: JobSpec, dry_run: bool = False) -> SubmitResult:
        """Queue a job (placed now if it fits), or with ``dry_run`` only show the plan."""
        return submit_job(self, spec, dry_run)

    # -- what submit_job asks of this engine ------------------------------------------------------
    def prepare(self, sub: Submission) -> Submission:
        """Ranks run here: an image job is prepared for this host's podman or docker, and this host
        must have room for the job's processes and its programs. A plain MPI program is started
        under mpirun (see programs.py)."""
        sub = _one_mpi_world(sub)
        if sub.spec.image:
            label = job_label(self.home, sub.spec.name)
            try:
                prepared = spec_in_image(sub.spec, sub.line, sub.spec.submit_env or {}, label)
            except DependencyError as missing:
                if not sub.dry_run:
                    raise
                # A plan needs no container: where the ranks would go is shown, and what they lack.
                note = f"note: the plan only: {missing.message}. To run it: {missing.fix}"
                return dataclasses.replace(sub, notes=(*sub.notes, note))
            sub = dataclasses.replace(sub, spec=prepared.spec, notes=(*sub.notes, prepared.note))
        _check_here(sub.spec, sub.line)
        return sub

    def exists(self, name: str) -> bool:
        with self.db.read() as conn:
            return store.job_row(conn, name) is not None

    def snapshot(self) -> ClusterState:
        """The cluster a submit places on: cordoned nodes' free GPUs held, as the queue's pass
        holds them (a --dry-run plan never names a node the job could not get)."""
        with self.db.read() as conn:
            return without_cordoned(store.cluster_state(conn), store.cordons(conn))

    def check(self, decision: Decision, state: ClusterState) -> None:
        """Its queue must exist (checked again when it commits); every node declared here can
        start what fits on it."""
        with self.db.read() as conn:
            check_queue_exists(store.queues(conn), decision.job.queue)

    def describe(self, sub: Submission, decision: Decision) -> dict[str, Any]:
        return {}  # the ranks' plan is written when the job starts

    def commit(self, sub: Submission, decision: Decision, notes: list[str], hint: str | None) -> Decision:
        """The job inserted and the queue's pass run in one transaction, then the agent woken."""
        del decision  # the pass decides, over the cluster as it is then
        spec = sub.spec
        if spec.image is None:  # checked for a job that will run, not for a plan (--dry-run)
            check_script(sub.line.program, spec.workdir)
        with self._writable().write() as conn:
            now = self.clock.now()  # taken under the lock: the wait for it may be long
            if store.job_row(conn, spec.name) is not None:
                raise duplicate(spec.name, self.supports)
            check_queue_exists(store.queues(conn), spec.queue)
            remove_job_folders(self.home, spec.name)  # left by a delete that was killed: not this job's
            store.insert_job(conn, spec.to_dict(), spec.priority, now)
            store.add_event(conn, spec.name, "Submitted", spec.describe(), now)
            for note in notes:
                kind = "Hint" if note == hint else "Command"
                store.add_event(conn, spec.name, kind, note.removeprefix("note: "), now)
            decisions = schedule_pass_decisions(conn, now)
            mine = next(d for d in decisions if d.job.name == spec.name)
            # The cluster may have changed since it was placed on: refused here, nothing commits.
            refuse_unresolvable(mine, self.supports)
        crash_point("submit-committed")  # killed here: the next command's agent starts the job
        why = self._wake()
        if why is not None and any(d.ok for d in decisions):  # submitted all the same: the state holds it
            self.notes.append(f"note: the folder's agent, which starts job {spec.name}, could not start yet "
                              f"({why}); the next ringleader command starts it")  # fmt: skip
        return mine

    def started(self, name: str) -> JobView:
        return self.get(name)

    def queued_with(self, spec: JobSpec, state: ClusterState) -> Snapshot | None:
        """The folder's queue (``lifecycle.queue_snapshot``: cordons, quotas, running jobs' ends)
        with ``spec`` waiting last; ``state`` is read again inside it."""
        del state
        with self.db.read() as conn:
            now = self.clock.now()
            specs, waiting = waiting_jobs(conn)
            added = Waiting(spec.request(), max((w.seq for w in waiting), default=0) + 1, now)
            return queue_snapshot(conn, now, [*waiting, added], queue_estimator([*specs.values(), spec]))

    # -- waiting jobs (jobs/pending.py) ------------------------------------------------------------
    def change_waiting(self, name: str, change: pending.Change) -> None:
        """The job's spec changed as ``change`` says, said in its events, and the queue's pass run
        (a held job's GPUs go to the next in line; a released one may start now)."""
        with self._writable().write() as conn:
            row = store.job_row(conn, name)
            if row is None:
                raise NotFoundError(f"job {name!r} not found", "see `ringleader list`")
            changed = change(JobSpec.from_dict(json.loads(row["spec"])), JobStatus(row["status"]))
            now = self.clock.now()
            store.update_job(conn, name, spec=json.dumps(changed.spec.to_dict()), priority=changed.spec.priority)
            store.add_event(conn, name, changed.kind, changed.message, now)
            schedule_pass(conn, now)
        self._wake()

    # -- team queues (scheduler/teams.py) ---------------------------------------------------------
    def create_queue(self, queue: TeamQueue, overwrite: bool = False) -> None:
        """Keep ``queue`` (with ``overwrite``, replace the one of that name) and run the queue's
        pass: a new quota may start or stop what waits."""
        with self._writable().write() as conn:
            kept = store.queues(conn)
            check_queue(queue, kept, overwrite)
            store.put_queue(conn, queue, self.clock.now())
            schedule_pass(conn, self.clock.now())
        self._wake()

    def delete_queue(self, name: str) -> None:
        """Forget a queue that no waiting or running job is in."""
        with self._writable().write() as conn:
            if not any(q.name == name for q in store.queues(conn)):
                raise NotFoundError(f"queue {name!r} not found", "see `ringleader queue list`")
            active = [r["name"] for r in store.job_rows(conn, [JobStatus.QUEUING, JobStatus.PENDING, JobStatus.RUNNING])
                      if JobSpec.from_dict(json.loads(r["spec"])).queue == name]  # fmt: skip
            check_queue_unused(name, active)
            store.delete_queue(conn, name)

    def queues(self) -> list[QueueView]:
        """Every queue with its quota, what its running jobs hold and borrow, its jobs and its
        fair share (the default queue, of jobs without --queue, last)."""
        with self.db.read() as conn:
            now = self.clock.now()
            kept = store.queues(conn)
            teams = team_queues(conn, store.cluster_state(conn), now)
            counts: dict[str, list[int]] = {}
            for row in store.job_rows(conn, [JobStatus.QUEUING, JobStatus.PENDING, JobStatus.RUNNING]):
                name = queue_of(JobSpec.from_dict(json.loads(row["spec"])))
                counts.setdefault(name, [0, 0])[row["status"] != JobStatus.RUNNING.value] += 1
            usage = store.queue_usage(conn, now)
        return queue_views(kept, teams, counts, usage)

    def get(self, name: str) -> JobView:
        with self.db.read() as conn:
            row = store.job_row(conn, name)
            if row is None:
                raise NotFoundError(f"job {name!r} not found", "see `ringleader list`")
            return job_view(conn, row)

    def prediction(self, job: JobView) -> dict[str, Any] | None:
        def cluster() -> ClusterState:
            with self.db.read() as conn:
                return store.cluster_state(conn)

        return view_prediction(job, cluster)

    def gpu_usage(self, name: str) -> dict[str, tuple[GpuUsage, ...] | None]:
        """Each running instance's GPUs now (duty cycle, memory); None where it cannot be read:
        an emulated node (virtual GPU ids), an instance without GPUs or not running, a node
        whose GPUs do not answer."""
        job = self.get(name)
        specs = {ns.name: ns.spec for ns in self.nodes().nodes}
        read: dict[str, dict[int, tuple[float, float, float]]] = {}
        out: dict[str, tuple[GpuUsage, ...] | None] = {}
        for inst in job.instances:
            spec = specs.get(inst.node or "")
            if spec is None or not inst.gpus or inst.status != "Running":
                out[inst.name] = None
                continue
            if spec.name not in read:
                read[spec.name] = node_gpu_usage(spec, self.home)
            seen = read[spec.name]
            found = tuple(GpuUsage(g, *seen[g]) for g in inst.gpus if g in seen)
            out[inst.name] = found if len(found) == len(inst.gpus) else None
        return out

    def list_jobs(self, statuses: Sequence[JobStatus] | None = None, with_instances: bool = False) -> list[JobView]:
        """Jobs in submission order, only those in ``statuses`` if given; their instances are
        read only with ``with_instances`` (a list of many big jobs stays quick)."""
        with self.db.read() as conn:
            return [job_view(conn, r, with_events=False, with_instances=with_instances)
                    for r in store.job_rows(conn, statuses)]  # fmt: skip

    def wait(self, name: str, timeout: float | None = None) -> JobView:
        """Block until the job is SUCCEEDED or FAILED; TimeoutError after ``timeout`` seconds."""
        # The agent looked after every 2 s: one that was killed or stopped must not make us wait forever.
        return wait_until_ended(lambda: self.get(name), timeout, 0.2, tick=self._wake)

    # -- logs -----------------------------------------------------------------------------------
    def log_file(self, name: str, instance: str | None = None) -> Path:
        return log_path(self.home, name, instance_name(self.get(name), instance))

    def logs(self, name: str, instance: str | None = None, tail: int | None = None, timestamps: bool = False) -> str:
        """An instance's log (the chief's by default), its last ``tail`` lines."""
        return read_log(self.log_file(name, instance), tail, timestamps)

    def previous_logs(self, name: str, instance: str | None = None, tail: int | None = None,
                      timestamps: bool = False) -> str:  # fmt: skip
        """What an instance wrote in the job's previous run (``logfiles.previous_log``)."""
        return previous_log(self.home / "logs" / name, self.get(name), instance, tail, timestamps)

    def follow(self, name: str, instance: str | None = None, tail: int | None = None,
               timestamps: bool = False) -> Iterator[str]:  # fmt: skip
        """Yield the log, then new lines as they come, until the job ends (a pending job's
        log is waited for)."""
        return follow_log(lambda: self.get(name), lambda: self.log_file(name, instance), tail, timestamps, 0.3)

    # -- removal --------------------------------------------------------------------------------
    def delete(self, names: Sequence[str], now: bool = False) -> list[str]:
        """Stop each job's processes, free its GPUs, remove its state and logs. Every rank gets
        SIGTERM, then the job's grace to exit (RINGLEADER_GRACE_S at its submit), then SIGKILL;
        ``now``: SIGKILL at once.

        A waiting or finished job is forgotten here; a running one is asked of the folder's agent
        (its stop recorded, then the agent woken), and this returns once the agent forgot it."""
        graces: dict[str, float] = {}
        with self.db.read() as conn:
            missing = [n for n in names if store.job_row(conn, n) is None]
        if missing:
            raise NotFoundError(f"job {missing[0]!r} not found", "see `ringleader list`")
        db = self._writable()

        def request() -> list[str]:
            stopping = []
            with db.write() as conn:
                at = self.clock.now()
                for name in names:
                    row = store.job_row(conn, name)
                    if row is None:
                        continue
                    if row["status"] != JobStatus.RUNNING.value:  # no process: forgotten now
                        store.delete_job(conn, name)
                        continue
                    if row["launch"] != Launch.STOPPING.value:
                        grace = graces[name] = 0.0 if now else job_grace(row)
                        store.update_job(conn, name, launch=Launch.STOPPING, stop_grace=grace)
                        how = "SIGKILL at once" if grace <= 0 else f"SIGTERM, then SIGKILL after {grace:g} s"
                        store.add_event(conn, name, "Deleting", f"stop requested ({how})", at)
                    else:  # another delete asked first: its grace holds
                        graces[name] = float(row["stop_grace"] or 0.0)
                    stopping.append(name)
            return stopping

        # A full disk: the reserve given back first (the agent then removes the logs, which frees it).
        stopping = store.while_disk_full(self.home, request, attempts=10)
        for name in names:
            if name not in stopping:
                remove_job_folders(self.home, name)  # never through a link put in a folder's place
        crash_point("delete-requested")  # killed here: the agent stops and forgets the jobs all the same
        if stopping:
            self._until_forgotten(stopping, max(graces.values(), default=0.0))
        return list(names)

    def _until_forgotten(self, names: list[str], grace: float) -> None:
        """Wait while the agent stops the jobs and forgets them, waking it (or a new one) every
        second; bounded, so a folder whose agent cannot start says so."""
        bound = grace + 2 * lease_seconds() + 60.0
        deadline = self.clock.monotonic() + bound
        woken = 0.0
        while True:
            with self.db.read() as conn:
                left = [n for n in names if store.job_row(conn, n) is not None]
            if not left:
                return
            if self.clock.monotonic() > deadline:
                raise StateError(
                    f"job {left[0]!r} is being stopped, and the folder's agent has not finished it in {bound:g} s",
                    f"see {self.home / 'run' / agentctl.LOG}; `ringleader get {left[0]}` shows when it is gone",
                )
            if self.clock.monotonic() - woken >= 1.0:
                self._wake(needed=lambda: True)
                woken = self.clock.monotonic()
            time.sleep(0.05)

    def prune(self, since_seconds: float) -> list[str]:
        """Delete finished jobs that ended more than ``since_seconds`` ago."""
        cutoff = self.clock.now() - since_seconds
        old = [v.name for v in self.list_jobs() if v.status.is_terminal() and (v.ended_at or 0) < cutoff]
        return self.delete(old) if old else []


def job_grace(row: sqlite3.Row) -> float:
    """The grace a job's ranks get (its spec's); a row too damaged to read gets the default."""
    try:
        return JobSpec.from_dict(json.loads(row["spec"])).stop_grace()
    except (ValueError, TypeError, KeyError):
        return grace_seconds()


def open_embedded(home: Path, readonly: bool = False) -> Runtime:
    """The embedded engine (see ``ringleader.engines``): this runtime."""
    return Runtime.open(home, readonly=readonly)


def max_procs() -> int:
    """How many processes one job may run: all of them run on this host, emulated nodes too.
    max(64, 8 x CPU cores), or RINGLEADER_MAX_PROCS."""
    return settings.integer("RINGLEADER_MAX_PROCS") or max(64, 8 * (os.cpu_count() or 1))


def _check_here(spec: JobSpec, line: CommandLine) -> None:
    """What this host must have for the job: room for its processes, and its programs (the
    program of an image job is the image's)."""
    procs = spec.workers + (1 if line.mpirun else 0)  # a horovodrun line has become mpirun's: one more
    limit = max_procs()
    if procs > limit:
        raise UsageError(
            f"job {spec.name} would run {procs} processes on this host, more than the limit of {limit} "
            "(every worker runs here, on emulated nodes too)",
            "ask for fewer --workers, or raise the limit with RINGLEADER_MAX_PROCS",
        )
    if line.mpirun:
        _check_program(spec, line.argv[0], DependencyError)
    if spec.image is None:  # in an image, the program is the image's: this host may lack it
        _check_program(spec, line.program[0], UsageError)  # what runs once per rank


def _one_mpi_world(sub: Submission) -> Submission:
    """A plain MPI program of several ranks, started under mpirun: one world of the job's ranks,
    as on every other engine (where mpirun is missing, each rank a world of its own, said so).
    In an image the program is the image's, not read here: `mpirun` in the line says it."""
    spec, line = sub.spec, sub.line
    if line.mpirun or spec.workers < 2 or spec.image is not None or spec.kind != "mpi":
        return sub  # a PyTorch job's program gets torchrun's variables, as a PyTorchJob's pods do
    path = (spec.submit_env or {}).get("PATH", os.environ.get("PATH"))
    why = mpi_program(line.program, spec.workdir, path)
    if why is None:
        unseen = mpi_unseen(line.program, spec.workdir)
        if unseen is None:
            return sub
        note = (f"note: {unseen}: if it uses MPI, its {spec.workers} ranks start here as {spec.workers} MPI worlds "
                f"of one each; for one world of {spec.workers}, submit `mpirun -np {spec.workers} "
                f"{shlex.join(line.program)}`")  # fmt: skip
        return dataclasses.replace(sub, notes=(*sub.notes, note))
    if shutil.which("mpirun", path=path) is None:
        note = (f"note: {why}, and mpirun is not installed here: each of its {spec.workers} ranks is an MPI world "
                "of its own (install Open MPI for one world)")  # fmt: skip
        return dataclasses.replace(sub, notes=(*sub.notes, note))
    prepared = prepare(["mpirun", *spec.command], spec.workers, spec.env, spec.submit_env or {}, spec.name)
    assert prepared.line is not None
    written = spec.user_command or spec.command
    spec = dataclasses.replace(spec, command=prepared.command, env=prepared.env, user_command=list(written),
                               line=prepared.line)  # fmt: skip
    note = f"note: {why}: its {spec.workers} ranks start under mpirun as one MPI world, as on every engine"
    return Submission(spec, prepared.line, (*sub.notes, *prepared.notes, note))


def _check_program(spec: JobSpec, program: str, err: type[UsageError]) -> None:
    if "/" in program:
        path = Path(spec.workdir or ".") / program
        if not path.exists():
            raise UsageError(f"program {program!r} does not exist", "check the path")
        # What exec would refuse on every rank, refused once here (shutil.which below checks the same).
        if path.is_dir():
            raise UsageError(f"program {program!r} is a folder, not a program", "give the program inside it")
        if not os.access(path, os.X_OK):
            raise UsageError(
                f"program {program!r} is not executable",
                f"chmod +x {program}, or start it with its interpreter (e.g. python {program})",
            )
    elif shutil.which(program, path=(spec.submit_env or {}).get("PATH", os.environ.get("PATH"))) is None:
        raise err(f"program {program!r} not found on PATH", "install it or give its full path")


