"""Turn a placed job into processes: the per-rank plan, and the mpirun line rewritten onto it.

Two command forms run: an Open MPI ``mpirun ... program`` line (ringleader owns -np and the
host options and wraps the program with the rank wrapper) and a plain program started once per
worker with torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, ...).
"""

from __future__ import annotations

import base64
import json
import os
import stat
import sys
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ringleader.runtime.rank import rendezvous_port

if TYPE_CHECKING:
    from ringleader.scheduler import Placement

RANK_MODULE = "ringleader.runtime.rank"
DEMUX_MODULE = "ringleader.runtime.demux"  # a launcher of ranks on ssh hosts: the wrapper with its relay
# A rank's wrapper runs as this file, isolated (-I) and without site-packages (-S): it needs only
# the standard library, and the site and package imports were a quarter of each rank's start.
RANK_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "rank.py")


def rank_source() -> str:
    """A short ``python3 -c`` program carrying the rank wrapper's source (compressed): what runs
    it needs nothing of ringleader installed (ssh hosts, a container rank's guard)."""
    with open(RANK_FILE, "rb") as fh:
        packed = base64.b64encode(zlib.compress(fh.read(), 9)).decode()
    return f"import base64,zlib;exec(zlib.decompress(base64.b64decode('{packed}')))"


class _Node(Protocol):
    @property
    def emulated(self) -> bool: ...


def rank_wrapper(plan: Path, launcher: bool = False, rank: int | None = None, hosts: bool = False) -> list[str]:
    """The argv prefix that runs a program under ringleader's rank wrapper. A launcher runs it
    as a module; for ranks on ssh hosts, as ringleader's demultiplexer (which runs the wrapper)."""
    if launcher:
        cmd = [sys.executable, "-m", DEMUX_MODULE if hosts else RANK_MODULE, str(plan), "--launcher"]
    else:
        cmd = [sys.executable, "-I", "-S", RANK_FILE, str(plan)]
    if rank is not None:
        cmd += ["--rank", str(rank)]
    return [*cmd, "--"]


def build_plan(
    job: str, placement: Placement, nodes: Mapping[str, _Node], env: dict[str, str], home: Path
) -> dict[str, Any]:
    """Per rank: node, its GPUs, local rank, log and state file; what the rank wrapper reads.

    Every rank sees exactly its job's GPUs on its node, in placement order, so local rank i
    uses the i-th assigned GPU (torchrun's and Horovod's convention)."""
    ranks = []
    by_node: dict[str, list[int]] = {}
    for slot in placement.slots:
        by_node.setdefault(slot.node, []).append(slot.index)
    node_order = list(by_node)  # first appearance: Placement.nodes
    for slot in placement.slots:
        peers = by_node[slot.node]
        node_gpus = [g for s in placement.slots if s.node == slot.node for g in s.gpus]  # Placement.gpus_on
        instance = f"{job}-worker-{slot.index}"
        ranks.append({
            "rank": slot.index, "instance": instance, "node": slot.node,
            "node_rank": node_order.index(slot.node), "gpus": list(slot.gpus),
            "node_gpus": node_gpus, "local_rank": peers.index(slot.index),
            "local_world_size": len(peers), "emulated": nodes[slot.node].emulated,
            "log": str(log_path(home, job, instance)), "state": str(state_path(home, job, instance)),
        })  # fmt: skip
    launcher = f"{job}-launcher"
    return {
        "job": job, "world_size": len(placement.slots), "master_addr": "127.0.0.1",
        "master_port": rendezvous_port("127.0.0.1"), "env": dict(env), "ranks": ranks, "nnodes": len(node_order),
        "launcher": {"instance": launcher, "log": str(log_path(home, job, launcher)),
                     "state": str(state_path(home, job, launcher))},
    }  # fmt: skip


def log_path(home: Path, job: str, instance: str) -> Path:
    return home / "logs" / job / f"{instance}.log"


def state_path(home: Path, job: str, instance: str) -> Path:
    return home / "run" / job / f"{instance}.json"


def plan_path(home: Path, job: str) -> Path:
    return home / "run" / job / "plan.json"


def lease_path(home: Path, job: str) -> Path:
    """Where the head records the leases of a job's ranks on ssh hosts (``demux.LEASE_RECORD``)."""
    return home / "run" / job / "lease.json"


def worker_lines(job: str, command: Sequence[str], placement: Placement, plan: Path) -> list[tuple[str, list[str]]]:
    """Each worker instance and its line where every rank runs under its own wrapper (no mpirun)."""
    return [(f"{job}-worker-{s.index}", [*rank_wrapper(plan, rank=s.index), *command]) for s in placement.slots]


def plan_written(home: Path, job: str) -> bool:
    """Whether a job's ranks may have been started: every supervisor writes the plan, whole,
    before it starts any, and a submit removes a former job's. Without it, a job whose holder
    was lost was never launched, whatever it had claimed: it is started, not adopted. A plan
    that does not parse was cut short as it was written (by an agent killed before plans were
    renamed into place): no rank had started either."""
    try:
        fd = os.open(plan_path(home, job), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)  # a FIFO never blocks it
    except FileNotFoundError:
        return False
    except OSError:
        return True  # something holds its name (a link ringleader never follows): taken as written
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return True  # a folder or a FIFO in its place: taken as written, as any name there
        with open(fd, "rb", closefd=False) as fh:
            json.loads(fh.read())
    except ValueError:
        return False
    finally:
        os.close(fd)
    return True


def read_state(path: Path) -> dict[str, Any] | None:
    """The rank wrapper's state file (pid, start times, child, exit code), if written yet."""
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError):
        return None


def instance_targets(home: Path, job: str, instance: str, pid: int | None,
                     pid_start: int | None) -> list[tuple[int, int]]:  # fmt: skip
    """The processes of one instance that may be signalled: its wrapper (as recorded, or from
    its state file) and the wrapper's program.

    A process whose start time is unknown is never a target (its pid may belong to anyone by
    now), and neither is an instance whose state file already holds an exit code (it is over)."""
    st = read_state(state_path(home, job, instance)) or {}
    if "exit_code" in st:
        return []
    pairs = [(pid, pid_start), (st.get("pid"), st.get("pid_start")), (st.get("child_pid"), st.get("child_start"))]
    out: list[tuple[int, int]] = []
    for p, start in pairs:
        if p and start is not None and (int(p), int(start)) not in out:
            out.append((int(p), int(start)))
    return out


def job_env(submit_env: Mapping[str, str] | None) -> dict[str, str]:
    """The environment a job's wrappers start with: what the job recorded at submit, plus what
    the wrapper needs to import ringleader. Never the environment of whichever process happens
    to start the job (another job's supervisor may start a pending one)."""
    env = dict(submit_env or {})
    env.setdefault("PATH", os.defpath)
    extra = _import_path()
    if extra:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH"), extra) if p)
    return env


def supervisor_env() -> dict[str, str]:
    """The minimal environment of a supervisor: a PATH, ringleader importable, and the
    runtime's own settings (RINGLEADER_*), nothing of the starting command's shell."""
    env = {"PATH": os.defpath}
    env.update({k: v for k, v in os.environ.items() if k.startswith("RINGLEADER_")})
    extra = _import_path()
    if extra:
        env["PYTHONPATH"] = extra
    return env


def _import_path() -> str | None:
    """The folder ringleader was imported from, if only PYTHONPATH made it importable."""
    root = str(Path(__file__).resolve().parents[2])
    entries = [str(Path(p).resolve()) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return root if root in entries else None
