"""One detached supervisor per running job: ``python -m ringleader.engines.embedded.supervisor HOME JOB``.

It claims the job (one live supervisor per job), starts the job's instances (or adopts them
after a crash), watches them, fails the job on the first failure (earliest failure = root
cause; siblings get SIGTERM, then SIGKILL after a grace period), frees the GPUs, runs a
scheduling pass so pending jobs start without anyone acting, and reconciles (so a peer job
whose supervisor was lost is noticed without a user command). If its job disappears (deleted)
it stops every process it started.
"""

from __future__ import annotations

import json
import os
import select
import shlex
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ringleader.engines.embedded import store
from ringleader.engines.embedded.early import IMAGE_SEEN_FRESH_S, Started, start_rank, write_private
from ringleader.engines.embedded.lifecycle import (
    HOSTS_SETTINGS,
    IMAGE_HERE_AT,
    finish_job,
    schedule_pass,
    spawn_supervisors,
)
from ringleader.engines.embedded.liveness import PEER_CHECK_S, Heartbeat
from ringleader.engines.embedded.watchdog import ensure_watchdog
from ringleader.errors import RingleaderError
from ringleader.jobs.commandline import is_mpirun, read_line
from ringleader.jobs.spec import JobSpec
from ringleader.jobs.states import InstanceStatus, JobStatus
from ringleader.runtime.plan import (
    StoredPlacement,
    build_plan,
    instance_targets,
    job_env,
    plan_path,
    plan_written,
    rank_wrapper,
    read_state,
    state_path,
    worker_lines,
)  # fmt: skip
from ringleader.runtime.procs import alive, grace_seconds, start_time, stop_all
from ringleader.runtime.rank import signal_name

# Every job's ranks wait for this process to start: what only some jobs need (the scheduler and
# topology packages behind ssh hosts, images, a queue pass, reconciliation) is imported where used.
if TYPE_CHECKING:
    from ringleader.topology import NodeSpec

POLL_S = 0.25
# After adoption: how long an instance with neither a pid nor a state file may still be a
# wrapper that the lost supervisor started and that has not written its state file yet.
START_GRACE_S = 5.0
NEVER_STARTED = "never started: supervisor died during launch"


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


