"""The Python API of the local runtime; the CLI only parses and renders around it.

    from ringleader.engines.embedded.engine import JobSpec, Runtime
    rt = Runtime.open()                       # ~/.ringleader, or RINGLEADER_HOME, or a path
    rt.apply_cluster("examples/seeds-cluster.yaml")
    rt.submit(JobSpec("vgg", workers=4, gpus_per_worker=1, command=["python", "train.py"],
                      topology_aware=True))
    rt.wait("vgg")
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ringleader import settings
from ringleader.engines.embedded import store
from ringleader.engines.embedded.faults import crash_point
from ringleader.engines.embedded.folders import remove_job_folders
from ringleader.engines.embedded.lifecycle import (
    HOSTS_SETTINGS,
    release_claim,
    schedule_pass,
    schedule_pass_decisions,
    spawn_supervisors,
)
from ringleader.engines.embedded.liveness import Heartbeat
from ringleader.engines.embedded.reconcile import LAUNCH_GRACE_S, reconcile
from ringleader.engines.embedded.views import job_view
from ringleader.errors import (
    ConflictError,
    DependencyError,
    DiskFullError,
    NotFoundError,
    RingleaderError,
    UsageError,
)
from ringleader.jobs.commandline import CommandLine
from ringleader.jobs.logfiles import follow_log, instance_name, read_log, wait_until_ended
from ringleader.jobs.prediction import placement_from_plan, predict_job
from ringleader.jobs.spec import JobSpec
from ringleader.jobs.states import JobStatus
from ringleader.jobs.support import Support
from ringleader.jobs.views import GpuUsage, JobView, NodeHealth, SubmitResult
from ringleader.runtime.plan import (
    RANK_FILE,
    RANK_MODULE,
    instance_targets,
    log_path,
    plan_path,
)  # fmt: skip
from ringleader.runtime.procs import find_by_args, grace_seconds, signal_proc, start_time, stop_all

if TYPE_CHECKING:  # the scheduler is imported by the calls that place: listing jobs does not need it
    from ringleader.scheduler import ClusterState
    from ringleader.topology import NodeSpec

__all__ = ["JobSpec", "JobView", "Runtime", "SubmitResult", "open_embedded"]


class Runtime:
    """The local runtime over ``<home>/state.db``. Reads never create the database."""

    def __init__(self, home: Path, db: store.Store) -> None:
        self.home = home
        self.db = db
        self.notes: list[str] = []  # one-line notes for the user (e.g. "no GPUs found")

    supports = Support("embedded", image="podman or docker on this host", cluster_file=True, node_labels=True,
                       prune=True, emulated_cluster=True, state_backup=True, time_limit=True, network_tree=True,
                       container_options=("--data", "--shm-size", "--rdma", "--image-pull-policy", "--container-user"),
                       more_room="declare bigger nodes (`ringleader cluster apply`)")  # fmt: skip

    @classmethod
    def open(cls, home: str | Path | None = None, readonly: bool = False) -> Runtime:
        """Open the state (reconciling crashed jobs first); ``readonly`` (shell completion) has
        no side effect at all: no reconcile, no supervisor started, no GPU discovery."""
        # Absolute: supervisors and ranks start in the job's own working directory.
        path = (Path(home) if home is not None else store.default_home()).absolute()
        db, _ = store.Store.open(path, create=False)
        rt = cls(path, db)
        if readonly:
            return rt
        if db.read_only:  # a read-only file system: show what is there, change nothing
            return rt
        rt._init_cluster()
        if not db.ephemeral:
            rt._reclaim_orphan_allocations()
            reconcile(db)
        return rt

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> Runtime:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- state file -----------------------------------------------------------------------------
    def _init_cluster(self) -> None:
        """The embedded default cluster: this machine as node `local` (its GPUs from NVML)."""
        with self.db.read() as conn:
            done = store.get_meta(conn, "cluster") is not None
        if done:
            return
        from ringleader.engines.embedded.nodes import LOCAL, local_node  # GPU discovery: first use only

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
            placed = schedule_pass(conn, time.time()) if freed else []
        spawn_supervisors(self.home, placed)
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
        from ringleader.engines.embedded.nodes import check_declared, discover_hosts, merge_declared, shrinking
        from ringleader.scheduler import Code
        from ringleader.topology import load_cluster_file

        declared = load_cluster_file(path)
        check_declared(declared)  # bad input must not even create the database
        declared = discover_hosts(declared)
        db = self._writable()
        with db.write() as conn:
            now = time.time()  # taken under the lock: the wait for it may be long
            nodes = merge_declared(store.get_nodes(conn), declared)
            problem = shrinking(store.cluster_state(conn), nodes)
            if problem:
                raise ConflictError(problem, "wait for or delete the jobs on that node, then apply again")
            store.replace_nodes(conn, nodes)
            store.set_meta(conn, "cluster", str(Path(path).resolve()))
            decisions = schedule_pass_decisions(conn, now)
        spawn_supervisors(self.home, [d.job.name for d in decisions if d.ok])
        self.notes += [f"note: waiting job {d.job.name} can never run on this cluster now: {'; '.join(d.reasons)}"
                       for d in decisions if d.code is Code.UNRESOLVABLE]  # fmt: skip
        return self.nodes()

    def cluster_up(self, path: str | Path, scale: float) -> tuple[Path, ClusterState]:
        """Emulate the declared cluster on this box (root): a network namespace with sshd and a
        shaped link per node, a bridge per switch of its network tree with shaped uplinks (see
        engines.embedded.hosts.netns), then apply it with their ssh addresses and the tree."""
        from ringleader.engines.embedded.hosts import netns
        from ringleader.topology import load_cluster_file

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
        `cluster up` made (also after a crash); its nodes stay declared until the next apply."""
        from ringleader.engines.embedded.hosts import netns

        removed = netns.down(self.home)
        if not self.db.ephemeral:
            with self.db.write() as conn:
                store.delete_meta(conn, HOSTS_SETTINGS)
        return removed

    def label_node(self, node: str, key: str, value: str | None, overwrite: bool = False) -> None:
        """Set (or with value None remove) a node label; changing a value needs ``overwrite``."""
        from ringleader.engines.embedded.nodes import label_node

        label_node([ns.spec for ns in self.nodes().nodes], node, key, value, overwrite)  # check first
        db = self._writable()
        with db.write() as conn:
            nodes = label_node(store.get_nodes(conn), node, key, value, overwrite)
            store.replace_nodes(conn, nodes)
            placed = schedule_pass(conn, time.time())
        spawn_supervisors(self.home, placed)

    def nodes(self) -> ClusterState:
        with self.db.read() as conn:
            return store.cluster_state(conn)

    def node_health(self, names: Sequence[str] | None = None) -> dict[str, NodeHealth]:
        """This machine, emulated nodes and ssh hosts now (see engines.embedded.nodes.node_health)."""
        from ringleader.engines.embedded.nodes import node_health

        specs = [ns.spec for ns in self.nodes().nodes if names is None or ns.name in names]
        return node_health(specs, self.home)

    def local_note(self) -> str:
        with self.db.read() as conn:
            return store.get_meta(conn, "local_note") or ""

    # -- jobs -----------------------------------------------------------------------------------
    def submit(self, spec: JobSpec, dry_run: bool = False) -> SubmitResult:
        """Queue a job (placed now if it fits), or with ``dry_run`` only show the plan."""
        from ringleader.engines.embedded.early import rank_starts, start_early  # submit only
        from ringleader.jobs.submit import placement_hint, prepare_submit, refuse_unresolvable

        sub = prepare_submit(spec, self.supports)
        spec, notes = sub.spec, list(sub.notes)
        _check_size(spec, sub.line)  # a horovodrun line has become mpirun's: one more process
        from ringleader.jobs.codec import decision_to_dict
        from ringleader.scheduler import place

        with self.db.read() as conn:  # checked before anything is written (or created)
            if store.job_row(conn, spec.name) is not None:
                raise _duplicate(spec.name)
            state = store.cluster_state(conn)
            decision = place(state, spec.request())
        refuse_unresolvable(decision, self.supports)
        # It fits now: its supervisor starts while this command asks the runtime and commits
        # (in a state folder that exists: a first submit's is made, and checked, below).
        early = start_early(self.home, spec.name) if decision.ok and not dry_run and not self.db.ephemeral else None
        try:
            image_here_at: dict[str, float] = {}  # the image seen on this host by the probe below
            if spec.image:
                from ringleader.runtime.containers import job_label, spec_in_image

                prepared = spec_in_image(spec, sub.line, spec.submit_env or {}, job_label(self.home, spec.name))
                spec = prepared.spec
                notes.append(prepared.note)
                if prepared.here_at is not None:
                    image_here_at[spec.name] = prepared.here_at
            _check_command(spec, sub.line)
            hint = placement_hint(state, decision)
            notes += [hint] if hint else []
            if dry_run:
                self.notes += notes
                prediction = predict_job(state, spec, decision.placement) if decision.placement else None
                return SubmitResult(decision, decision_to_dict(decision), dry_run=True,
                                    extra={"prediction": prediction})  # fmt: skip
            db = self._writable()
            with db.write() as conn:
                now = time.time()  # taken under the lock: the wait for it may be long
                if store.job_row(conn, spec.name) is not None:
                    raise _duplicate(spec.name)
                self._remove_folders(spec.name)  # left by a delete that was killed: not this job's
                store.insert_job(conn, spec.to_dict(), spec.priority, now)
                store.add_event(conn, spec.name, "Submitted", _describe(spec), now)
                for note in notes:
                    kind = "Hint" if note == hint else "Command"
                    store.add_event(conn, spec.name, kind, note.removeprefix("note: "), now)
                decisions = schedule_pass_decisions(conn, now)
                mine = next(d for d in decisions if d.job.name == spec.name)
                # The cluster may have changed since the check above: refused here, nothing commits.
                refuse_unresolvable(mine, self.supports)
                placed = [d.job.name for d in decisions if d.ok]
                if early is not None and mine.ok:
                    early.claim_for(conn, spec.name, now)
                    row = store.job_row(conn, spec.name)
                    assert row is not None  # inserted and placed above
                    placement, kinds = json.loads(row["placement"]), store.node_kinds(conn)
        except BaseException:
            if early is not None:
                early.release()
            raise
        crash_point("submit-committed")  # killed here: the early supervisor, or reconciliation, starts the job
        if early is not None and mine.ok:
            placed.remove(spec.name)
            try:
                ranks = rank_starts(self.home, spec, placement, kinds, image_here_at.get(spec.name))
            except OSError:  # no port for the rendezvous yet: the supervisor builds the plan itself
                ranks = None
            if not early.start(self.home, spec.name, image_here_at.get(spec.name), ranks):
                try:
                    with db.write() as conn:
                        release_claim(conn, spec.name, early.proc.pid, early.pid_start)
                    placed.insert(0, spec.name)
                except (RingleaderError, sqlite3.Error, OSError):
                    pass  # still claimed by a process that is gone and wrote no plan: reconciliation starts it
        elif early is not None:
            early.release()
        unstarted = spawn_supervisors(self.home, placed, image_here_at)
        if spec.name in unstarted:  # submitted all the same: the state holds it, placed
            why = unstarted[spec.name]
            notes.append(f"note: job {spec.name}'s supervisor could not start yet ({why}); it is started "
                         f"{LAUNCH_GRACE_S:g} s after its placement, by a running job's checks or the next command")
        self.notes += notes
        return SubmitResult(mine, decision_to_dict(mine), dry_run=False, job=self.get(spec.name))

    def get(self, name: str) -> JobView:
        with self.db.read() as conn:
            row = store.job_row(conn, name)
            if row is None:
                raise NotFoundError(f"job {name!r} not found", "see `ringleader list`")
            return job_view(conn, row)

    def prediction(self, name: str) -> dict[str, Any] | None:
        """Predicted images/s of the job's placement and of the other policy's placement on the
        cluster as it is now without this job; None if the job has no --model hint or no placement."""
        job = self.get(name)
        placement = placement_from_plan(name, job.placement)
        if placement is None or not job.spec.model:
            return None
        with self.db.read() as conn:
            state = store.cluster_state(conn).without_job(name)
        return predict_job(state, job.spec, placement)

    def gpu_usage(self, name: str) -> dict[str, tuple[GpuUsage, ...] | None]:
        """Each running instance's GPUs now (duty cycle, memory); None where it cannot be read:
        an emulated node (virtual GPU ids), an instance without GPUs or not running, a node
        whose GPUs do not answer."""
        from ringleader.engines.embedded.nodes import node_gpu_usage

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
        # Reconciling every 2 s: a supervisor that died must not make us wait forever.
        return wait_until_ended(lambda: self.get(name), timeout, 0.2, tick=lambda: reconcile(self.db))

    # -- logs -----------------------------------------------------------------------------------
    def log_file(self, name: str, instance: str | None = None) -> Path:
        return log_path(self.home, name, instance_name(self.get(name), instance))

    def logs(self, name: str, instance: str | None = None, tail: int | None = None, timestamps: bool = False) -> str:
        """An instance's log (the chief's by default), its last ``tail`` lines."""
        return read_log(self.log_file(name, instance), tail, timestamps)

    def follow(self, name: str, instance: str | None = None, tail: int | None = None,
               timestamps: bool = False) -> Iterator[str]:  # fmt: skip
        """Yield the log, then new lines as they come, until the job ends (a pending job's
        log is waited for)."""
        return follow_log(lambda: self.get(name), lambda: self.log_file(name, instance), tail, timestamps, 0.3)

    # -- removal --------------------------------------------------------------------------------
    def delete(self, names: Sequence[str], now: bool = False) -> list[str]:
        """Stop each job's processes, free its GPUs, remove its state and logs. Every rank gets
        SIGTERM, then RINGLEADER_GRACE_S to exit, then SIGKILL; ``now``: SIGKILL at once."""
        with self.db.read() as conn:
            missing = [n for n in names if store.job_row(conn, n) is None]
        if missing:
            raise NotFoundError(f"job {missing[0]!r} not found", "see `ringleader list`")
        try:
            self._writable().check_writable()  # stopping processes cannot be undone: refuse first
        except (sqlite3.OperationalError, OSError, DiskFullError) as exc:
            if not store.disk_full(exc):  # a full disk: deleting the job's logs is what frees it
                raise
        grace = 0.0 if now else grace_seconds()
        leftovers = self._containers(names)  # read before the jobs are forgotten
        # Every job this command holds keeps beating until all are stopped: a held job whose beat
        # stopped while the next ones were being stopped looked stuck to peers after the lease
        # (20 jobs in containers take ~10 s), and they killed this command.
        # (Their folders, beat files included, go next: then no peer takes them for stuck.)
        beats: list[Heartbeat] = []
        try:
            for name in names:
                self._stop(name, grace, beats)
        finally:
            for beat in beats:
                beat.stop()
        crash_point("delete-stopped")  # killed here: reconciliation fails the job, frees its GPUs
        for name in names:  # first: on a full disk, the logs are what frees the room to record
            self._remove_folders(name)
        db = self._writable()

        def forget() -> list[str]:
            with db.write() as conn:
                for name in names:
                    store.delete_job(conn, name)
                return schedule_pass(conn, time.time())

        placed = store.while_disk_full(self.home, forget, attempts=10)
        crash_point("delete-forgotten")
        if leftovers:
            # What the stopped ranks' container clients left; once no job is held by this command
            # (a long hold without a beat would look stuck to the peers that reconcile).
            from ringleader.engines.embedded.containers import remove_containers

            for spec, nodes in leftovers:
                remove_containers(self.home, spec, nodes)
        spawn_supervisors(self.home, placed)
        return list(names)

    def _remove_folders(self, name: str) -> None:
        remove_job_folders(self.home, name)  # never through a link put in a folder's place

    def _stop(self, name: str, grace_s: float, beats: list[Heartbeat]) -> None:
        with self.db.read() as conn:
            row = store.job_row(conn, name)
            insts = store.instances(conn, name)
        # A status this version does not know (a damaged row) is stopped like a live job: delete
        # is how a user clears it.
        if row is None or row["status"] in {s.value for s in JobStatus if s.is_terminal()}:
            return
        me = os.getpid()
        heartbeat = Heartbeat(self.home, name, me, start_time(me)).start()
        beats.append(heartbeat)  # stopped by the caller once every job is stopped
        # This command takes the job over while its ranks stop: its supervisor can record
        # nothing more (no sibling failure of ranks this delete stops), and peers that
        # reconcile see a live, beating holder, so none adopts the job meanwhile.
        self._hold(name, me)
        # The supervisor goes first (SIGKILL: it must start nothing more), alone: its
        # descendants are the ranks, which get their grace below.
        if row["supervisor_pid"]:
            signal_proc(row["supervisor_pid"], row["supervisor_start"], signal.SIGKILL)
        targets = [t for i in insts for t in instance_targets(self.home, name, i["name"], i["pid"], i["pid_start"])]
        # A wrapper the supervisor started but had not recorded yet: found by its plan file.
        for wrapper in (RANK_MODULE, RANK_FILE):  # a launcher's, a rank's
            targets += find_by_args(wrapper, str(plan_path(self.home, name)))
        stop_all(list(dict.fromkeys(targets)), grace_s)

    def _containers(self, names: Sequence[str]) -> list[tuple[JobSpec, list[NodeSpec]]]:
        """The jobs run in an image that are still live, with the nodes they were placed on."""
        from ringleader.engines.embedded.containers import placed_nodes

        out = []
        with self.db.read() as conn:
            for name in names:
                row = store.job_row(conn, name)
                if row is None or row["status"] in {s.value for s in JobStatus if s.is_terminal()}:
                    continue
                spec = JobSpec.from_dict(json.loads(row["spec"]))
                if spec.image:
                    out.append((spec, placed_nodes(conn, name, row["placement"])))
        return out

    def _hold(self, name: str, me: int) -> None:
        try:
            with self.db.write() as conn:
                store.update_job(conn, name, supervisor_pid=me, supervisor_start=start_time(me))
                store.add_event(conn, name, "Deleting", f"pid {me} stops the job's processes", time.time())
        except (sqlite3.OperationalError, OSError, DiskFullError) as exc:
            if not store.disk_full(exc):  # a full disk: stop the ranks all the same (their logs free it)
                raise

    def prune(self, since_seconds: float) -> list[str]:
        """Delete finished jobs that ended more than ``since_seconds`` ago."""
        cutoff = time.time() - since_seconds
        old = [v.name for v in self.list_jobs() if v.status.is_terminal() and (v.ended_at or 0) < cutoff]
        return self.delete(old) if old else []

    def reconcile(self) -> list[str]:
        return [] if self.db.ephemeral else reconcile(self.db)


