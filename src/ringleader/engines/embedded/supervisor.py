"""One running job as the folder's agent supervises it, in a thread of its own (see ``agent``).

It holds the job for the agent, starts the job's instances (or adopts them from the last agent:
rank state files, pids with start times), watches them, fails the job on the first failure
(earliest failure = root cause; siblings get SIGTERM, then SIGKILL after a grace period), stops
it at its time limit, frees the GPUs and runs a scheduling pass. A delete requested meanwhile
(``Launch.STOPPING``) stops every process with the grace asked for and forgets the job.

Its progress is one ``Phase`` at a time; ``ALLOWED`` is the table of what may follow what.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shlex
import sqlite3
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from ringleader.clock import SYSTEM_CLOCK, Clock
from ringleader.engines.embedded import store
from ringleader.engines.embedded.containers import placed_nodes, remove_containers, resolve_image
from ringleader.engines.embedded.hosts.launch import hosts_command, master_address, stop_options
from ringleader.engines.embedded.lifecycle import (
    HOSTS_SETTINGS,
    blame_node,
    failed_runs,
    finish_job,
    requeue_stopped,
    restart_job,
    schedule_pass,
)
from ringleader.errors import RingleaderError
from ringleader.jobs.codec import placement_from_dict
from ringleader.jobs.commandline import gets_torchrun_defaults
from ringleader.jobs.failures import LOG_TAIL_BYTES, Failure, classify, restart_number
from ringleader.jobs.line import CommandLine, option_words, root_option
from ringleader.jobs.logfiles import first_rank_line, read_log
from ringleader.jobs.spec import JobSpec
from ringleader.jobs.states import InstanceStatus, JobStatus, Launch
from ringleader.runtime.containers import readable
from ringleader.runtime.plan import (
    DEMUX_MODULE,
    RANK_FILE,
    RANK_MODULE,
    build_plan,
    instance_targets,
    job_env,
    lease_path,
    log_path,
    plan_path,
    plan_written,
    rank_wrapper,
    read_state,
    state_path,
    worker_lines,
)  # fmt: skip
from ringleader.runtime.procs import alive, find_by_args, processes_with_args, start_time, stop_all
from ringleader.runtime.rank import LEASE_S, fence_bound, signal_name
from ringleader.scheduler.types import approx_duration
from ringleader.statefolder import make_job_folders, remove_job_folders, write_file
from ringleader.topology import NodeSpec

POLL_S = 0.25
# How often a restarted run's rank logs are looked at (only what was appended since) until its
# program's first line is found: when its restart ended is that line's stamp, not the look.
RESTART_LOOK_S = 5.0
# After adoption: how long an instance with neither a pid nor a state file may still be a
# wrapper that the lost agent started and that has not written its state file yet.
START_GRACE_S = 5.0
# Before completing a half-started gang: time for a rank its lost agent had forked (killed with
# it before recording the pid) to finish exec'ing its wrapper, so that it is found, not doubled.
FORK_SETTLE_S = 0.5
NEVER_STARTED = "never started: its agent died during launch"
# stop_request(), besides a delete's grace: the job was forgotten, or is held by another agent.
GONE, OTHER = -1.0, -2.0


class Phase(Enum):
    """Where a supervised job is: ``Supervisor.run`` takes each phase's step, which says the
    next; ``ALLOWED`` lists what may follow what."""

    CLAIMING = "claiming"
    """Being held for this agent: nothing of it started or adopted by this supervisor yet."""
    COMPLETING = "completing"
    """Adopted while its lost agent was starting it: the gang is completed, or what had
    started is stopped so that the whole gang starts afresh."""
    LAUNCHING = "launching"
    """Its instances are being started (its image made present first)."""
    RUNNING = "running"
    """Its instances run, watched: the first failure or its time limit ends it."""
    FAILING = "failing"
    """An instance failed (the root cause): the others are stopped."""
    TIMING_OUT = "timing out"
    """It reached its time limit: every instance is stopped, and the job fails TIMEOUT."""
    ENDED = "ended"
    """Every instance ended: the job's end is recorded, its GPUs freed, the queue's pass run."""
    STOPPING = "stopping"
    """A delete or a preemption was asked for, or the job was forgotten or taken by another
    agent: which of those it is, is read."""
    REQUEUING = "requeuing"
    """A preemption's stop: every process stopped, then the job back in the queue."""
    FORGETTING = "forgetting"
    """A delete's stop: every process stopped, then the job and its folders forgotten."""
    RELEASED = "released"
    """Nothing of the job is this supervisor's any more."""


ALLOWED: dict[Phase, frozenset[Phase]] = {
    Phase.CLAIMING: frozenset({Phase.COMPLETING, Phase.LAUNCHING, Phase.RUNNING, Phase.STOPPING, Phase.RELEASED}),
    Phase.COMPLETING: frozenset({Phase.LAUNCHING, Phase.RUNNING, Phase.STOPPING}),
    Phase.LAUNCHING: frozenset({Phase.RUNNING, Phase.STOPPING}),
    Phase.RUNNING: frozenset({Phase.FAILING, Phase.TIMING_OUT, Phase.ENDED, Phase.STOPPING}),
    Phase.FAILING: frozenset({Phase.ENDED, Phase.STOPPING}),
    Phase.TIMING_OUT: frozenset({Phase.ENDED, Phase.STOPPING}),
    Phase.ENDED: frozenset({Phase.RELEASED, Phase.STOPPING}),  # a delete that came before the end was recorded
    Phase.STOPPING: frozenset({Phase.REQUEUING, Phase.FORGETTING, Phase.RELEASED}),
    Phase.REQUEUING: frozenset({Phase.FORGETTING, Phase.RELEASED}),  # a delete that came during the preemption
    Phase.FORGETTING: frozenset({Phase.RELEASED}),
    Phase.RELEASED: frozenset(),
}


