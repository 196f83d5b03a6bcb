"""arena's `submit mpijob|pytorchjob` flags that ringleader reads under another name, or refuses
in one line naming what to use instead: none is silently ignored.

arena's own flags (pkg/argsbuilder: submit.go, submit_mpijob.go, submit_pytorchjob.go,
submit_sync_code.go, submit_tensorboard.go; the global ones of pkg/commands/root.go). Those
ringleader takes under the same name are its own submit options (cli/jobs.py, cli/kube_options.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ringleader.errors import UsageError

# arena's spelling -> ringleader's option of the same meaning.
RENAMED = {
    "--workingDir": "--working-dir",  # arena's deprecated spellings of its own flags
    "--dataDir": "--data-dir",
    "--image-pull-secrets": "--image-pull-secret",  # as arena's docs write it
    "--running-timeout": "--time-limit",  # pytorchjob: how long it may run before it is stopped
    "--share-memory": "--shm-size",  # pytorchjob: /dev/shm of each worker
    "--syncMode": "--sync-mode",
    "--syncSource": "--sync-source",
    "--syncImage": "--sync-image",
    "--tensorboardImage": "--tensorboard-image",
}

# Switches arena users give a value as a word of its own (`--gputopology true`), and those words.
SWITCHES_WITH_A_WORD = ("--gputopology", "--gang")
TRUTH_WORDS = ("true", "1", "yes", "false", "0", "no")

# arena's flags with no counterpart here: (what it is, what to do instead).
REFUSED: dict[str, tuple[str, str]] = {
    "--device": (
        "arena's --device asks for another vendor's chips (amd.com/gpu=1)",
        "give --gpus N: ringleader places NVIDIA GPUs",
    ),
    "--scheduler": ("ringleader is the job's scheduler (it places the whole gang)", "drop --scheduler"),
    "--hostNetwork": (
        "ringleader's pods do not share the host's network namespace",
        "drop it: ranks reach each other over the pod network (NCCL and Open MPI settings with -e)",
    ),
    "--hostIPC": (
        "ringleader's pods do not share the host's IPC namespace",
        "drop it; --shm-size sizes /dev/shm for NCCL's shared memory",
    ),
    "--hostPID": ("ringleader's pods do not share the host's PID namespace", "drop it"),
    "--model-name": (
        "arena's model registry is not kept by ringleader",
        "drop it; --model NAME names the network for throughput predictions",
    ),
    "--model-source": (
        "arena's model registry is not kept by ringleader",
        "drop it; mount the model's files with -d/--data",
    ),
    "--mounts-on-launcher": ("ringleader's launcher mounts nothing of the job's (it only starts the ranks)", "drop it"),
    "--clean-task-policy": (
        "ringleader keeps a finished job's instances and logs until it is deleted",
        "drop it; remove finished jobs with `ringleader delete NAME` or `ringleader prune -s 1h`",
    ),
    "--ttl-after-finished": (
        "ringleader keeps a finished job until it is deleted",
        "drop it; remove finished jobs with `ringleader prune -s DURATION`",
    ),
    "--nproc-per-node": (
        "ringleader runs one process per worker and places each",
        "give the total as --workers (arena's workers x nproc-per-node) and --gpus per process",
    ),
    "--pprof": ("arena's profiling of itself has no counterpart", "drop it"),
    "--trace": ("arena's tracing of itself has no counterpart", "drop it"),
    "--arena-namespace": ("ringleader installs no arena system services", "drop it"),
    "--config": (
        "arena's --config names a kubeconfig, and ringleader reads kubectl's (KUBECONFIG, ~/.kube/config)",
        "drop it and run with KUBECONFIG=PATH",
    ),
    "--helm-binary": ("ringleader submits no Helm charts", "drop it"),
}

def refusal(flag: str) -> UsageError | None:
    """The one-line refusal of arena's ``flag`` (as written, ``--flag`` or ``--flag=value``), or
    None when ringleader reads it."""
    name = flag.partition("=")[0]
    if name not in REFUSED:
        return None
    what, fix = REFUSED[name]
    return UsageError(f"{name}: {what}", fix)


def read_arena_flags(args: Sequence[str], arity: Mapping[str, int]) -> list[str]:
    """``args`` with arena's spellings of ringleader's options renamed, and arena's flags that
    have no counterpart refused (one line each, the first one found), in the places a submit reads
    options: before the command, and after a command given as one quoted string (arena's way).
    ``arity``: how many values each of the command's own options takes."""
    out = list(args)
    at = 0
    while at < len(out):
        word = out[at]
        if word == "--":
            break
        if not word.startswith("-") or word == "-":
            if " " not in word.strip():
                break  # the command's words follow: they are the program's, whatever they look like
            at += 1  # a quoted command: arena reads flags after it
            continue
        name, inline, value = word.partition("=")
        refused = refusal(name)
        if refused is not None:
            raise refused
        if name == "--queue":
            _check_queue(value if inline else out[at + 1] if at + 1 < len(out) else "")
        if name in RENAMED:
            name = RENAMED[name]
            out[at] = f"{name}={value}" if inline else name
        at += 1 + (0 if inline else arity.get(name, 0))
        if name in SWITCHES_WITH_A_WORD and not inline and at < len(out) and out[at].lower() in TRUTH_WORDS:
            at += 1  # arena's `--gputopology true`: the word is the switch's value
    return out


def _check_queue(value: str) -> None:
    """arena's ``--queue`` is a switch (kube-queue); ringleader's takes a team queue's name. A
    switch's value, a command where a name should be, or nothing at all: refused in one line."""
    if value.lower() in ("", "true", "false") or " " in value.strip() or value.startswith("-"):
        raise UsageError("--queue takes a team queue's name here (arena's --queue switch, for kube-queue, has no "
                         "counterpart: every ringleader job is queued)",
                         "drop it, or give --queue NAME from `ringleader queue list`")  # fmt: skip