class Supervisor:
    def __init__(
        self, home: Path, job: str, image_here_at: float | None = None, started: Started | None = None
    ) -> None:
        self.home, self.job = home, job
        self.started = started  # the ranks its early supervisor started before importing this (see early)
        self.image_here_at = image_here_at  # when the submit saw the job's image on this host
        self.db, _ = store.Store.open(home, create=False)
        self.me, self.me_start = os.getpid(), start_time(os.getpid())
        self.watched: list[Watched] = []
        self.root: Watched | None = None
        self.interrupted = False
        self.adopted_at: float | None = None  # time.monotonic() when this supervisor adopted the job
        self.checked_at = 0.0  # when still_mine() last read the job
        self.starting: Watched | None = None  # the instance being started, if Popen raises
        self.heartbeat = Heartbeat(home, job, self.me, self.me_start)
        self.peers_checked_at = time.monotonic()
        self.started_at: float | None = None  # when the job was placed (wall clock, as recorded)
        self.time_limit_s: float | None = None
        self.deadline: float | None = None  # time.monotonic() at which the time limit is reached
        self.timed_out = False
        self.spec: JobSpec | None = None
        self.nodes: Sequence[NodeSpec | str] | None = None  # where the job's ranks run (see containers.Nodes)
        self.not_started: str | None = None  # why no rank could start (the image could not be had)

    def log(self, message: str) -> None:
        """A line in run/<job>/supervisor.log (this process's stdout)."""
        print(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} supervisor {self.me}: {message}", flush=True)

    # -- claim, launch, adopt -------------------------------------------------------------------
    def claim(self) -> tuple[JobSpec, dict[str, Any], bool] | None:
        """Become the job's supervisor unless another live one is; (spec, placement, launched)."""
        claimed = store.until_recorded(self.home, self._claim, self.log)
        if claimed is not None:
            spec, _, _ = claimed
            self.time_limit_s = spec.time_limit_s
            if spec.time_limit_s is not None:
                # The wall clock read once, for the time already run (an adopted job); from
                # here on the limit runs on the monotonic clock, which no clock change moves.
                ran = max(0.0, time.time() - float(self.started_at or time.time()))
                self.deadline = time.monotonic() + max(0.0, spec.time_limit_s - ran)
        return claimed

    def _claim(self) -> tuple[JobSpec, dict[str, Any], bool] | None:
        self.watched.clear()  # a retried claim starts afresh
        with self.db.write() as conn:
            row = store.job_row(conn, self.job)
            if row is None or row["status"] != JobStatus.RUNNING.value:
                return None
            other = row["supervisor_pid"]
            # Claimed for this very process by the command that placed the job (see early):
            # its own to start, not a lost supervisor's to adopt.
            mine = store.held_by(row, self.me, self.me_start)
            if other and not mine and alive(other, row["supervisor_start"]):
                return None
            # A lost holder that had not written the plan started no rank: started afresh here.
            launched = row["launched_at"] is not None and not mine and plan_written(self.home, self.job)
            self.started_at = row["started_at"]
            fields: dict[str, Any] = {"supervisor_pid": self.me, "supervisor_start": self.me_start}
            if row["launched_at"] is None:
                fields["launched_at"] = time.time()  # the intent, before any process exists
            store.update_job(conn, self.job, **fields)
            if launched:
                self.adopted_at = time.monotonic()
                store.add_event(conn, self.job, "Adopted", f"supervisor pid {self.me} watches the job", time.time())
            for inst in store.instances(conn, self.job):
                self.watched.append(Watched(
                    inst["name"], inst["role"], state_path(self.home, self.job, inst["name"]),
                    InstanceStatus(inst["status"]), inst["pid"], inst["pid_start"], exit_code=inst["exit_code"],
                    started_at=inst["started_at"],
                ))  # fmt: skip
            return JobSpec.from_dict(json.loads(row["spec"])), json.loads(row["placement"]), launched

    def targets(self, w: Watched) -> list[tuple[int, int]]:
        return instance_targets(self.home, self.job, w.name, w.pid, w.pid_start)

    def launch(self, spec: JobSpec, placement_data: dict[str, Any]) -> bool:
        """Start every instance; False if the job was deleted meanwhile (then all is stopped)."""
        placement = StoredPlacement.from_dict(placement_data)
        if self.started is not None:
            return self.take_over(spec, placement, self.started)
        with self.db.read() as conn:
            kinds = store.node_kinds(conn)
            remote = any(kinds[n].remote for n in placement.nodes)
            # Full node specs only for ssh hosts.
            nodes = {n.name: n for n in store.get_nodes(conn)} if remote else {}
            settings = json.loads(store.get_meta(conn, HOSTS_SETTINGS) or "{}") if remote else {}
        plan = build_plan(spec.name, placement, kinds, spec.env, self.home)
        pfile = plan_path(self.home, spec.name)
        pfile.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        if spec.image and self.resolve_image(spec, [nodes[n] if remote else n for n in placement.nodes]):
            return True
        if remote:
            # Ranks on ssh hosts: one mpirun on this machine starts them all (see engines.embedded.hosts).
            from ringleader.engines.embedded.hosts.launch import hosts_command, master_address
            from ringleader.jobs.codec import placement_from_dict

            address = master_address(placement_from_dict(spec.name, placement_data), nodes, settings)
            plan.update(hosts=True, master_addr=address)
            plan["env"] = {**settings.get("env", {}), **plan["env"]}
            write_private(pfile, json.dumps(plan, indent=1))
            argv, detail = hosts_command(spec, plan, pfile, nodes, self.home, settings)
            self._start(f"{spec.name}-launcher", [*rank_wrapper(pfile, launcher=True), *argv], spec)
        elif is_mpirun(spec.command):
            write_private(pfile, json.dumps(plan, indent=1))
            emulated = any(kinds[n].emulated for n in placement.nodes)
            argv = rewrite_mpirun(spec.command, spec.workers, emulated, pfile)
            self._start(f"{spec.name}-launcher", [*rank_wrapper(pfile, launcher=True), *argv], spec)
            detail = _shown(argv, spec)
        else:
            write_private(pfile, json.dumps(plan, indent=1))
            for instance, argv in worker_lines(spec.name, spec.command, placement, pfile):
                self._start(instance, argv, spec)
            detail = _shown(spec.command, spec)
        if not self.persist(event=("Started", f"{len(placement.slots)} worker(s): {detail}")):
            self.abandon()
            return False
        return True

    def take_over(self, spec: JobSpec, placement: StoredPlacement, started: Started) -> bool:
        """Watch the ranks the early supervisor started (see early) as if started here."""
        if spec.image:
            self.nodes = list(placement.nodes)  # every rank on this host, where the command saw the image
        for instance, popen, pid_start, at in started.ranks:
            self._track(next(w for w in self.watched if w.name == instance), popen, pid_start, at)
        if started.failed is not None:
            instance, exc = started.failed
            self.starting = next(w for w in self.watched if w.name == instance)
            raise exc
        if not self.persist(event=("Started", f"{len(started.ranks)} worker(s): {_shown(spec.command, spec)}")):
            self.abandon()
            return False
        return True

    def resolve_image(self, spec: JobSpec, nodes: Sequence[NodeSpec | str]) -> bool:
        """The job's image made present once on each host of its ranks, before any starts (per
        its --image-pull-policy); when it cannot be, every instance fails with the one-line reason."""
        self.nodes = nodes
        seen = self.image_here_at
        here_known = seen is not None and 0.0 <= time.time() - seen <= IMAGE_SEEN_FRESH_S
        if here_known and all(isinstance(n, str) for n in nodes):
            return False  # every rank on this host, where the submit just saw the image
        from ringleader.engines.embedded.containers import resolve_image

        why = resolve_image(self.home, spec, nodes, cancelled=lambda: self.interrupted or not self.still_mine(),
                            here_known=here_known)  # fmt: skip
        if why is None:
            return False
        self.not_started = why
        for w in self.watched:
            self._end(w, None, time.time(), why)
        return True

    def remove_containers(self) -> None:
        """What the job's ranks left in the container runtime (a killed client's record)."""
        if self.spec is not None and self.spec.image:
            from ringleader.engines.embedded.containers import placed_nodes, remove_containers

            if self.nodes is None:  # an adopted job: its nodes as stored
                with self.db.read() as conn:
                    row = store.job_row(conn, self.job)
                    self.nodes = placed_nodes(conn, self.job, row["placement"] if row else None)
            remove_containers(self.home, self.spec, self.nodes)

    def _start(self, instance: str, argv: list[str], spec: JobSpec) -> None:
        w = next(w for w in self.watched if w.name == instance)
        self.starting = w
        # The job's own recorded environment, never this supervisor's (see job_env).
        popen = start_rank(argv, spec.workdir, job_env(spec.submit_env))
        self._track(w, popen, start_time(popen.pid), time.time())
        self.starting = None

    def _track(self, w: Watched, popen: subprocess.Popen[bytes], pid_start: int | None, started_at: float) -> None:
        w.popen, w.pid, w.pid_start, w.started_at = popen, popen.pid, pid_start, started_at
        w.exit_fd = _exit_fd(popen.pid)
        w.status, w.dirty = InstanceStatus.RUNNING, True

    # -- watching ---------------------------------------------------------------------------------
    def observe(self) -> None:
        now = time.time()
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
        """Adopted, and long enough ago that a wrapper the lost supervisor started would have
        written its state file by now."""
        del now
        return self.adopted_at is not None and time.monotonic() - self.adopted_at > START_GRACE_S

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

    def persist(self, event: tuple[str, str] | None = None) -> bool:
        """Write changed instances; False if the job was deleted or taken over meanwhile. On a
        full disk it waits for space (the job's processes keep running meanwhile)."""
        return store.until_recorded(self.home, lambda: self._persist(event), self.log)

    def _persist(self, event: tuple[str, str] | None) -> bool:
        dirty = [w for w in self.watched if w.dirty]
        if not dirty and event is None:
            return self.still_mine()
        with self.db.write() as conn:
            now = time.time()  # taken under the lock: the wait for it may be long
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
            if event:
                store.add_event(conn, self.job, event[0], event[1], now)
        return True

    def still_mine(self) -> bool:
        """A read (no lock): is the job still there and still ours? At most once a second."""
        now = time.monotonic()
        if now - self.checked_at < 1.0:
            return True
        self.checked_at = now
        with self.db.read() as conn:
            row = store.job_row(conn, self.job)
        return row is not None and row["supervisor_pid"] == self.me

    def stop_others(self, why: str) -> None:
        """SIGTERM, grace, SIGKILL every instance still running; they end as STOPPED."""
        for w in self.watched:
            if not w.done:
                w.note, w.stopping = why, True
        # Every instance's processes, finished ones too: a lost wrapper may leave its program behind.
        stop_all([t for w in self.watched for t in self.targets(w)], grace_seconds())
        self.observe()
        for w in self.watched:
            if not w.done and not any(alive(p, s) for p, s in self.targets(w)):
                self._end(w, w.popen.poll() if w.popen else None, time.time(), why)

    def stop_started(self) -> None:
        """The ranks the early supervisor started for a job that is no longer this process's
        (deleted meanwhile): stopped, as abandon() stops the ones it watches."""
        ranks = self.started.ranks if self.started is not None else []
        targets = [instance_targets(self.home, self.job, name, p.pid, started) for name, p, started, _ in ranks]
        stop_all([t for each in targets for t in each], grace_seconds())
        for _, popen, _, _ in ranks:
            if popen.poll() is None:
                popen.kill()
            popen.wait()

    def abandon(self) -> None:
        """The job is gone (deleted) or no longer ours: stop every process this supervisor
        started or adopted, recording nothing."""
        stop_all([t for w in self.watched for t in self.targets(w)], grace_seconds())
        for w in self.watched:  # reap our own children
            if w.popen is not None and w.popen.poll() is None:
                w.popen.kill()
                w.popen.wait()
        self.remove_containers()

    def watch(self) -> bool:
        stopping = False
        while True:
            self.observe()
            if self.root is None:
                self.root = self.pick_root()
            if not stopping and self.root is None and self.deadline is not None and time.monotonic() >= self.deadline:
                self.timed_out = True
            if (self.root or self.interrupted or self.timed_out) and not stopping:
                stopping = True
                if self.root:
                    why = f"stopped: {self.root.name} failed"
                elif self.timed_out:
                    why = f"stopped: the job reached its time limit ({self._limit_text()})"
                else:
                    why = "stopped: supervisor was signalled"
                if not self.persist():
                    self.abandon()
                    return False
                self.stop_others(why)
            if not self.persist():
                self.abandon()
                return False
            if all(w.done for w in self.watched):
                return True
            self.watch_peers()
            self.pause()

    def watch_peers(self) -> None:
        """Every PEER_CHECK_S: reconcile, so a peer job whose supervisor died or stopped
        answering is adopted or finished, and the jobs waiting for its GPUs start, with no
        command typed. A busy or full state only delays it to the next check."""
        if time.monotonic() - self.peers_checked_at < PEER_CHECK_S:
            return
        self.peers_checked_at = time.monotonic()
        ensure_watchdog(self.home)  # the last supervisor's watcher (see watchdog)
        from ringleader.engines.embedded.reconcile import reconcile

        try:
            reconcile(self.db)
        except (RingleaderError, sqlite3.OperationalError, OSError) as exc:
            self.log(f"peer check skipped: {exc}")

    def _limit_text(self) -> str:
        from ringleader.scheduler.types import approx_duration

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

    def finalize(self) -> None:
        store.until_recorded(self.home, self._finalize, self.log)

    def _finalize(self) -> None:
        with self.db.write() as conn:
            now = time.time()  # taken under the lock: the wait for it may be long
            row = store.job_row(conn, self.job)
            if row is None or row["supervisor_pid"] != self.me or row["status"] != JobStatus.RUNNING.value:
                return
            if self.not_started:
                finish_job(conn, self.job, JobStatus.FAILED, self.not_started, now)
            elif self.timed_out:  # first: ranks that exit 0 on SIGTERM still did not finish
                grace = f"SIGTERM, then SIGKILL after {grace_seconds():g} s"
                reason = f"TIMEOUT: reached its time limit of {self._limit_text()}; its processes were stopped "
                reason += f"({grace})"
                finish_job(conn, self.job, JobStatus.FAILED, reason, now)
            elif self.root is not None:
                code = "none" if self.root.exit_code is None else self.root.exit_code
                reason = f"root cause: {self.root.name} failed (exit code {code})"
                reason += f": {self.root.note}" if self.root.note else ""
                finish_job(conn, self.job, JobStatus.FAILED, reason, now)
            elif self.interrupted or any(w.status is not InstanceStatus.SUCCEEDED for w in self.watched):
                finish_job(conn, self.job, JobStatus.FAILED, "stopped before every instance succeeded", now)
            else:
                finish_job(conn, self.job, JobStatus.SUCCEEDED, "", now)
            placed = schedule_pass(conn, now)
        spawn_supervisors(self.home, placed)

    def run(self) -> int:
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, lambda _s, _f: setattr(self, "interrupted", True))
        if self.started is not None and self.started.interrupted:  # signalled before these handlers
            self.interrupted = True
        self.heartbeat.start()  # before the claim, so the beat file names the holder from the first moment
        claimed = self.claim()
        if claimed is None:
            self.stop_started()
            return 0
        spec, placement, launched = claimed
        ensure_watchdog(self.home)
        self.spec = spec
        if not launched:
            try:
                ok = self.launch(spec, placement)
            except OSError as exc:
                # The instance whose start raised is the root cause, not merely the first one.
                self.root = self.starting or self.watched[0]
                self._end(self.root, None, time.time(), f"cannot start: {exc}")
                ok = True
            if not ok:
                return 0
        finished = self.watch()
        if finished and any(w.status is not InstanceStatus.SUCCEEDED for w in self.watched):
            # A client that was stopped can leave its container's record (one that ended by
            # itself removed it: --rm). Before the job is over: a `get` that says so finds none.
            # (Not finished: abandon() removed them.)
            self.remove_containers()
        if finished:
            self.finalize()
        # Every supervisor reconciles when its job ends, so a peer whose supervisor was lost is
        # noticed (GPUs freed or the job adopted) without anyone running a command.
        from ringleader.engines.embedded.reconcile import reconcile

        store.until_recorded(self.home, lambda: reconcile(self.db), self.log)
        return 0


