"""`ringleader slurm`: Slurm helpers. `gres-conf` writes a node's gres.conf lines with Links=
(and one GRES type per GPU, so ringleader can ask Slurm for exact GPU ids)."""

from __future__ import annotations

import re
import socket
from pathlib import Path

import click

from ringleader.engines.slurm.gres import gres_conf_lines, node_gres
from ringleader.engines.slurm.state import gpu_feature
from ringleader.errors import UsageError
from ringleader.topology import NodeTopology, parse_topo_text, preset
from ringleader.topology.nvml import discover


@click.group("slurm")
def slurm() -> None:
    """Slurm helpers (jobs run on Slurm with --engine slurm, or `ringleader engine use slurm`)."""


def _topology(preset_name: str | None, matrix_file: str | None) -> tuple[NodeTopology, str]:
    if preset_name and matrix_file:
        raise UsageError("--preset and --matrix-file both given", "give one of them, or neither to ask NVML")
    if preset_name:
        return preset(preset_name), f"preset {preset_name}"
    if matrix_file:
        try:
            text = Path(matrix_file).read_text()
        except OSError as exc:
            raise UsageError(f"cannot read {matrix_file!r}: {exc.strerror}", "check the path") from None
        return parse_topo_text(text), f"`nvidia-smi topo -m` text in {matrix_file}"
    found = discover()
    if found.topology.n_gpus == 0:
        raise UsageError(f"no GPUs found on this host: {found.reason}",
                         "run it on the GPU node, or give --preset or --matrix-file")  # fmt: skip
    return found.topology, "NVML on this host"


@slurm.command("gres-conf")
@click.option("--node", default=None, help="Slurm node name (default: this host's short name).")
@click.option("--preset", "preset_name", default=None, help="Describe a preset machine instead of this host.")
@click.option("--matrix-file", default=None, help="`nvidia-smi topo -m` output of the node instead of NVML.")
@click.option("--device", default="/dev/nvidia{index}", show_default=True,
              help="Device file of GPU {index}.")  # fmt: skip
@click.option("--untyped", is_flag=True, help="Leave out the per-GPU types (Slurm's links only; no exact ids).")
def gres_conf(node: str | None, preset_name: str | None, matrix_file: str | None, device: str, untyped: bool) -> None:
    """Print a node's gres.conf lines with Links= (NVLink counts per GPU pair) and the Gres= and
    Features= (its GPU model) its slurm.conf NodeName line needs. Each GPU gets its own type (g0,
    g1, ...): ringleader's Slurm engine asks for exact GPU ids through them; plain `--gres=gpu:N`
    requests still match any GPU.

    \b
    ringleader slurm gres-conf --node gpu-01 >> /etc/slurm/gres.conf     # on the GPU node
    """
    name = node or socket.gethostname().split(".")[0]
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name):
        raise UsageError(f"invalid Slurm node name {name!r}", "use letters, digits, '.', '_' and '-'")
    if "{index}" not in device:
        raise UsageError(f"--device {device!r} lacks {{index}}", "write it like /dev/nvidia{index}")
    topo, source = _topology(preset_name, matrix_file)
    files = [device.replace("{index}", str(i)) for i in range(topo.n_gpus)]
    gres = node_gres(topo.n_gpus) if not untyped else f"gpu:{topo.n_gpus}"
    click.echo(f"# gres.conf lines for node {name}, {topo.n_gpus} GPU(s), links from {source}")
    feature = gpu_feature(topo.gpu_model)
    features = f" Features={feature}" if feature else ""  # where `get` and --dry-run read the GPU model
    click.echo(f"# slurm.conf needs: GresTypes=gpu and NodeName={name} ... Gres={gres}{features}")
    for line in gres_conf_lines(name, topo, files, typed=not untyped):
        click.echo(line)


def register(cli: click.Group) -> None:
    cli.add_command(slurm)
