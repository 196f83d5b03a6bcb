"""The rank wrapper: ``python -I -S .../rank.py PLAN --rank N -- PROGRAM`` (or ``python -m
ringleader.runtime.rank PLAN --launcher -- MPIRUN ...``; for ranks on ssh hosts the same runs as
``python -m ringleader.runtime.demux``, which hands this wrapper its relay of mpirun's output).

Runs one instance's program with that rank's environment (GPUs, torchrun variables), writes its
output with timestamps to the instance's log (and, under mpirun, to stdout too), records its pid,
start time and exit code in a state file, and forwards signals.

On an ssh host (``--stream TABLE``, TABLE the plan's rank table as JSON) there is no file of the
head to write: the wrapper prints every line of its program prefixed with ``O``, its state as
``S{json}`` lines and a heartbeat ``H`` every HEARTBEAT_S seconds to its stdout, which mpirun
carries back to the head (see ringleader.runtime.demux). The other way, the head renews the rank's
lease on its stdin (``L`` and the head's monotonic time, every RENEW_S, through ``mpirun --stdin
all``): the program starts on the first renewal, and once none has come for the lease (LEASE_S)
the wrapper stops it as every stop does (SIGTERM, the job's grace, SIGKILL to its process group
and every descendant) and exits. A host cut off from the head stops its ranks itself, within a
bound the head knows (``fence_bound``): the gang restarts elsewhere only after it.

A container rank's program is this file's guard (``python3 -S -c SOURCE --guard [--gpus] RUNTIME
run ARGS``, see ``guard_main``), which completes the client's line for the rank's own GPUs and
execs it. The wrapper recognises its own guard and completes the line itself: the client is its
child directly, one interpreter start fewer per rank. The guard stays a program of its own, so a
prepared command runs the same under any wrapper.

Standard library only and importing nothing of ringleader's: it starts once per rank, and the
head sends this file's source to ssh hosts as ``python3 -c SOURCE`` (nothing to install there).
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time

# It starts once per rank, so it imports only what it uses at run time (no typing, pathlib,
# datetime or contextlib: a third of its start-up). Type checkers take MYPY as true.
MYPY = False
if MYPY:
    from collections.abc import Callable
    from typing import Any, BinaryIO

    # What reads a launcher's mpirun output for ranks on ssh hosts (``demux.relay``): given the
    # plan, the launcher's log and mpirun, the function its pump thread runs over mpirun's stdout.
    Relay = Callable[[dict[str, Any], BinaryIO, subprocess.Popen[bytes]], Callable[[BinaryIO], object]]

FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)
# How a stop reaches ranks under mpirun. Open MPI's mpirun, on SIGTERM, signals its ranks only
# after odls_base_sigkill_timeout (1 s) and SIGKILLs them one timeout later, and it refuses to
# forward SIGTERM; it does forward the signals of ess_base_forward_signals. So the launcher
# wrapper turns its SIGTERM into this signal to mpirun, mpirun forwards it to every rank wrapper
# (on ssh hosts too), and each turns it into one SIGTERM to its program: the grace starts at
# once everywhere. SIGURG: ignored by default, so a process it strays to is not harmed.
STOP_SIGNAL = signal.SIGURG
HEARTBEAT_S = 2.0
STREAM_OUTPUT, STREAM_STATE, STREAM_HEARTBEAT, STREAM_RENEWAL = b"O", b"S", b"H", b"L"
# A rank on an ssh host runs while the head renews its lease: every RENEW_S, lapsed after LEASE_S
# without one (as long as the head waits for a silent host's heartbeats, see demux.HOST_SILENCE_S).
# FENCE_MARGIN_S covers the wrapper's look at its lease (every LEASE_CHECK_S), its SIGKILL and the
# quickest delivery of a renewal it saw (milliseconds on a LAN).
RENEW_S, LEASE_S, LEASE_CHECK_S, FENCE_MARGIN_S = 1.0, 10.0, 0.25, 1.0
FENCED_EXIT = 125  # the wrapper's exit code once it stopped its program for a lapsed lease
FENCE_KILL_WAIT_S = 10.0  # how long the fence waits for its SIGKILLs to land (a process in D state)
# The first line of a container guard's ``-c`` source: how the wrapper knows its own guard.
GUARD_MARK = "# ringleader container guard\n"


def start_time(pid: int) -> int | None:
    """Start time (clock ticks since boot, /proc/<pid>/stat field 22); None if gone or a zombie."""
    # The command name (field 2) is in parentheses and may itself contain spaces or ')'.
    fields = _stat_fields(pid)
    if fields is None or len(fields) < 20 or fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def _stat_fields(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read().decode(errors="replace")
    except OSError:
        return None
    return data[data.rfind(")") + 2 :].split()


def descendants(*roots: int) -> list[tuple[int, int]]:
    """(pid, start time) of every live descendant of ``roots``, parents before children."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat_fields(int(entry))
            if fields and len(fields) > 19 and fields[0] not in ("Z", "X"):
                children.setdefault(int(fields[1]), []).append(int(entry))
    found: list[tuple[int, int]] = []
    todo = list(roots)
    while todo:
        for child in children.get(todo.pop(0), []):
            started = start_time(child)
            if started is not None:
                found.append((child, started))
                todo.append(child)
    return found


