"""`ringleader kube`: the Kubernetes scheduler, the node agent, and the manifests that install them.

Parse and render only: the work is in ``ringleader.engines.kubernetes``.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from ringleader.cli.params import DAY_S, FiniteFloat, count
from ringleader.engines.kubernetes import names
from ringleader.engines.kubernetes.agent import find_topology, publish, run_agent
from ringleader.engines.kubernetes.client import Api, load_client
from ringleader.engines.kubernetes.delivery import TRUSTED_NAMESPACES, Delivery
from ringleader.engines.kubernetes.metrics import serve
from ringleader.engines.kubernetes.objects import topology_annotation
from ringleader.engines.kubernetes.scheduler import Scheduler
from ringleader.errors import RingleaderError, UsageError

if TYPE_CHECKING:
    from ringleader.engines.kubernetes.agent import Found

F = TypeVar("F", bound=Callable[..., Any])
CONFIG_KEYS = {"leaseSeconds", "metricsPort", "namespace", "bindThreads", "networkLevelKeys", "networkHyperNodes",
               "gpuDelivery"}


def _logging() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def read_config(path: str | None) -> dict[str, Any]:
    """The scheduler's config file (the ConfigMap of `kube manifests`); {} when none is given."""
    if path is None:
        return {}
    import yaml

    try:
        data = yaml.safe_load(Path(path).read_text()) or {}
    except OSError as exc:
        raise UsageError(f"cannot read config {path!r}: {exc.strerror}", "check the --config path") from None
    except yaml.YAMLError as exc:
        raise UsageError(f"config {path!r} is not valid YAML ({exc})", "fix its syntax") from None
    if not isinstance(data, dict):
        raise UsageError(f"config {path!r} is not a mapping", f"use keys {', '.join(sorted(CONFIG_KEYS))}")
    unknown = sorted(set(data) - CONFIG_KEYS)
    if unknown:
        raise UsageError(f"config {path!r}: unknown key {unknown[0]!r}", f"use {', '.join(sorted(CONFIG_KEYS))}")
    for key in ("leaseSeconds", "metricsPort", "bindThreads"):
        if key in data and (not isinstance(data[key], int) or data[key] < 0):
            raise UsageError(f"config {path!r}: {key} must be a whole number >= 0", f"fix {key}")
    keys = data.get("networkLevelKeys")
    if keys is not None and (not isinstance(keys, list) or not all(isinstance(k, str) and k for k in keys)):
        raise UsageError(f"config {path!r}: networkLevelKeys must be a list of node label keys",
                         "list them nearest the node first, e.g. [example.com/rack, example.com/block]")  # fmt: skip
    if data.get("gpuDelivery", "env") not in names.DELIVERIES:
        raise UsageError(f"config {path!r}: gpuDelivery must be one of {', '.join(names.DELIVERIES)}",
                         "use the --gpu-delivery the install was made with (`kube manifests`)")  # fmt: skip
    if not isinstance(data.get("networkHyperNodes", False), bool):
        raise UsageError(f"config {path!r}: networkHyperNodes must be true or false",
                         "true reads the network tree from Volcano's HyperNodes")  # fmt: skip
    return data


@click.group("kube")
def kube() -> None:
    """Run ringleader on Kubernetes: its scheduler, its node agent, their install manifests."""


@kube.command("scheduler")
@click.option("--config", "config_path", default=None,
              help="Config file (leaseSeconds, metricsPort, namespace, bindThreads, networkLevelKeys, "
                   "networkHyperNodes, gpuDelivery).")
@click.option("--identity", default=None, help="This replica's name in the Lease (default: $POD_NAME, else host).")
@click.option("--metrics-port", type=count(1, 65535), default=None,
              help="Port of /metrics and /healthz (default 10259).")
@click.option("--server", default=None, help="API server URL (e.g. `kubectl proxy`'s); default: kubeconfig.")
@click.option("--context", default=None, help="kubeconfig context (default: the current one).")
def scheduler(config_path: str | None, identity: str | None, metrics_port: int | None, server: str | None,
              context: str | None) -> None:  # fmt: skip
    """Schedule pods with `schedulerName: ringleader`, each gang in one decision."""
    from ringleader.engines.kubernetes.manifests import METRICS_PORT

    config = read_config(config_path)
    port = metrics_port if metrics_port is not None else int(config.get("metricsPort", METRICS_PORT))
    me = identity or os.environ.get("POD_NAME") or f"{socket.gethostname()}-{os.getpid()}"
    _logging()
    sched = Scheduler(Api(load_client(context=context, host=server)), me,
                      namespace=str(config.get("namespace", names.SYSTEM_NAMESPACE)),
                      lease_seconds=int(config.get("leaseSeconds", 15)),
                      writers=int(config.get("bindThreads", 8)),
                      level_keys=config.get("networkLevelKeys"),
                      hypernodes=bool(config.get("networkHyperNodes", False)),
                      dra=config.get("gpuDelivery") == "dra")  # fmt: skip
    try:
        serve(sched.metrics, sched.health_problem, "0.0.0.0", port)
    except OSError as exc:
        problem = f"cannot serve metrics on port {port}: {exc.strerror}"
        raise UsageError(problem, "pick another --metrics-port") from None
    click.echo(f"ringleader scheduler {me}: metrics on :{port}", err=True)
    stop_on_signals(sched.stop)
    try:
        sched.run()
    except KeyboardInterrupt:
        sched.stop()


