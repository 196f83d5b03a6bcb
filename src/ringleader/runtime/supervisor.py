"""One detached supervisor per running job: ``python -m ringleader.runtime.supervisor HOME JOB``.

It claims the job (one live supervisor per job), starts the job's instances (or adopts them
after a crash), watches them, fails the job on the first failure (earliest failure = root
cause; siblings get SIGTERM, then SIGKILL after a grace period), frees the GPUs and runs a
scheduling pass so pending jobs start without anyone acting.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ringleader.runtime import store
from ringleader.runtime.codec import placement_from_dict
from ringleader.runtime.launchers import build_plan, plan_path, rank_wrapper, rewrite_mpirun, state_path
from ringleader.runtime.lifecycle import finish_job, schedule_pass, spawn_supervisors
from ringleader.runtime.procs import alive, grace_seconds, start_time, stop_all
from ringleader.runtime.spec import JobSpec
from ringleader.runtime.states import InstanceStatus, JobStatus

POLL_S = 0.25


def read_state(path: Path) -> dict[str, Any] | None:
    """The rank wrapper's state file (pid, start time, child, exit code), if written yet."""
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError):
        return None


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

    @property
    def done(self) -> bool:
        return self.status.is_terminal()

    def targets(self) -> list[tuple[int, int | None]]:
        """This instance's processes: the wrapper and, from its state file, its program."""
        out: list[tuple[int, int | None]] = [(self.pid, self.pid_start)] if self.pid else []
        st = read_state(self.state_file) or {}
        if st.get("child_pid"):
            out.append((int(st["child_pid"]), st.get("child_start")))
        return out