def become_subreaper() -> None:
    """Orphans of the program (a daemon, a `setsid` child) become our children, not init's, so
    they can be found and stopped with the instance (Linux PR_SET_CHILD_SUBREAPER)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def end_leftovers(grace_s: float = 2.0) -> None:
    """After the program: stop every process it left behind (SIGTERM, then SIGKILL) and reap them."""
    left = descendants(os.getpid())
    for sig in (signal.SIGTERM, signal.SIGKILL):
        _signal_each(left, sig)
        deadline = time.monotonic() + grace_s
        while sig == signal.SIGTERM and time.monotonic() < deadline and any(start_time(p) == s for p, s in left):
            _reap()
            time.sleep(0.05)
    _reap()


def _signal_each(procs: list[tuple[int, int]], sig: int) -> None:
    """``sig`` to each (pid, start time) that is still that process (a reused pid is left alone)."""
    for pid, started in procs:
        if start_time(pid) == started:
            try:  # noqa: SIM105 (contextlib costs this per-rank process a millisecond to import)
                os.kill(pid, sig)
            except OSError:
                pass


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def rendezvous_port(host: str = "") -> int:
    """A free TCP port for MASTER_PORT, below the kernel's ephemeral range (as torchrun's 29500
    is): a port the kernel hands out itself can be taken by any connection (srun's, PMIx's)
    between this choice and rank 0 binding it."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as fh:
            low = int(fh.read().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    for port in random.sample(range(20000, max(20001, low)), min(64, max(1, low - 20000))):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def stamp() -> bytes:
    """The UTC time a log line starts with: 2026-11-23T16:43:10.123456Z."""
    now = time.time()
    return (time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1e6):06d}Z ").encode()


def rank_env(plan: dict[str, Any], entry: dict[str, Any], under_mpirun: bool) -> dict[str, str]:
    """The variables one rank sees: its GPUs (real or virtual) and torchrun's set; under mpirun
    also Open MPI's local rank and size as the placement has them (Horovod's local_rank() reads
    them; on emulated nodes mpirun sees one host and would count every rank as local)."""
    gpus = ",".join(str(g) for g in entry["node_gpus"])
    env = {
        "RANK": str(entry["rank"]), "WORLD_SIZE": str(plan["world_size"]),
        "LOCAL_RANK": str(entry["local_rank"]), "LOCAL_WORLD_SIZE": str(entry["local_world_size"]),
        "GROUP_RANK": str(entry["node_rank"]), "NODE_RANK": str(entry["node_rank"]),
        "MASTER_ADDR": plan["master_addr"], "MASTER_PORT": str(plan["master_port"]),
        # The rest of what torchrun's agent sets: one role, and the restart count and limit (--max-restarts).
        "GROUP_WORLD_SIZE": str(plan.get("nnodes", 1)), "ROLE_NAME": "default",
        "ROLE_RANK": str(entry["rank"]), "ROLE_WORLD_SIZE": str(plan["world_size"]),
        "TORCHELASTIC_RUN_ID": plan["job"], "TORCHELASTIC_RESTART_COUNT": str(plan.get("restarts", 0)),
        "TORCHELASTIC_MAX_RESTARTS": str(plan.get("max_restarts", 0)),
        # DeepSpeed's launcher's names for the node's index, the node count and the node's ranks.
        "CROSS_RANK": str(entry["node_rank"]), "CROSS_SIZE": str(plan.get("nnodes", 1)),
        "LOCAL_SIZE": str(entry["local_world_size"]),
        "RINGLEADER_JOB": plan["job"], "RINGLEADER_INSTANCE": entry["instance"],
        "RINGLEADER_NODE": entry["node"],
        "RINGLEADER_WORKER_GPUS": ",".join(str(g) for g in entry["gpus"]),
    }  # fmt: skip
    if under_mpirun:
        env["OMPI_COMM_WORLD_LOCAL_RANK"] = str(entry["local_rank"])
        env["OMPI_COMM_WORLD_LOCAL_SIZE"] = str(entry["local_world_size"])
        env["OMPI_COMM_WORLD_NODE_RANK"] = str(entry["node_rank"])
    if entry["emulated"]:
        # Virtual GPU ids: never hand a real GPU to a process of an emulated node.
        env["CUDA_VISIBLE_DEVICES"] = ""
        env["RINGLEADER_VIRTUAL_GPUS"] = gpus
    else:
        env["CUDA_VISIBLE_DEVICES"] = gpus
        env["RINGLEADER_VIRTUAL_GPUS"] = ""
    return env


