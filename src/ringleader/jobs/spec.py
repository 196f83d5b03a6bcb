"""What a user asks to run: the job spec, validated before anything is written."""

from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any, ClassVar

from ringleader import settings
from ringleader.errors import UsageError
from ringleader.jobs.hints import workload_hints
from ringleader.jobs.line import CommandLine, line_from_dict, read_line
from ringleader.scheduler import JobRequest
from ringleader.scheduler.types import DEFAULT_RISK, RISKS, START_RULES, Workload
from ringleader.topology.cluster import check_name
from ringleader.topology.grammar import LABEL_KEY_RE, LABEL_VALUE_RE

if TYPE_CHECKING:
    from ringleader.scheduler import JobRequest

_ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# What every rank's environment gets from its placement (runtime/rank.py's rank_env, on every
# engine that starts ranks): a job's own -e for one of these would be silently replaced.
SET_PER_RANK = {
    "RANK": "its rank in the job", "WORLD_SIZE": "the job's ranks", "LOCAL_RANK": "its rank on its node",
    "LOCAL_WORLD_SIZE": "the ranks on its node", "GROUP_RANK": "its node's index", "NODE_RANK": "its node's index",
    "GROUP_WORLD_SIZE": "the job's nodes", "ROLE_NAME": "torchrun's role", "ROLE_RANK": "its rank in the job",
    "ROLE_WORLD_SIZE": "the job's ranks", "MASTER_ADDR": "rank 0's host", "MASTER_PORT": "a free port on rank 0's host",
    "TORCHELASTIC_RUN_ID": "the job's name", "TORCHELASTIC_RESTART_COUNT": "the restarts so far",
    "TORCHELASTIC_MAX_RESTARTS": "--max-restarts", "OMPI_COMM_WORLD_LOCAL_RANK": "its rank on its node",
    "OMPI_COMM_WORLD_LOCAL_SIZE": "the ranks on its node", "OMPI_COMM_WORLD_NODE_RANK": "its node's index",
    "CUDA_VISIBLE_DEVICES": "the GPUs it was placed on", "RINGLEADER_VIRTUAL_GPUS": "an emulated node's GPUs",
    "RINGLEADER_JOB": "the job's name", "RINGLEADER_INSTANCE": "its instance", "RINGLEADER_NODE": "its node",
    "RINGLEADER_WORKER_GPUS": "its worker's GPUs", "CROSS_RANK": "its node's index (DeepSpeed's name)",
    "CROSS_SIZE": "the job's nodes (DeepSpeed's name)", "LOCAL_SIZE": "the ranks on its node (DeepSpeed's name)",
}  # fmt: skip
_SET_PER_RANK_FIX = {"CUDA_VISIBLE_DEVICES": "; ask for GPUs with --gpus (each rank sees the ones it was placed on)",
                     "TORCHELASTIC_MAX_RESTARTS": "; give --max-restarts"}  # fmt: skip
_LEVEL = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")  # a network level's name
# What a job takes from the shell it was submitted from, whichever process later starts it: the
# search paths and the Python, CUDA and communication-library settings (not the whole env, so
# tokens and passwords are never stored).
SUBMIT_ENV_KEYS = (
    "PATH", "PYTHONPATH", "VIRTUAL_ENV", "CONDA_PREFIX", "CONDA_DEFAULT_ENV", "LD_LIBRARY_PATH",
    "CUDA_HOME", "HOME", "USER", "LANG", "LC_ALL", "TMPDIR", "OMP_NUM_THREADS",
)  # fmt: skip
MAX_TIME_LIMIT_S = 365 * 24 * 3600.0  # a year: beyond it a limit is a typo, not a plan
MAX_GRACE_S = settings.SETTINGS["RINGLEADER_GRACE_S"].high or 0.0
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


