"""What runs inside the Slurm allocation: the batch step (on the first node), the launch agent
of mpirun's daemons, and one rank wrapper per rank. Standard library and ringleader's rank
wrapper only, and run by file path (``python .../task.py rank PLAN -- PROGRAM``), not as ``-m``:
importing the package around it would load the whole engine into every rank and double its start
time.

The batch step picks the rendezvous port on the first node. An mpirun line runs as the user's
mpirun inside the allocation, as Slurm users run it: rank i on the i-th line of a hostfile in
placement order (Open MPI's sequential mapper), its daemons started on each node by this file's
``agent`` through ``srun`` in the node's component (Open MPI's rsh launcher with srun as the
agent, so a heterogeneous job's every component is reached), so MPI's dynamic process
management (ports, published names) works as under plain mpirun. Any other line runs as one
``srun`` step over all components with ``--mpi=pmix``: a plain MPI program's ranks are one world,
as under mpirun on the other engines (without PMIx they would abort in MPI_Init); it goes without
(``--mpi=none``) only where this Slurm has no pmix plugin.

Each rank maps its task id (Slurm's, or Open MPI's under mpirun) to its rank, checks that Slurm
gave its node exactly the GPUs ringleader placed, and hands CUDA_VISIBLE_DEVICES over in
placement order, translated to the ids this task sees (Slurm renumbers them when it constrains
devices).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from ringleader.runtime import rank as rank_wrapper

TASK_FILE = str(Path(__file__).resolve())
WRONG_GPUS = 3  # exit code of a task whose node got other GPUs than placed
# How the batch step's mpirun reaches the nodes: its rsh launcher with ``agent`` below (srun in
# the node's component, no tree of daemons), each daemon left attached to its srun step (not
# daemonized out of it: Slurm then stops its ranks as it stops any step's), ranks where the
# hostfile says, and the allocation from the hostfile, not from Slurm's variables (which name one
# component of a heterogeneous job).
LAUNCH_MCA = {"plm": "rsh", "plm_rsh_no_tree_spawn": "1", "orte_leave_session_attached": "1", "rmaps": "seq",
              "ras": "^slurm"}
AGENT_MCA = "plm_rsh_agent"


def _indices(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        if part.strip():
            lo, _, hi = part.strip().partition("-")
            out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def _write_private(path: Path, text: str) -> None:
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.replace(tmp, path)


def srun_argv(plan: dict[str, Any], plan_file: str) -> list[str]:
    argv = ["srun", "--kill-on-bad-exit=1"]
    if len(plan["components"]) > 1:
        argv.append("--het-group=" + ",".join(str(k) for k in range(len(plan["components"]))))
    argv.append("--mpi=pmix" if has_pmix() else "--mpi=none")
    return [*argv, sys.executable, TASK_FILE, "rank", plan_file, "--", *plan["program"]]


def has_pmix() -> bool:
    """Whether this Slurm's srun has the pmix plugin (``srun --mpi=list``)."""
    try:
        listed = subprocess.run(["srun", "--mpi=list"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return any(word.startswith("pmix") for word in (listed.stdout + listed.stderr).split())


def mpirun_argv(plan: dict[str, Any], plan_file: str) -> list[str]:
    """The user's mpirun (``plan["mpirun"]``: its launcher and options) over the placement."""
    hostfile = Path(plan_file).with_name("hostfile")
    _write_private(hostfile, "".join(entry["node"] + "\n" for entry in plan["ranks"]))
    agent = f"{sys.executable} {TASK_FILE} agent {plan_file}"
    return [*plan["mpirun"], "-np", str(len(plan["ranks"])), "--hostfile", str(hostfile), "--mca", AGENT_MCA, agent,
            sys.executable, TASK_FILE, "rank", plan_file, "--", *plan["program"]]  # fmt: skip


def agent(plan_file: str, argv: list[str]) -> int:
    """What Open MPI's rsh launcher runs to start its daemon on a node (``HOST COMMAND...``, the
    command words for a remote shell): a one-task srun step on that node, in its component."""
    plan = json.loads(Path(plan_file).read_text())
    host, words = argv[0], argv[1:]
    nodes = [c["node"] for c in plan["components"]]
    if host not in nodes:
        print(f"ringleader: mpirun asked for a daemon on {host}, not a node of this job ({', '.join(nodes)})",
              file=sys.stderr)  # fmt: skip
        return 1
    # A step gets all the job's CPUs and GPUs on its node by default; --overlap: beside the batch step.
    step = ["srun", "--nodes=1", "--ntasks=1", f"--nodelist={host}", "--overlap", "--mpi=none", "--kill-on-bad-exit=1"]
    if len(nodes) > 1:
        step.append(f"--het-group={nodes.index(host)}")
    os.execvp("srun", [*step, "/bin/sh", "-c", " ".join(words)])
    return 1  # not reached


def batch(plan_file: str) -> int:
    path = Path(plan_file)
    plan = json.loads(path.read_text())
    plan["master_port"] = rank_wrapper.rendezvous_port()
    _write_private(path, json.dumps(plan))
    argv = mpirun_argv(plan, plan_file) if plan.get("mpirun") else srun_argv(plan, plan_file)
    child = subprocess.Popen(argv, stdin=subprocess.DEVNULL)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, lambda s, _f: child.send_signal(s))
    code = child.wait()
    return code if code >= 0 else 128 - code


def _fail(entry: dict[str, Any], message: str, code: int) -> int:
    Path(entry["log"]).parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(entry["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    with os.fdopen(fd, "ab") as log:
        log.write(rank_wrapper.stamp() + f"ringleader: {message}\n".encode())
    Path(entry["state"]).parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    now = time.time()
    state = {"pid": os.getpid(), "started_at": now, "exit_code": code, "ended_at": now, "error": message}
    _write_private(Path(entry["state"]), json.dumps(state))
    print(f"ringleader: {entry['instance']}: {message}", file=sys.stderr)
    return code


def rank(plan_file: str, program: list[str]) -> int:
    plan = json.loads(Path(plan_file).read_text())
    # started by the batch step's mpirun (Open MPI numbers them), else by one srun step
    rank_id, local_id = ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK") if plan.get("mpirun") else \
        ("SLURM_PROCID", "SLURM_LOCALID")  # fmt: skip
    task = int(os.environ[rank_id])
    entry = plan["ranks"][task]
    local = int(os.environ.get(local_id, entry["local_rank"]))
    if local != entry["local_rank"]:
        return _fail(entry, f"Slurm made task {task} local task {local}, placed as {entry['local_rank']}", WRONG_GPUS)
    if entry["node_gpus"]:
        given = _indices(os.environ.get("SLURM_STEP_GPUS") or os.environ.get("SLURM_JOB_GPUS") or "")
        if sorted(given) != sorted(entry["node_gpus"]):
            return _fail(entry, f"Slurm gave GPUs {given} on {entry['node']}, ringleader placed "
                                f"{sorted(entry['node_gpus'])}", WRONG_GPUS)  # fmt: skip
        # Slurm's CUDA_VISIBLE_DEVICES lists the same GPUs in the same (index) order, as this
        # task must name them: global ids, or 0..n-1 when devices are constrained.
        seen = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")
        visible = dict(zip(sorted(given), seen, strict=False)) if len(seen) == len(given) else {}
        entry = {**entry, "node_gpus": [visible.get(g, str(g)) for g in entry["node_gpus"]]}
    plan["ranks"][task] = entry
    own = Path(plan_file).with_name(f"plan.rank{task}.json")
    _write_private(own, json.dumps(plan))
    # Slurm signals every process of the job itself (scancel, --time): the wrapper must not
    # forward SIGTERM again, or a program's checkpoint handler would be interrupted by a second.
    return rank_wrapper.main([str(own), "--rank", str(task), "--no-term-forward", "--", *program])


def main(argv: list[str]) -> int:
    split = argv.index("--") if "--" in argv else len(argv)
    if argv[:1] == ["rank"] and split >= 2:
        return rank(argv[1], argv[split + 1 :])
    if argv[:1] == ["batch"] and len(argv) == 2:
        return batch(argv[1])
    if argv[:1] == ["agent"] and len(argv) >= 4:
        return agent(argv[1], argv[2:])
    print(f"usage: python {TASK_FILE} batch PLAN | agent PLAN HOST COMMAND... | rank PLAN -- PROGRAM", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
