"""The mpirun line that starts a placed gang on ssh hosts, with Open MPI's own ssh launcher.

Rank i runs on the i-th line of a hostfile (Open MPI's sequential mapper), so every rank lands
exactly where the placement put it whatever the order of its slots. Each rank runs under the
rank wrapper sent as source (``python3 -c``) in stream mode; mpirun carries its lines back with
``--tag-output`` (see demux.py). Open MPI is told to launch every daemon from the head (no tree
spawn: the hosts need neither our ssh configuration nor our key) and to notice a lost daemon
within seconds (TCP keepalive), not minutes.
"""

from __future__ import annotations

import json
import os
import shlex
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ringleader.engines.embedded.hosts.ssh import write_config
from ringleader.jobs.line import MAPPING_OPTIONS, MpiOption, mca_parameter, mca_values, option_words, root_option
from ringleader.jobs.spec import CONTAINER_RUNTIME_KEYS, JobSpec
from ringleader.runtime.demux import HOST_START_S
from ringleader.runtime.plan import rank_source
from ringleader.runtime.rank import LEASE_S, stop_mca
from ringleader.scheduler import Placement
from ringleader.topology import NodeSpec

LOCALHOST = "localhost"
# Passed to the ranks on every host when the job has them (as `mpirun -x` users do by hand), and
# the container runtime's settings to each rank's client (--image; never into the container).
FORWARDED_KEYS = ("PATH", "LD_LIBRARY_PATH", "PYTHONPATH", "VIRTUAL_ENV", "OMP_NUM_THREADS", "CUDA_HOME",
                  *CONTAINER_RUNTIME_KEYS)  # fmt: skip
FORWARDED_PREFIXES = ("NCCL_", "GLOO_", "TORCH_", "MKL_")
# Placement decides where ranks go (a hostfile read by the sequential mapper): a user's mapping
# options (MAPPING_OPTIONS) are replaced, and the job's Started event says so. (Those that would
# map ranks elsewhere were refused at submit, see runtime.commands.) --bind-to (on real hosts) and
# --oversubscribe are kept as given.
# A lost daemon is noticed by Open MPI in about 5 + 2 x 3 s (its default is 5 minutes).
KEEPALIVE_MCA = {"oob_tcp_keepalive_time": "5", "oob_tcp_keepalive_intvl": "2", "oob_tcp_keepalive_probes": "3"}


def host_alias(node: NodeSpec) -> str:
    """How mpirun and ssh name the node: its own name (our ssh config maps it to its address)."""
    return node.name if node.address is not None else LOCALHOST


def master_address(placement: Placement, nodes: Mapping[str, NodeSpec], settings: Mapping[str, Any]) -> str:
    """MASTER_ADDR for torchrun-style programs: rank 0's host, as the other hosts reach it. A
    node of the emulated cluster is its name, its own hostname there (torchrun gives rank 0's
    host name, not an address)."""
    first = nodes[placement.slots[0].node]
    if first.address is not None:
        return first.name if first.emulated and _resolves(first.name) else first.address.host
    return str(settings.get("head_address") or socket.getfqdn())


def _resolves(name: str) -> bool:
    try:
        socket.getaddrinfo(name, None)
    except OSError:
        return False
    return True


def rank_table(plan: Mapping[str, Any]) -> dict[str, Any]:
    """What a remote rank wrapper needs: the plan without paths of the head or the job's env (the
    run's restart count and limit included: torchrun's TORCHELASTIC_RESTART_COUNT and
    TORCHELASTIC_MAX_RESTARTS), and its lease (rank.Lease)."""
    keep = ("rank", "instance", "node", "gpus", "node_gpus", "local_rank", "local_world_size", "node_rank", "emulated")
    return {
        "job": plan["job"], "world_size": plan["world_size"], "nnodes": plan["nnodes"],
        "master_addr": plan["master_addr"], "master_port": plan["master_port"],
        "restarts": plan.get("restarts", 0), "max_restarts": plan.get("max_restarts", 0),
        "torchrun_defaults": plan.get("torchrun_defaults", False),
        "ranks": [{k: r[k] for k in keep} for r in plan["ranks"]],
        # The lease each rank holds from the head, and how it is stopped once that lapses.
        "lease_s": LEASE_S, "start_s": HOST_START_S, "grace_s": plan["grace_s"],
    }  # fmt: skip


def forwarded_names(spec: JobSpec, plan: Mapping[str, Any]) -> list[str]:
    """Variables mpirun passes to every rank (-x NAME): the search paths and communication
    settings the job was submitted with, and its -e pairs. (OMPI_MCA_* reach mpirun itself.)"""
    env = spec.submit_env or {}
    names = [k for k in env if k in FORWARDED_KEYS or k.startswith(FORWARDED_PREFIXES)]
    return list(dict.fromkeys([*names, *plan["env"]]))