def check_image_reference(image: str, flag: str = "--image") -> None:
    """Refuse what no registry, podman, docker or kubelet would take as an image reference."""
    # Bounded first: the grammar's alternatives must never see a huge string.
    found = _IMAGE_REFERENCE.fullmatch(image) if 0 < len(image) <= 4 * MAX_IMAGE_NAME else None
    if found is None or len(found["name"]) > MAX_IMAGE_NAME:
        raise UsageError(
            f"{flag} {image!r} is not an image reference ([registry/]name[:tag][@digest], the name lowercase, "
            f"at most {MAX_IMAGE_NAME} characters)",
            f"write e.g. {flag} python:3.11 or {flag} nvcr.io/nvidia/pytorch:24.01-py3",
        )


PULL_POLICIES = ("Always", "IfNotPresent", "Never")  # Kubernetes' imagePullPolicy values
_SIZE = re.compile(r"(\d+)([bkmgt]?)(?:i?b|i)?", re.ASCII | re.IGNORECASE)  # 8g, 8GB, 8GiB, 8Gi (Kubernetes')
_SIZE_UNIT = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_CONTAINER_USER = re.compile(r"\d{1,10}(?::\d{1,10})?", re.ASCII)


def parse_size(text: str, option: str = "--shm-size") -> int:
    """'1g', '512m', '64MiB', '8Gi' (a Kubernetes quantity, as arena takes it) or bytes -> bytes,
    units binary as podman and docker read them."""
    found = _SIZE.fullmatch(text.strip())
    size = int(found[1]) * _SIZE_UNIT[found[2].lower()] if found else 0
    if not 0 < size < 1 << 50:
        raise UsageError(f"{option} {text!r} is not a size", "write e.g. 1g, 512m or 64MiB")
    return size


def parse_data(text: str) -> tuple[str, str]:
    """``-d SRC:DST`` -> (SRC, DST), split at the last ':' (SRC a host path or a volume's name,
    per engine; DST an absolute path in the container)."""
    source, sep, target = text.rpartition(":")
    if not sep or not source or not target.startswith("/") or "\0" in text or "," in target:
        raise UsageError(f"--data {text!r} is not SRC:DST", "write -d SRC:/path/in/container (DST absolute, no ',')")
    return source, target


def parse_container_user(text: str, uid: int | None = None, gid: int | None = None) -> str:
    """``--container-user UID[:GID]`` (numbers: what a pod's runAsUser takes too), or
    ``submitter``: the submitting user's own uid:gid."""
    if text == "submitter":
        return f"{os.getuid() if uid is None else uid}:{os.getgid() if gid is None else gid}"
    if not _CONTAINER_USER.fullmatch(text):
        raise UsageError(f"--container-user {text!r} is not UID[:GID]", "give numbers (e.g. 1000:1000) or submitter")
    return text


@dataclass(frozen=True)
class ContainerOptions:
    """How each rank's container is set up beyond its image (arena's names); the engine that runs
    the containers checks what is engine-specific (a host path here, a PVC name in a pod)."""

    data: tuple[tuple[str, str], ...] = ()  # -d SRC:DST, in order
    shm_size: int | None = None  # bytes of /dev/shm
    rdma: bool = False  # /dev/infiniband and unlimited memlock
    image_pull_policy: str | None = None  # one of PULL_POLICIES; None: the engine's default
    user: str | None = None  # "UID[:GID]" the program runs as; None: the image's user

    def given(self) -> list[str]:
        """The options set, as the CLI spells them (what an engine may refuse)."""
        named = {"--data": bool(self.data), "--shm-size": self.shm_size is not None, "--rdma": self.rdma,
                 "--image-pull-policy": self.image_pull_policy is not None, "--container-user": self.user is not None}
        return [option for option, set_ in named.items() if set_]

    def validate(self) -> None:
        for pair in self.data:
            parse_data(":".join(pair))
        targets = [target for _, target in self.data]
        if len(set(targets)) != len(targets):
            raise UsageError("--data mounts two sources at the same path", "give each -d its own DST")
        if self.shm_size is not None and not (isinstance(self.shm_size, int) and 0 < self.shm_size < 1 << 50):
            raise UsageError(f"--shm-size must be a positive size, got {self.shm_size}", "write e.g. 1g")
        if self.image_pull_policy is not None and self.image_pull_policy not in PULL_POLICIES:
            raise UsageError(f"--image-pull-policy {self.image_pull_policy!r} is not one of "
                             f"{', '.join(PULL_POLICIES)}", "give Always, IfNotPresent or Never")  # fmt: skip
        if self.user is not None:
            parse_container_user(self.user)

    @staticmethod
    def from_dict(data: dict[str, Any] | None) -> ContainerOptions:
        data = data or {}
        return ContainerOptions(
            data=tuple((str(s), str(d)) for s, d in data.get("data") or ()),
            shm_size=None if data.get("shm_size") is None else int(data["shm_size"]), rdma=bool(data.get("rdma")),
            image_pull_policy=data.get("image_pull_policy"), user=data.get("user"),
        )  # fmt: skip


