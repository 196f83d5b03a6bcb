"""``--image``: run each rank's program in a container image, through podman or docker.

The container runtime is found on the submitter's PATH and asked to answer (``podman info``,
``docker info``): a docker client whose daemon cannot be reached counts as none. With none, the
job is refused; an image is never accepted and then ignored.

Each rank's wrapper runs ``RUNTIME run ... IMAGE PROGRAM`` in place of PROGRAM, on the host's
network, IPC and PID namespaces (NCCL and Open MPI talk through shared memory and the host's
interfaces), in the job's working directory mounted at the same path, with the rank's variables
passed by name, and the host's NVIDIA GPUs when the job asks for GPUs (CUDA_VISIBLE_DEVICES,
passed in, picks the rank's). The host's own settings of the runtime apply (e.g. podman's
CONTAINERS_CONF, given with -e). Under mpirun the ranks inside the containers must reach mpirun's daemons on the
host through Open MPI's OMPI_*/PMIX_* variables: podman passes them by prefix; docker cannot
(no wildcards in ``-e``), so an mpirun job with an image needs podman.
"""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ringleader.errors import DependencyError
from ringleader.jobs.commandline import CommandLine
from ringleader.jobs.spec import JobSpec, check_image_reference
from ringleader.runtime import container_guard

PROBE_SECONDS = 20.0
# What the rank wrapper sets for every rank (see rank.rank_env), passed into the container.
RANK_VARIABLES = (
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "NODE_RANK", "MASTER_ADDR",
    "MASTER_PORT", "CUDA_VISIBLE_DEVICES", "RINGLEADER_JOB", "RINGLEADER_INSTANCE", "RINGLEADER_NODE",
    "RINGLEADER_WORKER_GPUS", "RINGLEADER_VIRTUAL_GPUS", "PYTHONUNBUFFERED",
)  # fmt: skip
# Passed by prefix (podman only): what Open MPI's ranks need to join their job, and NCCL's settings.
MPI_PREFIXES = ("OMPI_", "PMIX_", "NCCL_")


@dataclass(frozen=True)
class ContainerRuntime:
    name: str  # "podman" or "docker"
    path: str


def check_image(image: str) -> None:
    check_image_reference(image)


def find_runtime(image: str, environ: Mapping[str, str]) -> ContainerRuntime:
    """The first of podman and docker on the submitter's PATH that answers; else a one-line
    refusal naming what was found and why it cannot run containers."""
    reasons = []
    probes = {"podman": ["info", "--format", "{{.Host.OCIRuntime.Name}}"],
              "docker": ["info", "--format", "{{.ServerVersion}}"]}  # fmt: skip
    for name, probe in probes.items():
        path = shutil.which(name, path=environ.get("PATH"))
        if path is None:
            reasons.append(f"no {name} on PATH")
            continue
        try:
            done = subprocess.run([path, *probe], capture_output=True, text=True, timeout=PROBE_SECONDS,
                                  stdin=subprocess.DEVNULL, env=dict(environ))  # fmt: skip
        except (OSError, subprocess.TimeoutExpired):
            reasons.append(f"{name} at {path} did not answer")
            continue
        if done.returncode == 0 and done.stdout.strip():
            return ContainerRuntime(name, path)
        said = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
        reasons.append(f"{name} at {path} cannot run containers ({said[:160]})")
    raise DependencyError(
        f"--image {image} needs a container runtime on this host and there is none: {'; '.join(reasons)}",
        "install podman or start docker's daemon, or submit without --image to run on this host",
    )


def guard_command() -> list[str]:
    """``python3 -c <container_guard's source>``: it runs wherever a rank runs, ringleader
    installed there or not."""
    packed = base64.b64encode(zlib.compress(Path(container_guard.__file__).read_bytes(), 9)).decode()
    return ["python3", "-c", f"import base64,zlib;exec(zlib.decompress(base64.b64decode('{packed}')))"]


def has_nvidia_devices() -> bool:
    """Whether this host has NVIDIA GPUs to hand into containers (emulated nodes have none)."""
    return Path("/dev/nvidiactl").exists()


def in_image(runtime: ContainerRuntime, image: str, program: Sequence[str], workdir: str,
             env_names: Iterable[str], gpus: bool, mpi: bool) -> list[str]:  # fmt: skip
    """``program`` as run in ``image``: what each rank's wrapper starts in its place (the
    container's client under container_guard, which leaves no container behind). The runtime is named, not
    its path here: it is found on the PATH of the host each rank runs on."""
    if mpi and runtime.name != "podman":
        raise DependencyError(
            f"an mpirun job in an image needs podman: {runtime.name} cannot pass Open MPI's per-rank "
            "variables (OMPI_*, PMIX_*) into the container",
            "install podman, or run the program without mpirun (ringleader starts one per worker)",
        )
    # No --init: with the host's PID namespace the program is not PID 1 and gets signals as usual.
    argv = [*guard_command(), runtime.name, "run", "--rm", "--network=host", "--ipc=host",
            "--pid=host", "-v", f"{workdir}:{workdir}", "-w", workdir]  # fmt: skip
    for name in sorted({*RANK_VARIABLES, *env_names}):
        argv += ["-e", name]
    if mpi:
        for prefix in MPI_PREFIXES:
            argv += ["-e", f"{prefix}*"]
    if gpus and has_nvidia_devices():
        argv += ["--device", "nvidia.com/gpu=all"] if runtime.name == "podman" else ["--gpus", "all"]
    return [*argv, image, *program]


def spec_in_image(spec: JobSpec, line: CommandLine, environ: Mapping[str, str]) -> tuple[JobSpec, str]:
    """A prepared spec whose program runs in ``spec.image`` through this host's podman or
    docker (refused when there is none), and the note saying so."""
    import dataclasses

    assert spec.image is not None
    check_image(spec.image)
    runtime = find_runtime(spec.image, environ)
    mpi = line.mpirun
    head, program = (line.head, list(line.program)) if mpi else ([], list(spec.command))
    env = dict(spec.env)
    wrapped = in_image(runtime, spec.image, program, spec.workdir or os.getcwd(), env,
                       gpus=spec.gpus_per_worker > 0, mpi=mpi)  # fmt: skip
    written = spec.user_command or spec.command
    spec = dataclasses.replace(spec, command=[*head, *wrapped], env=env, user_command=list(written))
    return spec, f"note: each rank runs in image {spec.image} through {runtime.name} ({runtime.path})"