class Supervisor:
    def __init__(self, home: Path, job: str) -> None:
        self.home, self.job = home, job
        self.db, _ = store.Store.open(home, create=False)
        self.me, self.me_start = os.getpid(), start_time(os.getpid())
        self.watched: list[Watched] = []
        self.root: Watched | None = None
        self.interrupted = False

    # -- claim, launch, adopt -------------------------------------------------------------------
    def claim(self) -> tuple[JobSpec, dict[str, Any], bool] | None:
        """Become the job's supervisor unless another live one is; (spec, placement, launched)."""
        with self.db.write() as conn:
            row = store.job_row(conn, self.job)
            if row is None or row["status"] != JobStatus.RUNNING.value:
                return None
            other = row["supervisor_pid"]
            if other and other != self.me and alive(other, row["supervisor_start"]):
                return None
            launched = row["launched_at"] is not None
            fields: dict[str, Any] = {"supervisor_pid": self.me, "supervisor_start": self.me_start}
            if not launched:
                fields["launched_at"] = time.time()  # the intent, before any process exists
            store.update_job(conn, self.job, **fields)
            if launched:
                store.add_event(conn, self.job, "Adopted", f"supervisor pid {self.me} watches the job", time.time())
            for inst in store.instances(conn, self.job):
                self.watched.append(Watched(
                    inst["name"], inst["role"], state_path(self.home, self.job, inst["name"]),
                    InstanceStatus(inst["status"]), inst["pid"], inst["pid_start"], exit_code=inst["exit_code"],
                    started_at=inst["started_at"],
                ))  # fmt: skip
            return JobSpec.from_dict(json.loads(row["spec"])), json.loads(row["placement"]), launched

    def launch(self, spec: JobSpec, placement_data: dict[str, Any]) -> None:
        with self.db.read() as conn:
            nodes = {n.name: n for n in store.get_nodes(conn)}
        placement = placement_from_dict(spec.name, placement_data)
        plan = build_plan(spec.name, placement, nodes, spec.env, self.home)
        pfile = plan_path(self.home, spec.name)
        pfile.parent.mkdir(parents=True, exist_ok=True)
        pfile.write_text(json.dumps(plan, indent=1))
        if spec.is_mpirun:
            emulated = any(nodes[n].emulated for n in placement.nodes)
            argv = rewrite_mpirun(spec.command, spec.workers, emulated, pfile)
            self._start(f"{spec.name}-launcher", [*rank_wrapper(pfile, launcher=True), *argv], spec)
            detail = " ".join(argv)
        else:
            for slot in placement.slots:
                argv = [*rank_wrapper(pfile, rank=slot.index), *spec.command]
                self._start(f"{spec.name}-worker-{slot.index}", argv, spec)
            detail = " ".join(spec.command)
        self.persist(event=("Started", f"{len(placement.slots)} worker(s): {detail}"))

    def _start(self, instance: str, argv: list[str], spec: JobSpec) -> None:
        w = next(w for w in self.watched if w.name == instance)
        env = {**os.environ, **(spec.submit_env or {})}
        w.popen = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True, close_fds=True, cwd=spec.workdir, env=env,
        )  # fmt: skip
        w.pid, w.pid_start, w.started_at = w.popen.pid, start_time(w.popen.pid), time.time()
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
            if st and w.pid is None:
                w.pid, w.pid_start, w.started_at = int(st["pid"]), st.get("pid_start"), now
                w.status, w.dirty = InstanceStatus.RUNNING, True
            exited = w.popen is not None and w.popen.poll() is not None
            gone = w.pid is not None and (exited or not alive(w.pid, w.pid_start))
            if gone:
                st = read_state(w.state_file)  # the wrapper writes its exit code just before it exits
            if st and "exit_code" in st:
                self._end(w, int(st["exit_code"]), float(st.get("ended_at", now)), "")
            elif gone:
                code = w.popen.returncode if exited and w.popen else None
                self._end(w, code, now, "process lost (no exit code recorded)")
            elif w.pid is None and has_launcher and launcher_done:
                self._end(w, None, now, "never started")

    def _end(self, w: Watched, code: int | None, ended: float, note: str) -> None:
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
        """Write changed instances; False if the job was deleted or taken over meanwhile."""
        dirty = [w for w in self.watched if w.dirty]
        if not dirty and event is None:
            return True
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
                    msg = f"{w.name} {w.status.value.lower()} (exit code {code})" + (f": {w.note}" if w.note else "")
                    store.add_event(conn, self.job, "InstanceExited", msg, w.ended_at or now)
                w.dirty = False
            if event:
                store.add_event(conn, self.job, event[0], event[1], now)
        return True

    def stop_others(self, why: str) -> None:
        """SIGTERM, grace, SIGKILL every instance still running; they end as STOPPED."""
        for w in self.watched:
            if not w.done:
                w.note, w.stopping = why, True
        # Every instance's processes, finished ones too: a lost wrapper may leave its program behind.
        stop_all([t for w in self.watched for t in w.targets()], grace_seconds())
        self.observe()
        for w in self.watched:
            if not w.done and not any(alive(p, s) for p, s in w.targets()):
                self._end(w, w.popen.poll() if w.popen else None, time.time(), why)

    def watch(self) -> bool:
        stopping = False
        while True:
            self.observe()
            if self.root is None:
                self.root = self.pick_root()
            if (self.root or self.interrupted) and not stopping:
                stopping = True
                why = f"stopped: {self.root.name} failed" if self.root else "stopped: supervisor was signalled"
                if not self.persist():
                    return False
                self.stop_others(why)
            if not self.persist():
                return False
            if all(w.done for w in self.watched):
                return True
            time.sleep(POLL_S)

    def finalize(self) -> None:
        with self.db.write() as conn:
            now = time.time()  # taken under the lock: the wait for it may be long
            row = store.job_row(conn, self.job)
            if row is None or row["supervisor_pid"] != self.me or row["status"] != JobStatus.RUNNING.value:
                return
            if self.root is not None:
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
        claimed = self.claim()
        if claimed is None:
            return 0
        spec, placement, launched = claimed
        if not launched:
            try:
                self.launch(spec, placement)
            except OSError as exc:
                self.root = next(w for w in self.watched)
                self._end(self.root, None, time.time(), f"cannot start: {exc}")
        if self.watch():
            self.finalize()
        return 0


def main(argv: list[str]) -> int:
    home, job = Path(argv[0]), argv[1]
    return Supervisor(home, job).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
