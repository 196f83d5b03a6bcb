"""``--image``: run each rank's program in a container image, through podman or docker.

The container runtime is found on the submitter's PATH and asked to answer (``podman image
exists IMAGE``, which also says whether the image is here; ``docker version``, which needs the
daemon): a docker client whose daemon cannot be reached counts as none. With none, the job is
refused; an image is never accepted and then ignored.

Each rank's wrapper runs ``RUNTIME run ... IMAGE PROGRAM`` in place of PROGRAM (completed per
rank by the rank wrapper's guard: ``runtime.rank.completed``), on the host's network, IPC and PID
namespaces (NCCL and Open MPI talk through shared memory and the host's interfaces), in the
job's working directory mounted at the same path, with the job's environment passed by name
(``jobs.spec.container_env``: every variable a rank sees without an image but the host's own
paths) and only the rank's own GPUs. The runtime's own settings (CONTAINERS_CONF, DOCKER_HOST,
...) are kept with the job and given to the client, never to the container. Under mpirun the
ranks inside the containers reach mpirun's daemons on the host through Open MPI's OMPI_*/PMIX_*
variables: podman passes them by prefix; docker cannot (no wildcards in ``-e``), so an mpirun
job with an image needs podman.

The image is resolved once per node by the job's supervisor before any rank starts
(``resolve_image``, per --image-pull-policy); ranks run with ``--pull=never``. Every container
carries the job's label, and whoever ends the job removes what is left by it
(``remove_containers``): a killed client leaves a record that no process tree holds.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ringleader.errors import DependencyError, UsageError
from ringleader.jobs.line import CommandLine
from ringleader.jobs.spec import (
    CONTAINER_RUNTIME_KEYS,
    ContainerOptions,
    JobSpec,
    check_image_reference,
    container_env,
)
from ringleader.runtime.plan import rank_source
from ringleader.runtime.rank import GUARD_MARK, rank_env

PROBE_SECONDS = 20.0
# Passed by prefix (podman only): what Open MPI's ranks need to join their job, and NCCL's settings.
MPI_PREFIXES = ("OMPI_", "PMIX_", "NCCL_")
LABEL = "io.ringleader.job"  # every container of a job carries LABEL=<job_label()>
# Where nvidia-ctk writes the CDI spec that podman's `--device nvidia.com/gpu=N` reads.
CDI_DIRS = ("/etc/cdi", "/var/run/cdi")
NO_OPTIONS = ContainerOptions()
# How the guard's `-c` source began when it was a program of its own (container_guard.py).
OLD_GUARD = "import base64,zlib;exec("
CDI_FIX = "run `sudo nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml` on this host, or submit without GPUs"


@dataclass(frozen=True)
class ContainerRuntime:
    name: str  # "podman" or "docker"
    path: str
    has_image: bool | None = None  # the image was on this host when the runtime answered; None: not asked


@dataclass(frozen=True)
class ImageJob:
    """A spec prepared to run in its image (``spec_in_image``)."""

    spec: JobSpec
    note: str


def find_runtime(image: str, environ: Mapping[str, str]) -> ContainerRuntime:
    """The first of podman and docker on the submitter's PATH that answers; else a one-line
    refusal naming what was found and why it cannot run containers."""
    reasons = []
    # Not `info` (0.8 s for podman). podman's `image exists` answers 0 (here) or 1 (not here),
    # anything else is podman failing; docker's `version` answers only through its daemon.
    probes = {"podman": ["image", "exists", image],
              "docker": ["version", "--format", "{{.Server.Version}}"]}  # fmt: skip
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
        if name == "podman" and done.returncode in (0, 1):
            return ContainerRuntime(name, path, has_image=done.returncode == 0)
        if name == "docker" and done.returncode == 0 and done.stdout.strip():
            return ContainerRuntime(name, path)
        said = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
        reasons.append(f"{name} at {path} cannot run containers ({said[:160]})")
    raise DependencyError(
        f"--image {image} needs a container runtime on this host and there is none: {'; '.join(reasons)}",
        "install podman or start docker's daemon, or submit without --image to run on this host",
    )


def guard_command() -> list[str]:
    """``python3 -S -c <the rank wrapper's source> --guard``: it runs wherever a rank runs,
    ringleader installed there or not; a rank wrapper completes it in its own process instead."""
    # -S: the guard needs only the standard library, not site-packages (a few ms per rank).
    return ["python3", "-S", "-c", GUARD_MARK + rank_source(), "--guard"]


def job_label(home: Path, job: str) -> str:
    """The value of LABEL on a job's containers: its name within its state folder."""
    return f"{hashlib.sha256(str(home).encode()).hexdigest()[:12]}.{job}"


