"""What a user asks to run: the job spec, validated before anything is written."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from ringleader.errors import UsageError

if TYPE_CHECKING:
    from ringleader.scheduler import JobRequest

_ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_LEVEL = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")  # a network level's name
# What a job takes from the shell it was submitted from, whichever process later starts it: the
# search paths and the Python, CUDA and communication-library settings (not the whole env, so
# tokens and passwords are never stored).
SUBMIT_ENV_KEYS = (
    "PATH", "PYTHONPATH", "VIRTUAL_ENV", "CONDA_PREFIX", "CONDA_DEFAULT_ENV", "LD_LIBRARY_PATH",
    "CUDA_HOME", "HOME", "USER", "LANG", "LC_ALL", "TMPDIR", "OMP_NUM_THREADS",
)  # fmt: skip
MAX_TIME_LIMIT_S = 365 * 24 * 3600.0  # a year: beyond it a limit is a typo, not a plan
SUBMIT_ENV_PREFIXES = ("NCCL_", "OMPI_MCA_", "PMIX_MCA_", "GLOO_", "TORCH_", "MKL_")


_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")
_DURATION_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(text: str, option: str = "--time-limit") -> float:
    """'90s', '30m', '2h', '1h30m' or plain seconds ('600') -> seconds; one usage error otherwise."""
    text = text.strip()
    fix = "write e.g. 90s, 30m, 2h, 1h30m or a number of seconds"
    try:
        seconds = float(text)
    except ValueError:
        parts = _DURATION.findall(text)
        if not parts or "".join(n + u for n, u in parts) != text:
            raise UsageError(f"{option} {text!r} is not a duration", fix) from None
        seconds = sum(float(n) * _DURATION_UNIT_S[u] for n, u in parts)
    if not 0 < seconds < MAX_TIME_LIMIT_S:  # also refuses nan and inf
        raise UsageError(f"{option} {text!r} must be more than 0 s and less than a year", fix)
    return seconds


# An image reference as the OCI distribution grammar (docker's reference package) reads it:
# [domain[:port]/]path[:tag][@digest], path components lowercase, at most 255 characters of name.
_ALNUM = r"[a-z0-9]+"
_PATH_COMPONENT = rf"{_ALNUM}(?:(?:[._]|__|-+){_ALNUM})*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[0-9a-fA-F:]+\])(?::[0-9]+)?"
_IMAGE_NAME = rf"(?:{_DOMAIN}/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*"
_IMAGE_REFERENCE = re.compile(
    rf"(?P<name>{_IMAGE_NAME})(?::[A-Za-z0-9_][A-Za-z0-9_.-]{{0,127}})?"
    r"(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?",
    re.ASCII,
)
MAX_IMAGE_NAME = 255


def check_image_reference(image: str) -> None:
    """Refuse what no registry, podman, docker or kubelet would take as an image reference."""
    # Bounded first: the grammar's alternatives must never see a huge string.
    found = _IMAGE_REFERENCE.fullmatch(image) if 0 < len(image) <= 4 * MAX_IMAGE_NAME else None
    if found is None or len(found["name"]) > MAX_IMAGE_NAME:
        raise UsageError(
            f"--image {image!r} is not an image reference ([registry/]name[:tag][@digest], the name lowercase, "
            f"at most {MAX_IMAGE_NAME} characters)",
            "write e.g. --image python:3.11 or --image nvcr.io/nvidia/pytorch:24.01-py3",
        )


def submit_env(environ: dict[str, str]) -> dict[str, str]:
    """The part of the submitting environment a job keeps (see SUBMIT_ENV_KEYS)."""
    return {k: v for k, v in environ.items() if k in SUBMIT_ENV_KEYS or k.startswith(SUBMIT_ENV_PREFIXES)}


@dataclass(frozen=True)
class JobSpec:
    """A gang of ``workers`` processes with ``gpus_per_worker`` GPUs each, running ``command``.

    ``command`` is an argv list: either an Open MPI ``mpirun ... program`` line (ringleader
    rewrites its host options) or a plain program started once per worker, torchrun-style.
    Submit prepares it (``runtime.commands``): a horovodrun or torchrun line is rewritten, the
    program put in ``image``; ``user_command`` then keeps the line as written. ``model`` is a
    hint for throughput predictions.
    """

    name: str
    workers: int
    gpus_per_worker: int
    command: list[str]
    env: dict[str, str] = field(default_factory=dict)
    topology_aware: bool = False
    priority: int = 0
    image: str | None = None
    model: str | None = None
    workdir: str | None = None  # where the processes start; submit records the caller's cwd
    submit_env: dict[str, str] | None = None  # submit records the caller's (see submit_env())
    user_command: list[str] | None = None  # the line as written, when submit rewrote it
    # Seconds the job may run; it is stopped (SIGTERM, grace, SIGKILL) and FAILED at the limit.
    # The queue plans reservations with it, and a job with one may backfill (see docs/scheduler.md).
    time_limit_s: float | None = None
    # A network level (docs/scheduler.md, Network tree): stay under one switch of it, or wait;
    # or prefer to, spreading higher only when it must.
    topology_required: str | None = None
    topology_preferred: str | None = None

    def validate(self) -> JobSpec:
        from ringleader.topology.cluster import check_name

        check_name(self.name, "job")
        if not isinstance(self.workers, int) or self.workers < 1:
            raise UsageError(f"--workers must be >= 1, got {self.workers}", "give at least one worker")
        if not isinstance(self.gpus_per_worker, int) or self.gpus_per_worker < 0:
            raise UsageError(f"--gpus must be >= 0, got {self.gpus_per_worker}", "give 0 for a CPU job")
        if not self.command or not all(isinstance(a, str) for a in self.command):
            raise UsageError("no command given", "give the command as one quoted string or after --")
        written = self.user_command
        well_formed = isinstance(written, list) and bool(written) and all(isinstance(a, str) for a in written)
        if written is not None and not well_formed:
            raise UsageError("user_command must be the command line as written, a list of strings", "leave it unset")
        priority = self.priority
        if isinstance(priority, bool) or not isinstance(priority, int) or not -(2**31) <= priority < 2**31:
            raise UsageError(f"--priority must be a 32-bit integer, got {priority}", "give -2147483648 to 2147483647")
        limit = self.time_limit_s
        numeric = isinstance(limit, int | float) and not isinstance(limit, bool)
        if limit is not None and not (numeric and 0 < limit < MAX_TIME_LIMIT_S):
            raise UsageError(f"--time-limit must be a positive duration, got {limit}", "write e.g. 90s, 30m or 2h")
        for key in self.env:
            if not _ENV_KEY.match(key):
                raise UsageError(f"invalid environment variable name {key!r}", "use -e NAME=VALUE")
        for option, level in (("--topology-required", self.topology_required),
                              ("--topology-preferred", self.topology_preferred)):  # fmt: skip
            if level is not None and not (isinstance(level, str) and _LEVEL.match(level)):
                raise UsageError(f"{option} {level!r} is not a level name", "name a level, e.g. rack or spine")
        if self.image is not None:  # `--image ''` too: it is not "no image"
            check_image_reference(self.image)
        return self

    def request(self) -> JobRequest:
        from ringleader.scheduler import JobRequest

        return JobRequest(
            self.name, self.workers, self.gpus_per_worker, self.topology_aware, self.priority, self.model,
            time_limit_s=self.time_limit_s, topology_required=self.topology_required,
            topology_preferred=self.topology_preferred,
        )  # fmt: skip


    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def from_dict(data: dict[str, Any]) -> JobSpec:
        return JobSpec(
            name=data["name"], workers=int(data["workers"]), gpus_per_worker=int(data["gpus_per_worker"]),
            command=list(data["command"]), env=dict(data.get("env") or {}),
            topology_aware=bool(data.get("topology_aware")), priority=int(data.get("priority", 0)),
            image=data.get("image"), model=data.get("model"), workdir=data.get("workdir"),
            submit_env=data.get("submit_env"), user_command=data.get("user_command"),
            time_limit_s=None if data.get("time_limit_s") is None else float(data["time_limit_s"]),
            topology_required=data.get("topology_required"), topology_preferred=data.get("topology_preferred"),
        )  # fmt: skip