def open_embedded(home: Path, readonly: bool = False) -> Runtime:
    """The embedded engine (see ``ringleader.engines``): this runtime."""
    return Runtime.open(home, readonly=readonly)


def _duplicate(name: str) -> ConflictError:
    return ConflictError(f"job {name!r} already exists", f"pick another --name or `ringleader delete {name}`")


def max_procs() -> int:
    """How many processes one job may run: all of them run on this host, emulated nodes too.
    max(64, 8 x CPU cores), or RINGLEADER_MAX_PROCS."""
    return settings.integer("RINGLEADER_MAX_PROCS") or max(64, 8 * (os.cpu_count() or 1))


def _check_size(spec: JobSpec, line: CommandLine) -> None:
    procs = spec.workers + (1 if line.mpirun else 0)
    limit = max_procs()
    if procs > limit:
        raise UsageError(
            f"job {spec.name} would run {procs} processes on this host, more than the limit of {limit} "
            "(every worker runs here, on emulated nodes too)",
            "ask for fewer --workers, or raise the limit with RINGLEADER_MAX_PROCS",
        )


def _check_command(spec: JobSpec, line: CommandLine) -> None:
    if line.mpirun:
        _check_program(spec, line.argv[0], DependencyError)
    if spec.image is None:  # in an image, the program is the image's: this host may lack it
        _check_program(spec, line.program[0], UsageError)  # what runs once per rank


def _check_program(spec: JobSpec, program: str, err: type[UsageError]) -> None:
    import shutil

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


def _describe(spec: JobSpec) -> str:
    kind = "--gputopology" if spec.topology_aware else "default scheduling"
    extra = "".join(f", {k} {v}" for k, v in (("image", spec.image), ("model", spec.model)) if v)
    return f"{spec.workers} worker(s) x {spec.gpus_per_worker} GPU(s), {kind}, priority {spec.priority}{extra}"