def rank_variable_names() -> list[str]:
    """Every variable the rank wrapper sets for a rank (rank.rank_env, under mpirun too), and
    the run's own: RINGLEADER_RESTARTS (set for each run by its supervisor), and torchrun's
    defaults where the wrapper sets them (``rank.torchrun_defaults``; a name unset is not passed)."""
    plan = {"world_size": 1, "master_addr": "", "master_port": 0, "job": "", "nnodes": 1}
    entry = {"rank": 0, "local_rank": 0, "local_world_size": 1, "node_rank": 0, "instance": "", "node": "",
             "gpus": [], "node_gpus": [], "emulated": False}  # fmt: skip
    return [*rank_env(plan, entry, under_mpirun=True), "RINGLEADER_VIRTUAL_GPUS", "PYTHONUNBUFFERED",
            "RINGLEADER_RESTARTS", "OMP_NUM_THREADS", "TORCH_NCCL_ASYNC_ERROR_HANDLING"]


def nvidia_gpu_indexes() -> list[int]:
    """This host's NVIDIA GPUs (/dev/nvidiaN); none on emulated nodes."""
    found = (re.fullmatch(r"nvidia(\d+)", p.name) for p in Path("/dev").glob("nvidia[0-9]*"))
    return sorted(int(m[1]) for m in found if m)


def cdi_gpu_names(dirs: Iterable[str] = CDI_DIRS) -> set[str]:
    """The device names of kind nvidia.com/gpu in the CDI spec files of ``dirs`` (YAML or JSON)."""
    import yaml

    names: set[str] = set()
    for folder in dirs:
        for path in sorted(Path(folder).glob("*")) if Path(folder).is_dir() else []:
            if path.suffix not in (".yaml", ".yml", ".json"):
                continue
            try:
                doc = yaml.safe_load(path.read_text())
            except (OSError, yaml.YAMLError):
                continue
            if isinstance(doc, dict) and doc.get("kind") == "nvidia.com/gpu":
                names |= {str(d["name"]) for d in doc.get("devices") or [] if isinstance(d, dict) and "name" in d}
    return names


def check_cdi(indexes: Sequence[int], dirs: Iterable[str] = CDI_DIRS) -> None:
    """podman gives a rank GPU N as the CDI device nvidia.com/gpu=N: refuse, in one line, a host
    whose CDI spec does not name every GPU (the job would fail with exit code 126 after launch)."""
    dirs = list(dirs)
    names = cdi_gpu_names(dirs)
    missing = [i for i in indexes if str(i) not in names]
    if missing:
        found = f"it names {', '.join(sorted(names))}" if names else f"there is none in {' or '.join(dirs)}"
        raise DependencyError(
            f"--image with GPUs needs a CDI spec naming each GPU as nvidia.com/gpu=INDEX (GPU {missing[0]}): {found}",
            CDI_FIX,
        )