# The container runtime's own settings: kept with the job for the runtime that starts its ranks'
# containers (a rank's `podman run` fails without them), never passed into a container.
CONTAINER_RUNTIME_KEYS = (
    "CONTAINERS_CONF", "CONTAINERS_STORAGE_CONF", "CONTAINERS_REGISTRIES_CONF", "REGISTRY_AUTH_FILE",
    "XDG_RUNTIME_DIR", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "CONTAINER_HOST", "CONTAINER_CONNECTION",
    "DOCKER_HOST", "DOCKER_CONFIG", "DOCKER_CONTEXT", "DOCKER_TLS_VERIFY", "DOCKER_CERT_PATH",
)  # fmt: skip
# What the submitting shell says about its own host (its files, its user): in a container the
# image's own values apply instead. Only these are left out; -e/-x values always go in.
HOST_ONLY_KEYS = (
    "PATH", "PYTHONPATH", "VIRTUAL_ENV", "CONDA_PREFIX", "CONDA_DEFAULT_ENV", "LD_LIBRARY_PATH", "CUDA_HOME",
    "HOME", "USER", "TMPDIR", *CONTAINER_RUNTIME_KEYS,
)  # fmt: skip


def submit_env(environ: dict[str, str]) -> dict[str, str]:
    """The part of the submitting environment a job keeps (see SUBMIT_ENV_KEYS)."""
    kept = (*SUBMIT_ENV_KEYS, *CONTAINER_RUNTIME_KEYS)
    return {k: v for k, v in environ.items() if k in kept or k.startswith(SUBMIT_ENV_PREFIXES)}


# -e variables whose name says they hold a secret: their values are never shown (``JobSpec.shown``)
# nor written where others may read them (on Kubernetes, a Secret the pods read them from).
SECRET_WORDS = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "KEY", "CREDENTIAL")
HIDDEN = "(hidden)"  # what is shown of such a value


def looks_secret(name: str) -> bool:
    return any(word in name.upper() for word in SECRET_WORDS)


def container_env(recorded: dict[str, str] | None, env: dict[str, str]) -> dict[str, str]:
    """The job's environment in its containers, by one rule on every engine: what the job keeps
    of the submitting shell (``recorded``) but HOST_ONLY_KEYS, then the job's -e/-x ``env``."""
    return {**{k: v for k, v in (recorded or {}).items() if k not in HOST_ONLY_KEYS}, **env}


# The prefix of ringleader's own labels and annotations on Kubernetes objects (see
# engines/kubernetes/names.py): a user's job never sets one.
OWN_PREFIX = "ringleader.io"
# Kubernetes names: label keys ([prefix/]name), label values, DNS-1123 names.
_K8S_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|Ki|Mi|Gi|Ti|k|M|G|T)?$")
_TOLERATION = re.compile(r"^(all|[^=:\s]+(=[^=:\s]*)?(:(NoSchedule|PreferNoSchedule|NoExecute))?)$")
_DATA_DIR = re.compile(r"^/[^:\s]*:/[^:\s]*$")
# arena's code sync (--sync-mode): git clones with git-sync, rsync copies from an rsync daemon.
SYNC_MODES = ("git", "rsync")
# arena's defaults: where its jobs write TensorBoard's summaries; TensorBoard's image (arena's is a
# mirror of TensorFlow's own image; this is TensorFlow's, which has the tensorboard command).
TRAINING_LOGDIR = "/training_logs"
TENSORBOARD_IMAGE = "tensorflow/tensorflow:2.16.1"
_URL = re.compile(r"^[a-z][a-z0-9+.-]*://\S+$")  # a --logdir TensorBoard reads itself (hdfs://, gs://, s3://)


