"""What runs inside the Slurm allocation: the batch step (on the first node) and one rank
wrapper per task. Standard library and ringleader's rank wrapper only, and run by file path
(``python .../task.py rank PLAN -- PROGRAM``), not as ``-m``: importing the package around it
would load the whole engine into every rank and double its start time.

The batch step picks the rendezvous port on the first node and runs one ``srun`` step over all
components with ``--mpi=pmix``: Open MPI ranks of an mpirun line are started by Slurm with their
local ranks matching LOCAL_RANK, and a plain MPI program's ranks are one world, as under mpirun
on the other engines (without PMIx they would abort in MPI_Init). A plain program goes without
(``--mpi=none``) only where this Slurm has no pmix plugin.

Each task maps Slurm's task id to its rank, checks that Slurm gave its node exactly the GPUs
ringleader placed, and hands CUDA_VISIBLE_DEVICES over in placement order, translated to the
ids this task sees (Slurm renumbers them when it constrains devices).
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
    argv.append("--mpi=pmix" if plan["mpi"] or has_pmix() else "--mpi=none")
    return [*argv, sys.executable, TASK_FILE, "rank", plan_file, "--", *plan["program"]]


def has_pmix() -> bool:
    """Whether this Slurm's srun has the pmix plugin (``srun --mpi=list``)."""
    try:
        listed = subprocess.run(["srun", "--mpi=list"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return any(word.startswith("pmix") for word in (listed.stdout + listed.stderr).split())


def batch(plan_file: str) -> int:
    path = Path(plan_file)
    plan = json.loads(path.read_text())
    plan["master_port"] = rank_wrapper.rendezvous_port()
    _write_private(path, json.dumps(plan))
    child = subprocess.Popen(srun_argv(plan, plan_file), stdin=subprocess.DEVNULL)
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
    task = int(os.environ["SLURM_PROCID"])
    entry = plan["ranks"][task]
    local = int(os.environ.get("SLURM_LOCALID", entry["local_rank"]))
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
    if plan["mpi"]:
        # What mpirun would have told each rank; Horovod-style programs pick GPUs by them.
        plan["env"] = {**plan["env"], **ompi_env(plan, entry)}
    own = Path(plan_file).with_name(f"plan.rank{task}.json")
    _write_private(own, json.dumps(plan))
    # Slurm signals every process of the job itself (scancel, --time): the wrapper must not
    # forward SIGTERM again, or a program's checkpoint handler would be interrupted by a second.
    return rank_wrapper.main([str(own), "--rank", str(task), "--no-term-forward", "--", *program])


def ompi_env(plan: dict[str, Any], entry: dict[str, Any]) -> dict[str, str]:
    return {
        "OMPI_COMM_WORLD_RANK": str(entry["rank"]), "OMPI_COMM_WORLD_SIZE": str(plan["world_size"]),
        "OMPI_COMM_WORLD_LOCAL_RANK": str(entry["local_rank"]),
        "OMPI_COMM_WORLD_LOCAL_SIZE": str(entry["local_world_size"]),
        "OMPI_COMM_WORLD_NODE_RANK": str(entry["node_rank"]),
    }  # fmt: skip


def main(argv: list[str]) -> int:
    split = argv.index("--") if "--" in argv else len(argv)
    if argv[:1] == ["rank"] and split >= 2:
        return rank(argv[1], argv[split + 1 :])
    if argv[:1] == ["batch"] and len(argv) == 2:
        return batch(argv[1])
    print(f"usage: python {TASK_FILE} batch PLAN | rank PLAN -- PROGRAM", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