def in_image(runtime: ContainerRuntime, image: str, program: Sequence[str], workdir: str,
             env_names: Iterable[str], gpus: bool, mpi: bool, options: ContainerOptions = NO_OPTIONS,
             label: str | None = None) -> list[str]:  # fmt: skip
    """``program`` as run in ``image``: what each rank's wrapper starts in its place (the
    container's client, completed per rank by the guard). The runtime is named, not its
    path here: it is found on the PATH of the host each rank runs on."""
    if mpi and runtime.name != "podman":
        raise DependencyError(
            f"an mpirun job in an image needs podman: {runtime.name} cannot pass Open MPI's per-rank "
            "variables (OMPI_*, PMIX_*) into the container",
            "install podman, or run the program without mpirun (ringleader starts one per worker)",
        )
    # No --init: with the host's PID namespace the program is not PID 1 and gets signals as usual.
    # --mount, not -v: a path may hold ':' (refused with ',' at submit).
    argv = [*guard_command(), *(["--gpus"] if gpus else []), runtime.name, "run", "--rm", "--pull=never",
            "--network=host", "--pid=host", *_ipc(options), *(["--label", f"{LABEL}={label}"] if label else []),
            *_bind(workdir, workdir), "-w", workdir]  # fmt: skip
    for source, target in options.data:
        argv += _bind(source, target)
    if options.rdma:
        argv += ["--device", "/dev/infiniband", "--ulimit", "memlock=-1:-1", "--cap-add", "IPC_LOCK"]
    if options.user is not None:
        argv += ["--user", options.user]
    for name in sorted({*rank_variable_names(), *env_names}):
        argv += ["-e", name]
    if mpi:
        for prefix in MPI_PREFIXES:
            argv += ["-e", f"{prefix}*"]
    return [*argv, image, *program]


def _ipc(options: ContainerOptions) -> list[str]:
    """The host's IPC namespace (ranks of a node share /dev/shm), or with --shm-size the
    container's own /dev/shm of that size, as a pod's."""
    return ["--ipc=host"] if options.shm_size is None else ["--ipc=private", f"--shm-size={options.shm_size}b"]


def _bind(source: str, target: str) -> list[str]:
    return ["--mount", f"type=bind,source={source},target={target}"]


def check_mounts(workdir: str, options: ContainerOptions) -> None:
    """What a rank's `run` would refuse after launch, refused at submit in one line."""
    if "," in workdir:
        raise UsageError(f"the working directory {workdir!r} holds a ',', which a container mount cannot",
                         "submit from a folder whose path has no ','")  # fmt: skip
    for source, _ in options.data:
        if not source.startswith("/") or "," in source:
            raise UsageError(f"--data {source!r}: on this engine SRC is an absolute host path without ','",
                             "write -d /path/on/the/host:/path/in/container")  # fmt: skip
        if not os.path.exists(source):
            raise UsageError(f"--data {source!r}: no such file or folder on this host", "create it or fix the path")


def spec_in_image(spec: JobSpec, line: CommandLine, environ: Mapping[str, str], label: str | None = None) -> ImageJob:
    """A prepared spec whose program runs in ``spec.image`` through this host's podman or
    docker (refused when there is none), and the note saying so."""
    assert spec.image is not None
    check_image_reference(spec.image)
    workdir = spec.workdir or os.getcwd()
    check_mounts(workdir, spec.container)
    runtime = find_runtime(spec.image, environ)
    present = runtime.has_image
    if present is None and spec.container.image_pull_policy == "Never":
        present = image_present(runtime.path, spec.image, environ)
    if spec.container.image_pull_policy == "Never" and not present:
        raise UsageError(f"image {spec.image} is not on this host and --image-pull-policy is Never",
                         f"{runtime.name} pull {spec.image} (or build it), or use --image-pull-policy IfNotPresent")
    if spec.gpus_per_worker > 0 and runtime.name == "podman" and nvidia_gpu_indexes():
        check_cdi(nvidia_gpu_indexes())
    mpi = line.mpirun
    head, program = (line.head, list(line.program)) if mpi else ([], list(spec.command))
    env = dict(spec.env)
    if mpi:
        # PMIx's shared-memory store cannot be shared across containers: each rank prints a
        # gds_ds12_lock_pthread.c error without this.
        env.setdefault("PMIX_MCA_gds", "hash")
    names = container_env(spec.submit_env, env)
    wrapped = in_image(runtime, spec.image, program, workdir, names, gpus=spec.gpus_per_worker > 0, mpi=mpi,
                       options=spec.container, label=label or spec.name)  # fmt: skip
    written = spec.user_command or spec.command
    command = [*head, *wrapped]
    in_container = dataclasses.replace(line, argv=tuple(command), program=tuple(wrapped)) if mpi else \
        CommandLine(tuple(command), False, (), tuple(command), None)  # fmt: skip
    spec = dataclasses.replace(spec, command=command, env=env, user_command=list(written), line=in_container)
    note = f"note: each rank runs in image {spec.image} through {runtime.name} ({runtime.path})"
    return ImageJob(spec, note)


