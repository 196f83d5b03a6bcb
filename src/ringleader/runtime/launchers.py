"""Turn a placed job into processes: the per-rank plan, and the mpirun line rewritten onto it.

Two command forms run: an Open MPI ``mpirun ... program`` line (ringleader owns -np and the
host options and wraps the program with the rank wrapper) and a plain program started once per
worker with torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, ...).
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ringleader.errors import UsageError

if TYPE_CHECKING:
    from ringleader.scheduler import Placement
    from ringleader.topology import NodeSpec

MPI_LAUNCHERS = ("mpirun", "mpiexec", "orterun")
# Open MPI options that take one value (all others are taken as flags); --mca takes two.
_TWO_VALUES = {"mca", "gmca"}
_ONE_VALUE = {
    "np", "n", "c", "x", "map-by", "bind-to", "rank-by", "wdir", "wd", "path", "prefix",
    "output-filename", "npernode", "npersocket", "cpus-per-proc", "cpus-per-rank", "cpu-set",
    "tune", "am", "launch-agent", "report-bindings-file", "timeout", "stdin", "display-map-file",
    "N", "ppr", "max-vm-size", "merge-stderr-to-stdout-file", "app", "preload-files",
    "set-cwd-to-session-dir", "tmpdir", "report-uri", "report-pid", "xml-file", "debugger",
    "H", "host", "hostfile", "machinefile", "default-hostfile", "rf", "rankfile",
}  # fmt: skip
_OWNED = {"np", "n", "c", "H", "host", "hostfile", "machinefile", "default-hostfile"}
_NP = {"np", "n", "c"}
RANK_MODULE = "ringleader.runtime.rank"


def is_mpirun(argv: Sequence[str]) -> bool:
    return bool(argv) and Path(argv[0]).name in MPI_LAUNCHERS


def rank_wrapper(plan: Path, launcher: bool = False, rank: int | None = None) -> list[str]:
    """The argv prefix that runs a program under ringleader's rank wrapper."""
    cmd = [sys.executable, "-m", RANK_MODULE, str(plan)]
    if launcher:
        cmd.append("--launcher")
    if rank is not None:
        cmd += ["--rank", str(rank)]
    return [*cmd, "--"]


def _split_option(token: str) -> tuple[str, str | None]:
    name = token.lstrip("-")
    if "=" in name and token.startswith("--"):
        key, value = name.split("=", 1)
        return key, value
    return name, None


@dataclass(frozen=True)
class MpiOption:
    token: str  # as written, e.g. "-H" or "--host=a:2"
    name: str  # without its dashes, e.g. "H", "host"
    values: tuple[str, ...]  # the values that follow it (none when given inline: --host=a:2)

    def text(self) -> str:
        return shlex.join([self.token, *self.values])


def scan_mpirun(argv: Sequence[str]) -> tuple[list[MpiOption], list[str]]:
    """An mpirun line's options (each with its values) and the program it runs: the one walk
    over an mpirun line that every reader of one uses."""
    options: list[MpiOption] = []
    i = 1
    while i < len(argv):
        token = argv[i]
        if not token.startswith("-") or token == "-":
            break
        name, inline = _split_option(token)
        count = 0 if inline is not None else 2 if name in _TWO_VALUES else 1 if name in _ONE_VALUE else 0
        values = tuple(argv[i + 1 : i + 1 + count])
        if len(values) < count:
            raise UsageError(f"mpirun option {token} lacks its value", "complete the mpirun line")
        options.append(MpiOption(token, name, values))
        i += 1 + count
    return options, list(argv[i:])


def parse_mpirun(argv: Sequence[str]) -> tuple[list[str], str | None, list[str]]:
    """Split an mpirun line into (kept options, the user's -np or None, program argv); refuse a
    malformed one."""
    options, program = scan_mpirun(argv)
    kept: list[str] = []
    np_value: str | None = None
    for opt in options:
        if opt.name in _NP:
            np_value = opt.values[0] if opt.values else _split_option(opt.token)[1]
        elif opt.name not in _OWNED:
            kept += [opt.token, *opt.values]
    if not program:
        raise UsageError("the mpirun line names no program", "end it with the program to run, e.g. python train.py")
    if ":" in program:
        raise UsageError("MPMD mpirun lines (with ':') are not supported", "run one program per job")
    return kept, np_value, program


def check_mpirun(argv: Sequence[str], workers: int) -> None:
    """Refuse (exit 2) an mpirun line whose -np disagrees with --workers."""
    _, np_value, _ = parse_mpirun(argv)
    if np_value is None:
        return
    try:
        np_int = int(np_value)
    except ValueError:
        raise UsageError(f"mpirun -np {np_value!r} is not a number", "write -np <workers>") from None
    if np_int != workers:
        raise UsageError(
            f"mpirun -np {np_int} disagrees with --workers {workers}",
            f"use -np {workers} or drop -np (ringleader sets it)",
        )


def rewrite_mpirun(argv: Sequence[str], workers: int, emulated: bool, plan: Path) -> list[str]:
    """The mpirun line that starts ``workers`` ranks on this host, each under the rank wrapper."""
    kept, _, program = parse_mpirun(argv)
    names = {_split_option(t)[0] for t in kept if t.startswith("-")}
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
    return [*head, *extra, *kept, *rank_wrapper(plan), *program]


def free_port() -> int:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def build_plan(
    job: str, placement: Placement, nodes: dict[str, NodeSpec], env: dict[str, str], home: Path
) -> dict[str, Any]:
    """Per rank: node, its GPUs, local rank, log and state file; what the rank wrapper reads.

    Every rank sees exactly its job's GPUs on its node, in placement order, so local rank i
    uses the i-th assigned GPU (torchrun's and Horovod's convention)."""
    ranks = []
    by_node: dict[str, list[int]] = {}
    for slot in placement.slots:
        by_node.setdefault(slot.node, []).append(slot.index)
    node_order = list(placement.nodes)
    for slot in placement.slots:
        peers = by_node[slot.node]
        instance = f"{job}-worker-{slot.index}"
        ranks.append({
            "rank": slot.index, "instance": instance, "node": slot.node,
            "node_rank": node_order.index(slot.node), "gpus": list(slot.gpus),
            "node_gpus": list(placement.gpus_on(slot.node)), "local_rank": peers.index(slot.index),
            "local_world_size": len(peers), "emulated": nodes[slot.node].emulated,
            "log": str(log_path(home, job, instance)), "state": str(state_path(home, job, instance)),
        })  # fmt: skip
    launcher = f"{job}-launcher"
    return {
        "job": job, "world_size": len(placement.slots), "master_addr": "127.0.0.1",
        "master_port": free_port(), "env": dict(env), "ranks": ranks, "nnodes": len(node_order),
        "launcher": {"instance": launcher, "log": str(log_path(home, job, launcher)),
                     "state": str(state_path(home, job, launcher))},
    }  # fmt: skip


def log_path(home: Path, job: str, instance: str) -> Path:
    return home / "logs" / job / f"{instance}.log"


def state_path(home: Path, job: str, instance: str) -> Path:
    return home / "run" / job / f"{instance}.json"


def plan_path(home: Path, job: str) -> Path:
    return home / "run" / job / "plan.json"


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