@dataclass(frozen=True)
class KubeOptions:
    """arena's Kubernetes-only submit options (-n, --cpu, --selector, ...): the kubernetes engine
    maps them onto the MPIJob's pods; every other engine refuses them (``Support.kube_options``)."""

    cpu: str | None = None  # CPU request of each worker pod (a quantity: 4, 500m)
    memory: str | None = None  # memory request of each worker pod (8Gi)
    selector: tuple[tuple[str, str], ...] = ()  # nodeSelector KEY=VALUE
    tolerations: tuple[str, ...] = ()  # KEY[=VALUE][:EFFECT], or "all"
    image_pull_secrets: tuple[str, ...] = ()
    labels: tuple[tuple[str, str], ...] = ()  # on the MPIJob and its pods
    annotations: tuple[tuple[str, str], ...] = ()  # on the MPIJob and its pods
    priority_class: str | None = None  # the pods' PriorityClass
    retry: int | None = None  # runPolicy.backoffLimit
    data_dirs: tuple[str, ...] = ()  # HOST_PATH:CONTAINER_PATH hostPath mounts
    # arena's --tensorboard: a TensorBoard Deployment and NodePort Service beside the job, reading
    # --logdir (arena's default /training_logs) where the job writes its summaries.
    tensorboard: bool = False
    tensorboard_image: str | None = None
    logdir: str | None = None
    # arena's --sync-mode git|rsync: the code fetched from --sync-source into WORKDIR/code by an
    # init container of every pod before the job's own container starts.
    sync_mode: str | None = None
    sync_source: str | None = None
    sync_image: str | None = None

    FLAGS: ClassVar[dict[str, str]] = {
             "cpu": "--cpu", "memory": "--memory", "selector": "--selector",
             "tolerations": "--toleration", "image_pull_secrets": "--image-pull-secret", "labels": "--label",
             "annotations": "--annotation", "priority_class": "--priority-class", "retry": "--retry",
             "data_dirs": "--data-dir", "tensorboard": "--tensorboard", "tensorboard_image": "--tensorboard-image",
             "logdir": "--logdir", "sync_mode": "--sync-mode", "sync_source": "--sync-source",
             "sync_image": "--sync-image"}  # fmt: skip

    def given(self) -> str | None:
        """The first option set, as the user spelled it (None: none)."""
        return next((flag for key, flag in self.FLAGS.items()
                     if getattr(self, key) not in (None, ()) and getattr(self, key) is not False), None)  # fmt: skip

    def validate(self) -> None:
        def bad(flag: str, value: object, fix: str) -> UsageError:
            return UsageError(f"{flag} {value!r} is not valid for Kubernetes", fix)

        for name in (self.priority_class, *self.image_pull_secrets):
            if name is not None and not _K8S_NAME.match(name):
                raise bad("name", name, "use lowercase letters, digits, '-' and '.' (DNS-1123)")
        for flag, value in (("--cpu", self.cpu), ("--memory", self.memory)):
            if value is not None and not _QUANTITY.match(value):
                raise bad(flag, value, "write a Kubernetes quantity, e.g. --cpu 4, --cpu 500m, --memory 16Gi")
        for flag, pairs in (("--selector", self.selector), ("--label", self.labels)):
            for key, value in pairs:
                if not LABEL_KEY_RE.fullmatch(key) or not LABEL_VALUE_RE.fullmatch(value):
                    raise bad(flag, f"{key}={value}", "write KEY=VALUE with a label key and value")
        for key, _ in self.annotations:
            if not LABEL_KEY_RE.fullmatch(key):
                raise bad("--annotation", key, "write KEY=VALUE with KEY like example.com/name")
        for flag, pairs in (("--label", self.labels), ("--annotation", self.annotations)):
            for key, _ in pairs:
                domain, _, name = key.rpartition("/")
                if domain == OWN_PREFIX or domain.endswith("." + OWN_PREFIX):
                    raise UsageError(
                        f"{flag} {key!r}: {OWN_PREFIX}/ keys are ringleader's own (its scheduler reads them as its "
                        "own decisions)", f"use a key of your own, e.g. example.com/{name}",
                    )
        for tol in self.tolerations:
            if not _TOLERATION.match(tol):
                raise bad("--toleration", tol, "write KEY, KEY=VALUE, KEY[=VALUE]:EFFECT or all")
        for mount in self.data_dirs:
            if not _DATA_DIR.match(mount):
                raise bad("--data-dir", mount, "write HOST_PATH:CONTAINER_PATH, both absolute")
        if self.retry is not None and not (isinstance(self.retry, int) and 0 <= self.retry <= 100):
            raise bad("--retry", self.retry, "give 0 to 100 retries")
        self._check_tensorboard()
        self._check_sync()

    def _check_tensorboard(self) -> None:
        for flag, value in (("--tensorboard-image", self.tensorboard_image), ("--logdir", self.logdir)):
            if value is not None and not self.tensorboard:
                raise UsageError(f"{flag} is the TensorBoard's, and no --tensorboard was given",
                                 f"add --tensorboard, or leave {flag} out")  # fmt: skip
        if self.tensorboard_image is not None:
            check_image_reference(self.tensorboard_image, "--tensorboard-image")
        path = self.logdir is not None and self.logdir.startswith("/") and " " not in self.logdir
        if self.logdir is not None and not (path or _URL.match(self.logdir)):
            raise UsageError(f"--logdir {self.logdir!r} is neither an absolute path nor a URL TensorBoard reads",
                             "write e.g. --logdir /training_logs or --logdir hdfs://namenode/logs")  # fmt: skip

    def _check_sync(self) -> None:
        if self.sync_mode is None:
            for flag, value in (("--sync-source", self.sync_source), ("--sync-image", self.sync_image)):
                if value is not None:
                    raise UsageError(f"{flag} is the code sync's, and no --sync-mode was given",
                                     f"add --sync-mode {' or '.join(SYNC_MODES)}")  # fmt: skip
            return
        if self.sync_mode == "hdfs":  # listed in arena's help, refused by its own submit: no chart syncs it
            raise UsageError("--sync-mode hdfs is not a code sync arena or ringleader does (arena's submit refuses it "
                             "too)", "put the code on a volume and mount it with -d PVC:/path, or use "
                             "--sync-mode git|rsync")  # fmt: skip
        if self.sync_mode not in SYNC_MODES:
            raise UsageError(f"--sync-mode {self.sync_mode!r} is not a code sync",
                             f"give --sync-mode {' or '.join(SYNC_MODES)}")  # fmt: skip
        if not self.sync_source or any(c.isspace() for c in self.sync_source):
            raise UsageError(f"--sync-mode {self.sync_mode} needs --sync-source, where the code is",
                             "add e.g. --sync-source https://github.com/tensorflow/benchmarks.git (git) or "
                             "--sync-source 10.0.0.5::backup/code (rsync)")  # fmt: skip
        if self.sync_image is not None:
            check_image_reference(self.sync_image, "--sync-image")

    @staticmethod
    def from_dict(data: dict[str, Any] | None) -> KubeOptions | None:
        if data is None:
            return None
        pairs = ("selector", "labels", "annotations")
        fields: dict[str, Any] = {
            k: tuple(tuple(p) for p in v) if k in pairs else tuple(v) if isinstance(v, list) else v
            for k, v in data.items() if k in KubeOptions.FLAGS}  # fmt: skip
        return KubeOptions(**fields)


