"""The runtime's view of the cluster: node `local` (this machine), declared nodes, labels."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

from ringleader.engines.embedded.hosts.ssh import (
    CONNECT_TIMEOUT_S,
    SSH_FAILED,
    HostError,
    check_reachable,
    discover,
    run_remote,
    write_config,
)
from ringleader.engines.embedded.store import default_home
from ringleader.errors import ConflictError, NotFoundError, RingleaderError, UsageError
from ringleader.jobs.views import READY, UNREACHABLE, NodeHealth
from ringleader.scheduler import ClusterState
from ringleader.topology import NodeTopology
from ringleader.topology.cluster import DISCOVER, SCHEDULE_LABEL, SCHEDULE_MODES, NodeSpec
from ringleader.topology.grammar import check_label
from ringleader.topology.nvml import (
    HEALTH_FROM,
    HEALTH_QUERY,
    USAGE_QUERY,
    gpu_usage,
    parse_health_csv,
    parse_usage_csv,
    short_model,
    unhealthy_gpus,
)
from ringleader.topology.nvml import discover as discover_gpus
from ringleader.topology.smi import parse_topo_text

LOCAL = "local"
# ACK's label name, accepted as a spelling of ours.
LABEL_ALIASES = {"ack.node.gpu.schedule": SCHEDULE_LABEL}


def local_node() -> tuple[NodeSpec, str]:
    """This machine with its GPUs, read as on an ssh host: `nvidia-smi topo -m` (links, NICs and
    each GPU's CPU and NUMA affinity), else NVML (links only); (spec, note) with a note when it has
    none."""
    found = discover_gpus()
    smi = _smi_topology(found.topology.gpu_model)
    if smi is not None and smi.n_gpus >= found.topology.n_gpus:
        return NodeSpec(LOCAL, smi), ""
    note = found.reason if found.topology.n_gpus == 0 else ""
    return NodeSpec(LOCAL, found.topology), note


def _smi_topology(gpu_model: str) -> NodeTopology | None:
    """`nvidia-smi topo -m` of this machine, its GPUs named by NVML or `nvidia-smi`; None where
    nvidia-smi is absent, fails, or shows no GPU."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        topo = subprocess.run([smi, "topo", "-m"], capture_output=True, text=True, timeout=30)
        if not gpu_model:
            names = subprocess.run([smi, "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                                   text=True, timeout=30).stdout.splitlines()  # fmt: skip
            gpu_model = short_model(names[0]) if names else ""
        if topo.returncode != 0 or "GPU0" not in topo.stdout:
            return None
        return parse_topo_text(topo.stdout, gpu_model=gpu_model, source="nvidia-smi topo -m")
    except (OSError, subprocess.SubprocessError, RingleaderError):
        return None


def check_declared(declared: Sequence[NodeSpec]) -> None:
    """A declared node is this machine (`local`), an ssh host (it has an `address`), or
    emulated (virtual GPUs; its ranks run here unless it has an address too)."""
    for spec in declared:
        if spec.name != LOCAL and not spec.emulated and spec.address is None:
            raise UsageError(
                f"node {spec.name!r} is neither emulated nor an ssh host, and only node {LOCAL!r} is this machine",
                f"give it an `address` (ssh host), set `emulated: true`, or name it {LOCAL!r}",
            )
        if spec.name == LOCAL and spec.address is not None:
            raise UsageError(f"node {LOCAL!r} is this machine and has no ssh address", "drop its `address`")


def discover_hosts(declared: Sequence[NodeSpec]) -> list[NodeSpec]:
    """Declared nodes with the topology of every ssh host declared without one read over ssh
    (`nvidia-smi topo -m`, else NVML); every ssh host is checked reachable. One line naming the
    host when one is not."""
    hosts = [s for s in declared if s.address is not None]
    if not hosts:
        return list(declared)
    with tempfile.TemporaryDirectory(prefix="ringleader-ssh-") as tmp:
        config = write_config(Path(tmp) / "ssh_config", hosts, default_home())
        found = {}
        for spec in hosts:
            if spec.topology.source == DISCOVER:
                topology, how = discover(config, spec)
                found[spec.name] = replace(spec, topology=replace(topology, source=how))
            else:
                check_reachable(config, spec)
    return [found.get(s.name, s) for s in declared]


def merge_declared(current: Sequence[NodeSpec], declared: Sequence[NodeSpec]) -> list[NodeSpec]:
    """The cluster after `cluster apply`: node `local` (unless the file declares it) plus the
    declared nodes."""
    check_declared(declared)
    if any(s.name == LOCAL for s in declared):
        return list(declared)
    # This machine is looked at again (a driver may have come since), keeping its labels.
    local = local_node()[0]
    old = next((s for s in current if s.name == LOCAL), None)
    return [local.with_labels(dict(old.labels)) if old else local, *declared]


def shrinking(state: ClusterState, new_nodes: Sequence[NodeSpec]) -> str | None:
    """Why applying ``new_nodes`` would pull GPUs from under running jobs (None if it would not)."""
    new = {s.name: s for s in new_nodes}
    for ns in state.nodes:
        if not ns.allocated:
            continue
        jobs = sorted({job for _, job in ns.allocated})
        spec = new.get(ns.name)
        if spec is None:
            return f"node {ns.name} holds GPUs of running job(s) {', '.join(jobs)} and would disappear"
        if spec.topology.n_gpus < ns.spec.topology.n_gpus:
            return (
                f"node {ns.name} holds GPUs of running job(s) {', '.join(jobs)} and would shrink "
                f"from {ns.spec.topology.n_gpus} to {spec.topology.n_gpus} GPUs"
            )
    return None


def label_node(
    nodes: Sequence[NodeSpec], node: str, key: str, value: str | None, overwrite: bool
) -> list[NodeSpec]:
    """Nodes with ``node``'s label ``key`` set to ``value`` (removed if None); kubectl rules."""
    key = LABEL_ALIASES.get(key, key)
    check_label(key, value)
    if key == SCHEDULE_LABEL and value is not None and value not in SCHEDULE_MODES:
        raise UsageError(f"label {SCHEDULE_LABEL}={value!r} is not a mode", "use topology or default")
    target = next((s for s in nodes if s.name == node), None)
    if target is None:
        raise NotFoundError(f"node {node!r} not found", f"use one of {', '.join(s.name for s in nodes)}")
    labels = dict(target.labels)
    old = labels.get(key)
    if value is not None and old is not None and old != value and not overwrite:
        raise ConflictError(
            f"node {node} already has label {key}={old}", f"add --overwrite to change it to {value}"
        )
    if value is None:
        labels.pop(key, None)
    else:
        labels[key] = value
    return [s.with_labels(labels) if s.name == node else s for s in nodes]


def node_gpu_usage(spec: NodeSpec, home: Path) -> dict[int, tuple[float, float, float]]:
    """A node's GPUs now, by index: NVML (else nvidia-smi) here for `local`, `nvidia-smi
    --query-gpu` over ssh for an ssh host; empty for an emulated node (its GPU ids are virtual)
    or where nothing answers."""
    if spec.emulated:
        return {}
    if spec.address is None:
        return gpu_usage()
    with tempfile.TemporaryDirectory(prefix="ringleader-usage-") as tmp:
        config = write_config(Path(tmp) / "ssh_config", [spec], home)
        done = run_remote(config, spec.name, USAGE_QUERY, timeout=15)
    return parse_usage_csv(done.stdout) if done.returncode == 0 else {}


def node_health(specs: Sequence[NodeSpec], home: Path) -> dict[str, NodeHealth]:
    """Each node now: `local` is this machine (Ready; its GPUs' health from NVML, else nvidia-smi);
    an emulated node without address runs here (Ready; virtual GPUs, health n/a); an ssh host
    (emulated ones too: their namespace's sshd) is logged in to as the launcher does, all hosts
    at once, each within a short timeout: Unreachable with ssh's error, else Ready with its
    GPUs' health from `nvidia-smi --query-gpu` there."""
    out: dict[str, NodeHealth] = {}
    hosts = [s for s in specs if s.address is not None]
    for spec in specs:
        if spec.address is not None:
            continue
        if spec.emulated:
            out[spec.name] = NodeHealth(spec.name, READY, checked="emulated on this machine: virtual GPUs")
        else:
            bad = unhealthy_gpus(spec.topology.n_gpus)
            how = HEALTH_FROM if bad is not None else "no NVML or nvidia-smi here"
            out[spec.name] = NodeHealth(spec.name, READY, unhealthy_gpus=bad, checked=how)
    if hosts:
        with tempfile.TemporaryDirectory(prefix="ringleader-health-") as tmp:
            config = write_config(Path(tmp) / "ssh_config", hosts, home)
            with ThreadPoolExecutor(max_workers=min(32, len(hosts))) as pool:
                for health in pool.map(lambda s: _host_health(config, s), hosts):
                    out[health.node] = health
    return {s.name: out[s.name] for s in specs}


def _host_health(config: Path, spec: NodeSpec) -> NodeHealth:
    argv = ["true"] if spec.emulated else HEALTH_QUERY
    try:
        done = run_remote(config, spec.name, argv, timeout=CONNECT_TIMEOUT_S + 3)
    except HostError as exc:
        return NodeHealth(spec.name, UNREACHABLE, exc.message)
    if done.returncode == SSH_FAILED:
        why = (done.stderr.strip().splitlines() or [f"ssh exit code {done.returncode}"])[-1]
        return NodeHealth(spec.name, UNREACHABLE, f"ssh to {spec.address}: {why}")
    if spec.emulated:
        return NodeHealth(spec.name, READY, checked="emulated: virtual GPUs")
    bad = parse_health_csv(done.stdout + done.stderr, spec.topology.n_gpus)
    return NodeHealth(spec.name, READY, unhealthy_gpus=bad,
                      checked="nvidia-smi over ssh" if bad is not None else "no nvidia-smi on the host")  # fmt: skip