def hosts_command(
    spec: JobSpec, plan: Mapping[str, Any], plan_file: Path, nodes: Mapping[str, NodeSpec], home: Path,
    settings: Mapping[str, Any],
) -> tuple[list[str], str]:  # fmt: skip
    """The whole mpirun argv for ``spec`` placed as ``plan`` and how to show it (the wrapper's
    source elided); writes the job's ssh configuration and hostfile beside the plan file."""
    run_dir = plan_file.parent
    placed = [nodes[n] for n in dict.fromkeys(r["node"] for r in plan["ranks"])]
    config = write_config(run_dir / "ssh_config", placed, home)
    hostfile = run_dir / "hostfile"
    fd = os.open(hostfile, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write("".join(host_alias(nodes[r["node"]]) + "\n" for r in plan["ranks"]))
    line = spec.command_line()
    if line.mpirun:
        options, program, mpirun = line.kept_options, list(line.program), line.argv[0]
    else:
        options, program, mpirun = [], list(spec.command), "mpirun"
    emulated = any(n.emulated for n in placed)
    # Emulated nodes share this box's cores: binding would fail or pile ranks onto a few cores.
    dropped = MAPPING_OPTIONS | ({"bind-to"} if emulated else set())
    replaced = [o for o in options if o.name in dropped]
    stdin_replaced = [o for o in options if o.name == "stdin"]
    options = [o for o in options if o.name not in dropped | {"stdin"}]
    given = {o.name for o in options}
    argv = [mpirun, "-np", str(len(plan["ranks"])), "--hostfile", str(hostfile), "--mca", "rmaps", "seq"]
    argv += root_option(options, os.geteuid() == 0)
    if "bind-to" not in given:
        argv += ["--bind-to", "none"]
    # Every rank's stdin is mpirun's, on which the head renews their leases (demux.Demux).
    argv += ["--tag-output", "--stdin", "all"]
    if emulated and "oversubscribe" not in given:
        argv.append("--oversubscribe")  # emulated nodes share this box's cores
    # Open MPI refuses a parameter given twice: each is passed once. The launcher's own (ssh, the
    # mapper, an emulated cluster's interfaces) replace a user's setting that asks for another
    # value; keepalive tuning is the user's where given.
    owned = {"plm_rsh_agent": f"ssh -F {config}", "plm_rsh_no_tree_spawn": "1", "rmaps": "seq",
             **settings.get("mca", {}), **stop_mca(mca_values(options), spec.stop_grace())}  # fmt: skip
    mca_replaced = [o for o in options if mca_parameter(o) in owned and o.values[1] != str(owned[o.values[0]])]
    options = [o for o in options if mca_parameter(o) not in owned]
    given_mca = {mca_parameter(o) for o in options}
    mca = {k: v for k, v in {**owned, **KEEPALIVE_MCA}.items() if k != "rmaps" and k not in given_mca}
    for key, value in mca.items():
        argv += ["--mca", key, str(value)]
    for name in forwarded_names(spec, plan):
        argv += ["-x", name]
    # -S: the wrapper needs only the standard library, not site-packages (a few ms per rank).
    wrapper = ["python3", "-S", "-c", rank_source(), "--stream", json.dumps(rank_table(plan)), "--"]
    kept = option_words(options)
    shown = shlex.join([*argv, *kept]) + " python3 -S -c <rank wrapper> " + shlex.join(program)
    if replaced:
        unbound = ", unbound on emulated nodes" if emulated else ""
        shown += f" (mpirun {shlex.join(option_words(replaced))} replaced: ranks follow the placement's order{unbound})"
    if stdin_replaced:
        shown += (f" (mpirun {shlex.join(option_words(stdin_replaced))} replaced: every rank's stdin carries its "
                  "lease from the head)")  # fmt: skip
    if mca_replaced:
        shown += (f" (mpirun {shlex.join(option_words(mca_replaced))} replaced: the launcher sets these for the "
                  "cluster's hosts and network)")  # fmt: skip
    return [*argv, *kept, *wrapper, *program], shown


def stop_options(options: list[MpiOption], grace_s: float) -> tuple[list[MpiOption], list[str]]:
    """``options`` without the parameters that decide how ranks are stopped, and the words that
    set those as every launcher of ringleader's does (``rank.stop_mca``)."""
    mca = stop_mca(mca_values(options), grace_s)
    return [o for o in options if mca_parameter(o) not in mca], [w for k, v in mca.items() for w in ("--mca", k, v)]
