"""``--image`` where a job's ranks run: this host (the runtime with the job's recorded settings)
or its ssh hosts (their own runtime, given the job's runtime settings through `env`): the image
resolved once per node before any rank starts, and the containers the ranks left removed."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path

from ringleader.engines.embedded import store
from ringleader.engines.embedded.hosts.ssh import HostError, run_remote, write_config
from ringleader.jobs.codec import placement_from_dict
from ringleader.jobs.spec import JobSpec
from ringleader.runtime import containers
from ringleader.runtime.plan import job_env, plan_path
from ringleader.topology import NodeSpec

REMOTE_PULL_S = 1800.0  # a pull of a large training image over a slow link


def _runners(
    home: Path, spec: JobSpec, nodes: Sequence[NodeSpec], cancelled: Callable[[], bool]
) -> list[tuple[str, containers.Runner]]:
    """(where, runner) once per host the job's ranks run on: this host for its own and emulated
    nodes, then each ssh host."""
    env = job_env(spec.submit_env)
    out: list[tuple[str, containers.Runner]] = []
    remote = [n for n in nodes if n.address is not None]
    if len(remote) < len(nodes):
        out.append(("this host", containers.local_runner(env, cancelled)))
    if remote:
        config = write_config(plan_path(home, spec.name).parent / "ssh_config", remote, home)
        settings = containers.runtime_settings(env)

        def on(node: str) -> containers.Runner:
            def run(argv: list[str]) -> tuple[int, str, str]:
                try:
                    done = run_remote(config, node, ["env", *settings, *argv], timeout=REMOTE_PULL_S)
                except HostError as exc:
                    return 255, "", exc.message
                return done.returncode, done.stdout, done.stderr

            return run

        out += [(f"host {n.name}", on(n.name)) for n in remote]
    return out


def resolve_image(home: Path, spec: JobSpec, nodes: Sequence[NodeSpec], cancelled: Callable[[], bool]) -> str | None:
    """The job's image made present on every host its ranks run on (per --image-pull-policy):
    None, or the first host's one-line reason why it cannot be."""
    runtime = containers.container_runtime_of(spec.command)
    if runtime is None or spec.image is None:
        return None
    policy = spec.container.image_pull_policy
    for where, run in _runners(home, spec, nodes, cancelled):
        why = containers.resolve_image(runtime, spec.image, policy, run, where)
        if why is not None:
            return why
    return None


def remove_containers(home: Path, spec: JobSpec, nodes: Sequence[NodeSpec]) -> None:
    """What the job's ranks left in the container runtime of every host they ran on."""
    runtime = containers.container_runtime_of(spec.command) if spec.image else None
    if runtime is None:
        return
    label = containers.job_label(home, spec.name)
    for _, run in _runners(home, spec, nodes, lambda: False):
        containers.remove_containers(runtime, label, run)


def placed_nodes(conn: sqlite3.Connection, job: str, placement: str | None) -> list[NodeSpec]:
    """The nodes a job's stored placement (JSON) put its ranks on."""
    if not placement:
        return []
    names = set(placement_from_dict(job, json.loads(placement)).nodes)
    return [n for n in store.get_nodes(conn) if n.name in names]