@dataclass
class Watched:
    """One instance as the supervisor tracks it."""

    name: str
    role: str
    state_file: Path
    status: InstanceStatus
    pid: int | None = None
    pid_start: int | None = None
    popen: subprocess.Popen[bytes] | None = None
    exit_code: int | None = None
    ended_at: float | None = None
    note: str = ""
    dirty: bool = False
    stopping: bool = False
    started_at: float | None = None
    signal: str | None = None
    exit_fd: int | None = None  # readable once the process this supervisor started has exited

    @property
    def done(self) -> bool:
        return self.status.is_terminal()


@dataclass
class ResumeWatch:
    """A restarted run's look for its program's first line in its ranks' logs: what its restart
    took on this cluster ends there (``Supervisor._look_for_resume``)."""

    read: dict[str, int] = field(default_factory=dict)  # rank -> how far its log was read
    looked: float = -RESTART_LOOK_S  # clock.monotonic() at the last look
    resumed_at: float | None = None  # the first line's stamp, once found
    recorded: bool = False  # the restart it ends is recorded

    @property
    def unrecorded(self) -> bool:
        return self.resumed_at is not None and not self.recorded


class Supervisor:
    """One job, for the agent (``holder``: its pid and start time). ``placed`` is called with
    the jobs a scheduling pass placed, once committed: the agent starts them. ``clock``: where
    its time comes from (the agent's)."""

    def __init__(self, home: Path, job: str, holder: tuple[int, int | None],
                 placed: Callable[[], None] = lambda: None, clock: Clock = SYSTEM_CLOCK) -> None:  # fmt: skip
        self.home, self.job = home, job
        self.me, self.me_start = holder
        self.placed = placed
        self.clock = clock
        self.db, _ = store.Store.open(home, create=False)
        self.phase = Phase.CLAIMING
        self.passed = [Phase.CLAIMING]  # every phase it was in, in turn
        self.watched: list[Watched] = []
        self.root: Watched | None = None
        self.adopted_at: float | None = None  # clock.monotonic() when adopted from a lost agent
        self.checked_at = 0.0  # when stop_request() last read the job
        self.stop_grace: float | None = None  # a delete's request: the grace its ranks get
        self.preempting = False  # the stop asked for is a preemption's: the job is requeued, not forgotten
        self.restarts = 0  # times it was requeued before this run (RINGLEADER_RESTARTS)
        self.resume = ResumeWatch()
        self.starting: Watched | None = None  # the instance being started, if Popen raises
        self.started_at: float | None = None  # when the job was placed (wall clock, as recorded)
        self.time_limit_s: float | None = None
        self.grace_s = 0.0  # the job's grace (JobSpec.grace_s), read at the claim
        self.deadline: float | None = None  # clock.monotonic() at which the time limit is reached
        self.spec: JobSpec | None = None
        self.placement: dict[str, Any] = {}  # as stored with the job
        self.nodes: Sequence[NodeSpec] | None = None  # where the job's ranks run
        self.not_started: str | None = None  # why no rank could start (the image could not be had)

    def enter(self, phase: Phase) -> None:
        """Go on to ``phase``; one that may not follow the present one is a bug, said at once."""
        if phase not in ALLOWED[self.phase]:
            raise RuntimeError(f"job {self.job}: {phase.value} cannot follow {self.phase.value}")
        self.phase = phase
        self.passed.append(phase)

    def log(self, message: str) -> None:
        """A line in run/<job>/supervisor.log (never through a link; lost on a full disk)."""
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(self.clock.now()))
        line = f"{stamp} agent {self.me}: {message}\n"
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC
        with contextlib.suppress(OSError):
            fd = os.open(self.home / "run" / self.job / "supervisor.log", flags, 0o600)
            try:
                os.write(fd, line.encode())
            finally:
                os.close(fd)

    def poke(self) -> None:
        """Read the job at the next check (the agent was woken: a delete may have come)."""
        self.checked_at = 0.0

    # -- claim, launch, adopt -------------------------------------------------------------------
    def claim(self) -> Phase:
        """Hold the job for the agent (its spec and placement read); the phase that follows."""
        claimed = store.until_recorded(self.home, self._claim, self.log)
        if claimed is None:
            return Phase.RELEASED
        spec, self.placement, launch = claimed
        self.spec = spec
        self.time_limit_s = spec.time_limit_s
        self.grace_s = spec.stop_grace()
        if spec.time_limit_s is not None:
            # The wall clock read once, for the time already run (an adopted job); from
            # here on the limit runs on the monotonic clock, which no clock change moves.
            now = self.clock.now()
            ran = max(0.0, now - float(self.started_at or now))
            self.deadline = self.clock.monotonic() + max(0.0, spec.time_limit_s - ran)
        if self.stop_grace is not None:
            return Phase.STOPPING
        if launch is None:  # nothing was started: its plan is written before any rank starts
            return Phase.LAUNCHING
        return Phase.COMPLETING if launch is Launch.STARTING else Phase.RUNNING

    def _claim(self) -> tuple[JobSpec, dict[str, Any], Launch | None] | None:
        """(spec, placement, how far its last agent had launched it; None: nothing started)."""
        self.watched.clear()  # a retried claim starts afresh
        with self.db.write() as conn:
            row = store.job_row(conn, self.job)
            if row is None or row["status"] != JobStatus.RUNNING.value:
                return None
            launch = Launch(row["launch"] or Launch.PLACED.value)
            # Its plan is written before any rank starts: without it, nothing was started.
            launched = launch is not Launch.PLACED and plan_written(self.home, self.job)
            self.started_at = row["started_at"]
            self.stop_grace = row["stop_grace"] if launch in (Launch.STOPPING, Launch.PREEMPTING) else None
            self.preempting = launch is Launch.PREEMPTING
            self.restarts = int(row["restarts"] or 0)
            lost = row["supervisor_pid"]
            fields: dict[str, Any] = {"supervisor_pid": self.me, "supervisor_start": self.me_start}
            if launch is Launch.PLACED:
                fields["launch"] = Launch.STARTING  # the intent, before any process exists
            store.update_job(conn, self.job, **fields)
            if launched:
                self.adopted_at = self.clock.monotonic()
            if launched and lost != self.me:
                said = f"agent pid {self.me} watches the job (its agent pid {lost} was lost)"
                store.add_event(conn, self.job, "Adopted", said, self.clock.now())
            for inst in store.instances(conn, self.job):
                self.watched.append(Watched(
                    inst["name"], inst["role"], state_path(self.home, self.job, inst["name"]),
                    InstanceStatus(inst["status"]), inst["pid"], inst["pid_start"], exit_code=inst["exit_code"],
                    started_at=inst["started_at"],
                ))  # fmt: skip
            spec = JobSpec.from_dict(json.loads(row["spec"]))
            return spec, json.loads(row["placement"]), launch if launched else None

    def targets(self, w: Watched) -> list[tuple[int, int]]:
        return instance_targets(self.home, self.job, w.name, w.pid, w.pid_start)

    def every_process(self) -> list[tuple[int, int]]:
        return job_processes(self.home, self.job, [(w.name, w.pid, w.pid_start) for w in self.watched])

    def launch(self, spec: JobSpec, placement_data: dict[str, Any]) -> None:
        """Start every instance (each recorded as it starts, then the job as STARTED)."""
        placement = placement_from_dict(spec.name, placement_data)
        with self.db.read() as conn:
            nodes = {n.name: n for n in store.get_nodes(conn)}
            settings = json.loads(store.get_meta(conn, HOSTS_SETTINGS) or "{}")
        remote = any(nodes[n].address is not None for n in placement.nodes)
        env = {**spec.env, "RINGLEADER_RESTARTS": str(self.restarts)}  # to resume from its checkpoint
        plan = build_plan(spec.name, placement, nodes, env, self.home)
        line = spec.command_line()
        # torchrun's names for the counts too, and its defaults where torchrun would set them
        plan.update(restarts=self.restarts, max_restarts=spec.max_restarts,
                    torchrun_defaults=gets_torchrun_defaults(spec))  # fmt: skip
        pfile = plan_path(self.home, spec.name)
        make_job_folders(self.home, spec.name)  # what its ranks write: real folders, not links
        if spec.image and self.resolve_image(spec, [nodes[n] for n in placement.nodes]):
            return
        if remote:  # ranks on ssh hosts: one mpirun on this machine starts them all (engines.embedded.hosts)
            plan.update(hosts=True, master_addr=master_address(placement, nodes, settings),
                        grace_s=spec.stop_grace(), lease_file=str(lease_path(self.home, spec.name)))  # fmt: skip
            plan["env"] = {**settings.get("env", {}), **plan["env"]}
        write_file(pfile.parent, pfile.name, json.dumps(plan, indent=1).encode())  # whole, before any rank starts
        # this run's lines start where the ranks' logs end now (earlier runs' are above them)
        self.resume = ResumeWatch({w.name: _size(log_path(self.home, self.job, w.name)) for w in self.watched
                                   if w.role != "launcher"})  # fmt: skip
        if remote:
            argv, detail = hosts_command(spec, plan, pfile, nodes, self.home, settings)
            self._start(f"{spec.name}-launcher", [*rank_wrapper(pfile, launcher=True, hosts=True), *argv], spec)
        elif line.mpirun:
            emulated = any(nodes[n].emulated for n in placement.nodes)
            argv = rewrite_mpirun(line, spec.workers, emulated, pfile, spec.stop_grace())
            self._start(f"{spec.name}-launcher", [*rank_wrapper(pfile, launcher=True), *argv], spec)
            detail = _shown(argv, spec)
        else:
            for instance, argv in worker_lines(spec.name, spec.command, placement, pfile):
                self._start(instance, argv, spec)
            detail = _shown(spec.command, spec)
        self.persist(event=("Started", f"{len(placement.slots)} worker(s): {detail}"), launch=Launch.STARTED)

    def finish_half_start(self, spec: JobSpec, placement_data: dict[str, Any]) -> bool:
        """A gang its lost agent was still starting; whether it now runs (else it is to be
        launched afresh). Every instance started (its launcher, or each worker, has a pid or a
        state file): adopted as it is. Workers each under their own wrapper: the gang is
        completed, the ranks that started keep running and the others start now, so no rank runs
        twice. An mpirun launcher that had not started (ranks without it wait for peers that
        never come): whatever had started is stopped, and the whole gang starts afresh."""
        launchers = [w for w in self.watched if w.role == "launcher"]
        if all(self._started(w) for w in launchers or self.watched):
            return True
        if not launchers:
            self._complete(spec, placement_data)
            return True
        stop_all(self.every_process(), self.grace_s)
        started = 0
        for w in self.watched:
            started += self._started(w)
            with contextlib.suppress(FileNotFoundError):
                w.state_file.unlink()
            w.status, w.pid, w.pid_start, w.started_at, w.dirty = InstanceStatus.PENDING, None, None, None, True
        self.persist(event=("Restarted", f"its lost agent had started {started} of {len(self.watched)} instance(s): "
                                         "those were stopped, and the whole gang is started again"))  # fmt: skip
        self.adopted_at = None
        return False

    @staticmethod
    def _started(w: Watched) -> bool:
        return w.pid is not None or read_state(w.state_file) is not None

    def _complete(self, spec: JobSpec, placement_data: dict[str, Any]) -> None:
        """Start the workers the lost agent had not; adopt one it had forked but not recorded."""
        time.sleep(FORK_SETTLE_S)  # a rank it had forked finishes exec'ing its wrapper
        pfile = plan_path(self.home, self.job)
        forked = _wrappers_by_rank(pfile)
        lines = dict(worker_lines(spec.name, spec.command, placement_from_dict(spec.name, placement_data), pfile))
        had = sum(self._started(w) for w in self.watched)
        begun = []
        for w in self.watched:
            if self._started(w):
                continue
            found = forked.get(int(w.name.rsplit("-", 1)[1]))
            if found is not None:  # started, not yet recorded: it is the one, adopted
                w.pid, w.pid_start, w.started_at = found[0], found[1], self.clock.now()
                w.status, w.dirty = InstanceStatus.RUNNING, True
            else:
                self._start(w.name, lines[w.name], spec)
                begun.append(w.name)
        said = (f"its lost agent had started {had} of {len(self.watched)} instance(s): they keep running, and "
                f"{', '.join(begun) or 'none'} started now (no rank runs twice)")  # fmt: skip
        self.persist(event=("Completed", said), launch=Launch.STARTED)

    def resolve_image(self, spec: JobSpec, nodes: Sequence[NodeSpec]) -> bool:
        """The job's image made present once on each host of its ranks, before any starts (per
        its --image-pull-policy); when it cannot be, every instance fails with the one-line reason."""
        self.nodes = nodes
        why = resolve_image(self.home, spec, nodes, cancelled=lambda: self.stop_request() is not None)
        if why is None:
            return False
        self.not_started = why
        now = self.clock.now()
        for w in self.watched:
            self._end(w, None, now, why)
        return True

    def remove_containers(self) -> None:
        """What the job's ranks left in the container runtime (a killed client's record)."""
        if self.spec is not None and self.spec.image:
            if self.nodes is None:  # an adopted job: its nodes as stored
                with self.db.read() as conn:
                    row = store.job_row(conn, self.job)
                    self.nodes = placed_nodes(conn, self.job, row["placement"] if row else None)
            remove_containers(self.home, self.spec, self.nodes)

    def _start(self, instance: str, argv: list[str], spec: JobSpec) -> None:
        w = next(w for w in self.watched if w.name == instance)
        self.starting = w
        # In its own session (a process group it leads, so stopping it reaches its program), in
        # the job's folder, with the job's own recorded environment, never the agent's (job_env).
        popen = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True, close_fds=True, cwd=spec.workdir, env=job_env(spec.submit_env),
        )  # fmt: skip
        w.popen, w.pid, w.pid_start, w.started_at = popen, popen.pid, start_time(popen.pid), self.clock.now()
        w.exit_fd = _exit_fd(popen.pid)
        w.status, w.dirty = InstanceStatus.RUNNING, True
        self.starting = None

    # -- watching ---------------------------------------------------------------------------------
    def observe(self) -> None:
        now = self.clock.now()
        launcher_done = all(w.done for w in self.watched if w.role == "launcher")
        has_launcher = any(w.role == "launcher" for w in self.watched)
        for w in self.watched:
            if w.done:
                continue
            st = read_state(w.state_file)
            if st and st.get("remote"):
                self._observe_remote(w, st, now, launcher_done)
                continue
            if st and w.pid is None:
                w.pid, w.pid_start = int(st["pid"]), st.get("pid_start")
                w.started_at = float(st.get("started_at", now))  # an mpirun rank's own start
                w.status, w.dirty = InstanceStatus.RUNNING, True
            exited = w.popen is not None and w.popen.poll() is not None
            gone = w.pid is not None and (exited or not alive(w.pid, w.pid_start))
            if gone:
                st = read_state(w.state_file)  # the wrapper writes its exit code just before it exits
            if st and "exit_code" in st:
                w.signal = st.get("signal")
                self._end(w, int(st["exit_code"]), float(st.get("ended_at", now)), "")
            elif gone:
                code = w.popen.returncode if exited and w.popen else None
                self._end(w, code, now, "process lost (no exit code recorded)")
            elif w.pid is None and has_launcher and launcher_done:
                self._end(w, None, now, "never started")
            elif w.pid is None and (w.role == "launcher" or not has_launcher) and self._launch_lost(now):
                self._end(w, None, now, NEVER_STARTED)  # (an mpirun job's ranks follow its launcher)

    def _observe_remote(self, w: Watched, st: dict[str, Any], now: float, launcher_done: bool) -> None:
        """A rank on an ssh host, as the launcher's demultiplexer recorded it: never a local
        pid (a remote pid means nothing here); over when an exit code or a loss is recorded, or
        when mpirun ended without either."""
        if w.status is InstanceStatus.PENDING and st.get("started_at"):
            w.started_at, w.status, w.dirty = float(st["started_at"]), InstanceStatus.RUNNING, True
        if "exit_code" in st:
            w.signal = st.get("signal")
            self._end(w, int(st["exit_code"]), float(st.get("ended_at", now)), "")
        elif "lost" in st:
            self._end(w, None, float(st.get("ended_at", now)), str(st["lost"]))
        elif launcher_done:
            self._end(w, None, now, f"no exit code came back from host {st.get('host')} (see the launcher's log)")

    def _launch_lost(self, now: float) -> bool:
        """Adopted while its ranks were being started, and long enough ago that a wrapper the
        lost agent started would have written its state file by now."""
        del now
        return self.adopted_at is not None and self.clock.monotonic() - self.adopted_at > START_GRACE_S

    def _end(self, w: Watched, code: int | None, ended: float, note: str) -> None:
        if code is not None and code < 0:  # killed by a signal: 128 + its number, as Kubernetes shows
            w.signal, code = signal_name(-code), 128 - code
        w.exit_code, w.ended_at, w.note, w.dirty = code, ended, note or w.note, True
        if code == 0:
            w.status = InstanceStatus.SUCCEEDED
        elif w.stopping or self._collateral(w):
            w.status = InstanceStatus.STOPPED
        else:
            w.status = InstanceStatus.FAILED

    def _collateral(self, w: Watched) -> bool:
        """Killed by a signal after (so because of) the root failure, e.g. by mpirun's abort."""
        root = self.root
        if root is None or root is w or (w.ended_at or 0) < (root.ended_at or 0):
            return False
        return w.exit_code is None or w.exit_code < 0 or w.exit_code >= 128 or w.role == "launcher"

    def pick_root(self) -> Watched | None:
        """The earliest failure; later ones that look like its consequences become STOPPED."""
        failed = [w for w in self.watched if w.status is InstanceStatus.FAILED]
        if not failed:
            return None
        self.root = min(failed, key=lambda w: (w.ended_at or 0, w.role == "launcher"))
        for w in failed:
            if self._collateral(w):
                w.status, w.dirty = InstanceStatus.STOPPED, True
        return self.root

    def persist(self, event: tuple[str, str] | None = None, launch: Launch | None = None) -> bool:
        """Write changed instances; False if the job was forgotten meanwhile. On a full disk or
        a busy state it waits (the job's processes keep running meanwhile)."""
        return store.until_recorded(self.home, lambda: self._persist(event, launch), self.log)

    def _persist(self, event: tuple[str, str] | None, launch: Launch | None) -> bool:
        dirty = [w for w in self.watched if w.dirty]
        if not dirty and event is None and not self.resume.unrecorded:
            return self.stop_request() != GONE
        with self.db.write() as conn:
            now = self.clock.now()  # taken under the lock: the wait for it may be long
            row = store.job_row(conn, self.job)
            if row is None or row["supervisor_pid"] != self.me:
                return False
            for w in dirty:
                store.update_instance(
                    conn, self.job, w.name, status=w.status.value, pid=w.pid, pid_start=w.pid_start,
                    exit_code=w.exit_code, started_at=w.started_at, ended_at=w.ended_at,
                )  # fmt: skip
                if w.done:
                    code = "none" if w.exit_code is None else str(w.exit_code)
                    code += f", {w.signal}" if w.signal else ""
                    msg = f"{w.name} {w.status.value.lower()} (exit code {code})" + (f": {w.note}" if w.note else "")
                    store.add_event(conn, self.job, "InstanceExited", msg, w.ended_at or now)
                w.dirty = False
            self._record_restart(conn, row)
            if event:
                store.add_event(conn, self.job, event[0], event[1], now)
            if launch is not None and row["launch"] != Launch.STOPPING.value:
                store.update_job(conn, self.job, launch=launch)
        return True

    def _look_for_resume(self, last: bool = False) -> None:
        """A run after a requeue: when its program first wrote a line to a rank's log since its
        placement (the line's stamp), which is when it ran again: its imports done, often its
        checkpoint loaded (its ranks' start alone leaves most of that out). Looked for every
        RESTART_LOOK_S at most while it runs, reading only what was appended since, and once
        more at the run's ``last``; a run whose program wrote nothing tells nothing."""
        if not self.restarts or self.resume.resumed_at is not None or self.started_at is None:
            return
        now = self.clock.monotonic()
        if not last and now - self.resume.looked < RESTART_LOOK_S:
            return
        self.resume.looked = now
        logs = {w.name: log_path(self.home, self.job, w.name) for w in self.watched
                if w.role != "launcher"}  # mpirun's log: its own lines and warnings, the ranks' again
        self.resume.resumed_at = first_rank_line(logs, self.resume.read, float(self.started_at))

    def _record_restart(self, conn: sqlite3.Connection, row: sqlite3.Row) -> None:
        """From the run's placement to its program's first line is what its restart took on this
        cluster (a move's is priced by the recent ones)."""
        if self.resume.resumed_at is None or self.resume.recorded:
            return
        if row["started_at"] is not None:
            store.add_restart(conn, self.job, float(row["started_at"]), self.resume.resumed_at)
        self.resume.recorded = True

    def stop_request(self) -> float | None:
        """A read (no lock), at most once a second unless poked: the grace a delete asked for,
        GONE when the job was forgotten, None when neither."""
        now = self.clock.monotonic()
        if now - self.checked_at < 1.0:
            return self.stop_grace
        self.checked_at = now
        with self.db.read() as conn:
            row = store.job_row(conn, self.job)
        if row is None:
            self.stop_grace = GONE
        elif row["supervisor_pid"] != self.me:
            self.stop_grace = OTHER
        elif row["launch"] in (Launch.STOPPING.value, Launch.PREEMPTING.value):
            self.stop_grace = float(row["stop_grace"] or 0.0)
            self.preempting = row["launch"] == Launch.PREEMPTING.value
        return self.stop_grace

    def stop_others(self, why: str) -> None:
        """SIGTERM, grace, SIGKILL every instance still running; they end as STOPPED."""
        for w in self.watched:
            if not w.done:
                w.note, w.stopping = why, True
        # Every instance's processes, finished ones too: a lost wrapper may leave its program behind.
        # A launcher whose ranks have all ended has nothing left to stop gracefully: mpirun,
        # aborting, would only sit out its own kill timeout (the grace) before it exits.
        stop_all([t for w in self.watched for t in self.targets(w)], self.grace_s, self._ranks_over, self.wrappers())
        self.observe()
        for w in self.watched:
            if not w.done and not any(alive(p, s) for p, s in self.targets(w)):
                self._end(w, w.popen.poll() if w.popen else None, self.clock.now(), why)

    def wrappers(self) -> list[tuple[int, int]]:
        """Each running instance's wrapper (the launcher's and every local rank's), which stops
        its program once: what a stop tells."""
        found = []
        for w in self.watched:
            st = read_state(w.state_file) or {}
            if w.done or "exit_code" in st or st.get("remote"):
                continue
            pid, start = (w.pid, w.pid_start) if w.pid else (st.get("pid"), st.get("pid_start"))
            if pid and start is not None:
                found.append((int(pid), int(start)))
        return found

    def _ranks_over(self) -> bool:
        """Whether an mpirun job's ranks have all ended (read afresh); False without a launcher."""
        if not any(w.role == "launcher" for w in self.watched):
            return False
        self.observe()
        return all(w.done for w in self.watched if w.role != "launcher")

    def forget(self, grace_s: float) -> None:
        """A delete's request: every process of the job stopped (SIGTERM, ``grace_s``, SIGKILL),
        what its containers left removed, its folders, then its rows (the logs first: on a full
        disk they are what frees the room to record), and the queue's pass."""
        if grace_s == GONE:  # forgotten already: only this supervisor's own children are left
            grace_s = 0.0
        self._stop_everything(grace_s)
        remove_job_folders(self.home, self.job)  # never through a link put in a folder's place
        if store.until_recorded(self.home, self._forget_rows, self.log):
            self.placed()

    def _stop_everything(self, grace_s: float) -> None:
        """Every process of the job stopped (SIGTERM, ``grace_s``, SIGKILL), our own children
        reaped, and what its containers left removed: a delete's and a preemption's stop."""
        stop_all(self.every_process(), grace_s)
        for w in self.watched:
            if w.popen is not None and w.popen.poll() is None:
                w.popen.kill()
            if w.popen is not None:
                w.popen.wait()
        self.remove_containers()

    def requeue(self, grace_s: float) -> bool:
        """A preemption's request: every process stopped as for a delete (SIGTERM, ``grace_s``,
        SIGKILL), what its containers left removed and its run folder (rank states, plan) with
        them; its logs are kept, and its next run appends to them. Then the job is back in the
        queue with its GPUs freed, and the queue's pass runs (its preemptor starts). False when a
        delete came meanwhile: that one forgets it."""
        self._stop_everything(grace_s)
        self._await_fence(stoppable=False)
        self._look_for_resume(last=True)
        remove_job_folders(self.home, self.job, ("run",))
        requeued = store.until_recorded(self.home, self._requeue_rows, self.log)
        if requeued:
            self.placed()
        return requeued is not None

    def _requeue_rows(self) -> list[str] | None:
        """The queue's placements after the requeue (None: not requeued, a delete came first)."""
        with self.db.write() as conn:
            row = store.job_row(conn, self.job)
            if row is None or row["launch"] != Launch.PREEMPTING.value:
                return None
            self._record_restart(conn, row)
            return requeue_stopped(conn, self.job, self.clock.now())

    def _forget_rows(self) -> bool:
        with self.db.write() as conn:
            row = store.job_row(conn, self.job)
            if row is None or row["launch"] != Launch.STOPPING.value:
                return False
            store.delete_job(conn, self.job)
            return bool(schedule_pass(conn, self.clock.now()))

    # -- the phases' steps: each does its phase's work and says which phase follows ------------
    def _launching(self) -> Phase:
        try:
            self.launch(self.spec_held(), self.placement)
        except OSError as exc:
            # The instance whose start raised is the root cause, not merely the first one.
            self.root = self.starting or self.watched[0]
            self._end(self.root, None, self.clock.now(), f"cannot start: {exc}")
        return Phase.STOPPING if self.stop_grace is not None else Phase.RUNNING

    def _completing(self) -> Phase:
        runs = self.finish_half_start(self.spec_held(), self.placement)
        if self.stop_grace is not None:
            return Phase.STOPPING
        return Phase.RUNNING if runs else Phase.LAUNCHING

    def _running(self) -> Phase:
        """Watched until the first failure, its time limit, its end or a stop asked for."""
        while True:
            self._look()
            self._look_for_resume()
            if self.root is not None:
                return Phase.FAILING
            if self.deadline is not None and self.clock.monotonic() >= self.deadline:
                return Phase.TIMING_OUT
            if (after := self._over()) is not None:
                return after
            self.pause()

    def _stopping_the_rest(self) -> Phase:
        """FAILING and TIMING_OUT: the instances still running stopped, then watched to the end."""
        if self.phase is Phase.FAILING and self.root is not None:
            why = f"stopped: {self.root.name} failed"
        else:
            why = f"stopped: the job reached its time limit ({self._limit_text()})"
        self.persist()
        self.stop_others(why)
        while (after := self._over()) is None:
            self.pause()
            self._look()
        return after

    def _look(self) -> None:
        self.observe()
        if self.root is None:
            self.root = self.pick_root()

    def _over(self) -> Phase | None:
        """STOPPING when a stop was asked for (or the job forgotten), ENDED when every instance
        ended, else None: it runs on."""
        if self.stop_request() is not None or not self.persist():
            return Phase.STOPPING
        if all(w.done for w in self.watched):
            return Phase.ENDED
        return None

    def _fenced_at(self) -> tuple[float, list[str]] | None:
        """When the ranks on ssh hosts whose end is unknown (no exit code came back: cut off, or
        mpirun stopped first) have stopped writing at the latest, and their hosts: each stops
        itself once its lease lapses, a lease and a grace after the last renewal the head sent
        (``rank.fence_bound``; recorded before it was sent). None: every end is known, or no
        renewal was ever sent (no rank started its program)."""
        unsure = [st for w in self.watched if (st := read_state(w.state_file) or {}).get("remote")
                  and "exit_code" not in st]  # fmt: skip
        if not unsure:
            return None
        hosts = sorted({str(st.get("host")) for st in unsure})
        try:
            record = lease_path(self.home, self.job).read_text()
        except FileNotFoundError:
            return None
        except OSError:
            record = ""
        try:
            return float(json.loads(record)["fenced_at"]), hosts
        except (ValueError, KeyError, TypeError):  # unreadable: the whole bound, counted from now
            return fence_bound(self.clock.now(), self.grace_s), hosts

    def _await_fence(self, stoppable: bool = True) -> None:
        """Before the job's end is recorded (its GPUs freed, its restart placed): every rank whose
        end is unknown has stopped itself, so none writes after its gang starts elsewhere. When
        ``stoppable``, a delete asked for meanwhile ends the wait (the job is forgotten, not
        restarted); a preemption's requeue waits it out (a delete then forgets the job)."""
        fence = self._fenced_at()
        if fence is None or self.clock.now() >= fence[0]:
            return
        until, hosts = fence
        at = time.strftime("%H:%M:%S", time.localtime(until))
        self.persist(event=("Fencing", f"no exit code came back from {', '.join(hosts)}: its ranks stop themselves "
                                       f"once their lease lapses ({LEASE_S:g} s after the last renewal, then "
                                       f"{self.grace_s:g} s of grace): waiting until {at}"))  # fmt: skip
        while self.clock.now() < until and not (stoppable and self.stop_request() is not None):
            self.pause()

    def _ended(self) -> Phase:
        self._await_fence()
        self._look_for_resume(last=True)
        if any(w.status is not InstanceStatus.SUCCEEDED for w in self.watched):
            # A client that was stopped can leave its container's record (one that ended by
            # itself removed it: --rm). Before the job is over: a `get` that says so finds none.
            self.remove_containers()
        return Phase.RELEASED if self.finalize() else Phase.STOPPING

    def _stopping(self) -> Phase:
        self.poke()
        request = self.stop_request()
        if request == OTHER:  # another agent's: it is never this one's to stop
            return Phase.RELEASED
        if self.preempting and request not in (None, GONE):
            return Phase.REQUEUING
        return Phase.FORGETTING

    def _requeuing(self) -> Phase:
        return Phase.RELEASED if self.requeue(self.stop_grace or 0.0) else Phase.FORGETTING

    def _forgetting(self) -> Phase:
        self.poke()
        request = self.stop_request()  # a delete that came while it was being preempted
        if request != OTHER:
            self.forget(request or 0.0)
        return Phase.RELEASED

    def spec_held(self) -> JobSpec:
        assert self.spec is not None, "a phase after CLAIMING holds the job's spec"
        return self.spec

    def _limit_text(self) -> str:
        limit = self.time_limit_s or 0.0
        return f"{limit:g} s" if limit < 90 else approx_duration(limit).removeprefix("~")

    def pause(self) -> None:
        """Until one of the processes this supervisor started exits, or POLL_S at most: a job's
        end is recorded as soon as its last process ends, not up to a poll period later. (State
        files, adopted and remote instances are read every POLL_S.)"""
        waiting = select.poll()  # not select.select: no ceiling on descriptor numbers
        for w in self.watched:
            if w.exit_fd is None or w.popen is None:
                continue
            if w.popen.poll() is not None:  # exited (now reaped): its pidfd would stay readable
                os.close(w.exit_fd)
                w.exit_fd = None
            else:
                waiting.register(w.exit_fd, select.POLLIN)
        waiting.poll(POLL_S * 1000)

    def finalize(self) -> bool:
        """The job's end recorded, its GPUs freed and the queue's pass run; False when a delete
        came first (the caller then forgets it)."""
        return store.until_recorded(self.home, self._finalize, self.log)

    def _finalize(self) -> bool:
        with self.db.write() as conn:
            now = self.clock.now()  # taken under the lock: the wait for it may be long
            row = store.job_row(conn, self.job)
            if row is None or row["supervisor_pid"] != self.me or row["status"] != JobStatus.RUNNING.value:
                return True
            if row["launch"] == Launch.STOPPING.value:
                self.stop_grace = float(row["stop_grace"] or 0.0)
                return False
            self._record_restart(conn, row)
            # The job's true end is its last instance's own (an adopted job's may be long before now).
            ends = [w.ended_at for w in self.watched]
            ended = max(e for e in ends if e is not None) if ends and None not in ends else None
            if self.not_started:
                finish_job(conn, self.job, JobStatus.FAILED, self.not_started, now)
            elif Phase.TIMING_OUT in self.passed:  # first: ranks that exit 0 on SIGTERM still did not finish
                grace = f"SIGTERM, then SIGKILL after {self.grace_s:g} s"
                reason = f"TIMEOUT: reached its time limit of {self._limit_text()}; its processes were stopped "
                reason += f"({grace})"
                finish_job(conn, self.job, JobStatus.FAILED, reason, now)
            elif self.root is not None:
                code = "none" if self.root.exit_code is None else self.root.exit_code
                reason = f"root cause: {self.root.name} failed (exit code {code})"
                reason += f": {self.root.note}" if self.root.note else ""
                failure = self._failure(conn, self.root)
                if self.spec is not None and restart_number(failed_runs(conn, self.job), self.spec.max_restarts):
                    remove_job_folders(self.home, self.job, ("run",))  # the next run makes its own
                    restart_job(conn, self.job, failure, reason, now)
                else:
                    blame_node(conn, self.job, failure, now)
                    reason += f" ({failure.why})" if failure.node_fault else ""
                    finish_job(conn, self.job, JobStatus.FAILED, reason, now, ended_at=ended)
            elif any(w.status is not InstanceStatus.SUCCEEDED for w in self.watched):
                finish_job(conn, self.job, JobStatus.FAILED, "stopped before every instance succeeded", now)
            else:
                finish_job(conn, self.job, JobStatus.SUCCEEDED, "", now, ended_at=ended)
            placed = schedule_pass(conn, now)
        if placed:
            self.placed()
        return True

    def _failure(self, conn: sqlite3.Connection, root: Watched) -> Failure:
        """How ``root`` failed (jobs/failures.py): its exit, its node, the end of its log."""
        instances = store.instances(conn, self.job)
        node = next((i["node"] for i in instances if i["name"] == root.name), None)
        nodes = {s.name: s for s in store.get_nodes(conn)}
        remote = node in nodes and nodes[node].address is not None
        job_nodes = sorted({i["node"] for i in instances if i["node"]})
        try:
            tail = read_log(log_path(self.home, self.job, root.name), tail=200)[-LOG_TAIL_BYTES:]
        except (OSError, RingleaderError):
            tail = ""
        return classify(root.exit_code, root.note, node, remote, tail, job_nodes)

    def run(self) -> None:
        """Supervise the job until it ends or is forgotten; what it holds open is closed
        whatever happens (the agent lives on after a thread that raised)."""
        try:
            self._run()
        finally:
            self._close()

    def _run(self) -> None:
        steps: dict[Phase, Callable[[], Phase]] = {
            Phase.CLAIMING: self.claim, Phase.COMPLETING: self._completing, Phase.LAUNCHING: self._launching,
            Phase.RUNNING: self._running, Phase.FAILING: self._stopping_the_rest,
            Phase.TIMING_OUT: self._stopping_the_rest, Phase.ENDED: self._ended, Phase.STOPPING: self._stopping,
            Phase.REQUEUING: self._requeuing, Phase.FORGETTING: self._forgetting,
        }  # fmt: skip
        while self.phase is not Phase.RELEASED:
            self.enter(steps[self.phase]())

    def _close(self) -> None:
        for w in self.watched:
            if w.exit_fd is not None:
                os.close(w.exit_fd)
                w.exit_fd = None
        self.db.close()


