"""``[--gpus] RUNTIME run ARGS``, completed for one rank and exec'd in this process's place.

What only the rank knows is added here: with ``--gpus``, the rank's own GPUs (the host's
indexes in CUDA_VISIBLE_DEVICES, set by the rank wrapper) become the container's only ones
(podman: one CDI device ``nvidia.com/gpu=INDEX`` each; docker: ``--gpus "device=I,J"``), and
CUDA_VISIBLE_DEVICES is renumbered as the container sees them (0..n-1).

It then becomes the container's client (exec): no process of ours sits between the rank
wrapper and the client, so signals reach the client directly, and nothing of ours needs
cleaning up. What the client leaves behind (a container record when it is killed) is removed by
label by whoever ends the job (see ``containers.remove_containers``).

Standard library only: sent as source (``containers.guard_command``) to wherever a rank runs.
"""

import os
import sys


def completed(argv: list[str], environ: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    """The client's argv and environment for this rank."""
    gpus = bool(argv) and argv[0] == "--gpus"
    if gpus:
        argv = argv[1:]
    runtime, run, rest = argv[0], argv[1], argv[2:]
    env = dict(environ)
    visible = [g for g in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if g.strip()]
    extra: list[str] = []
    if gpus and visible:
        if os.path.basename(runtime) == "docker":
            extra = ["--gpus", '"device=' + ",".join(visible) + '"']  # quoted: docker reads it as CSV
        else:
            extra = [word for g in visible for word in ("--device", "nvidia.com/gpu=" + g)]
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(len(visible)))
    return [runtime, run, *extra, *rest], env


def main(argv: list[str]) -> int:
    args, env = completed(argv, dict(os.environ))
    try:
        os.execvpe(args[0], args, env)
    except OSError as exc:
        print(f"ringleader: cannot run the container runtime {args[0]!r} on this host: {exc.strerror}", flush=True)
        return 127
    return 0  # not reached: exec replaced this process


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