def _shown(argv: Sequence[str], spec: JobSpec) -> str:
    """A started line as an event tells it (an image job's guard not spelled out)."""
    if spec.image:
        from ringleader.runtime.containers import readable

        return readable(argv)
    return shlex.join(argv)


def _exit_fd(pid: int) -> int | None:
    """A pidfd for our own child (it cannot be a reused pid: we have not reaped it yet); None
    where the kernel has no pidfd_open (before Linux 5.3): then polling alone notices exits."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def main(argv: list[str]) -> int:
    home, job = Path(argv[0]), argv[1]
    seen = float(argv[3]) if argv[2:3] == [IMAGE_HERE_AT] else None
    if job.startswith("--"):  # started before its job: the folder's spare (see spare)
        from ringleader.engines.embedded import spare

        _preload()  # a spare has time
        try:
            taken = spare.wait_for_job(home)
        except OSError as exc:  # cannot listen (a full disk, no /proc): the watchdog stops trying
            print(f"spare supervisor {os.getpid()}: not started: {exc}", flush=True)
            return spare.NOT_LISTENING
        if taken is None:
            return 0
        job, seen = taken
    return Supervisor(home, job, image_here_at=seen).run()


def _preload() -> None:
    """What a job's start imports where used (a supervisor started for one job imports only what
    that job needs), imported by a spare while it waits."""
    import ringleader.engines.embedded.containers
    import ringleader.engines.embedded.reconcile
    import ringleader.runtime.rank  # noqa: F401


def rewrite_mpirun(argv: Sequence[str], workers: int, emulated: bool, plan: Path) -> list[str]:
    """The mpirun line that starts ``workers`` ranks on this host, each under the rank wrapper."""
    line = read_line(argv)
    names = {o.name for o in line.kept_options}
    extra: list[str] = []
    if os.geteuid() == 0 and "allow-run-as-root" not in names:
        extra.append("--allow-run-as-root")
    crowded = workers > (os.cpu_count() or 1)
    if (emulated or crowded) and "oversubscribe" not in names:
        extra.append("--oversubscribe")
    if emulated and "bind-to" not in names:
        extra += ["--bind-to", "none"]
    # Every node is a process group on this host, so all ranks go to localhost.
    head = [argv[0], "-np", str(workers), "--host", f"localhost:{workers}"]
    return [*head, *extra, *line.kept, *rank_wrapper(plan), *line.program]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