MAX_RESTARTS = 100  # restarts a job may ask for: a gang failing more often is not going to succeed
# What kind of job it is (`submit mpi`, `submit pytorch`): the same gang on every engine; on
# Kubernetes an MPIJob (a launcher runs mpirun over ssh) or a PyTorchJob (each pod starts the program
# under torchrun). A PyTorch job's line is the program itself (or a torchrun line), never mpirun's.
JOB_KINDS = ("mpi", "pytorch")
TRAINERS = {"mpi": "MPIJOB", "pytorch": "PYTORCHJOB"}  # arena's TRAINER column

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
    container: ContainerOptions = field(default_factory=ContainerOptions)  # --data, --shm-size, ...
    kube: KubeOptions | None = None  # Kubernetes-only options (refused by other engines)
    # A network level (docs/scheduler.md, Network tree): stay under one switch of it, or wait;
    # or prefer to, spreading higher only when it must.
    topology_required: str | None = None
    topology_preferred: str | None = None
    # ``command`` as submit read it, once (jobs.line): kept with the job, so whoever launches it
    # reads this instead of parsing the line again.
    line: CommandLine | None = None
    # Seconds between the SIGTERM of any stop (delete, time limit, a failed sibling) and SIGKILL:
    # RINGLEADER_GRACE_S at submit, kept with the job as Kubernetes keeps a pod's
    # terminationGracePeriodSeconds, so the agent's own environment never decides it.
    grace_s: float | None = None
    # When it starts if its best placement is busy (scheduler.types.StartRule): "now" on the free
    # GPUs, "best" only on a placement as fast as its best, "finish" whichever the model says
    # finishes first; None: "finish" when it gives a run time, else "now". ``run_time_s``: how long
    # it trains on its best placement (the user's estimate); ``max_wait_s``: the longest it waits
    # for better GPUs, from submit.
    start: str | None = None
    run_time_s: float | None = None
    max_wait_s: float | None = None
    # How "finish" weighs predictions with likely ranges (scheduler.types.RISKS); None: DEFAULT_RISK.
    risk: str | None = None
    # Gang preemption (scheduler/preempt.py): ``preempt`` lets it stop preemptible jobs of lower
    # priority to start (Kubernetes' preemptionPolicy PreemptLowerPriority; off: Never);
    # ``preemptible`` False keeps it from ever being stopped for another job.
    preempt: bool = False
    preemptible: bool = True
    # The model calibration (``ringleader calibrate --out``'s document, kept with the job) the
    # queue prices this job's placements with when it weighs a start or a preemption; None: the
    # published rates.
    calibration: dict[str, Any] | None = None
    # Training steps the job runs (--steps): at submit, times the model's step time on its best
    # placement, it gives ``run_time_s`` (needs --model).
    steps: int | None = None
    # The team queue it is submitted to (arena's --queue; scheduler/teams.py): its quota, what it
    # may borrow and its fair share. None: the default queue, without quota.
    queue: str | None = None
    # How often a gang that fails is stopped whole, placed again and restarted, with its count in
    # RINGLEADER_RESTARTS and TORCHELASTIC_RESTART_COUNT (torchrun's --max-restarts, arena's
    # --retry); a node blamed for two failures is cordoned (jobs/failures.py).
    max_restarts: int = 0
    kind: str = "mpi"  # one of JOB_KINDS
    # The per-GPU batch, precision and gradient accumulation it trains at (jobs.hints), read at
    # submit from its flags and the DeepSpeed configuration they name, when it names a --model:
    # kept with the job, so an edited or deleted configuration never changes how it is priced.
    # None: read from the command line alone.
    workload: Workload | None = None
    # Held by its user (`ringleader hold`, sbatch's --hold): it waits, with reason Held, until
    # `ringleader release`; the queue's cycle skips it on every engine.
    hold: bool = False

    @property
    def trainer(self) -> str:
        return TRAINERS.get(self.kind, self.kind.upper())

    def start_rule(self) -> str:
        if self.start is not None:
            return self.start
        return "finish" if self.run_time_s is not None or self.steps is not None else "now"

    def stop_grace(self) -> float:
        """The grace its ranks get when stopped (a job kept before it was recorded: the default)."""
        if self.grace_s is not None:
            return self.grace_s
        return settings.number("RINGLEADER_GRACE_S")

    def command_line(self) -> CommandLine:
        """The command as read at submit; read now only for a spec kept before it was stored."""
        return self.line if self.line is not None else read_line(self.command)

    def validate(self) -> JobSpec:
        check_name(self.name, "job")
        if self.kind not in JOB_KINDS:
            raise UsageError(f"job kind {self.kind!r} is not one of {', '.join(JOB_KINDS)}",
                             "submit with `submit mpi` or `submit pytorch`")  # fmt: skip
        if self.queue is not None:
            check_name(self.queue, "queue")
        if isinstance(self.max_restarts, bool) or not isinstance(self.max_restarts, int) or not (
                0 <= self.max_restarts <= MAX_RESTARTS):  # fmt: skip
            raise UsageError(f"--max-restarts must be 0 to {MAX_RESTARTS}, got {self.max_restarts}",
                             "give how often a failed gang is restarted, e.g. --max-restarts 3")  # fmt: skip
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
        grace = self.grace_s
        if grace is not None and (isinstance(grace, bool) or not isinstance(grace, int | float)
                                  or not 0 <= grace <= MAX_GRACE_S):  # fmt: skip
            raise UsageError(f"the grace must be 0 to {MAX_GRACE_S:g} seconds, got {grace}",
                             "set RINGLEADER_GRACE_S to a number of seconds")  # fmt: skip
        limit = self.time_limit_s
        numeric = isinstance(limit, int | float) and not isinstance(limit, bool)
        if limit is not None and not (numeric and 0 < limit < MAX_TIME_LIMIT_S):
            raise UsageError(f"--time-limit must be a positive duration, got {limit}", "write e.g. 90s, 30m or 2h")
        self._validate_start()
        for key in self.env:
            if not _ENV_KEY.match(key):
                raise UsageError(f"invalid environment variable name {key!r}", "use -e NAME=VALUE")
            if key in SET_PER_RANK:
                fix = f"drop -e {key}" + _SET_PER_RANK_FIX.get(key, ": the program reads the value ringleader sets")
                raise UsageError(f"-e {key}: ringleader sets {key} for each rank ({SET_PER_RANK[key]}), so this "
                                 "value would be overridden", fix)  # fmt: skip
        for option, level in (("--topology-required", self.topology_required),
                              ("--topology-preferred", self.topology_preferred)):  # fmt: skip
            if level is not None and not (isinstance(level, str) and _LEVEL.match(level)):
                raise UsageError(f"{option} {level!r} is not a level name", "name a level, e.g. rack or spine")
        if self.image is not None:  # `--image ''` too: it is not "no image"
            check_image_reference(self.image)
        self.container.validate()
        if self.workdir is not None and not self.workdir.startswith("/"):
            raise UsageError(f"--working-dir {self.workdir!r} is not an absolute path", "give a path from /")
        if self.kube is not None:
            self.kube.validate()
        return self

    def _validate_start(self) -> None:
        if self.start is not None and self.start not in START_RULES:
            raise UsageError(f"--start {self.start!r} is not a start rule", f"use one of {', '.join(START_RULES)}")
        for option, value in (("--run-time", self.run_time_s), ("--max-wait", self.max_wait_s)):
            numeric = isinstance(value, int | float) and not isinstance(value, bool)
            if value is not None and not (numeric and 0 < value < MAX_TIME_LIMIT_S):
                raise UsageError(f"{option} must be a positive duration, got {value}", "write e.g. 90s, 30m or 2h")
        if self.steps is not None:
            if isinstance(self.steps, bool) or not isinstance(self.steps, int) or not 0 < self.steps < 2**40:
                raise UsageError(f"--steps must be a positive whole number, got {self.steps}", "give e.g. --steps 5000")
            if self.run_time_s is not None:
                raise UsageError("--steps and --run-time both say how long the job runs",
                                 "give one of them")  # fmt: skip
            if not self.model or not self.gpus_per_worker:
                raise UsageError("--steps needs the model's step time, and this job names no model or GPU",
                                 "add --model NAME (e.g. vgg16) and --gpus N, or give --run-time")  # fmt: skip
        rule = self.start_rule()
        if rule == "finish" and self.run_time_s is None and self.time_limit_s is None and self.steps is None:
            raise UsageError("--start finish weighs how long the job runs, and it gives no run time",
                             "add --run-time DURATION (its run on its best placement) or --time-limit")  # fmt: skip
        if self.max_wait_s is not None and rule == "now":
            raise UsageError("--max-wait bounds a wait for better GPUs, and this job starts on whatever is free",
                             "add --start finish or --start best, or leave --max-wait out")  # fmt: skip
        if self.risk is not None and self.risk not in RISKS:
            raise UsageError(f"--risk {self.risk!r} is not a risk", f"use one of {', '.join(RISKS)}")
        if self.risk is not None and rule != "finish":
            raise UsageError("--risk weighs a wait for better GPUs against starting now, and this job "
                             f"{'starts on whatever is free' if rule == 'now' else 'waits for its best'}",
                             "add --start finish and --run-time, or leave --risk out")  # fmt: skip

    def describe(self) -> str:
        """One line of what was asked for, as a job's `Submitted` event tells it."""
        kind = "--gputopology" if self.topology_aware else "default scheduling"
        extra = "".join(f", {k} {v}" for k, v in (("image", self.image), ("model", self.model), ("queue", self.queue))
                        if v)  # fmt: skip
        return f"{self.workers} worker(s) x {self.gpus_per_worker} GPU(s), {kind}, priority {self.priority}{extra}"

    def request(self) -> JobRequest:
        return JobRequest(
            self.name, self.workers, self.gpus_per_worker, self.topology_aware, self.priority, self.model,
            time_limit_s=self.time_limit_s, topology_required=self.topology_required,
            topology_preferred=self.topology_preferred, start_rule=self.start_rule(), work_s=self.run_time_s,
            max_wait_s=self.max_wait_s, risk=self.risk or DEFAULT_RISK, may_preempt=self.preempt,
            preemptible=self.preemptible, queue=self.queue, workload=self.training_workload() if self.model else None,
        )  # fmt: skip

    def training_workload(self) -> Workload:
        """The batch, precision and accumulation it trains at: as read at submit, else its line's."""
        return self.workload if self.workload is not None else workload_hints(self.command)

    def to_dict(self) -> dict[str, Any]:
        kept = asdict(self)
        if not self.hold:  # kept only when set: specs stored before holds read the same
            del kept["hold"]
        return kept

    def shown(self) -> JobSpec:
        """The spec as it may be shown or kept where others read it: secret-looking -e values hidden."""
        if not any(looks_secret(k) for k in self.env):
            return self
        return replace(self, env={k: HIDDEN if looks_secret(k) else v for k, v in self.env.items()})

    @staticmethod
    def from_dict(data: dict[str, Any]) -> JobSpec:
        return JobSpec(
            name=data["name"], workers=int(data["workers"]), gpus_per_worker=int(data["gpus_per_worker"]),
            command=list(data["command"]), env=dict(data.get("env") or {}),
            topology_aware=bool(data.get("topology_aware")), priority=int(data.get("priority", 0)),
            image=data.get("image"), model=data.get("model"), workdir=data.get("workdir"),
            submit_env=data.get("submit_env"), user_command=data.get("user_command"),
            time_limit_s=_seconds(data.get("time_limit_s")),
            container=ContainerOptions.from_dict(data.get("container")),
            kube=KubeOptions.from_dict(data.get("kube")),
            topology_required=data.get("topology_required"), topology_preferred=data.get("topology_preferred"),
            line=line_from_dict(data["line"]) if data.get("line") else None,
            grace_s=_seconds(data.get("grace_s")),
            start=data.get("start"), run_time_s=_seconds(data.get("run_time_s")),
            max_wait_s=_seconds(data.get("max_wait_s")), risk=data.get("risk"),
            preempt=bool(data.get("preempt", False)),
            preemptible=bool(data.get("preemptible", True)), calibration=data.get("calibration"),
            steps=None if data.get("steps") is None else int(data["steps"]), queue=data.get("queue"),
            max_restarts=int(data.get("max_restarts", 0)), kind=str(data.get("kind") or "mpi"),
            workload=Workload(**data["workload"]) if data.get("workload") else None,
            hold=bool(data.get("hold", False)),
        )  # fmt: skip


def _seconds(value: Any) -> float | None:
    return None if value is None else float(value)
