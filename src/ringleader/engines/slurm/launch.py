"""A placed gang as one Slurm job: a heterogeneous job with one component per chosen node, each
pinned with ``--nodelist`` and per-GPU GRES types, so Slurm starts all of it at once on exactly
the chosen nodes and GPU ids (or keeps all of it waiting).

The batch script runs ringleader's ``task.py``: for an mpirun line, the user's mpirun inside the
allocation (its daemons started on each node by ``srun``), else one ``srun`` step over every
component; each rank runs the program under the rank wrapper.
"""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ringleader.engines.slurm import task
from ringleader.engines.slurm.gres import request_gres
from ringleader.engines.slurm.records import private_dir, write_private
from ringleader.engines.slurm.task import TASK_FILE
from ringleader.jobs.commandline import gets_torchrun_defaults
from ringleader.jobs.line import MAPPING_OPTIONS, CommandLine, mca_parameter, mca_values, option_words, root_option
from ringleader.jobs.spec import JobSpec
from ringleader.runtime.plan import build_plan, job_env
from ringleader.runtime.rank import stop_mca
from ringleader.scheduler import Placement, WorkerSlot
from ringleader.scheduler.teams import DEFAULT_QUEUE
from ringleader.topology import NodeSpec


def by_node(placement: Placement) -> Placement:
    """Workers renumbered node by node (in the placement's node order): Slurm numbers the tasks
    of a heterogeneous step component after component, and rank i must be task i."""
    slots = [s for node in placement.nodes for s in placement.slots if s.node == node]
    return Placement(placement.job, tuple(WorkerSlot(i, s.node, s.gpus) for i, s in enumerate(slots)))


def mpirun_head(line: CommandLine, grace_s: float) -> list[str]:
    """An mpirun line's launcher and options as the batch step runs it inside the allocation:
    the user's options but mapping (the hostfile, in rank order, read by Open MPI's sequential
    mapper, is where ranks go, as on ssh hosts) and the MCA parameters the launch owns (how mpirun
    reaches the nodes replaces a user's setting of the same name), the ranks unbound unless asked
    (Slurm decides the cores), and stopped as every rank is (``stop_mca``)."""
    options = [o for o in line.kept_options if o.name not in MAPPING_OPTIONS]
    owned = {**task.LAUNCH_MCA, **stop_mca(mca_values(options), grace_s)}
    options = [o for o in options if mca_parameter(o) not in (*owned, task.AGENT_MCA)]
    head = [line.argv[0], *root_option(options, os.geteuid() == 0)]
    if not any(o.name == "bind-to" for o in options):
        head += ["--bind-to", "none"]
    for key, value in owned.items():
        head += ["--mca", key, value]
    return [*head, *option_words(options)]


def write_launch(
    root: Path, spec: JobSpec, placement: Placement, specs: Mapping[str, NodeSpec], addresses: Mapping[str, str],
    restarts: int = 0,
) -> tuple[Path, dict[str, Any]]:
    """The rank plan (``<root>/run/<job>/plan.json``) and the batch script next to it; ``restarts``:
    how often the job ran before (RINGLEADER_RESTARTS, and torchrun's TORCHELASTIC_RESTART_COUNT)."""
    placement = by_node(placement)
    env = job_env(spec.submit_env)
    line = spec.command_line()
    program = list(line.program) if line.mpirun else list(spec.command)
    env.update(spec.env)
    env["RINGLEADER_RESTARTS"] = str(restarts)  # to resume from its checkpoint
    plan = build_plan(spec.name, placement, dict(specs), env, root)
    plan.update(
        restarts=restarts, max_restarts=spec.max_restarts, torchrun_defaults=gets_torchrun_defaults(spec),
        master_addr=addresses[placement.nodes[0]], master_port=0, program=program,
        mpirun=mpirun_head(line, spec.stop_grace()) if line.mpirun else None,
        components=[{"node": n, "ntasks": sum(1 for s in placement.slots if s.node == n),
                     "gpus": list(placement.gpus_on(n))} for n in placement.nodes],
    )  # fmt: skip
    run = private_dir(root / "run" / spec.name)
    private_dir(root / "logs" / spec.name)
    plan_file = run / "plan.json"
    write_private(plan_file, json.dumps(plan))
    script = run / "batch.py"
    write_private(script, (
        f"#!{sys.executable}\n# ringleader: the batch step of job {spec.name}\nimport runpy, sys\n"
        f"sys.argv = [{TASK_FILE!r}, 'batch', {str(plan_file)!r}]\nrunpy.run_path(sys.argv[0], run_name='__main__')\n"
    ), mode=0o700)  # fmt: skip
    return script, plan


def batch_log(root: Path, name: str) -> Path:
    """The batch step's own output (srun's messages), as Slurm's --output."""
    return root / "logs" / name / "batch.log"


def sbatch_argv(spec: JobSpec, plan: dict[str, Any], script: Path, root: Path, partition: str | None) -> list[str]:
    # Made here, private, and appended to: Slurm would create it with the job's umask.
    output = batch_log(root, spec.name)
    os.close(os.open(output, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600))
    # --no-requeue: pinned to its nodes, a job Slurm requeued after a node failure would wait for
    # the lost node; ringleader requeues it in its own queue, to be placed again (--max-restarts).
    argv = ["sbatch", "--parsable", f"--job-name={spec.name}", "--comment=ringleader", f"--output={output}",
            "--open-mode=append", "--no-requeue", f"--chdir={spec.workdir or os.getcwd()}"]  # fmt: skip
    for k, comp in enumerate(plan["components"]):
        if k:
            argv.append(":")
        argv += [f"--nodelist={comp['node']}", "--nodes=1", f"--ntasks={comp['ntasks']}"]
        if partition:
            argv.append(f"--partition={partition}")
        if spec.queue not in (None, DEFAULT_QUEUE):  # its queue is the account and QOS of that name
            argv += [f"--account={spec.queue}", f"--qos={spec.queue}"]
        if comp["gpus"]:
            argv.append(f"--gres={request_gres(comp['gpus'])}")
        if spec.time_limit_s is not None:  # Slurm enforces it: SIGTERM, KillWait, SIGKILL; state TIMEOUT
            argv.append(f"--time={slurm_time(spec.time_limit_s)}")
    return [*argv, str(script)]


def slurm_time(seconds: float) -> str:
    """A time limit as sbatch's --time "minutes:seconds", rounded up to a whole second."""
    whole = math.ceil(seconds)
    return f"{whole // 60}:{whole % 60:02d}"