def _shown(argv: Sequence[str], spec: JobSpec) -> str:
    """A started line as an event tells it (an image job's guard not spelled out)."""
    if spec.image:
        return readable(argv)
    return shlex.join(argv)


def _wrappers_by_rank(plan: Path) -> dict[int, tuple[int, int]]:
    """Rank -> (pid, start) of each worker wrapper running for the job whose ``plan`` it reads."""
    found = {}
    for pid, started, args in processes_with_args(RANK_FILE, str(plan)):
        head = args[: args.index("--")] if "--" in args else args  # the wrapper's own, not the program's
        rank = head[head.index("--rank") + 1 :][:1] if "--rank" in head else []
        if rank and rank[0].isdigit():
            found[int(rank[0])] = (pid, started)
    return found


def job_processes(
    home: Path, job: str, instances: Sequence[tuple[str, int | None, int | None]]
) -> list[tuple[int, int]]:
    """Every recorded process of a job's ``instances`` (name, pid, start), and every wrapper
    started but not recorded yet (its agent was lost): a launcher's, an ssh hosts' launcher's
    or a rank's, found by its plan."""
    found = [t for name, pid, started in instances for t in instance_targets(home, job, name, pid, started)]
    for wrapper in (RANK_MODULE, DEMUX_MODULE, RANK_FILE):
        found += find_by_args(wrapper, str(plan_path(home, job)))
    return list(dict.fromkeys(found))


