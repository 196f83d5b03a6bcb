"""Cluster commands: cluster apply / get, node label, top node, topo.

Parse and render only: every command calls ``ringleader.engines.embedded.engine.Runtime``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ringleader.cli.jobs import engine_option, open_runtime, top_group, using_engine
from ringleader.cli.output import (
    INDENT,
    console,
    emit_data,
    key_values,
    output_option,
    refresh_option,
    refreshing,
    table,
)
from ringleader.cli.params import FiniteFloat, PlainText
from ringleader.engines.base import NodeCordons
from ringleader.engines.embedded.engine import Runtime
from ringleader.engines.embedded.hosts.netns import switch_links
from ringleader.errors import NotFoundError, UsageError
from ringleader.jobs.codec import node_to_dict
from ringleader.jobs.views import NodeHealth
from ringleader.topology import PRESETS, preset, render_topo_text
from ringleader.topology.draw import draw_node

if TYPE_CHECKING:  # the runtime and topologies are imported by the commands that use them
    from ringleader.scheduler import ClusterState, NodeState
    from ringleader.topology import NodeTopology

RULE = "-" * 90
MAX_REASON = 256  # a cordon's reason: a sentence `top node -d` shows, a Slurm reason, a Kubernetes annotation


def complete_nodes(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[str]:
    """Shell completion of node names (through click's _RINGLEADER_COMPLETE): read only."""
    del ctx, param

    try:
        with Runtime.open(readonly=True) as rt:
            return [ns.name for ns in rt.nodes().nodes if ns.name.startswith(incomplete)]
    except Exception:  # completion must never print a traceback into the shell
        return []


def mode(ns: NodeState) -> str:
    """Which jobs a node serves: topology, default, or both (unlabelled)."""
    return ns.spec.schedule_mode or "both"


def node_rows(state: ClusterState) -> list[list[Any]]:
    rows = []
    for ns in state.nodes:
        topo = ns.spec.topology
        labels = ",".join(f"{k}={v}" for k, v in ns.spec.labels) or "<none>"
        rows.append([ns.name, topo.n_gpus, len(ns.allocated), topo.gpu_model or "-", mode(ns),
                     str(ns.spec.emulated).lower(), f"{ns.spec.network_gbps:g}", str(ns.spec.address or "-"),
                     labels])  # fmt: skip
    return rows


def node_dict(ns: NodeState) -> dict[str, Any]:
    return {**node_to_dict(ns.spec), "mode": mode(ns), "gpus_total": ns.spec.topology.n_gpus,
            "allocated": [{"gpu": g, "job": j} for g, j in ns.allocated]}  # fmt: skip


def show_nodes(state: ClusterState, output: str) -> None:
    if output != "table":
        emit_data([node_dict(ns) for ns in state.nodes], output)
        return
    cols = ["NAME", "GPUS", "ALLOCATED", "MODEL", "MODE", "EMULATED", "NETWORK(Gb/s)", "ADDRESS", "LABELS"]
    console().print(table(cols, node_rows(state)))


@click.group("cluster")
def cluster() -> None:
    """Declare and show the cluster (this machine is node `local`)."""


@cluster.command("apply")
@click.option("-f", "--file", "path", required=True, type=click.Path(dir_okay=False), help="Cluster YAML.")
@output_option("json", "yaml")
@engine_option
def cluster_apply(path: str, output: str, engine: str | None) -> None:
    """Replace the declared cluster with the nodes of a YAML file (preset, matrix file or
    inline matrix per node; labels; network_gbps; emulated; count)."""
    with open_runtime(engine, "cluster_file", "`cluster apply`") as rt:
        state = rt.apply_cluster(path)
    if output == "table":
        click.echo(f"cluster applied from {path}: {len(state.nodes)} node(s), {state.total_gpus} GPU(s)")
    for ns in state.nodes:
        for warning in ns.spec.topology.warnings:
            click.echo(f"warning: node {ns.name}: {warning}", err=True)
    show_nodes(state, output)


@cluster.command("up")
@click.option("-f", "--file", "path", required=True, type=click.Path(dir_okay=False), help="Cluster YAML.")
@click.option("--scale", type=FiniteFloat(0.0, 1000.0, low_open=True), default=0.02, show_default=True,
              help="Each node's link is shaped to network_gbps x SCALE (a small box computes slowly).")
@engine_option
def cluster_up(path: str, scale: float, engine: str | None) -> None:
    """Emulate the cluster on this box (root): per node a network namespace with its own sshd
    and hostname, joined by a bridge, its link shaped with tc to its network_gbps x --scale;
    with a `network:` tree, a bridge per switch (rack), each joined to its parent by an uplink
    shaped to its nodes' network_gbps / the level's oversubscription x --scale.
    Jobs then run on the nodes over ssh, exactly as on real hosts."""
    with open_runtime(engine, "emulated_cluster", "`cluster up`") as rt:
        created, state = rt.cluster_up(path, scale)
    emulated = [ns for ns in state.nodes if ns.spec.address is not None]
    click.echo(f"cluster up: {len(emulated)} node(s) in network namespaces, links at network_gbps x {scale:g}")

    for link in switch_links([ns.spec for ns in emulated], scale):
        shaped = f"shaped to {link.mbit:g} Mb/s" if link.mbit is not None else "unshaped (non-blocking)"
        click.echo(f"switch {link.switch}: a bridge over {len(link.nodes)} node(s), its uplink to "
                   f"{link.parent or 'the head'} {shaped}")  # fmt: skip
    click.echo(f"declared from {created}")
    show_nodes(state, "table")


@cluster.command("down")
@engine_option
def cluster_down(engine: str | None) -> None:
    """Remove the emulated cluster: every namespace, bridge, sshd, key and hosts entry that
    `cluster up` made (also after a crash), and its nodes from the declared cluster. Safe to run
    twice."""
    with open_runtime(engine, "emulated_cluster", "`cluster down`") as rt:
        removed = rt.cluster_down()
    click.echo(f"cluster down: removed {len(removed)} object(s)" if removed else "cluster down: nothing to remove")


@cluster.command("get")
@output_option("json", "yaml")
@engine_option
def cluster_get(output: str, engine: str | None) -> None:
    """Show the nodes, their GPUs, scheduling mode and labels."""
    with open_runtime(engine, "cluster_file", "`cluster get`") as rt:
        state, note = rt.nodes(), rt.local_note()
    show_nodes(state, output)
    if note and output == "table":
        click.echo(f"\nnote: node local: {note}", err=True)


@click.group("node")
def node() -> None:
    """Label, cordon and uncordon nodes (kubectl's rules: changing a label needs --overwrite)."""


@node.command("label")
@click.argument("name", shell_complete=complete_nodes)
@click.argument("labels", nargs=-1, required=True, metavar="KEY=VALUE|KEY-...")
@click.option("--overwrite", is_flag=True, help="Allow changing an existing value (as kubectl).")
@engine_option
def node_label(name: str, labels: tuple[str, ...], overwrite: bool, engine: str | None) -> None:
    """Label a node, e.g. `gpu-schedule=topology` (only --gputopology jobs) or
    `gpu-schedule=default` (only the others); unlabelled nodes serve both. `KEY-` removes."""
    with open_runtime(engine, "node_labels", "`node label`") as rt:
        for item in labels:
            key, sep, value = item.partition("=")
            if not sep and item.endswith("-"):
                rt.label_node(name, item[:-1], None, overwrite)
            elif sep and key:
                rt.label_node(name, key, value, overwrite)
            else:
                raise UsageError(f"label {item!r} is not KEY=VALUE or KEY-", "write e.g. gpu-schedule=topology")
    click.echo(f"node/{name} labeled")


@node.command("cordon")
@click.argument("name", shell_complete=complete_nodes)
@click.option("--reason", default="cordoned by hand", show_default=True, type=PlainText(MAX_REASON),
              help=f"Why (at most {MAX_REASON} characters): `top node -d` shows it.")
@engine_option
def node_cordon(name: str, reason: str, engine: str | None) -> None:
    """Place no new job on a node (what runs there runs on), as kubectl cordon. ringleader
    cordons a node itself once it is blamed for two failed gangs (submit --max-restarts)."""
    with using_engine(engine) as opened:
        assert isinstance(opened, NodeCordons)  # every engine cordons nodes
        opened.cordon_node(name, reason)
    click.echo(f"node/{name} cordoned")


@node.command("uncordon")
@click.argument("name", shell_complete=complete_nodes)
@engine_option
def node_uncordon(name: str, engine: str | None) -> None:
    """Let jobs be placed on a cordoned node again, its blamed faults forgotten."""
    with using_engine(engine) as opened:
        assert isinstance(opened, NodeCordons)  # every engine cordons nodes
        opened.uncordon_node(name)
    click.echo(f"node/{name} uncordoned")


# -- top node / topo ------------------------------------------------------------------------------


def bandwidth_text(topo: NodeTopology) -> str:
    n = topo.n_gpus
    bw = topo.bandwidth_gbs
    head = "\t" + "\t".join(f"GPU{j}" for j in range(n))
    rows = [f"GPU{i}\t" + "\t".join("X" if i == j else f"{bw[i][j]:g}" for j in range(n)) for i in range(n)]
    return "\n".join([head, *rows])


def node_detail(ns: NodeState, health: NodeHealth) -> None:
    topo = ns.spec.topology
    kind = "GPUTopology" if mode(ns) != "default" else "GPUExclusive"
    unhealthy = unhealthy_text(health) + (f" ({health.checked})" if health.checked else "")
    status = [("Status", health.status), *([("Reason", health.reason)] if health.reason else []),
              ("Unhealthy GPUs", unhealthy)]  # fmt: skip
    key_values([("Name", ns.name), ("Type", kind), *status, ("Mode", mode(ns)),
                ("Emulated", str(ns.spec.emulated).lower()), ("Network", f"{ns.spec.network_gbps:g} Gb/s"),
                ("GPU Model", topo.gpu_model or "N/A")])  # fmt: skip
    click.echo(RULE)
    click.echo("GPUs:")
    rows = [[g, "used" if ns.owner(g) else "idle", ns.owner(g) or "-"] for g in range(topo.n_gpus)]
    console().print(table(["INDEX", "STATUS", "ALLOCATED_JOB"], rows, indent=INDENT))
    if topo.n_gpus:
        click.echo(RULE)
        click.echo("GPU Topology:")
        click.echo(render_topo_text(topo).split("\nLegend:")[0].rstrip())
        click.echo(RULE)
        click.echo("Bandwidth Matrix (GB/s, one direction):")
        click.echo(bandwidth_text(topo))
    click.echo(RULE)
    used, total = len(ns.allocated), topo.n_gpus
    click.echo(f"Allocated/Total GPUs of node {ns.name}: {used}/{total} ({_pct(used, total)})")
    click.echo("")


def _pct(used: int, total: int) -> str:
    return f"{100.0 * used / total:.1f}%" if total else "0.0%"


# arena's -m/--gpu-mode letters, as this engine's modes: which nodes each keeps.
GPU_MODES = {"t": "topology", "topology": "topology", "e": "default", "exclusive": "default",
             "default": "default", "n": "none", "none": "none"}  # fmt: skip


def _in_mode(ns: NodeState, wanted: str | None) -> bool:
    if wanted is None:
        return True
    if wanted == "none":
        return ns.spec.topology.n_gpus == 0
    return ns.spec.topology.n_gpus > 0 and mode(ns) in (wanted, "both")


def ip_address(ns: NodeState) -> str:
    """Where the node's ranks run: its ssh host, this machine for `local`, - when emulated here."""
    if ns.spec.address is not None:
        return ns.spec.address.host
    return "127.0.0.1" if not ns.spec.emulated else "-"


@click.command("node")
@click.argument("names", nargs=-1, shell_complete=complete_nodes)
@click.option("-d", "--details", is_flag=True, help="Per node: link and bandwidth matrices, each GPU's job.")
@click.option("-m", "--gpu-mode", type=click.Choice(sorted(GPU_MODES)), default=None,
              help="Only nodes serving --gputopology jobs (t), plain jobs (e), or with no GPU (n), as arena's.")
@output_option("json", "yaml", "wide")
@refresh_option
@engine_option
def top_node(names: tuple[str, ...], details: bool, gpu_mode: str | None, output: str, refresh: float | None,
             engine: str | None) -> None:  # fmt: skip
    """GPUs per node: address, status (Ready, NotReady, Unreachable, Drained, Cordoned; the reason
    with -d or -o), total, allocated, unhealthy (n/a where unknown), scheduling mode (arena top
    node); NAMES picks nodes. `-o wide` is the table (arena's name for it)."""
    output = "table" if output == "wide" else output
    refreshing(refresh, lambda: _draw_top_node(names, details, GPU_MODES.get(gpu_mode or ""), output, engine))


def _draw_top_node(names: tuple[str, ...], details: bool, gpu_mode: str | None, output: str,
                   engine: str | None) -> None:  # fmt: skip
    with using_engine(engine) as rt:
        state = rt.nodes()
        unknown = [n for n in names if n not in state.by_name]
        if unknown:
            raise NotFoundError(f"node {unknown[0]!r} not found", f"use one of {', '.join(state.by_name)}")
        shown = [ns for ns in state.nodes if (not names or ns.name in names) and _in_mode(ns, gpu_mode)]
        health = rt.node_health([ns.name for ns in shown])
    unreported = NodeHealth("", "Unknown", "the engine did not report it")
    seen = {ns.name: health.get(ns.name) or unreported for ns in shown}
    if output != "table":
        emit_data([{**node_dict(ns), **seen[ns.name].to_dict()} for ns in shown], output)
        return
    if details:
        for ns in shown:
            node_detail(ns, seen[ns.name])
    else:
        rows = [[ns.name, ip_address(ns), seen[ns.name].status, ns.spec.topology.n_gpus, len(ns.allocated),
                 unhealthy_text(seen[ns.name]), mode(ns)] for ns in shown]  # fmt: skip
        console().print(table(["NAME", "IPADDRESS", "STATUS", "GPU(Total)", "GPU(Allocated)", "UNHEALTHY", "MODE"],
                              rows))  # fmt: skip
    used = sum(len(ns.allocated) for ns in shown)
    total = sum(ns.spec.topology.n_gpus for ns in shown)
    click.echo(RULE)
    click.echo("Allocated/Total GPUs In Cluster:")
    click.echo(f"{used}/{total} ({_pct(used, total)})")


def unhealthy_text(health: NodeHealth) -> str:
    return "n/a" if health.unhealthy_gpus is None else str(health.unhealthy_gpus)


@click.command("topo")
@click.argument("name", required=False, shell_complete=complete_nodes)
@click.option("--presets", is_flag=True, help="List the presets (or, with NAME, show that preset).")
@click.option("--png", "png", type=click.Path(dir_okay=False), help="Also draw NAME's GPU/NIC graph to this PNG.")
@click.option("--svg", "svg", type=click.Path(dir_okay=False), help="Also draw NAME's GPU/NIC graph to this SVG.")
@output_option("json", "yaml")
def topo(name: str | None, presets: bool, png: str | None, svg: str | None, output: str) -> None:
    """Print node topologies as `nvidia-smi topo -m` does; --png/--svg draw one node's GPUs,
    NICs, link kinds and the job holding each GPU."""
    if (png or svg) and name is None:
        raise UsageError("--png and --svg draw one node", "name it: ringleader topo NODE --png FILE")
    if presets and name is None:
        rows = [[p.name, len(p.build().links), p.build().gpu_model or "-", p.description] for p in PRESETS.values()]
        if output != "table":
            emit_data([dict(zip(("name", "gpus", "model", "description"), r, strict=True)) for r in rows], output)
            return
        console().print(table(["NAME", "GPUS", "MODEL", "DESCRIPTION"], rows))
        return
    if presets:
        topologies = {str(name): preset(str(name))}
    else:
        with open_runtime(None, "cluster_file", "`topo NAME`") as rt:
            state = rt.nodes()
        if name is not None and name not in state.by_name:
            raise NotFoundError(f"node {name!r} not found", f"use one of {', '.join(state.by_name)}, or --presets NAME")
        topologies = {ns.name: ns.spec.topology for ns in state.nodes if name in (None, ns.name)}
    for picture in (p for p in (png, svg) if p):
        draw_topology(str(name), topologies[str(name)], picture, None if presets else state.by_name[str(name)])
    if output != "table":
        emit_data({n: {"links": [[str(c) for c in row] for row in t.links], "bandwidth_gbs": t.bandwidth_gbs,
                       "gpu_model": t.gpu_model} for n, t in topologies.items()}, output)  # fmt: skip
        return
    for node_name, t in topologies.items():
        if len(topologies) > 1:
            click.echo(f"# {node_name}")
        click.echo(render_topo_text(t) if t.n_gpus else f"node {node_name} has no GPUs\n", nl=False)
        if len(topologies) > 1:
            click.echo("")


def draw_topology(name: str, topology: NodeTopology, path: str, ns: NodeState | None) -> None:
    owners = dict(ns.allocated) if ns else {}
    held = f", {len(owners)}/{topology.n_gpus} GPUs allocated" if ns else " (preset)"
    title = f"{name}: {topology.n_gpus} x {topology.gpu_model or 'GPU'}{held}"
    try:
        draw_node(topology, Path(path), title, owners)
    except (OSError, ValueError) as exc:  # an unwritable path, or a suffix matplotlib cannot write
        raise UsageError(f"cannot draw to {path!r}: {exc}", "give a writable .png or .svg path") from None
    click.echo(f"drew {name} to {path}", err=True)


def register(cli: click.Group) -> None:
    cli.add_command(cluster)
    cli.add_command(node)
    cli.add_command(topo)
    top_group(cli).add_command(top_node)