def torchrun_defaults(plan: dict[str, Any], entry: dict[str, Any], env: dict[str, str]) -> None:
    """What torchrun sets only where the job did not (torch.distributed.run and its local agent):
    OMP_NUM_THREADS=1 when it starts more than one process on the node (``"OMP_NUM_THREADS" not in
    os.environ and nproc_per_node > 1``: N ranks of a node do not each take every core), the
    rank's node count being its placement's (LOCAL_WORLD_SIZE); and NCCL's async error handling
    on (TORCH_NCCL_ASYNC_ERROR_HANDLING=1: a failed collective ends the rank, not hangs it). Only
    where the plan says so (``plan["torchrun_defaults"]``): not for an mpirun line's ranks nor
    what DeepSpeed's launcher starts, which set neither."""
    if not plan.get("torchrun_defaults"):
        return
    if entry["local_world_size"] > 1 and "OMP_NUM_THREADS" not in env:
        env["OMP_NUM_THREADS"] = "1"
    env.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1")


def _mpi_rank() -> int | None:
    value = os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("PMIX_RANK"))
    return int(value) if value is not None else None


def _entry(plan: dict[str, Any], args: list[str]) -> tuple[dict[str, Any], dict[str, str]]:
    if "--launcher" in args:
        # mpirun itself uses no GPU; the ranks it starts set their own.
        return plan["launcher"], {"CUDA_VISIBLE_DEVICES": "", "RINGLEADER_JOB": plan["job"]}
    mpi_rank = _mpi_rank()
    rank = int(args[args.index("--rank") + 1]) if "--rank" in args else (mpi_rank or 0)
    entry = plan["ranks"][rank]
    return entry, rank_env(plan, entry, under_mpirun=mpi_rank is not None)


# A state file that cannot be written (disk full) is retried this long: the supervisor reads it.
STATE_RETRY_S = 120.0