def _size(path: Path) -> int:
    """A file's size; 0 when it does not exist (yet) or cannot be read."""
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _exit_fd(pid: int) -> int | None:
    """A pidfd for our own child (it cannot be a reused pid: we have not reaped it yet); None
    where the kernel has no pidfd_open (before Linux 5.3): then polling alone notices exits."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def rewrite_mpirun(line: CommandLine, workers: int, emulated: bool, plan: Path, grace_s: float) -> list[str]:
    """The mpirun line that starts ``workers`` ranks on this host, each under the rank wrapper
    and stopped as every rank is (``grace_s`` between SIGTERM and SIGKILL)."""
    names = {o.name for o in line.kept_options}
    extra = root_option(line.kept_options, os.geteuid() == 0)
    crowded = workers > (os.cpu_count() or 1)
    if (emulated or crowded) and "oversubscribe" not in names:
        extra.append("--oversubscribe")
    if emulated and "bind-to" not in names:
        extra += ["--bind-to", "none"]
    # Every node is a process group on this host, so all ranks go to localhost.
    head = [line.argv[0], "-np", str(workers), "--host", f"localhost:{workers}"]
    kept, stopping = stop_options(list(line.kept_options), grace_s)
    return [*head, *extra, *stopping, *option_words(kept), *rank_wrapper(plan), *line.program]