def container_runtime_of(command: Sequence[str]) -> str | None:
    """The runtime (podman or docker) a prepared command runs its ranks' containers with, or None."""
    for i in range(len(command) - 2):
        if command[i] != "-c":
            continue
        if command[i + 1].startswith(GUARD_MARK) and command[i + 2] == "--guard":
            rest = command[i + 3 : i + 5]
        elif command[i + 1].startswith(OLD_GUARD):  # a job queued before the guard was the rank wrapper
            rest = command[i + 2 : i + 4]
        else:
            continue
        rest = [w for w in rest if w != "--gpus"]
        return rest[0] if rest and rest[0] in ("podman", "docker") else None
    return None


def readable(command: Sequence[str]) -> str:
    """``command`` as a shell line, the guard's packed source shown as ``<guard>``."""
    return " ".join("<guard>" if w.startswith((GUARD_MARK, OLD_GUARD)) else shlex.quote(w) for w in command)


# Runs a runtime command where the job's ranks run: argv -> (exit code, stdout, stderr).
Runner = Callable[[list[str]], tuple[int, str, str]]


def local_runner(env: Mapping[str, str], cancelled: Callable[[], bool] = lambda: False) -> Runner:
    """A Runner on this host with the job's runtime settings; a cancelled command is stopped."""

    def run(argv: list[str]) -> tuple[int, str, str]:
        try:
            proc = subprocess.Popen(argv, env=dict(env), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True)  # fmt: skip
        except OSError as exc:
            return 127, "", f"cannot run {argv[0]}: {exc.strerror}"
        while True:
            try:
                out, err = proc.communicate(timeout=0.1)
                return proc.returncode, out, err
            except subprocess.TimeoutExpired:
                if cancelled():
                    proc.terminate()
                    proc.communicate()
                    return 130, "", "cancelled"

    return run


def image_present(runtime: str, image: str, env: Mapping[str, str]) -> bool:
    return local_runner(env)(_exists(runtime, image))[0] == 0


def _exists(runtime: str, image: str) -> list[str]:
    return [runtime, "image", "exists" if Path(runtime).name == "podman" else "inspect", image]


def resolve_image(runtime: str, image: str, policy: str | None, run: Runner, where: str = "this host") -> str | None:
    """Make ``image`` present where ``run`` runs, per ``policy`` (default IfNotPresent): None
    when it is, else one line saying why not (the registry's own last word on a failed pull)."""
    policy = policy or "IfNotPresent"
    if policy != "Always" and run(_exists(runtime, image))[0] == 0:
        return None
    if policy == "Never":
        return f"image {image} is not on {where} and --image-pull-policy is Never"
    code, _, err = run([runtime, "pull", "--quiet" if Path(runtime).name == "podman" else "-q", image])
    if code == 0:
        return None
    said = err.strip().splitlines() or [f"exit code {code}"]
    return f"image {image} could not be pulled on {where}: {said[-1][:300]}"


def remove_containers(runtime: str, label: str, run: Runner) -> int:
    """Remove, by force, every container left with LABEL=``label``; how many there were."""
    code, out, _ = run([runtime, "ps", "-aq", "--filter", f"label={LABEL}={label}"])
    ids = out.split() if code == 0 else []
    if ids:  # podman's -f would give a live program 10 s after SIGTERM: its rank is being stopped already
        run([runtime, "rm", "-f", *(["-t", "0"] if Path(runtime).name == "podman" else []), *ids])
    return len(ids)


def runtime_settings(env: Mapping[str, str]) -> list[str]:
    """``NAME=VALUE`` of the runtime's own settings in ``env`` (for `env` on another host)."""
    return [f"{k}={env[k]}" for k in CONTAINER_RUNTIME_KEYS if k in env]