def _open_log(path: str) -> int:
    """The instance's log, for appending; a link planted in its place is removed, never
    written through (its folder is ringleader's own: see statefolder.make_job_folders)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW
    try:
        return os.open(path, flags, 0o600)
    except OSError:
        if not os.path.islink(path):
            raise
        os.unlink(path)
        return os.open(path, flags, 0o600)


def _write_state(path: str, data: dict[str, Any], retry_s: float = 0.0) -> None:
    """Atomically, privately; on a full disk retried for ``retry_s`` seconds, then given up (the
    supervisor then records the exit code it sees itself, or the instance as lost)."""
    deadline = time.monotonic() + retry_s
    tmp = f"{os.path.splitext(path)[0]}.tmp{os.getpid()}"
    while True:
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "w") as fh:
                fh.write(json.dumps(data))
            os.replace(tmp, path)
            return
        except OSError:
            if time.monotonic() >= deadline:
                return
            time.sleep(1.0)


def _pump(src: BinaryIO, log: BinaryIO, tee: bool) -> None:
    """Copy the program's output to its log until it closes it. A log that cannot be written
    (disk full) never blocks the program: from then on its lines are dropped (so the log does not
    eat space freed for the state), and one last line says how many, if it can."""
    dropped = 0
    for line in iter(src.readline, b""):
        if not dropped:
            try:
                log.write(stamp() + (line if line.endswith(b"\n") else line + b"\n"))
                log.flush()
            except OSError:
                dropped = 1
        else:
            dropped += 1
        if tee:
            try:
                sys.stdout.buffer.write(line)
                sys.stdout.buffer.flush()
            except OSError:
                tee = False
    if dropped:
        try:
            log.write(stamp() + f"ringleader: {dropped} line(s) dropped: the log could not be written\n".encode())
            log.flush()
        except OSError:
            pass


class _Stream:
    """The ssh-host side: program lines, state records and heartbeats on one stdout."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.out = sys.stdout.buffer

    def write(self, kind: bytes, payload: bytes = b"") -> None:
        with self.lock:
            self.out.write(kind + payload.rstrip(b"\n") + b"\n")
            self.out.flush()

    def state(self, data: dict[str, Any]) -> None:
        self.write(STREAM_STATE, json.dumps(data).encode())

    def pump(self, src: BinaryIO) -> None:
        for line in iter(src.readline, b""):
            self.write(STREAM_OUTPUT, line)

    def beat(self, done: threading.Event) -> None:
        while not done.wait(HEARTBEAT_S):
            self.write(STREAM_HEARTBEAT)


def fence_bound(renewed_at: float, grace_s: float, lease_s: float = LEASE_S) -> float:
    """When a rank whose last renewal the head sent at ``renewed_at`` has stopped writing, at the
    latest, on the head's clock: its lease, the job's grace and the margin (FENCE_MARGIN_S)."""
    return renewed_at + lease_s + grace_s + FENCE_MARGIN_S


class Lease:
    """A rank's lease as the wrapper holds it. Each renewal carries the head's monotonic time of
    sending; the lease runs ``length_s`` from that time, not from its arrival, so a renewal that
    a cut link held back and delivered late (TCP retransmits once the link is back) extends
    nothing. The two hosts' clocks differ by an unknown offset: a renewal received at local time
    r and sent at head time s says local = head + (r - s) at most, so the smallest r - s seen is
    the offset used (it over-states the true one by the quickest delivery seen)."""

    def __init__(self, length_s: float) -> None:
        self.length_s = length_s
        self.offset: float | None = None  # local minus head time, the smallest seen
        self.sent: float | None = None  # the latest sending time, on the head's clock

    def renew(self, line: bytes, received: float) -> bool:
        """One line of the head's (``L<seconds>``), received at local monotonic ``received``;
        False (and nothing changed) for anything else."""
        if line[:1] != STREAM_RENEWAL:
            return False
        try:
            sent = float(line[1:])
        except ValueError:
            return False
        if sent != sent or sent in (float("inf"), float("-inf")):
            return False
        offset = received - sent
        self.offset = offset if self.offset is None else min(self.offset, offset)
        self.sent = sent if self.sent is None else max(self.sent, sent)
        return True

    @property
    def granted(self) -> bool:
        return self.sent is not None

    def expires(self) -> float | None:
        """Local monotonic time at which it lapses; None before the first renewal."""
        if self.sent is None or self.offset is None:
            return None
        return self.sent + self.offset + self.length_s

    def lapsed(self, now: float) -> bool:
        expires = self.expires()
        return expires is not None and now >= expires


def completed(argv: list[str], environ: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    """``[--gpus] RUNTIME run ARGS`` as this rank's container client runs it, with its environment.

    With ``--gpus``, the rank's own GPUs (the host's indexes in CUDA_VISIBLE_DEVICES, set by the
    wrapper) become the container's only ones (podman: one CDI device ``nvidia.com/gpu=INDEX``
    each; docker: ``--gpus "device=I,J"``), and CUDA_VISIBLE_DEVICES is renumbered as the
    container sees them (0..n-1)."""
    gpus = bool(argv) and argv[0] == "--gpus"
    if gpus:
        argv = argv[1:]
    runtime, run, rest = argv[0], argv[1], argv[2:]
    env = dict(environ)
    visible = [g for g in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if g.strip()]
    extra: list[str] = []
    if gpus and visible:
        if os.path.basename(runtime) == "docker":
            extra = ["--gpus", '"device=' + ",".join(visible) + '"']  # quoted: docker reads it as CSV
        else:
            extra = [word for g in visible for word in ("--device", "nvidia.com/gpu=" + g)]
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(len(visible)))
    return [runtime, run, *extra, *rest], env