def stop_on_signals(stop: Callable[[], None]) -> None:
    """A pod is stopped with SIGTERM, then SIGKILL after its grace; as PID 1 in its container a
    process that sets no handler ignores it. SIGTERM and Ctrl-C both call ``stop``, which ends the
    loop where it checks, never in the middle of a step (a KeyboardInterrupt raised anywhere could
    leave a lock held or a write half done); the scheduler gives its Lease up then, so a standby
    leads at once. A second Ctrl-C interrupts at once."""

    def on_signal(signum: int, _frame: object) -> None:
        if signum == signal.SIGINT:
            signal.signal(signal.SIGINT, signal.default_int_handler)
        stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)


@kube.command("agent")
@click.option("--node", default=None, help="This node's name (default: $NODE_NAME).")
@click.option("--interval", type=FiniteFloat(1.0, DAY_S), default=60.0, show_default=True,
              help="Seconds between looks.")
@click.option("--once", is_flag=True, help="Publish once and exit.")
@click.option("--check", is_flag=True,
              help="Print what it finds and would publish, and exit (1 when it finds no GPU); no API is called.")
@click.option("--server", default=None, help="API server URL; default: in-cluster, else kubeconfig.")
@click.option("--context", default=None, help="kubeconfig context (default: the current one).")
def agent(node: str | None, interval: float, once: bool, check: bool, server: str | None,
          context: str | None) -> None:  # fmt: skip
    """Publish this node's GPU topology and GPU count for the scheduler."""
    if check:
        _check_agent(find_topology())
        return
    name = node or os.environ.get("NODE_NAME")
    if not name:
        raise UsageError("no node name", "give --node NAME or set NODE_NAME (the DaemonSet sets it)")
    if interval <= 0:
        raise UsageError(f"--interval must be > 0, got {interval}", "give seconds between looks")
    api = Api(load_client(context=context, host=server))
    if once:
        found = find_topology()
        wrote = publish(api, name, found.topology, found.uuids)
        done = "published" if wrote else "unchanged"
        click.echo(f"node {name}: {found.topology.n_gpus} GPU(s) ({found.how}); {done}")
        return
    _logging()
    stop = threading.Event()
    stop_on_signals(stop.set)
    try:
        run_agent(api, name, interval, stop=stop)
    except KeyboardInterrupt:
        stop.set()


def _check_agent(found: Found) -> None:
    """The agent's self-check (an image tried on a node before the DaemonSet is deployed)."""
    if not found.topology.n_gpus:
        raise RingleaderError(f"no GPU found here ({found.how})",
                              "run it on a GPU node, under the NVIDIA runtime (the agent DaemonSet's RuntimeClass), "
                              "where the driver's NVML library or nvidia-smi is")  # fmt: skip
    health = "health unknown" if found.unhealthy is None else f"{found.unhealthy} unhealthy"
    uuids = "UUIDs known" if found.uuids else "no UUIDs"
    click.echo(f"{found.topology.n_gpus} GPU(s) found by {found.how}; {health}; {uuids}")
    click.echo(f"{names.TOPOLOGY_ANNOTATION}: {topology_annotation(found.topology)}")


@kube.command("manifests")
@click.option("--image", default=None, help="ringleader's container image for the scheduler and agent.")
@click.option("--replicas", type=click.IntRange(1, 9), default=2, show_default=True, help="Scheduler replicas.")
@click.option("--gpu-delivery", type=click.Choice(["env", "dra"]), default="env", show_default=True,
              help="env: the NVIDIA runtime and NVIDIA_VISIBLE_DEVICES (Kubernetes 1.30+); "
                   "dra: ResourceClaims for NVIDIA's DRA driver (Kubernetes 1.34+).")
@click.option("--runtime-class", default="nvidia", show_default=True, metavar="NAME|none",
              help="RuntimeClass of the NVIDIA runtime on workers and the agent (none: the node's default).")
@click.option("--trusted-namespace", "trusted", multiple=True, metavar="NS",
              help="A namespace whose pods may set NVIDIA_* (repeatable; kube-system, ringleader-system, "
                   "gpu-operator and nvidia-dra-driver-gpu always are).")
def manifests_cmd(image: str | None, replicas: int, gpu_delivery: str, runtime_class: str,
                  trusted: tuple[str, ...]) -> None:  # fmt: skip
    """Print the install for `kubectl apply -f -`: namespace, RBAC, scheduler, agent, admission policies."""
    from ringleader.engines.kubernetes import manifests

    delivery = Delivery.parse(gpu_delivery, runtime_class)
    objects = manifests.install(image or manifests.DEFAULT_IMAGE, replicas, delivery=delivery,
                                trusted=(*TRUSTED_NAMESPACES, *trusted))  # fmt: skip
    click.echo(manifests.dump_all(objects), nl=False)


def register(cli: click.Group) -> None:
    cli.add_command(kube)