def guard_main(argv: list[str]) -> int:
    """The guard as a program: the completed client exec'd in this process's place, so signals
    reach the client directly. What a killed client leaves (its container record) is removed by
    label by whoever ends the job."""
    args, env = completed(argv, dict(os.environ))
    try:
        os.execvpe(args[0], args, env)
    except OSError as exc:
        print(cannot_start(args, [], exc), flush=True)
        return 127
    return 0  # not reached: exec replaced this process


def unguarded(program: list[str], env: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    """``program`` and ``env``, with this file's own guard (``PYTHON -S -c GUARD --guard ARGS``)
    completed here rather than in an interpreter of its own."""
    if len(program) > 4 and program[2] == "-c" and program[3].startswith(GUARD_MARK) and program[4] == "--guard":
        return completed(program[5:], env)
    return program, env


def cannot_start(program: list[str], given: list[str], exc: OSError) -> str:
    """The line a program that could not start leaves in its log (a container client: as its
    guard would have said it)."""
    if program is not given:
        return f"ringleader: cannot run the container runtime {program[0]!r} on this host: {exc.strerror}"
    return f"ringleader: cannot start {program[0]!r}: {exc.strerror}"


def _start(program: list[str], env: dict[str, str], forwarded: tuple[int, ...] = FORWARDED,
           launcher: bool = False, stdin: int = subprocess.DEVNULL) -> subprocess.Popen[bytes]:  # fmt: skip
    # The program in a process group of its own: mpirun, aborting, signals each rank's whole
    # group (whatever odls_base_signal_direct_children_only says), which would give the
    # program a second SIGTERM past the wrapper's one.
    child = subprocess.Popen(program, env=env, stdin=stdin, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, preexec_fn=_die_with_parent, process_group=0)  # fmt: skip
    for sig in forwarded:
        signal.signal(sig, lambda s, _f: child.send_signal(s))
    if signal.SIGTERM not in forwarded:
        # The stopper signals every process itself (Slurm's slurmd): forwarding it too would
        # give the program a second SIGTERM in the middle of its handler. The wrapper stays up
        # to record the program's exit code.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        return child
    stopped: list[int] = []

    def stop(_sig: int, _frame: object) -> None:
        # A stop reaches the program once: ringleader's SIGTERM, the stop signal mpirun
        # forwarded, then mpirun's own SIGTERM when another rank ends early must not interrupt
        # the handler that writes its checkpoint.
        if not stopped:
            stopped.append(1)
            child.send_signal(STOP_SIGNAL if launcher else signal.SIGTERM)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(STOP_SIGNAL, stop)
    return child


def in_background(thread: threading.Thread) -> None:
    """Start a helper thread that never takes the signals a stop uses: the kernel gives a
    signal sent to the process to any thread that does not block it, and one taken by a helper
    thread leaves the main thread asleep in ``child.wait()`` (no EINTR there), so the Python
    handler that passes the stop to the program would run only once the program had ended: it
    would get no SIGTERM, and SIGKILL after the grace (threads inherit the mask they start with)."""
    quiet = {*FORWARDED, STOP_SIGNAL}
    before = signal.pthread_sigmask(signal.SIG_BLOCK, quiet)
    try:
        thread.start()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


def _die_with_parent() -> None:
    """In the program, before it runs: SIGKILL when this wrapper dies. The program has a process
    group of its own (see ``_start``), so mpirun's SIGKILL of the wrapper's group does not reach
    it: a wrapper it kills must not leave the program running on its host (Linux
    PR_SET_PDEATHSIG)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def stop_mca(given: dict[str, str], grace_s: float) -> dict[str, str]:
    """The mpirun parameters (``--mca NAME VALUE``) that stop its ranks as ringleader stops any
    rank: the stop signal forwarded (beside any the user forwards), forwarded signals to the rank
    wrappers alone (each passes one on; mpirun's kill of an aborting job signals each rank's
    process group all the same, hence the program's own group), and no SIGKILL of mpirun's own
    before the grace has passed."""
    forwards = [s for s in given.get("ess_base_forward_signals", "").split(",") if s and s != "none"]
    return {
        "ess_base_forward_signals": ",".join([*forwards, signal.Signals(STOP_SIGNAL).name]),
        "odls_base_signal_direct_children_only": "1",
        "odls_base_sigkill_timeout": str(max(1, -int(-grace_s // 1))),
    }


def _final(state: dict[str, Any], code: int) -> dict[str, Any]:
    # Killed by a signal: 128 + its number, as shells, Kubernetes and arena show it.
    final: dict[str, Any] = {**state, "exit_code": code if code >= 0 else 128 - code, "ended_at": time.time()}
    if code < 0:
        final["signal"] = signal_name(-code)
    return final


def stream_main(table: dict[str, Any], program: list[str]) -> int:
    """One rank on an ssh host: everything goes back through mpirun's stdout; its lease comes on
    its stdin (the program starts on the first renewal and is stopped when the lease lapses)."""
    become_subreaper()
    out = _Stream()
    rank = _mpi_rank() or 0
    entry = table["ranks"][rank]
    env = {**os.environ, **rank_env(table, entry, under_mpirun=True)}
    torchrun_defaults(table, entry, env)
    env.setdefault("PYTHONUNBUFFERED", "1")
    given = program
    program, env = unguarded(program, env)
    state: dict[str, Any] = {"pid": os.getpid(), "started_at": time.time(), "host": os.uname().nodename}
    out.state(state)
    done = threading.Event()  # heartbeats from now on: a rank waiting for its lease is not a silent host
    in_background(threading.Thread(target=out.beat, args=(done,), daemon=True))
    lease = Lease(float(table["lease_s"]))
    granted = threading.Event()
    in_background(threading.Thread(target=_hold, args=(lease, granted), daemon=True))
    if not granted.wait(float(table["start_s"])):
        why = f"ringleader: no lease from the head within {table['start_s']:g} s: the program was not started"
        out.write(STREAM_OUTPUT, why.encode())
        out.state({**state, "exit_code": FENCED_EXIT, "ended_at": time.time()})
        return FENCED_EXIT
    try:
        child = _start(program, env)
    except OSError as exc:
        out.write(STREAM_OUTPUT, cannot_start(program, given, exc).encode())
        out.state({**state, "exit_code": 127, "ended_at": time.time()})
        return 127
    state["child_pid"] = child.pid
    out.state(state)
    fencing = threading.Event()
    fence = threading.Thread(target=_fence, args=(lease, child, float(table["grace_s"]), out, fencing), daemon=True)
    in_background(fence)
    assert child.stdout is not None
    pump = threading.Thread(target=out.pump, args=(child.stdout,), daemon=True)
    in_background(pump)
    code = child.wait()
    if fencing.is_set():  # the fence stopped the program: it ends this wrapper, once all is gone
        fence.join()
    end_leftovers()
    pump.join(timeout=5)
    done.set()
    final = _final(state, code)
    out.state(final)
    return int(final["exit_code"])


def _hold(lease: Lease, granted: threading.Event) -> None:
    """Read the head's renewals from stdin for as long as it sends them (EOF: no more will come,
    and the lease runs out). Unbuffered reads of the descriptor: a thread asleep in sys.stdin's
    buffered reader holds its lock, and the interpreter aborts at exit when it cannot take it."""
    pending = b""
    while True:
        try:
            chunk = os.read(0, 4096)
        except OSError:  # no stdin at all: no renewal will come
            return
        if not chunk:
            return
        *lines, pending = (pending + chunk).split(b"\n")
        received = time.monotonic()
        if any([lease.renew(line.strip(), received) for line in lines]):
            granted.set()


def _fence(
    lease: Lease, child: subprocess.Popen[bytes], grace_s: float, out: _Stream, fencing: threading.Event
) -> None:
    """Once the lease lapses: the program stopped as every stop does (SIGTERM to its process
    group, ``grace_s``, then SIGKILL to it and every descendant of this wrapper, a subreaper), and
    this wrapper gone, so nothing of the rank writes after ``fence_bound``. ``fencing`` tells the
    wrapper's main thread, which sees its program die, to leave the exit to this thread."""
    while not lease.lapsed(time.monotonic()):
        if child.poll() is not None:
            return
        time.sleep(LEASE_CHECK_S)
    fencing.set()
    said = f"ringleader: no word from the head for {lease.length_s:g} s: stopping the rank"
    try:  # noqa: SIM105 (see _signal_each)
        out.write(STREAM_OUTPUT, said.encode())
    except OSError:  # nobody reads it any more (mpirun's daemon is gone): the stop matters, not the line
        pass
    _signal_group(child.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    _signal_group(child.pid, signal.SIGKILL)
    # A SIGKILL lands when its process next runs: on a loaded host, later than the kill. Kill
    # until nothing of the rank is left (a zombie writes nothing), so none outlives this wrapper.
    deadline = time.monotonic() + FENCE_KILL_WAIT_S
    while (left := descendants(os.getpid())) and time.monotonic() < deadline:
        _signal_each(left, signal.SIGKILL)
        time.sleep(0.01)
    os._exit(FENCED_EXIT)


def _signal_group(pgid: int, sig: int) -> None:
    try:  # noqa: SIM105 (see _signal_each)
        os.killpg(pgid, sig)
    except OSError:
        pass


def main(argv: list[str], relay: Relay | None = None) -> int:
    if argv[:1] == ["--guard"]:
        return guard_main(argv[1:])
    split = argv.index("--")
    own, program = argv[:split], argv[split + 1 :]
    if own and own[0] == "--stream":
        return stream_main(json.loads(own[1]), program)
    become_subreaper()
    with open(own[0], "rb") as fh:
        plan = json.loads(fh.read())
    entry, env = _entry(plan, own[1:])
    launcher = "--launcher" in own
    tee = not launcher and "OMPI_COMM_WORLD_RANK" in os.environ
    env = {**os.environ, **plan["env"], **env}
    if not launcher:
        torchrun_defaults(plan, entry, env)
    env.setdefault("PYTHONUNBUFFERED", "1")
    given = program
    program, env = unguarded(program, env)
    state_file, log_file = str(entry["state"]), str(entry["log"])
    os.makedirs(os.path.dirname(state_file), mode=0o700, exist_ok=True)
    os.makedirs(os.path.dirname(log_file), mode=0o700, exist_ok=True)
    state: dict[str, Any] = {
        "pid": os.getpid(), "pid_start": start_time(os.getpid()), "instance": entry["instance"],
        "started_at": time.time(),
    }  # fmt: skip
    _write_state(state_file, state, retry_s=STATE_RETRY_S)
    try:
        fd = _open_log(log_file)
    except OSError:  # a full disk cannot create the log: the program still runs
        fd = os.open(os.devnull, os.O_WRONLY)
    # --no-term-forward: under Slurm, whose scancel sends SIGTERM to every process of the job.
    forwarded = tuple(s for s in FORWARDED if s != signal.SIGTERM) if "--no-term-forward" in own else FORWARDED
    with os.fdopen(fd, "ab") as log:
        try:
            # mpirun over ssh hosts reads the leases its relay renews on its stdin (--stdin all).
            stdin = subprocess.PIPE if relay is not None else subprocess.DEVNULL
            child = _start(program, env, forwarded, launcher=launcher, stdin=stdin)
        except OSError as exc:
            log.write(stamp() + (cannot_start(program, given, exc) + "\n").encode())
            _write_state(state_file, {**state, "exit_code": 127, "ended_at": time.time()})
            return 127
        state.update(child_pid=child.pid, child_start=start_time(child.pid))
        _write_state(state_file, state)
        assert child.stdout is not None
        if relay is not None:
            # mpirun over ssh hosts: its tagged output carries every remote rank's lines and states.
            pump = threading.Thread(target=relay(plan, log, child), args=(child.stdout,), daemon=True)
        else:
            pump = threading.Thread(target=_pump, args=(child.stdout, log, tee), daemon=True)
        in_background(pump)
        code = child.wait()
        end_leftovers()
        pump.join(timeout=5)
    final = _final(state, code)
    _write_state(state_file, final, retry_s=STATE_RETRY_S)
    return int(final["exit_code"])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
